"""The file backend's idempotency records (spec 8), kept on disk with the changes they belong to.

``<data-dir>/index/idempotency.jsonl`` holds one JSON line per record. A record is written and synced *before* its
change is written, so a change can never be durable without its key (a crash in between leaves a key without its
change, never the reverse). Memory holds only where each record lies in the file: its answer is read back when a
retry asks for it.

A start must then tell two records apart that look alike on disk: one whose change never became durable (a crash,
or a write the disk refused, between the record and its change), which it must drop, or a retry would be told of a
change that never happened; and one whose change was made and whose session was deleted (or expired) since, which
it must keep for the record's whole 24 hours, or a retry would make the change again (a deleted session made anew,
its seed run twice). Only this process knows which records' changes were made: those it kept. So a delete first
appends a *deletion note* naming the session and the keys of its records kept in memory, and syncs it, before the
session's file goes; a crash between the two leaves the note and the session, and the note is still true. At start,
a note marks the record each of its keys last named (a key refused and then used by a retry has two lines: the note
is written after both, and names the one that was kept) as *settled*: its change was made. The start keeps a
settled record without looking for its change; any other record it keeps only while its change is there (the
session with that instance, holding those events, byte for byte), as before. A record written for a change that
failed is never kept in memory, so no note ever names it, and a later delete of its session does not revive it.
Records older than the keeping time go at start and at each sweep, settled or not; both write the file anew with
the notes folded into their records (a settled record's line says so), so notes never pile up.

A sweep's rewrite moves every line, those of changes in flight too (written, not kept yet): such a change's place,
found when it wrote its record, is then stale, and reading by it would give a retry another line's bytes. The
rewrite therefore also notes where the records no change has kept yet lie now, by key, and a change kept after a
rewrite takes its record's place from there. By key is exact: a key has one change in flight at most (the service
runs one request per key at a time), and its record is the key's last line, as for a start. (Holding the lock
from a record's write to its keep would make every keyed change wait for the whole write of every other; tracking
each change in flight would need every path on which a change fails to say so. This needs neither.)
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import orjson

from app.backends.base import IdempotencyRecord
from app.backends.errors import IdempotencyKeyTaken
from app.backends.files.disk.fileops import FileKind, FileOps

__all__ = ["JOURNAL_NAME", "IdempotencyJournal", "lines_digest"]

logger = logging.getLogger("forklog.storage")

JOURNAL_NAME = "idempotency.jsonl"


def lines_digest(lines: bytes | memoryview) -> str:
    return hashlib.blake2b(lines, digest_size=16).hexdigest()


@dataclass(frozen=True, slots=True)
class _Place:
    offset: int
    length: int
    created_at: int
    rewrites: int  # how many rewrites of the file came before this place was found: each later one moves it


@dataclass(slots=True)
class _Entry:
    """A record's line as a start or a sweep reads it back: ``settled`` once a deletion note vouched for its change."""

    record: IdempotencyRecord
    digest: str | None
    settled: bool
    line: bytes  # as it is (or will be) stored, without its newline

    def settle(self) -> None:
        if not self.settled:
            self.settled = True
            self.line = _encode(self.record, self.digest, settled=True)[:-1]


@dataclass(frozen=True, slots=True)
class _DeletionNote:
    """The session ``session`` of ``tenant`` is deleted, and the changes of its records ``keys`` were made."""

    tenant: str
    session: str
    keys: tuple[str, ...]


def _encode(record: IdempotencyRecord, digest: str | None, *, settled: bool = False) -> bytes:
    line = {
        "tenant": record.tenant,
        "key": record.key,
        "fingerprint": record.fingerprint,
        "status": record.status,
        "location": record.location,
        "body": base64.b64encode(record.body).decode("ascii"),
        "createdAt": record.created_at,
        "session": record.session,
        "instance": record.instance,
        "firstSeq": record.first_seq,
        "endSeq": record.end_seq,
        "digest": digest,
    }
    if settled:  # (most records never are: their lines stay as they were first written)
        line["settled"] = True
    return orjson.dumps(line) + b"\n"


def _encode_note(note: _DeletionNote) -> bytes:
    return orjson.dumps({"deleted": note.session, "tenant": note.tenant, "keys": list(note.keys)}) + b"\n"


