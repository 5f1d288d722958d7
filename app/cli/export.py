"""``python -m app export ID [--tenant T] [--compression zstd]`` (spec 10, 16): a session's DSH log (its header line,
then its event lines) to standard output, raw ``.jsonl`` or DSH's ``.jsonl.zstd``.

What it writes, and that the store is only read, is :mod:`app.service.transfer.export`'s. ``--salvage`` (a data
directory only) writes what a damaged session holds before its damage, for the README's repair walk.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from app.backends.errors import StorageError
from app.cli.store_flags import add_store_flags, store_settings
from app.domain.errors import InvalidId
from app.domain.ids import check_id
from app.domain.session import DEFAULT_TENANT, SessionKey
from app.service.errors import TransferFailed
from app.service.transfer.dsh_log import ENCODINGS
from app.service.transfer.export import export_session

__all__ = ["DESCRIPTION", "add_arguments", "run"]

DESCRIPTION = (
    "Write a session's DSH log (its header line, then all its events, whatever the last one is) to standard "
    "output, as raw JSONL or, with --compression zstd, as DSH's .jsonl.zstd. A data directory is only read, never "
    "changed; it is refused while a service owns it."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", help="the session's id")
    parser.add_argument("--tenant", default=DEFAULT_TENANT, help=f"the session's tenant (default {DEFAULT_TENANT})")
    parser.add_argument(
        "--salvage",
        action="store_true",
        help="for a damaged session (file backend): write its header and the whole events before the damage",
    )
    parser.add_argument(
        "--compression",
        choices=ENCODINGS,
        default="none",
        help="none (default): raw .jsonl, line-readable; zstd: DSH's .jsonl.zstd (its default encoding)",
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
        salvaged = asyncio.run(
            export_session(
                settings.store, key, sys.stdout.buffer, salvage=arguments.salvage, encoding=arguments.compression
            )
        )
    except (TransferFailed, StorageError) as exc:
        print(f"forklog export: {exc}", file=sys.stderr)
        return 1
    if salvaged is not None:
        left = f"; the rest was left out: {salvaged.left_out}" if salvaged.left_out else ""
        print(f"forklog export: salvaged {salvaged.events} events of {key.id!r}{left}", file=sys.stderr)
    return 0
