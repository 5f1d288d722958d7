"""Which sessions are archived (spec 17), kept beside their logs: ``<data-dir>/index/archived.jsonl``.

Archiving writes no event and changes no byte of a session's file, so the file backend keeps it in this journal, one
JSON line per change, ``{"tenant", "id", "instance", "archived"}``, appended and synced before the change is
acknowledged (a delete of an archived session appends its ``"archived": false``). The last line of an incarnation
says whether it is archived; a line of another incarnation never applies (a session deleted and made again under
its id is not archived by its predecessor's line). A start reads the journal once and writes it anew, folded to one
line per archived live session, whenever it holds anything else (older lines, the deleted, a torn last line).

A line is written whole by one write; a torn one (a crash, a refused write) is not valid JSON and is skipped. After
a refused write the journal is cut back to its length before it, so that the refused change is not there after a
restart; if even that fails, the next line starts with a newline, so that it never runs into the fragment.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterable
from pathlib import Path

import orjson

from app.backends.catalog import Catalog
from app.backends.files.disk.fileops import FileKind, FileOps
from app.domain.session import SessionKey

__all__ = ["JOURNAL_NAME", "ArchiveJournal", "apply_archived"]

JOURNAL_NAME = "archived.jsonl"


def _line(key: SessionKey, instance: str, archived: bool) -> bytes:
    record = {"tenant": key.tenant, "id": key.id, "instance": instance, "archived": archived}
    return orjson.dumps(record) + b"\n"


class ArchiveJournal:
    """The journal in ``folder`` (see the module's docstring); its writes may come from several threads."""

    def __init__(self, folder: Path, ops: FileOps, *, sync: bool) -> None:
        self.path = folder / JOURNAL_NAME
        self._ops = ops
        self._sync = sync
        self._lock = threading.Lock()
        self._fd = -1
        self._size = 0  # the journal's length after the last write that succeeded
        self._clean = True  # whether the file ends where a line ended (else the next line starts with a newline)
        self.folded = True  # whether the journal last loaded held one line per archived incarnation, and no other

    def load(self) -> dict[SessionKey, str]:
        """The archived incarnations the journal names: the instance of each archived session, by key."""
        self.folded = True
        if self._ops.kind(self.path) != FileKind.REGULAR:
            return {}  # missing (nothing was ever archived), or not a file forklog made: it is written anew
        fd = self._ops.open(self.path, os.O_RDONLY)
        try:
            data = self._ops.read_all(fd)
        finally:
            self._ops.close(fd)
        archived: dict[SessionKey, str] = {}
        lines = data.split(b"\n")
        if lines[-1] == b"":
            lines.pop()
        for line in lines:
            try:
                record = orjson.loads(line)
                key = SessionKey(record["tenant"], record["id"])
                instance, flag = record["instance"], record["archived"]
            except (orjson.JSONDecodeError, KeyError, TypeError):
                continue  # a torn line (or an empty one): its change was never acknowledged
            if flag is True and isinstance(instance, str):
                archived[key] = instance
            elif archived.get(key) == instance:
                del archived[key]
        self.folded = (len(lines) == len(archived) and data.endswith(b"\n")) or not data
        return archived

    def rewrite(self, archived: Iterable[tuple[SessionKey, str]]) -> None:
        """Write the journal anew with one line per archived incarnation: a synced temp file renamed over it."""
        ops = self._ops
        body = b"".join(_line(key, instance, True) for key, instance in archived)
        with self._lock:
            self._close_fd()
            ops.replace_whole(self.path, body, sync=self._sync)
            self._size, self._clean = len(body), True

    def write(self, key: SessionKey, instance: str, archived: bool) -> None:
        """Append that ``instance`` of ``key`` is now archived (or not), synced before it returns."""
        ops = self._ops
        with self._lock:
            if self._fd < 0:
                created = ops.kind(self.path) == FileKind.MISSING
                self._fd = ops.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
                self._size = ops.fstat(self._fd).st_size
                if created and self._sync:
                    ops.fsync_dir(self.path.parent)
            line = _line(key, instance, archived)
            if not self._clean:
                line = b"\n" + line
            try:
                ops.write_all(self._fd, line)
                if self._sync:
                    ops.fsync(self._fd)
            except BaseException:
                self._roll_back()
                raise
            self._size += len(line)
            self._clean = True

    def _roll_back(self) -> None:
        """Cut the journal back to its length before a refused write (never resurrected after a restart)."""
        try:
            self._ops.ftruncate(self._fd, self._size)
            if self._sync:
                self._ops.fsync(self._fd)
        except OSError:
            self._clean = False

    def _close_fd(self) -> None:
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                self._ops.close(self._fd)
            self._fd = -1

    def close(self) -> None:
        with self._lock:
            self._close_fd()


def apply_archived(catalog: Catalog, named: dict[SessionKey, str]) -> dict[SessionKey, str]:
    """Mark archived the live sessions ``named`` names with their live instance; those it marked."""
    kept: dict[SessionKey, str] = {}
    for key, instance in named.items():
        live = catalog.live(key)
        if live is not None and live.header.instance == instance:
            catalog.set_archived(live, True)
            kept[key] = instance
    return kept
