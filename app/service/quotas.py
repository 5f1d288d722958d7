"""Quotas on a backend only this process changes (spec 14): each tenant's usage kept here, exactly, under
concurrency.

A tenant's usage (live sessions, bytes) is read from the backend once, the first time one of its changes must be
checked, and kept up to date by every change from then on. Each change is *in flight* from before it is checked
until the backend has answered: it reserves what it adds when it is checked (so two creates racing for the last
slot cannot both pass) and turns the reservation into usage when it succeeds, or drops it when it fails. Checking and
reserving happen in one step of the event loop, with no ``await`` between them, so no lock is needed.

Reading the usage waits until none of the tenant's changes is in flight (new ones wait meanwhile): what the
backend reports then is exact, and every later change is counted from it. A backend shared with other processes
checks its quotas itself, in its transactions (:class:`~app.backends.base.EnforcesQuotas`); this is not used then.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from app.backends.base import CountsLocally, LimitsOf
from app.domain.errors import SessionError
from app.domain.limits import quota_refusal

__all__ = ["QuotaLedger", "Reservation"]

T = TypeVar("T")


@dataclass(slots=True)
class Reservation:
    """What one checked change may add to its tenant's usage until it is settled."""

    tenant: str
    sessions: int
    bytes: int
    settled: bool = False


@dataclass(slots=True)
class _Tenant:
    sessions: int = 0
    bytes: int = 0
    loaded: bool = False
    reserved_sessions: int = 0
    reserved_bytes: int = 0
    in_flight: int = 0
    # Set when the changes in flight drop to none while a load of the usage waits for that (only then: the event is
    # not touched by the changes themselves).
    idle: asyncio.Event = field(default_factory=asyncio.Event)
    loading: asyncio.Event | None = None


class QuotaLedger:
    def __init__(self, backend: CountsLocally, limits_of: LimitsOf) -> None:
        self._backend = backend
        self._limits_of = limits_of
        self._tenants: dict[str, _Tenant] = {}

    def _tenant(self, tenant: str) -> _Tenant:
        state = self._tenants.get(tenant)
        if state is None:
            state = self._tenants[tenant] = _Tenant()
            state.idle.set()
        return state

    async def enter(self, tenant: str) -> None:
        """A change of ``tenant`` begins (pair it with :meth:`leave`); its usage is read first if it is needed."""
        state = self._tenant(tenant)
        while state.loading is not None:
            await state.loading.wait()
        if not state.loaded and self._limits_of(tenant).quotas:
            state.loading = asyncio.Event()
            try:
                while state.in_flight:
                    state.idle.clear()
                    await state.idle.wait()
                state.sessions, state.bytes = self._backend.usage(tenant)
                state.loaded = True
            finally:
                state.loading.set()
                state.loading = None
        state.in_flight += 1

    def leave(self, tenant: str) -> None:
        """The change that :meth:`enter` began has ended (its reservations settled)."""
        state = self._tenant(tenant)
        state.in_flight -= 1
        if not state.in_flight and state.loading is not None:
            state.idle.set()

    def reserve(self, tenant: str, sessions: int, size: int) -> Reservation:
        """Check a change adding ``sessions`` and ``size`` bytes against the tenant's quotas and reserve them; raise
        QUOTA_EXCEEDED (nothing reserved) if it would go past one."""
        state = self._tenant(tenant)
        reservation = Reservation(tenant, sessions, size)
        if state.loaded:
            used = (state.sessions + state.reserved_sessions, state.bytes + state.reserved_bytes)
            refusal: SessionError | None = quota_refusal(tenant, self._limits_of(tenant), used, (sessions, size))
            if refusal is not None:
                raise refusal
            state.reserved_sessions += sessions
            state.reserved_bytes += size
        else:
            reservation.settled = True  # nothing is counted for this tenant yet: nothing to give back
        return reservation

    def commit(self, reservation: Reservation, sessions: int, size: int) -> None:
        """The change succeeded, adding ``sessions`` and ``size`` bytes (what it reserved, or exactly what it took)."""
        self.release(reservation)
        self.changed(reservation.tenant, sessions, size)

    def release(self, reservation: Reservation) -> None:
        """The change failed (or is committed by :meth:`commit`): give its reservation back."""
        if reservation.settled:
            return
        reservation.settled = True
        state = self._tenant(reservation.tenant)
        state.reserved_sessions -= reservation.sessions
        state.reserved_bytes -= reservation.bytes

    def changed(self, tenant: str, sessions: int, size: int) -> None:
        """A change that needs no check (a delete: negative numbers) took effect."""
        state = self._tenant(tenant)
        if state.loaded:
            state.sessions += sessions
            state.bytes += size

    def counts(self, tenant: str) -> bool:
        """Whether the tenant's usage is kept (else a change need not measure what it adds)."""
        state = self._tenants.get(tenant)
        return state is not None and state.loaded

    async def charged(
        self, tenant: str, sessions: int, size: int, change: Callable[[], Awaitable[T]], measure: Callable[[T], int]
    ) -> T:
        """Run ``change``, which adds ``sessions`` and about ``size`` bytes to the tenant, if the quotas allow it
        (else QUOTA_EXCEEDED, and it does not run); count what ``measure`` says it added once it succeeded."""
        await self.enter(tenant)
        try:
            reservation = self.reserve(tenant, sessions, size)
            try:
                made = await change()
            except BaseException:
                self.release(reservation)
                raise
            self.commit(reservation, sessions, measure(made))
            return made
        finally:
            self.leave(tenant)
