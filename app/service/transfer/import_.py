"""``import``: a DSH log file, raw ``.jsonl`` or ``.jsonl.zstd`` (told by its content), into a new session (spec 10,
16).

The file's events are checked as a seed (packed rows expanded, each event's ``seq`` and ``time`` kept); its
header's lineage, ``cwd`` and ``createdAt`` are kept. The session gets a new ``instance``: an import is a new
incarnation, so a client holding an earlier incarnation's ``instance`` is refused (``copy`` keeps instances). It
goes through the seam (``restore``), so it works on any backend; on the file backend it takes the data directory's
lock, so it refuses while a service owns the directory.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from app.backends.errors import SessionCorrupt
from app.backends.open import OpenFor, StoreSettings, open_store
from app.domain.clock import wall_clock_ms
from app.domain.dsh_records import MalformedRecord, decode_line, header_from_record, header_problem, parse_line
from app.domain.errors import SessionAlreadyExists, SessionError
from app.domain.ids import check_id, new_instance
from app.domain.jsonvalue import JsonSyntaxError, JsonTooDeep
from app.domain.log import SessionLog, seed_log
from app.domain.session import Session, SessionHeader, SessionKey
from app.service.errors import TransferFailed
from app.service.transfer.dsh_log import log_text
from app.service.transfer.opened import opened

__all__ = ["import_session", "read_log"]


def read_log(data: bytes, session_id: str | None) -> tuple[SessionHeader, SessionLog]:
    """The header (with a new instance, and the id ``session_id`` if given) and the checked log a DSH log's bytes
    (raw or compressed) hold; TransferFailed (saying which line and why) or InvalidId if they hold none."""
    lines = log_text(data).split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    if not lines:
        raise TransferFailed("the file is empty: a DSH log starts with a session header line")
    try:
        record: Any = parse_line(lines[0])
    except (JsonSyntaxError, JsonTooDeep, MalformedRecord) as exc:
        raise TransferFailed(f"line 1 (the header) is not valid JSON: {exc}") from None
    named = record.get("id") if isinstance(record, dict) else None
    problem = header_problem(record, named if isinstance(named, str) else "")
    if problem is not None:
        raise TransferFailed(f"line 1 (the header): {problem}")
    target = check_id(session_id if session_id is not None else named)
    events: list[Any] = []
    for number, line in enumerate(lines[1:], start=2):
        try:
            events += decode_line(line)
        except (JsonSyntaxError, JsonTooDeep, MalformedRecord) as exc:
            raise TransferFailed(f"line {number} is not a storage record: {exc}") from None
    # ``archived`` as export writes it (only ``true`` counts: DSH ignores the member, whatever it holds).
    archived = record.get("archived") is True
    header = dataclasses.replace(
        header_from_record(record, target), id=target, instance=new_instance(), archived=archived
    )
    try:
        log = seed_log(events, now=wall_clock_ms(), seed_length=header.seed_length)
    except SessionError as exc:
        raise TransferFailed(exc.detail) from None
    return header, log


async def import_session(store: StoreSettings, tenant: str, header: SessionHeader, log: SessionLog) -> Session:
    """The new session of ``tenant`` that ``header`` and ``log`` make in ``store``; SessionAlreadyExists when its id
    is taken there (by a live session or a damaged one), a storage error when the store refuses."""
    key = SessionKey(tenant, header.id)
    async with opened(open_store(store, OpenFor.WRITE)) as backend:
        try:
            if await backend.find(key) is not None:
                raise SessionAlreadyExists(key.id)
            return await backend.restore(key, header, log)
        except SessionCorrupt:
            raise SessionAlreadyExists(key.id) from None
