"""The file backend's share links (spec 18): one journal beside the sessions, ``<data-dir>/index/shares.jsonl``.

Each line is one change: ``{"add": {...}}`` (a share, with its token's SHA-256, never the token), ``{"revoke": id,
...}`` or ``{"drop": session, ...}`` (a session deleted: its shares go with it). A line is appended and synced
(``fdatasync``) before the change is answered, like everything acknowledged. Memory holds the shares in force
(:class:`~app.backends.share_index.ShareIndex`); a start folds the journal into them and, when it held anything
that is no longer in force (revoked, dropped, expired, of a session no longer live, or a line a crash cut short),
writes it anew with only those (a temporary file, synced, renamed over it, and the folder synced).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from app.backends.files.disk.fileops import FileKind, FileOps
from app.backends.share_index import ShareIndex
from app.domain.session import SessionKey
from app.domain.sharing import Redaction, ShareRecord

__all__ = ["SHARES_NAME", "ShareJournal"]

SHARES_NAME = "shares.jsonl"


def _encode(share: ShareRecord) -> dict[str, Any]:
    return {
        "id": share.id,
        "tenant": share.tenant,
        "session": share.session_id,
        "instance": share.instance,
        "sha256": share.digest,
        "upTo": share.up_to,
        "redact": sorted(share.redact),
        "createdAt": share.created_at,
        "expiresAt": share.expires_at,
    }


def _decode(item: dict[str, Any]) -> ShareRecord:
    up_to = item["upTo"]
    return ShareRecord(
        id=str(item["id"]),
        tenant=str(item["tenant"]),
        session_id=str(item["session"]),
        instance=str(item["instance"]),
        digest=str(item["sha256"]),
        up_to=None if up_to is None else int(up_to),
        redact=frozenset(Redaction(name) for name in item["redact"]),
        created_at=int(item["createdAt"]),
        expires_at=int(item["expiresAt"]),
    )


# Whether the incarnation ``instance`` of a session is live (a start keeps only the shares of live sessions).
IsLive = Callable[[SessionKey, str], bool]


class ShareJournal:
    def __init__(self, folder: Path, ops: FileOps, *, sync: bool) -> None:
        self._path = folder / SHARES_NAME
        self._ops = ops
        self._sync = sync
        self.index = ShareIndex()
        self._lock = threading.Lock()  # appends and the start's rewrite take turns

    def load(self, is_live: IsLive, *, now: int) -> None:
        """Fold the journal into the shares in force (at start, before any request)."""
        lines = self._read_lines()
        index = ShareIndex()
        unreadable = 0
        for line in lines:
            try:
                item = orjson.loads(line)
                if "add" in item:
                    index.add(_decode(item["add"]))
                elif "revoke" in item:
                    index.remove(SessionKey(str(item["tenant"]), str(item["session"])), str(item["revoke"]))
                elif "drop" in item:
                    index.drop_session(SessionKey(str(item["tenant"]), str(item["drop"])))
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                unreadable += 1  # a line a crash cut short: its change was never answered
        kept = [
            share
            for share in index
            if not share.expired(now) and is_live(SessionKey(share.tenant, share.session_id), share.instance)
        ]
        self.index = ShareIndex(kept)
        if unreadable or len(kept) != len(lines):
            self._rewrite(kept)

    def _read_lines(self) -> list[bytes]:
        if self._ops.kind(self._path) != FileKind.REGULAR:
            return []
        fd = self._ops.open(self._path, os.O_RDONLY)
        try:
            data = self._ops.read_all(fd)
        finally:
            self._ops.close(fd)
        return [line for line in data.split(b"\n") if line.strip()]

    def _rewrite(self, shares: list[ShareRecord]) -> None:
        data = b"".join(orjson.dumps({"add": _encode(share)}) + b"\n" for share in shares)
        with self._lock:
            self._ops.replace_whole(self._path, data, sync=self._sync)

    def _append(self, item: dict[str, Any]) -> None:
        """Append one change and sync it (OSError if the disk refuses: then the change is not made)."""
        with self._lock:
            made = self._ops.kind(self._path) == FileKind.MISSING
            fd = self._ops.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            try:
                self._ops.write_all(fd, orjson.dumps(item) + b"\n")
                if self._sync:
                    self._ops.fdatasync(fd)
            finally:
                self._ops.close(fd)
            if made and self._sync:  # a new file is durable once its folder's entry is
                self._ops.fsync_dir(self._path.parent)

    # -- changes (each in a worker thread: they wait for the disk) --------------------------------------------------

    def add(self, share: ShareRecord) -> None:
        self._append({"add": _encode(share)})
        self.index.add(share)

    def revoke(self, key: SessionKey, share_id: str) -> bool:
        if self.index.find(key, share_id) is None:
            return False
        self._append({"revoke": share_id, "tenant": key.tenant, "session": key.id})
        self.index.remove(key, share_id)
        return True

    def drop_session(self, key: SessionKey) -> None:
        """The session is deleted: its shares go (written only when it had any)."""
        if not self.index.of_session(key):
            return
        self._append({"drop": key.id, "tenant": key.tenant})
        self.index.drop_session(key)
