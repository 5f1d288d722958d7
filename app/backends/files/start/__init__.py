"""What a start does with the session files: check their bytes (in worker processes when no checkpoint covers
them) and rebuild the sessions from them."""
