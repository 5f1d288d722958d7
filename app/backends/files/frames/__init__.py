"""A compressed session file's frames (spec 16): where each ends, and the rewrite of an ended turn's small frames
into one."""
