"""Checkpoints: what a start needs to resume a session without checking its events again, kept current in the
background and journaled in one append-only file."""
