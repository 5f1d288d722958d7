"""The RFC's snapshot and fork (spec 2.3, 12): a source's log up to a turn boundary, handed out as a seed or made
into a child session, with the child's new events after it in the same atomic step."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from app.backends.base import Backend, SeedPrefix
from app.backends.errors import StaleHead
from app.domain.boundary import fork_lineage
from app.domain.dsh_records import header_bytes
from app.domain.errors import EventRejected, SessionAlreadyExists, SessionForkError, session_not_found
from app.domain.ids import check_id
from app.domain.session import Session, SessionHeader, SessionKey, check_live, lineage_attrs
from app.domain.staging import StagedEvents, replace_targets
from app.domain.staging_rules import stage
from app.service.boundaries import message_turn_end, seed_length_at, turn_end_of
from app.service.changes import ChangeFeed
from app.service.errors import invalid_event
from app.service.idempotency import IdempotentChange
from app.service.locks import KeyedLocks
from app.service.observer import SessionObserver
from app.service.quotas import QuotaLedger
from app.service.reads import find_live
from app.service.search import ForkOrigin, Searcher

__all__ = ["Forks", "Snapshot"]


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The RFC's snapshot: the source as it was, its seed's JSONL lines (a piece at a time), the child's meta."""

    source: Session
    seed: AsyncIterator[bytes]
    meta: dict[str, Any]


class Forks:
    """Snapshots and forks, each once the service is ready (``require_ready`` refuses with NOT_READY before); a
    fork runs under its child's lock, like a create of that id."""

    def __init__(
        self,
        backend: Backend,
        *,
        require_ready: Callable[[], None],
        locks: KeyedLocks[SessionKey],
        quotas: QuotaLedger | None,
        clock: Callable[[], int],
        new_id: Callable[[], str],
        new_instance: Callable[[], str],
        changes: ChangeFeed,
        observer: SessionObserver,
        searcher: Searcher,
    ) -> None:
        self._backend = backend
        self._require_ready = require_ready
        self._locks = locks
        self._quotas = quotas
        self._clock = clock
        self._new_id = new_id
        self._new_instance = new_instance
        self._changes = changes
        self._observer = observer
        self._searcher = searcher  # told where each fork came from: its index row starts from its source's row

    async def snapshot(
        self,
        key: SessionKey,
        *,
        at_seq: int | None = None,
        instance: str | None = None,
        expected_seq: int | None = None,
    ) -> Snapshot:
        self._require_ready()
        source = await find_live(self._backend, key, SessionForkError)
        check_live(source, instance, expected_seq, error=SessionForkError)
        count = await seed_length_at(self._backend, source, at_seq)
        try:
            seed = self._backend.chunks(key, source.header.instance, count)
        except StaleHead:
            raise session_not_found(key.id, SessionForkError) from None
        return Snapshot(source, seed, fork_lineage(source, count))

    async def fork(
        self,
        key: SessionKey,
        *,
        child_id: str | None = None,
        at_seq: int | None = None,
        at_turn: int | None = None,
        at_message_id: str | None = None,
        events: Sequence[Any] | None = None,
        breaks: dict[int, str] | None = None,
        instance: str | None = None,
        expected_seq: int | None = None,
        change: IdempotentChange | None = None,
    ) -> Session:
        """A child from the source's log at a boundary (``at_seq``, ``at_turn`` or ``at_message_id``: at most one),
        with ``events`` appended after its seed in the same atomic step (spec 12); ``change`` keeps its idempotency
        record with it."""
        self._require_ready()
        if child_id is not None:
            check_id(child_id, "sessionId")
        child = SessionKey(key.tenant, child_id if child_id is not None else self._new_id())
        boundary = _Boundary(at_seq, at_turn, at_message_id)
        made = await self._locks.run(
            child, lambda: self._fork(key, child, boundary, events or (), breaks, instance, expected_seq, change)
        )
        self._changes.changed(child)
        self._observer.forked(key.tenant)
        return made

    async def _fork(
        self,
        key: SessionKey,
        child: SessionKey,
        boundary: _Boundary,
        events: Sequence[Any],
        breaks: dict[int, str] | None,
        instance: str | None,
        expected_seq: int | None,
        change: IdempotentChange | None,
    ) -> Session:
        if await self._backend.find(child) is not None:
            raise SessionAlreadyExists(child.id)
        source = await find_live(self._backend, key, SessionForkError)
        check_live(source, instance, expected_seq, error=SessionForkError)
        if boundary.turn == 0:
            count = 0
        else:
            at_seq = boundary.seq
            if boundary.turn is not None:
                at_seq = await turn_end_of(self._backend, source, boundary.turn)
            elif boundary.message_id is not None:
                at_seq = await message_turn_end(self._backend, source, boundary.message_id)
            count = await seed_length_at(self._backend, source, at_seq)
        lineage = lineage_attrs(fork_lineage(source, count))
        staged = await self._stage_after_seed(key, source, count, events, breaks) if events else None
        seed = SeedPrefix(key, source.header.instance, count, then=staged)
        instance = self._new_instance()
        remember = change.created if change is not None else None

        def make() -> Awaitable[Session]:
            return self._backend.create(child, instance, lineage, seed, remember)

        try:
            counted = self._backend.capabilities.counts_locally
            if self._quotas is None or counted is None:
                made = await make()
            else:
                body = counted.log_bytes(key, count)  # a fork counts its whole log, shared or not
                if staged is not None:
                    body += len(staged.lines)
                size = header_bytes(SessionHeader(child.id, self._clock(), instance, **lineage)) + body
                made = await self._quotas.charged(
                    child.tenant, 1, size, make, lambda made: header_bytes(made.header) + made.head.body_bytes
                )
        except StaleHead:
            raise session_not_found(key.id, SessionForkError) from None
        self._searcher.forked(child, ForkOrigin(key, source.header.instance, count, made.header.instance))
        return made

    async def _stage_after_seed(
        self, key: SessionKey, source: Session, count: int, events: Sequence[Any], breaks: dict[int, str] | None
    ) -> StagedEvents:
        """The fork's ``events`` checked as an append to its seed (spec 12): INVALID_EVENT, nothing made, at the
        first bad one."""
        tip = await self._backend.seed_tip(key, source.header.instance, count, replace_targets(events))
        if tip is None:
            raise session_not_found(key.id, SessionForkError)
        try:
            return stage(tip, events, appended=True, now=self._clock(), breaks=breaks)
        except EventRejected as rejected:
            raise invalid_event(rejected) from None


@dataclass(frozen=True, slots=True)
class _Boundary:
    """Where a fork's seed ends, as the request named it (at most one of them)."""

    seq: int | None
    turn: int | None
    message_id: str | None
