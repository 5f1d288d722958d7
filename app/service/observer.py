"""What the service tells of the operations it completes, for the metrics of spec 13.

:class:`~app.service.sessions.SessionService` is given a :class:`SessionObserver`; the API layer's records each call
in its metrics. This base, the default, tells no one. Every method is called on the event loop, once per completed
operation, with the tenant it belongs to (a metric names it only when asked to).
"""

from __future__ import annotations

__all__ = ["NO_SESSION_OBSERVER", "SessionObserver"]


class SessionObserver:
    def appended(self, tenant: str, events: int, size: int) -> None:
        """``events`` events of ``size`` bytes (their stored lines) were appended and acknowledged."""

    def created(self, tenant: str) -> None:
        """A session was created (``POST /sessions``; a fork is :meth:`forked`)."""

    def forked(self, tenant: str) -> None:
        """A session was forked into a new one."""

    def deleted(self, tenant: str) -> None:
        """A session was deleted."""

    def expired(self, tenant: str) -> None:
        """A session was deleted by the service for its tenant's retention (spec 14)."""

    def replayed(self, tenant: str) -> None:
        """A request with a known ``Idempotency-Key`` got its kept answer again."""

    def streams(self, tenant: str, change: int) -> None:
        """A live tail opened (+1) or ended (-1)."""


NO_SESSION_OBSERVER = SessionObserver()
