"""``copy``: every session of every tenant, from one store to another (spec 10).

Each session keeps its id, tenant, ``createdAt``, ``instance``, lineage and the exact bytes of its events (a log is
rebuilt from the source's lines, checked as a seed is, and copied only if it gives back those very bytes). First
every source session is looked up in the destination: an id taken there stops the copy before anything is written,
unless ``skip_existing`` (then those are left as they are).

The source is only read: nothing of it changes, a data directory may be read-only, and one that does not exist or
holds no forklog store is refused before the destination is touched. A data directory is refused while a service
owns it (source and destination alike); a database must be reachable.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from contextlib import AbstractContextManager, AsyncExitStack, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from app.backends.base import Backend, Reader, each_session
from app.backends.database_url import redact
from app.backends.errors import SessionCorrupt
from app.backends.open import OpenFor, StoreSettings, open_store
from app.domain.clock import wall_clock_ms
from app.domain.dsh_records import loads_stored
from app.domain.errors import EventRejected, SessionAlreadyExists
from app.domain.listing import PageRequest
from app.domain.log import SessionLog
from app.domain.session import Session, SessionKey
from app.domain.stats import SessionStats
from app.service.errors import TransferFailed
from app.service.transfer.dsh_log import LogEncoding
from app.service.transfer.opened import opened

__all__ = ["Advance", "CopyReport", "copy_sessions", "copy_store", "describe"]

PAGE = 1000
WINDOW_EVENTS = 10_000

# Told (events copied, events in all) after each session.
Advance = Callable[[int, int], None]


def _unwatched(events: int, total: int) -> None:
    return None


@dataclass(frozen=True, slots=True)
class CopyReport:
    copied: int
    skipped: int
    events: int


def describe(place: str) -> str:
    """``place`` as a message may show it (a URL without its password)."""
    return redact(place) if "://" in place else place


def _store_at(place: str, compression: LogEncoding | None = None) -> StoreSettings:
    if "://" in place and not place.startswith("postgresql://"):
        raise TransferFailed(f"{describe(place)} is neither a data directory nor a postgresql:// URL")
    if compression is not None and "://" in place:
        raise TransferFailed(f"--compression is the encoding of a data directory, and {describe(place)} is a database")
    return dataclasses.replace(StoreSettings.at(place), compression=compression)


def _same_place(source: str, target: str) -> bool:
    if "://" in source or "://" in target:
        return source == target
    return Path(source).resolve() == Path(target).resolve()


async def copy_store(
    source: str,
    target: str,
    *,
    skip_existing: bool,
    compression: LogEncoding | None = None,
    progress: AbstractContextManager[Advance] | None = None,
) -> CopyReport:
    """Copy every session of the store at ``source`` (a data directory or a ``postgresql://`` URL) to the one at
    ``target``; ``progress`` is entered once both are open. A data directory as ``target`` holds its sessions in
    ``compression`` (spec 16; None: its own encoding, ``zstd`` for a new one), whatever the source's: a copy
    converts, the logical lines unchanged. TransferFailed (saying whether anything was written) or a storage error
    (a ``compression`` the existing target does not hold among them) when it cannot."""
    if _same_place(source, target):
        raise TransferFailed("--from and --to name the same store")
    source_store = _store_at(source)
    async with AsyncExitStack() as stack:
        # The source is read (or refused) before the destination is made or locked.
        reader = await stack.enter_async_context(opened(open_store(source_store, OpenFor.READ).reader))
        target_store = _store_at(target, compression)
        backend = await stack.enter_async_context(opened(open_store(target_store, OpenFor.WRITE)))
        with progress if progress is not None else nullcontext(_unwatched) as advance:
            report = await copy_sessions(reader, backend, skip_existing=skip_existing, progress=advance)
    return report


async def copy_sessions(
    source: Reader,
    target: Backend,
    *,
    skip_existing: bool,
    progress: Advance = _unwatched,
) -> CopyReport:
    """Copy (both stores already open); ``progress(events copied, events in all)`` after each session."""
    sessions = await _sessions_of(source)
    taken: set[SessionKey] = set()
    for session in sessions:
        try:
            if await target.find(session.key) is not None:
                taken.add(session.key)
        except SessionCorrupt:
            taken.add(session.key)
    if taken and not skip_existing:
        first = min(taken)
        raise TransferFailed(
            f"{len(taken)} of the {len(sessions)} sessions already exist in the destination (the first: "
            f'"{first.id}" of tenant {first.tenant}); nothing was copied. Pass --skip-existing to copy the others'
        )
    todo = [session for session in sessions if session.key not in taken]
    total = sum(session.head.count for session in todo)
    done = copied = 0
    for session in todo:
        log = await _log_of(source, session)
        try:
            await target.restore(session.key, session.header, log)
        except SessionAlreadyExists:
            if not skip_existing:
                raise TransferFailed(
                    f'session "{session.id}" of tenant {session.key.tenant} was created in the destination during '
                    f"the copy; {copied} sessions were copied before it"
                ) from None
            taken.add(session.key)
            continue
        copied += 1
        done += session.head.count
        progress(done, total)
    return CopyReport(copied=copied, skipped=len(taken), events=done)


async def _sessions_of(store: Reader) -> list[Session]:
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


async def _log_of(store: Reader, session: Session) -> SessionLog:
    """The session's log rebuilt from its stored lines, a window at a time; TransferFailed if it would not give back
    the same bytes."""
    log = SessionLog()
    log.state.stats = SessionStats(session.header.seed_length or 0)  # its own usage counts after its seed
    count = session.head.count
    for start in range(0, count, WINDOW_EVENTS):
        lines = await store.read(session.key, start, min(count, start + WINDOW_EVENTS))
        try:
            staged = log.stage(_events_of(lines), appended=False, now=wall_clock_ms())
        except EventRejected as rejected:
            raise TransferFailed(
                f'session "{session.id}" (tenant {session.key.tenant}): event {start + rejected.index} is refused '
                f"by the rules: {rejected.reason}"
            ) from None
        if staged.lines != lines:
            raise TransferFailed(f'session "{session.id}" (tenant {session.key.tenant}) would not copy byte for byte')
        log.commit(staged)
    return log
