"""``python -m app import FILE [--id ID] [--tenant T]`` (spec 10): a DSH log file (``.jsonl`` or ``.jsonl.zstd``)
into a new session.

What is checked and kept (the log as a seed; its lineage, ``cwd`` and ``createdAt``; a new ``instance``) is
:mod:`app.service.transfer.import_`'s. On the file backend it refuses while a service owns the data directory.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from app.backends.errors import StorageError
from app.cli.store_flags import add_store_flags, store_settings
from app.domain.errors import InvalidId, SessionAlreadyExists
from app.domain.ids import check_id
from app.domain.session import DEFAULT_TENANT
from app.service.errors import TransferFailed
from app.service.transfer.import_ import import_session, read_log

__all__ = ["DESCRIPTION", "add_arguments", "run"]

DESCRIPTION = (
    "Read a DSH log file into a new session, its events checked as a seed; its lineage, cwd and createdAt are "
    "kept, its instance is new. On the file backend it refuses while a service owns the data directory."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "file",
        help="the DSH log: JSONL (a session header line, then one record per line), or DSH's .jsonl.zstd of it "
        "(told by its content, whatever its name); - reads standard input",
    )
    parser.add_argument("--id", help="the new session's id (default: the id in the file's header)")
    parser.add_argument("--tenant", default=DEFAULT_TENANT, help=f"the new session's tenant (default {DEFAULT_TENANT})")
    add_store_flags(parser)


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
    except (TransferFailed, InvalidId) as exc:
        reason = exc.detail if isinstance(exc, InvalidId) else str(exc)
        print(f"forklog import: {path}: {reason}", file=sys.stderr)
        return 1
    settings = store_settings(arguments)
    try:
        session = asyncio.run(import_session(settings.store, tenant, header, log))
    except SessionAlreadyExists:
        print(f"forklog import: session {header.id!r} already exists (tenant {tenant!r}); pick --id", file=sys.stderr)
        return 1
    except StorageError as exc:
        print(f"forklog import: {exc}", file=sys.stderr)
        return 1
    print(
        f"imported {session.id} (tenant {tenant}): {session.head.count} events, "
        f"createdAt {session.header.created_at}, instance {session.header.instance}"
    )
    return 0
