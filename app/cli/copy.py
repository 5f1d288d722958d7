"""``python -m app copy --from SRC --to DST``: every session of every tenant, from one store to another (spec 10).

SRC and DST are each a data directory or a ``postgresql://`` URL; the copy itself, and what it keeps, is
:mod:`app.service.transfer.copy`'s. SRC is only read: nothing of it changes.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from app.backends.errors import StorageError
from app.service.errors import TransferFailed
from app.service.transfer.copy import Advance, copy_store, describe
from app.service.transfer.dsh_log import ENCODINGS

__all__ = ["DESCRIPTION", "add_arguments", "run"]

DESCRIPTION = (
    "Copy every session of every tenant from SRC to DST. Each is a data directory or a postgresql:// URL; ids, "
    "createdAt, instance, lineage and event bytes stay unchanged, and an id already in DST stops the copy before "
    "anything is written, unless --skip-existing. A data directory as DST holds its sessions in --compression "
    "(its own encoding by default, zstd for a new one), whatever SRC's: a copy converts."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--from", dest="source", required=True, metavar="SRC", help="a data directory or a URL")
    parser.add_argument("--to", dest="target", required=True, metavar="DST", help="a data directory or a URL")
    parser.add_argument(
        "--skip-existing", action="store_true", help="leave sessions whose id DST holds already, copy the others"
    )
    parser.add_argument(
        "--compression",
        choices=ENCODINGS,
        help="the encoding of a data directory DST: zstd (DSH's .jsonl.zstd) or none (raw .jsonl); default: the "
        "one DST holds, zstd for a new one. An existing DST of the other encoding is refused",
    )


def run(arguments: argparse.Namespace) -> int:
    try:
        report = asyncio.run(
            copy_store(
                arguments.source,
                arguments.target,
                skip_existing=arguments.skip_existing,
                compression=arguments.compression,
                progress=_progress() if sys.stderr.isatty() else None,
            )
        )
    except (TransferFailed, StorageError) as exc:
        sys.exit(f"forklog copy: {exc}")
    skipped = f", {report.skipped} skipped (already in the destination)" if report.skipped else ""
    print(
        f"copied {report.copied} sessions ({report.events} events) from {describe(arguments.source)} "
        f"to {describe(arguments.target)}{skipped}",
        file=sys.stderr,
    )
    return 0


@contextmanager
def _progress() -> Iterator[Advance]:
    """A bar of the events copied, on standard error (standard output stays clean for what a script pipes it to)."""
    columns = (TextColumn("copying"), BarColumn(), MofNCompleteColumn(), TextColumn("events"), TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("copy", total=None)
        yield lambda events, total: bar.update(task, completed=events, total=total)
