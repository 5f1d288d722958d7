"""``python -m app import FILE [--id ID] [--tenant T]`` (spec 10): a DSH log file into a new session.

The file's events are checked as a seed (packed rows expanded, each event's ``seq`` and ``time`` kept); its
header's lineage, ``cwd`` and ``createdAt`` are kept. The session gets a new ``instance``: an import is a new
incarnation, so a client holding an earlier incarnation's ``instance`` is refused (``copy`` keeps instances). It
goes through the seam (``restore``), so it works on any backend; on the file backend it takes the data directory's
lock, so it refuses while a service owns the directory.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
from pathlib import Path
from typing import Any

from app.backends.base import Backend
from app.backends.errors import SessionCorrupt, StorageError
from app.cli.store_flags import add_store_flags, store_settings
from app.cli.stores import on_open_store, writable_store_of_settings
from app.domain.clock import wall_clock_ms
from app.domain.dsh_records import MalformedRecord, decode_line, header_from_record, header_problem, parse_line
from app.domain.errors import InvalidId, SessionAlreadyExists, SessionError
from app.domain.ids import check_id, new_instance
from app.domain.jsonvalue import JsonSyntaxError, JsonTooDeep
from app.domain.log import SessionLog, seed_log
from app.domain.session import DEFAULT_TENANT, SessionHeader, SessionKey

__all__ = ["DESCRIPTION", "add_arguments", "read_log", "run"]

DESCRIPTION = (
    "Read a DSH log file into a new session, its events checked as a seed; its lineage, cwd and createdAt are "
    "kept, its instance is new. On the file backend it refuses while a service owns the data directory."
)


class BadLog(Exception):
    """The file is not a DSH log forklog can import; the message says where and why."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="the DSH log (JSONL: a session header line, then one record per line)")
    parser.add_argument("--id", help="the new session's id (default: the id in the file's header)")
    parser.add_argument("--tenant", default=DEFAULT_TENANT, help=f"the new session's tenant (default {DEFAULT_TENANT})")
    add_store_flags(parser)


def read_log(data: bytes, session_id: str | None) -> tuple[SessionHeader, SessionLog]:
    """The header (with a new instance) and the checked log a DSH log's bytes hold; BadLog or InvalidId if not."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    if not lines:
        raise BadLog("the file is empty: a DSH log starts with a session header line")
    try:
        record: Any = parse_line(lines[0])
    except (JsonSyntaxError, JsonTooDeep, MalformedRecord) as exc:
        raise BadLog(f"line 1 (the header) is not valid JSON: {exc}") from None
    named = record.get("id") if isinstance(record, dict) else None
    problem = header_problem(record, named if isinstance(named, str) else "")
    if problem is not None:
        raise BadLog(f"line 1 (the header): {problem}")
    target = check_id(session_id if session_id is not None else named)
    events: list[Any] = []
    for number, line in enumerate(lines[1:], start=2):
        try:
            events += decode_line(line)
        except (JsonSyntaxError, JsonTooDeep, MalformedRecord) as exc:
            raise BadLog(f"line {number} is not a storage record: {exc}") from None
    try:
        log = seed_log(events, now=wall_clock_ms())
    except SessionError as exc:
        raise BadLog(exc.detail) from None
    header = dataclasses.replace(header_from_record(record, target), id=target, instance=new_instance())
    return header, log


def run(arguments: argparse.Namespace) -> int:
    path = Path(arguments.file)
    try:
        data = sys.stdin.buffer.read() if arguments.file == "-" else path.read_bytes()
    except OSError as exc:
        print(f"forklog import: cannot read {path}: {exc.strerror}", file=sys.stderr)
        return 2
    try:
        tenant = check_id(arguments.tenant, "tenant")
        header, log = read_log(data, arguments.id)
    except (BadLog, InvalidId) as exc:
        reason = exc.detail if isinstance(exc, InvalidId) else str(exc)
        print(f"forklog import: {path}: {reason}", file=sys.stderr)
        return 1
    settings = store_settings(arguments)
    try:
        backend = writable_store_of_settings(settings)
    except StorageError as exc:
        print(f"forklog import: {exc}", file=sys.stderr)
        return 1
    return asyncio.run(_import(backend, SessionKey(tenant, header.id), header, log))


async def _import(backend: Backend, key: SessionKey, header: SessionHeader, log: SessionLog) -> int:
    return await on_open_store("import", backend, lambda: _restore(backend, key, header, log))


async def _restore(backend: Backend, key: SessionKey, header: SessionHeader, log: SessionLog) -> int:
    try:
        if await backend.find(key) is not None:
            raise SessionAlreadyExists(key.id)
        session = await backend.restore(key, header, log)
    except (SessionAlreadyExists, SessionCorrupt):
        print(f"forklog import: session {key.id!r} already exists (tenant {key.tenant!r}); pick --id", file=sys.stderr)
        return 1
    print(
        f"imported {session.id} (tenant {key.tenant}): {session.head.count} events, "
        f"createdAt {session.header.created_at}, instance {session.header.instance}"
    )
    return 0
