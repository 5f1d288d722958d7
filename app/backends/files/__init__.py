"""The JSONL file backend (spec section 4).

Its names are imported when first used: a worker process that checks files at a start imports only the checker
(:mod:`app.backends.files.start.parallel_checks`), not the backend and asyncio with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.backends.files.backend import FileBackend
    from app.backends.files.disk.fileops import FileOps

__all__ = ["FileBackend", "FileOps"]


def __getattr__(name: str) -> Any:
    if name == "FileBackend":
        from app.backends.files.backend import FileBackend

        return FileBackend
    if name == "FileOps":
        from app.backends.files.disk.fileops import FileOps

        return FileOps
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
