"""``python -m app export ID [--tenant T]`` (spec 10): a session's DSH log (its header line, then its event lines)
to standard output.

It opens the store through the seam (:func:`app.api.app.open_backend`), so it works on any backend; on the file
backend it takes the data directory's lock, so it refuses while a service owns the directory. ``--salvage`` (the
file backend only) writes what a damaged session holds before its damage, for the README's repair walk.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from typing import BinaryIO

from app.api.app import open_backend
from app.backends.base import Backend
from app.backends.errors import SessionCorrupt, StorageError
from app.backends.files import FileBackend
from app.backends.files.codec import encode_header
from app.backends.files.recovery import CorruptLog, salvage_log
from app.cli.store_flags import add_store_flags, store_settings
from app.domain.errors import InvalidId
from app.domain.ids import check_id
from app.domain.session import DEFAULT_TENANT, SessionKey
from app.service.sessions import wall_clock_ms

__all__ = ["DESCRIPTION", "add_arguments", "run"]

DESCRIPTION = (
    "Write a session's DSH log (its header line, then its events) to standard output. On the file backend it "
    "refuses while a service owns the data directory."
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
        backend = open_backend(settings)
    except StorageError as exc:
        print(f"forklog export: {exc}", file=sys.stderr)
        return 1
    return asyncio.run(_export(backend, key, sys.stdout.buffer, salvage=arguments.salvage))


async def _export(backend: Backend, key: SessionKey, out: BinaryIO, *, salvage: bool) -> int:
    try:
        await backend.open()
        try:
            session = await backend.find(key)
        except SessionCorrupt as damaged:
            if salvage and isinstance(backend, FileBackend):
                return _salvage(backend, key, out)
            print(
                f"forklog export: session {key.id!r} is damaged ({damaged.facts.get('reason')}); --salvage writes what "
                "it holds"
                " before the damage",
                file=sys.stderr,
            )
            return 1
        if session is None:
            print(f"forklog export: there is no session {key.id!r} (tenant {key.tenant!r})", file=sys.stderr)
            return 1
        out.write(encode_header(session.header))
        async for piece in backend.chunks(key, session.header.instance, session.head.count):
            out.write(piece)
        out.flush()
        return 0
    except StorageError as exc:
        print(f"forklog export: {exc}", file=sys.stderr)
        return 1
    finally:
        await backend.close()


def _salvage(backend: FileBackend, key: SessionKey, out: BinaryIO) -> int:
    path = backend.datadir.log_path(key)
    try:
        header, log, reason = salvage_log(key.id, path.read_bytes(), now=wall_clock_ms())
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
