"""Which reads a hot standby may serve, and how fresh they must be (spec 6, Read replicas).

A request whose route declares it (``RouteSpec.standby_reads``) runs inside :func:`standby_reads`: its reads may be
served by a standby once the standby has replayed every change acknowledged before the request arrived. The moment
that bounds them, :class:`StandbyRead`'s ``since``, moves on with :func:`read_from_now` when a read must see what
was acknowledged since (a live tail's next look after a notification, a long-poll woken by a change). Every other
read, and every change, runs on the primary. The backends decide the rest (a backend without standbys ignores it).

It is a context variable, so it follows the request into the tasks it starts (a stream's body), but not into the
background loops (:mod:`app.backends.background` starts them outside it).
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["StandbyRead", "read_from_now", "standby_read", "standby_reads", "without_standby_reads"]


@dataclass(slots=True)
class StandbyRead:
    """Reads that must see every change acknowledged before ``since`` (``time.monotonic()``); ``fence`` is what the
    backend found that to mean (the primary's WAL position), kept for the request's next statement."""

    since: float
    fence: int | None = None


_current: contextvars.ContextVar[StandbyRead | None] = contextvars.ContextVar("forklog_standby_read", default=None)


@contextlib.contextmanager
def standby_reads() -> Iterator[StandbyRead]:
    """The reads of the block may be served by a standby that has replayed every change acknowledged before now."""
    read = StandbyRead(time.monotonic())
    token = _current.set(read)
    try:
        yield read
    finally:
        _current.reset(token)


def standby_read() -> StandbyRead | None:
    """The current request's standby read, or None: its reads run on the primary."""
    return _current.get()


def read_from_now() -> None:
    """The reads from here on must also see every change acknowledged until now."""
    read = _current.get()
    if read is not None:
        read.since = time.monotonic()
        read.fence = None


def without_standby_reads() -> contextvars.Context:
    """A copy of the current context in which no read is a standby read (for a task that outlives the request)."""
    context = contextvars.copy_context()
    context.run(_current.set, None)
    return context
