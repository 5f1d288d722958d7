"""The JSONL file backend (spec section 4)."""

from app.backends.files.backend import FileBackend
from app.backends.files.fileops import FileOps

__all__ = ["FileBackend", "FileOps"]
