"""``verify``: every session file of a data directory checked as a start would, changing nothing (spec 10).

It takes no lock and writes nothing (no torn tail is cut, no leftover removed, no checkpoint written), so it may
run beside a running service.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from app.backends.base import CorruptEntry
from app.backends.open import OpenFor, StoreSettings, open_store

__all__ = ["ProgressBar", "VerifyReport", "verify_data_dir"]

# Given how many files there are to check, a bar held for the check: told each file's bytes after it (or None).
ProgressBar = Callable[[int], AbstractContextManager[Callable[[int], None] | None]]


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """The whole sessions found, their events and the files' bytes, and the damaged files (as ``/readyz`` says)."""

    sessions: int
    events: int
    bytes: int
    damaged: list[CorruptEntry]


def verify_data_dir(data_dir: Path, *, every_event: bool, progress: ProgressBar | None = None) -> VerifyReport:
    """Check every session file of ``data_dir`` (with ``every_event``, every event against every rule, also those a
    checkpoint covers); StartRefused when it is no data directory holding a forklog store."""
    checks = open_store(StoreSettings(data_dir), OpenFor.READ, every_event=every_event).data_dir
    if checks is None:
        raise TypeError("a data directory opened to be read has its checks")
    if progress is None:
        found = checks.verify()
    else:
        with progress(checks.count_files()) as advance:
            found = checks.verify(advance)
    return VerifyReport(found.files - len(found.corrupt), found.events, found.bytes, found.corrupt)
