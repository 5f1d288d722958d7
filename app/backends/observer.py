"""What a backend tells of its durable writes, for the service's metrics and traces (spec 13).

A backend holds a :class:`StorageObserver` (``observer``); the API layer gives it one that records. This base, the
default, tells no one and costs a method call.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

__all__ = ["NO_SPAN", "NO_STORAGE_OBSERVER", "StorageObserver"]

# The wrapper of a durable write no one traces: one for all (it holds nothing), not one made on every append.
NO_SPAN: AbstractContextManager[object] = nullcontext()


class StorageObserver:
    def synced(self, events: int, seconds: float) -> None:
        """An append round made ``events`` events durable in ``seconds`` (the file backend's write and ``fsync``
        round, shared by every append in it; PostgreSQL's commit of one batch). May be called from any thread."""

    def standby_read(self, server: str) -> None:
        """A read that a hot standby may serve (spec 6, Read replicas) ran on ``server``: ``standby`` or
        ``primary`` (no standby had replayed far enough in time, or none answers)."""

    def durable_write(self, name: str, events: int) -> AbstractContextManager[object]:
        """Wraps one request's wait for its durable write ``name`` (a child span of the request's trace)."""
        return NO_SPAN


NO_STORAGE_OBSERVER = StorageObserver()
