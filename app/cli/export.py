"""``python -m app export ID [--tenant T]`` (spec 10): a session's DSH log (its header line, then its event lines)
to standard output.

It writes every event the session holds, whatever the last one is (an open turn, a log-only event after its
``turn/end``): the same lines ``GET /sessions/{id}/events`` serves. A data directory is only read (see
:mod:`app.cli.stores`): nothing of it changes, it may be read-only, and it is refused while a service owns it.
``--salvage`` (a data directory only) writes what a damaged session holds before its damage, for the README's
repair walk.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from typing import BinaryIO

from app.backends.errors import SessionCorrupt, StorageError
from app.backends.files.reader import FileReader
from app.backends.files.recovery import CorruptLog
from app.cli.store_flags import add_store_flags, store_settings
from app.cli.stores import ReadableStore, on_open_store, store_of_settings
from app.domain.dsh_records import encode_header
from app.domain.errors import InvalidId
from app.domain.ids import check_id
from app.domain.session import DEFAULT_TENANT, SessionKey

__all__ = ["DESCRIPTION", "add_arguments", "run"]

DESCRIPTION = (
    "Write a session's DSH log (its header line, then all its events, whatever the last one is) to standard "
    "output. A data directory is only read, never changed; it is refused while a service owns it."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", help="the session's id")
    parser.add_argument("--tenant", default=DEFAULT_TENANT, help=f"the session's tenant (default {DEFAULT_TENANT})")
    parser.add_argument(
        "--salvage",
        action="store_true",
        help="for a damaged session (file backend): write its header and the whole events before the damage",
    )
    add_store_flags(parser)


def run(arguments: argparse.Namespace) -> int:
    try:
        key = SessionKey(check_id(arguments.tenant, "tenant"), check_id(arguments.id))
    except InvalidId as exc:
        print(f"forklog export: {exc.detail}", file=sys.stderr)
        return 2
    settings = store_settings(arguments)
    logging.getLogger("forklog.storage").disabled = True  # a damaged session is said once, below
    try:
        store = store_of_settings(settings)
    except StorageError as exc:
        print(f"forklog export: {exc}", file=sys.stderr)
        return 1
    return asyncio.run(_export(store, key, sys.stdout.buffer, salvage=arguments.salvage))


async def _export(store: ReadableStore, key: SessionKey, out: BinaryIO, *, salvage: bool) -> int:
    return await on_open_store("export", store, lambda: _write(store, key, out, salvage=salvage))


async def _write(store: ReadableStore, key: SessionKey, out: BinaryIO, *, salvage: bool) -> int:
    try:
        session = await store.find(key)
    except SessionCorrupt as damaged:
        if salvage and isinstance(store, FileReader):
            return _salvage(store, key, out)
        print(
            f"forklog export: session {key.id!r} is damaged ({damaged.facts.get('reason')}); --salvage writes what "
            "it holds before the damage",
            file=sys.stderr,
        )
        return 1
    if session is None:
        print(f"forklog export: there is no session {key.id!r} (tenant {key.tenant!r})", file=sys.stderr)
        return 1
    out.write(encode_header(session.header))
    # Every event, the last one whatever it is (not a snapshot's seed, which must end at a turn/end).
    async for piece in store.chunks(key, session.header.instance, session.head.count):
        out.write(piece)
    out.flush()
    return 0


def _salvage(store: FileReader, key: SessionKey, out: BinaryIO) -> int:
    path = store.log_path(key)
    try:
        header, log, reason = store.salvage(key)
    except CorruptLog as exc:
        print(f"forklog export: nothing to salvage from {path}: {exc.reason}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"forklog export: cannot read {path}: {exc.strerror}", file=sys.stderr)
        return 1
    out.write(encode_header(header))
    out.write(log.lines())
    out.flush()
    left = f"; the rest was left out: {reason}" if reason else ""
    print(f"forklog export: salvaged {len(log)} events of {key.id!r}{left}", file=sys.stderr)
    return 0
