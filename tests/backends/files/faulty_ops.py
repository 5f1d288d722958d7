"""A :class:`FileOps` that misbehaves on demand: the one way the persistence tests inject disk faults."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.backends.files.disk.fileops import FileOps


class FaultyFileOps(FileOps):
    """``fault(name, replacement)`` makes the method ``name`` call ``replacement`` instead; ``heal(name)`` undoes it.

    The file backend's helpers call the primitive methods (``write_all`` calls ``write``, ``fsync_dir`` calls
    ``fsync``), so one fault reaches every path that uses that call.
    """

    def __init__(self) -> None:
        self._faults: dict[str, Callable[..., Any]] = {}

    def __getattribute__(self, name: str) -> Any:
        faults: dict[str, Callable[..., Any]] = object.__getattribute__(self, "_faults")
        if name in faults:
            return faults[name]
        return object.__getattribute__(self, name)

    @property
    def syncs_natively(self) -> bool:
        return False  # a fault may reach a sync call at any time: every sync goes through this object

    def fault(self, name: str, replacement: Callable[..., Any]) -> None:
        if not callable(getattr(FileOps, name, None)):
            raise AttributeError(f"FileOps has no method {name!r}")
        self._faults[name] = replacement

    def heal(self, name: str) -> None:
        del self._faults[name]
