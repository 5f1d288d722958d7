"""Idle turns (spec 17): with ``FORKLOG_INTERRUPT_AFTER``, a turn that has had no event for that long is interrupted
by the service itself, as ``POST /sessions/{id}/interrupt`` would (DSH's closers, one atomic batch).

A turn's idleness counts from its session's last change as the server acknowledged it (:attr:`Session.changed_at
<app.domain.session.Session.changed_at>`), never from its events' ``time``, which a seed may set to anything. The
sweeper looks at every tenant's sessions every second or few (a tenth of the setting, from 1 to 5 s), so an idle
turn is closed within the setting plus 5 s. Each interrupt carries the log length the sweeper saw as its
``expectedSeq``: an append that came meanwhile makes it ``SEQ_CONFLICT`` (the writer is back: nothing is closed), and
on a store several replicas share, the replicas that lose the race to close the same turn get ``SEQ_CONFLICT`` or
``NOT_IN_TURN`` from the head the winner moved, so the turn is closed once. A loser is not an error: it is not
logged as one.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from app.backends.background import Periodic
from app.backends.base import Backend, each_session
from app.backends.errors import StorageError
from app.domain.errors import ErrorCode, SessionError
from app.domain.listing import PageRequest
from app.domain.session import Session, SessionKey

__all__ = ["IdleTurns", "is_idle"]

logger = logging.getLogger("forklog.idle_turns")

SWEEP_MIN_SECONDS = 1.0
SWEEP_MAX_SECONDS = 5.0
PAGE = 1000
# What an interrupt that lost the race answers: someone else (a writer, another replica) moved the session first.
_LOST = frozenset(
    {ErrorCode.SEQ_CONFLICT, ErrorCode.NOT_IN_TURN, ErrorCode.SESSION_NOT_FOUND, ErrorCode.SESSION_NOT_LIVE}
)

Interrupt = Callable[[SessionKey, int, str], Awaitable[object]]


def is_idle(session: Session, cutoff: int) -> bool:
    """Whether ``session`` has an open turn and no change acknowledged since ``cutoff`` (epoch ms)."""
    return session.head.open_turn is not None and session.changed_at < cutoff


class IdleTurns:
    """The sweeper: every idle open turn interrupted, once."""

    def __init__(self, backend: Backend, after_ms: int, clock: Callable[[], int], interrupt: Interrupt) -> None:
        self._backend = backend
        self._after_ms = after_ms
        self._clock = clock
        self._interrupt = interrupt  # (key, expectedSeq, instance): the service's interrupt
        seconds = min(SWEEP_MAX_SECONDS, max(SWEEP_MIN_SECONDS, after_ms / 10_000))
        self._sweeper = Periodic("forklog-idle-turns", seconds, self._sweep_once)
        self.interrupted_total = 0

    def start(self) -> None:
        self._sweeper.start()

    async def stop(self) -> None:
        await self._sweeper.stop()

    async def _sweep_once(self) -> None:
        try:
            await self.sweep()
        except StorageError as exc:  # the next round tries again
            logger.warning("could not interrupt idle turns: %s", exc.detail)
        except Exception:
            logger.exception("the idle-turn sweep failed; it runs again in a moment")

    async def sweep(self) -> int:
        """Interrupt every turn idle for longer than the setting; how many this process closed."""
        cutoff = self._clock() - self._after_ms
        closed = 0
        for tenant in await self._backend.tenants():
            idle = [
                session
                async for session in each_session(self._backend, tenant, PageRequest(PAGE))
                if is_idle(session, cutoff)
            ]
            for session in idle:
                try:
                    await self._interrupt(session.key, session.head.count, session.header.instance)
                except SessionError as refused:
                    if refused.code not in _LOST:
                        raise
                    logger.debug("an idle turn was moved by someone else first: %s", refused.code.value)
                    continue
                closed += 1
        self.interrupted_total += closed
        if closed:
            logger.info("interrupted %d turns idle for longer than FORKLOG_INTERRUPT_AFTER", closed)
        return closed