def _decode(line: bytes) -> _Entry | _DeletionNote:
    item = orjson.loads(line)
    if "deleted" in item:
        return _DeletionNote(str(item["tenant"]), str(item["deleted"]), tuple(str(key) for key in item["keys"]))
    record = IdempotencyRecord(
        tenant=str(item["tenant"]),
        key=str(item["key"]),
        fingerprint=str(item["fingerprint"]),
        status=int(item["status"]),
        location=None if item["location"] is None else str(item["location"]),
        body=base64.b64decode(item["body"]),
        created_at=int(item["createdAt"]),
        session=str(item["session"]),
        instance=str(item["instance"]),
        first_seq=int(item["firstSeq"]),
        end_seq=int(item["endSeq"]),
    )
    digest = item.get("digest")
    return _Entry(record, None if digest is None else str(digest), bool(item.get("settled", False)), line)


def _fold(lines: Iterable[bytes]) -> tuple[list[_Entry], int, bool]:
    """The records of the file's ``lines``, each settled if a later deletion note names it; how many lines could not
    be read (a line a crash cut short: its change never was acknowledged); whether there were notes."""
    entries: list[_Entry] = []
    last_named: dict[tuple[str, str], _Entry] = {}
    unreadable = 0
    noted = False
    for line in lines:
        try:
            decoded = _decode(line)
        except (ValueError, KeyError, TypeError):
            unreadable += 1
            continue
        if isinstance(decoded, _Entry):
            entries.append(decoded)
            last_named[(decoded.record.tenant, decoded.record.key)] = decoded
            continue
        noted = True
        for key in decoded.keys:
            entry = last_named.get((decoded.tenant, key))
            if entry is not None and entry.record.session == decoded.session:
                entry.settle()
    return entries, unreadable, noted


# Whether a record's change is there: given the record and its digest (of an append's lines; None for a create).
ChangeCheck = Callable[[IdempotencyRecord, str | None], bool]


