"""``python -m app copy --from SRC --to DST``: every session of every tenant, from one store to another (spec 10).

SRC and DST are each a data directory or a ``postgresql://`` URL. Each session keeps its id, tenant, ``createdAt``,
``instance``, lineage and the exact bytes of its events (a log is rebuilt from the source's lines, checked as a seed
is, and copied only if it gives back those very bytes). First every source session is looked up in DST: an id taken
there stops the copy before anything is written, unless ``--skip-existing`` (then those are left as they are).

SRC is only read (:mod:`app.cli.stores`): nothing of it changes, a data directory may be read-only, and one that does
not exist or holds no forklog store is refused before DST is touched. A data directory is refused while a service
owns it (SRC and DST alike); a database must be reachable.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from app.backends.base import Backend, each_session
from app.backends.errors import SessionCorrupt, StorageError
from app.backends.files import FileBackend
from app.backends.postgres import PostgresBackend
from app.cli.stores import ReadableStore, describe, readable_store
from app.domain.clock import wall_clock_ms
from app.domain.dsh_records import loads_stored
from app.domain.errors import EventRejected, SessionAlreadyExists
from app.domain.listing import PageRequest
from app.domain.log import SessionLog
from app.domain.session import Session, SessionKey

__all__ = ["DESCRIPTION", "CopyFailed", "add_arguments", "copy_sessions", "open_store", "run"]

DESCRIPTION = (
    "Copy every session of every tenant from SRC to DST. Each is a data directory or a postgresql:// URL; ids, "
    "createdAt, instance, lineage and event bytes stay unchanged, and an id already in DST stops the copy before "
    "anything is written, unless --skip-existing."
)

PAGE = 1000
WINDOW_EVENTS = 10_000


class CopyFailed(Exception):
    """The copy cannot go on; the message says why (and whether anything was written)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--from", dest="source", required=True, metavar="SRC", help="a data directory or a URL")
    parser.add_argument("--to", dest="target", required=True, metavar="DST", help="a data directory or a URL")
    parser.add_argument(
        "--skip-existing", action="store_true", help="leave sessions whose id DST holds already, copy the others"
    )


def check_place(place: str) -> None:
    if "://" in place and not place.startswith("postgresql://"):
        raise CopyFailed(f"{describe(place)} is neither a data directory nor a postgresql:// URL")


def open_store(place: str) -> Backend:
    """The backend DST names, not opened yet (a data directory is locked here, and made if it is missing)."""
    check_place(place)
    if place.startswith("postgresql://"):
        return PostgresBackend(place, clock=wall_clock_ms, wait=False)
    return FileBackend(Path(place), clock=wall_clock_ms, sync=True)


def same_place(source: str, target: str) -> bool:
    if "://" in source or "://" in target:
        return source == target
    return Path(source).resolve() == Path(target).resolve()


async def sessions_of(store: ReadableStore) -> list[Session]:
    """Every live session of every tenant, in creation order (so the copies' createdAt clock follows them)."""
    found: list[Session] = []
    for tenant in await store.tenants():
        found.extend([session async for session in each_session(store, tenant, PageRequest(PAGE))])
    found.sort(key=lambda session: (session.header.created_at, session.key.tenant, session.id))
    return found


def _events_of(lines: bytes) -> list[Any]:
    joined = b"[" + lines[:-1].replace(b"\n", b",") + b"]"
    try:
        values = orjson.loads(joined)
        if orjson.dumps(values) == joined:
            return list(values)
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):
        pass
    return [loads_stored(line)[0] for line in lines[:-1].split(b"\n")]


async def log_of(store: ReadableStore, session: Session) -> SessionLog:
    """The session's log rebuilt from its stored lines, a window at a time; CopyFailed if it would not give back
    the same bytes."""
    log = SessionLog()
    count = session.head.count
    for start in range(0, count, WINDOW_EVENTS):
        lines = await store.read(session.key, start, min(count, start + WINDOW_EVENTS))
        try:
            staged = log.stage(_events_of(lines), appended=False, now=wall_clock_ms())
        except EventRejected as rejected:
            raise CopyFailed(
                f'session "{session.id}" (tenant {session.key.tenant}): event {start + rejected.index} is refused '
                f"by the rules: {rejected.reason}"
            ) from None
        if staged.lines != lines:
            raise CopyFailed(f'session "{session.id}" (tenant {session.key.tenant}) would not copy byte for byte')
        log.commit(staged)
    return log


@dataclass(frozen=True, slots=True)
class CopyReport:
    copied: int
    skipped: int
    events: int


async def copy_sessions(
    source: ReadableStore,
    target: Backend,
    *,
    skip_existing: bool,
    progress: Callable[[int, int], None] = lambda events, total: None,
) -> CopyReport:
    """Copy (both stores already open); ``progress(events copied, events in all)`` after each session."""
    sessions = await sessions_of(source)
    taken: set[SessionKey] = set()
    for session in sessions:
        try:
            if await target.find(session.key) is not None:
                taken.add(session.key)
        except SessionCorrupt:
            taken.add(session.key)
    if taken and not skip_existing:
        first = min(taken)
        raise CopyFailed(
            f"{len(taken)} of the {len(sessions)} sessions already exist in the destination (the first: "
            f'"{first.id}" of tenant {first.tenant}); nothing was copied. Pass --skip-existing to copy the others'
        )
    todo = [session for session in sessions if session.key not in taken]
    total = sum(session.head.count for session in todo)
    done = copied = 0
    for session in todo:
        log = await log_of(source, session)
        try:
            await target.restore(session.key, session.header, log)
        except SessionAlreadyExists:
            if not skip_existing:
                raise CopyFailed(
                    f'session "{session.id}" of tenant {session.key.tenant} was created in the destination during '
                    f"the copy; {copied} sessions were copied before it"
                ) from None
            taken.add(session.key)
            continue
        copied += 1
        done += session.head.count
        progress(done, total)
    return CopyReport(copied=copied, skipped=len(taken), events=done)


async def _copy(arguments: argparse.Namespace) -> CopyReport:
    check_place(arguments.source)
    source = readable_store(arguments.source)
    try:
        await source.open()  # SRC is read (or refused) before DST is made or locked
        target = open_store(arguments.target)
    except BaseException:
        await source.close()
        raise
    bar: AbstractContextManager[Progress | None] = nullcontext()
    if sys.stderr.isatty():
        bar = Progress(
            TextColumn("copying"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("events"),
            TimeRemainingColumn(),
            console=Console(stderr=True),  # stdout stays clean for whatever a script pipes it to
            transient=True,
        )
    try:
        await target.open()
        with bar as shown:
            task = shown.add_task("copy", total=None) if shown is not None else None

            def advance(events: int, total: int) -> None:
                if shown is not None and task is not None:
                    shown.update(task, completed=events, total=total)

            return await copy_sessions(source, target, skip_existing=arguments.skip_existing, progress=advance)
    finally:
        await target.close()
        await source.close()


def run(arguments: argparse.Namespace) -> int:
    if same_place(arguments.source, arguments.target):
        sys.exit("forklog copy: --from and --to name the same store")
    try:
        report = asyncio.run(_copy(arguments))
    except (CopyFailed, StorageError) as exc:
        sys.exit(f"forklog copy: {exc}")
    skipped = f", {report.skipped} skipped (already in the destination)" if report.skipped else ""
    print(
        f"copied {report.copied} sessions ({report.events} events) from {describe(arguments.source)} "
        f"to {describe(arguments.target)}{skipped}",
        file=sys.stderr,
    )
    return 0
