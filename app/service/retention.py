"""Retention (spec 14): a session idle for longer than its tenant's ``retention`` is deleted, by the service itself.

A session's age counts from its last change as the server acknowledged it (:attr:`Session.changed_at
<app.domain.session.Session.changed_at>`: its create, fork or latest append, by the server's clock), never from
its events' ``time`` nor from ``updatedAt`` (a seed may time its events in 2100, and the appends after it follow);
once that is older than the retention the session has *expired*. The sweeper looks at the sessions of every tenant
with a retention every second or few (a tenth of the shortest retention, from 1 to 5 s), and deletes each expired
one as ``DELETE`` would (under the session's lock, after looking again: an append that came meanwhile keeps it; its
streams get ``event: deleted``, sessions forked from it keep their logs). Until it is deleted an expired session is
left out of lists and lineage (:func:`visible_page`).

On a store several processes share, each sweep first asks the store for the sweepers' lease
(:class:`~app.backends.base.SweepsOnce`): one replica sweeps at a time, so a session expires once, not once per
replica. ``expired_total`` counts the sessions this process deleted so (``forklog_sessions_expired_total``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace

from app.backends.base import Backend, SweepsOnce, each_session
from app.backends.errors import StorageError
from app.domain.limits import TenantLimits
from app.domain.listing import PageRequest
from app.domain.session import Session, SessionKey

__all__ = ["Retention", "is_expired", "visible_page"]

logger = logging.getLogger("forklog.retention")

SWEEP_MIN_SECONDS = 1.0
SWEEP_MAX_SECONDS = 5.0
# Sessions are looked at in pages of this many.
PAGE = 1000


def is_expired(session: Session, cutoff: int | None) -> bool:
    return cutoff is not None and session.changed_at < cutoff


async def visible_page(backend: Backend, tenant: str, request: PageRequest, cutoff: int | None) -> list[Session]:
    """The page ``request`` asks for, those expired at ``cutoff`` left out (and as many more read to fill it)."""
    if cutoff is None:
        return await backend.page(tenant, request)
    found: list[Session] = []
    while len(found) < request.limit:
        wanted = request.limit - len(found)
        page = await backend.page(tenant, replace(request, limit=wanted))
        found.extend(session for session in page if not is_expired(session, cutoff))
        if len(page) < wanted:
            break
        request = request.following(page[-1])
    return found


class Retention:
    def __init__(
        self,
        backend: Backend,
        tenant_limits: Callable[[], Mapping[str, TenantLimits]],
        clock: Callable[[], int],
        expire: Callable[[SessionKey, int], Awaitable[bool]],
    ) -> None:
        self._backend = backend
        self._tenant_limits = tenant_limits
        self._clock = clock
        self._expire = expire
        self._task: asyncio.Task[None] | None = None
        self.expired_total = 0

    def cutoff(self, tenant: str) -> int | None:
        """Sessions of ``tenant`` last changed before this (epoch ms) have expired; None if it keeps them all."""
        limits = self._tenant_limits().get(tenant)
        if limits is None or limits.retention_ms is None:
            return None
        return self._clock() - limits.retention_ms

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._sweep_forever(), name="forklog-retention")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def _interval(self) -> float:
        retentions = [limits.retention_ms for limits in self._tenant_limits().values() if limits.retention_ms]
        if not retentions:
            return SWEEP_MAX_SECONDS
        return min(SWEEP_MAX_SECONDS, max(SWEEP_MIN_SECONDS, min(retentions) / 10_000))

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self._interval())
            try:
                await self.sweep()
            except StorageError as exc:  # the next round tries again
                logger.warning("could not delete expired sessions: %s", exc.detail)
            except Exception:
                logger.exception("the retention sweep failed; it runs again in a moment")

    async def sweep(self) -> int:
        """Delete every expired session (one replica at a time on a shared store); how many this one deleted."""
        tenants = [tenant for tenant, limits in self._tenant_limits().items() if limits.retention_ms is not None]
        if not tenants:
            return 0
        if isinstance(self._backend, SweepsOnce):
            async with self._backend.sweep_lease() as leading:
                return await self._sweep(tenants) if leading else 0
        return await self._sweep(tenants)

    async def _sweep(self, tenants: list[str]) -> int:
        deleted = 0
        for tenant in tenants:
            cutoff = self.cutoff(tenant)
            if cutoff is None:
                continue
            expired = [
                session.key
                async for session in each_session(self._backend, tenant, PageRequest(PAGE))
                if is_expired(session, cutoff)
            ]
            for key in expired:
                if await self._expire(key, cutoff):
                    deleted += 1
        self.expired_total += deleted
        if deleted:
            logger.info("deleted %d sessions idle for longer than their tenant's retention", deleted)
        return deleted
