"""``python -m app verify [--data-dir D]`` (spec 10): check every session file as a start would, changing nothing
(:mod:`app.service.transfer.verify`).

It prints one line per damaged file (``path: reason``, the reason ``/readyz`` gives) and a summary, ``N sessions,
M events, B bytes, K damaged``; it exits 1 when anything is damaged, 2 when it cannot verify at all (no such data
directory, or one that holds no forklog store). On a terminal a progress bar goes to standard error.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from app.backends.errors import StorageError
from app.cli.store_flags import add_store_flags, store_settings
from app.service.transfer.verify import verify_data_dir

__all__ = ["DESCRIPTION", "add_arguments", "run"]

DESCRIPTION = (
    "Check every session file of a data directory as a start would, changing nothing (it may run beside a running "
    "service). Prints one line per damaged file and a summary; exits 1 when anything is damaged."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_store_flags(parser)
    parser.add_argument(
        "--full",
        action="store_true",
        help="check every event against every rule, also those a checkpoint covers (slower)",
    )


def run(arguments: argparse.Namespace) -> int:
    settings = store_settings(arguments)
    # The damage is the output; the storage log would say it a second time on standard error.
    logging.getLogger("forklog.storage").disabled = True
    try:
        progress = _progress if sys.stdout.isatty() else None
        report = verify_data_dir(settings.data_dir, every_event=arguments.full, progress=progress)
    except StorageError as exc:
        print(f"forklog verify: {exc}", file=sys.stderr)
        return 2
    for entry in report.damaged:
        print(f"{entry.path}: {entry.reason}")
    print(f"{report.sessions} sessions, {report.events} events, {report.bytes} bytes, {len(report.damaged)} damaged")
    return 1 if report.damaged else 0


@contextmanager
def _progress(files: int) -> Iterator[Callable[[int], None] | None]:
    """A progress bar of ``files`` files on standard error, or none when there are none."""
    if not files:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (TextColumn("verifying"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("verify", total=files)
        yield lambda size: bar.advance(task)
