"""The file backend's idempotency records (spec 8), kept on disk with the changes they belong to.

``<data-dir>/index/idempotency.jsonl`` holds one JSON line per record. A record is written and synced *before* its
change is written, so a change can never be durable without its key (a crash in between leaves a key without its
change, never the reverse). At start the records are reconciled with the sessions: a record stays only while its
change is there (the session with that instance, holding those events, byte for byte), so a key never outlives its
change; expired records go too, and the file is rewritten with what stays. Memory holds only where each record lies
in the file: its answer is read back when a retry asks for it.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import logging
import os
import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import orjson

from app.backends.base import IdempotencyRecord
from app.backends.errors import IdempotencyKeyTaken
from app.backends.files.fileops import FileKind, FileOps

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


def _encode(record: IdempotencyRecord, digest: str | None) -> bytes:
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
    return orjson.dumps(line) + b"\n"


def _decode(line: bytes) -> tuple[IdempotencyRecord, str | None]:
    item = orjson.loads(line)
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
    return record, None if digest is None else str(digest)


# Whether a record's change is there: given the record and its digest (of an append's lines; None for a create).
ChangeCheck = Callable[[IdempotencyRecord, str | None], bool]


class IdempotencyJournal:
    def __init__(self, folder: Path, ops: FileOps, *, sync: bool) -> None:
        self._path = folder / JOURNAL_NAME
        self._ops = ops
        self._sync = sync
        self._places: dict[tuple[str, str], _Place] = {}
        self._lock = threading.Lock()  # writes, reads by offset and rewrites of the file take turns

    # -- start ------------------------------------------------------------------------------------------------------

    def reconcile(self, change_is_there: ChangeCheck, *, expired_before: int) -> None:
        """Keep the records whose change is there and that are not expired; rewrite the file with them."""
        kept: list[bytes] = []
        dropped = 0
        lines = self._read_lines()
        for line in lines:
            try:
                record, digest = _decode(line)
            except (ValueError, KeyError, TypeError):  # a line a crash cut short: its change never was acknowledged
                dropped += 1
                continue
            if record.created_at < expired_before or not change_is_there(record, digest):
                dropped += 1
                continue
            kept.append(line + b"\n")
        if dropped:
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

    def _rewrite(self, lines: list[bytes], *, index_all: bool = True) -> None:
        """Replace the file with ``lines`` (atomically) and index them: all of them, or (``index_all=False``) those
        indexed already (the others belong to changes in flight, or refused: a start decides on them)."""
        temporary = self._path.parent / f".{JOURNAL_NAME}.{uuid.uuid4().hex[:12]}.tmp"
        fd = self._ops.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            try:
                self._ops.write_all(fd, b"".join(lines))
                if self._sync:
                    self._ops.fsync(fd)
            finally:
                self._ops.close(fd)
            self._ops.replace(temporary, self._path)
            if self._sync:
                self._ops.fsync_dir(self._path.parent)
        except BaseException:
            with contextlib.suppress(OSError):
                self._ops.unlink(temporary)
            raise
        self._index(lines, index_all=index_all)

    def _index(self, lines: list[bytes], *, index_all: bool) -> None:
        places: dict[tuple[str, str], _Place] = {}
        offset = 0
        for line in lines:
            record, _ = _decode(line[:-1])
            slot = (record.tenant, record.key)
            if index_all or slot in self._places:
                places[slot] = _Place(offset, len(line) - 1, record.created_at)
            offset += len(line)
        self._places = places

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
            fd = self._ops.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            try:
                start = self._ops.fstat(fd).st_size
                self._ops.write_all(fd, b"".join(data))
                if self._sync:
                    self._ops.fdatasync(fd)
            finally:
                self._ops.close(fd)
        placed = []
        offset = start
        for (record, _), line in zip(records, data, strict=True):
            placed.append((record, _Place(offset, len(line) - 1, record.created_at)))
            offset += len(line)
        return placed

    def keep(self, placed: list[tuple[IdempotencyRecord, _Place]]) -> None:
        """The change of these records is made: retries find them from now on."""
        if not placed:  # most changes carry no Idempotency-Key: no lock to take
            return
        with self._lock:
            for record, place in placed:
                self._places[(record.tenant, record.key)] = place

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
        return _decode(line)[0]

    def forget(self, before: int) -> None:
        """Drop the records made before ``before``: the file is rewritten with the others."""
        if not any(place.created_at < before for place in self._places.values()):
            return
        with self._lock:
            lines = [line + b"\n" for line in self._read_lines()]
            self._rewrite([line for line in lines if _decode(line[:-1])[0].created_at >= before], index_all=False)