class IdempotencyJournal:
    def __init__(self, folder: Path, ops: FileOps, *, sync: bool) -> None:
        self._path = folder / JOURNAL_NAME
        self._ops = ops
        self._sync = sync
        self._places: dict[tuple[str, str], _Place] = {}
        self._rewrites = 0
        # Where the last rewrite put the records not kept (yet): those of changes in flight, or refused.
        self._unkept: dict[tuple[str, str], _Place] = {}
        # The keys of the kept records no deletion note names yet, by the tenant and id of their session.
        self._unsettled: dict[tuple[str, str], set[str]] = {}
        self._lock = threading.Lock()  # writes, reads by offset and rewrites of the file take turns

    # -- start ------------------------------------------------------------------------------------------------------

    def reconcile(self, change_is_there: ChangeCheck, *, expired_before: int) -> None:
        """Keep the records that are settled or whose change is there, and that are not expired; rewrite the file
        with them (and with the notes folded into them)."""
        entries, unreadable, noted = _fold(self._read_lines())
        kept = [
            entry
            for entry in entries
            if entry.record.created_at >= expired_before
            and (entry.settled or change_is_there(entry.record, entry.digest))
        ]
        dropped = unreadable + len(entries) - len(kept)
        if dropped or noted:
            self._rewrite(kept)
        elif kept:
            self._index(kept, index_all=True)
        if dropped:
            logger.info("dropped %d idempotency records whose change is not there or that expired", dropped)

    def _read_lines(self) -> list[bytes]:
        if self._ops.kind(self._path) != FileKind.REGULAR:
            return []
        fd = self._ops.open(self._path, os.O_RDONLY)
        try:
            data = self._ops.read_all(fd)
        finally:
            self._ops.close(fd)
        return [line for line in data.split(b"\n") if line]

    def _rewrite(self, entries: list[_Entry], *, index_all: bool = True) -> None:
        """Replace the file with ``entries`` (atomically) and index them: all of them, or (``index_all=False``)
        those indexed already (the others belong to changes in flight, which keep them later, or refused: a start
        decides on them)."""
        self._ops.replace_whole(self._path, b"".join(entry.line + b"\n" for entry in entries), sync=self._sync)
        self._rewrites += 1
        self._index(entries, index_all=index_all)

    def _index(self, entries: list[_Entry], *, index_all: bool) -> None:
        """Where each record of the file's ``entries`` lies (the last line of a key is its record), and where those
        not indexed lie (see :meth:`keep`)."""
        last: dict[tuple[str, str], tuple[_Place, _Entry]] = {}
        offset = 0
        for entry in entries:
            place = _Place(offset, len(entry.line), entry.record.created_at, self._rewrites)
            last[(entry.record.tenant, entry.record.key)] = (place, entry)
            offset += len(entry.line) + 1
        chosen = {slot: found for slot, found in last.items() if index_all or slot in self._places}
        self._places = {slot: place for slot, (place, _) in chosen.items()}
        self._unkept = {slot: place for slot, (place, _) in last.items() if slot not in chosen}
        self._unsettled = {}
        for _, entry in chosen.values():
            if not entry.settled:
                self._unsettle(entry.record)

    def _unsettle(self, record: IdempotencyRecord) -> None:
        self._unsettled.setdefault((record.tenant, record.session), set()).add(record.key)

    # -- changes ------------------------------------------------------------------------------------------------------

    def check_free(self, records: Iterable[IdempotencyRecord]) -> None:
        for record in records:
            if (record.tenant, record.key) in self._places:
                raise IdempotencyKeyTaken(f"the Idempotency-Key {record.key!r} was used already")

    def write(self, records: list[tuple[IdempotencyRecord, str | None]]) -> list[tuple[IdempotencyRecord, _Place]]:
        """Append the records to the file and sync it (before their change is written); where each lies. OSError
        if the disk refuses: then the change must not be made."""
        data = [_encode(record, digest) for record, digest in records]
        with self._lock:  # a place found under the lock stays right until the next rewrite, which takes it too
            start = self._append(b"".join(data))
            rewrites = self._rewrites
        placed = []
        offset = start
        for (record, _), line in zip(records, data, strict=True):
            placed.append((record, _Place(offset, len(line) - 1, record.created_at, rewrites)))
            offset += len(line)
        return placed

    def _append(self, data: bytes) -> int:
        """Append ``data`` to the file and sync it (under the lock); the offset it starts at."""
        fd = self._ops.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            start = self._ops.fstat(fd).st_size
            self._ops.write_all(fd, data)
            if self._sync:
                self._ops.fdatasync(fd)
        finally:
            self._ops.close(fd)
        return start

    def keep(self, placed: list[tuple[IdempotencyRecord, _Place]]) -> None:
        """The change of these records is made: retries find them from now on."""
        if not placed:  # most changes carry no Idempotency-Key: no lock to take
            return
        with self._lock:
            for record, written in placed:
                slot = (record.tenant, record.key)
                moved = self._unkept.pop(slot, None)
                # Rewritten since the record was written: it lies where the rewrite put it (if it expired meanwhile,
                # a change in flight for the whole keeping time, it is gone and there is nothing left to replay).
                place = written if written.rewrites == self._rewrites else moved
                if place is not None:
                    self._places[slot] = place
                    self._unsettle(record)

    def settle(self, tenant: str, session: str) -> None:
        """The session is about to be deleted: note durably that the changes of its kept records were made, so that
        a start keeps them once the session is gone (see the module's docstring). OSError if the disk refuses: then
        the session must not be deleted."""
        with self._lock:
            keys = self._unsettled.get((tenant, session))
            if not keys:  # most sessions carry no kept record: nothing to write
                return
            self._append(_encode_note(_DeletionNote(tenant, session, tuple(sorted(keys)))))
            del self._unsettled[(tenant, session)]

    def recall(self, tenant: str, key: str) -> IdempotencyRecord | None:
        with self._lock:
            place = self._places.get((tenant, key))
            if place is None:
                return None
            fd = self._ops.open(self._path, os.O_RDONLY)
            try:
                line = self._ops.pread(fd, place.length, place.offset)
            finally:
                self._ops.close(fd)
        entry = _decode(line)
        assert isinstance(entry, _Entry), "a place is always a record's"
        return entry.record

    def forget(self, before: int) -> None:
        """Drop the records made before ``before``: the file is rewritten with the others."""
        with self._lock:  # (a change kept meanwhile would change the places' size while they are looked through)
            if not any(place.created_at < before for place in self._places.values()):
                return
            entries, _, _ = _fold(self._read_lines())
            self._rewrite([entry for entry in entries if entry.record.created_at >= before], index_all=False)
