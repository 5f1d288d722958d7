"""Other replicas' changes, reported to this one's listeners: LISTEN/NOTIFY as a doorbell, a poll as the truth.

Every change of a session (create, append, fork, restore, delete) takes a number from the ``forklog_changes``
sequence into its row (a delete into a ``forklog_deletions`` row). After it commits, this replica's
:class:`Doorbell` notifies channel ``forklog_changes`` with ``[replica, [[tenant, id, change_seq], ...]]``: one
statement for all the changes of a moment, outside the changes' transactions (a NOTIFY in a transaction takes a
lock that serializes every commit: measured here, 32 clients' appends went from ~4,100 to ~1,500 a second). A
notification is reported at once; and every ``poll_interval`` the feed reads the rows whose change number is above
its watermark, so a lost notification (or a connection that was down) costs at most one interval. Sequence numbers
are taken before commit, so a transaction can commit after a later one: the watermark used is the one of
``LOOKBACK`` seconds ago, and a change already reported (or this replica's own) is not reported again.

Behind a transaction pooler a LISTEN would hold no session (:mod:`~app.backends.postgres.pooler`): the feed then
listens over the direct URL when one is set, and polls alone otherwise, or while the direct URL cannot be reached
(trying it again every ``PREFERRED_AGAIN`` seconds).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable

import orjson

from app.backends.background import BackgroundLoop
from app.backends.base import ChangeListener
from app.backends.postgres.errors import DRIVER_ERRORS
from app.backends.postgres.pool import Connection, PoolSettings, connect
from app.domain.session import SessionKey

__all__ = ["CHANNEL", "Doorbell", "ReplicaChanges"]

logger = logging.getLogger("forklog.storage")

CHANNEL = "forklog_changes"
LOOKBACK = 5.0  # seconds a transaction may take between its change number and its commit and still be polled
MAX_ROWS = 10_000
PREFERRED_AGAIN = 10.0  # seconds the feed polls through a fallback URL before it tries the preferred one again

_POLL = """
SELECT tenant, id, change_seq FROM forklog_sessions WHERE change_seq > $1
UNION ALL
SELECT tenant, id, change_seq FROM forklog_deletions WHERE change_seq > $1
ORDER BY change_seq LIMIT $2
"""
_HIGHEST = """
SELECT GREATEST((SELECT max(change_seq) FROM forklog_sessions), (SELECT max(change_seq) FROM forklog_deletions))
"""


PAYLOAD_BYTES = 7000  # below PostgreSQL's 8000-byte limit on a notification's payload
RING_INTERVAL = 0.01  # seconds between two rings: changes of the meantime share one


def payloads(replica: str, changes: dict[SessionKey, int]) -> list[str]:
    """The notifications announcing ``changes``, each within PAYLOAD_BYTES."""
    found: list[str] = []
    batch: list[tuple[str, str, int]] = []
    size = 0
    for key, change_seq in changes.items():
        entry = (key.tenant, key.id, change_seq)
        entry_size = len(key.tenant) + len(key.id) + 32
        if batch and size + entry_size > PAYLOAD_BYTES:
            found.append(orjson.dumps([replica, batch]).decode())
            batch, size = [], 0
        batch.append(entry)
        size += entry_size
    if batch:
        found.append(orjson.dumps([replica, batch]).decode())
    return found


class Doorbell(BackgroundLoop):
    """Rings (NOTIFY) for this replica's changes once they committed, a batch at a time; a ring that fails is
    dropped (the other replicas' polls find the change)."""

    task_name = "forklog-doorbell"

    def __init__(self, replica: str, send: Callable[[list[str]], Awaitable[None]]) -> None:
        self._replica = replica
        self._send = send
        self._pending: dict[SessionKey, int] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def ring(self, key: SessionKey, change_seq: int) -> None:
        self._pending[key] = max(change_seq, self._pending.get(key, -1))
        self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            changes, self._pending = self._pending, {}
            try:
                await self._send(payloads(self._replica, changes))
            except Exception as exc:  # the polls find these changes anyway
                logger.debug("a change notification was not sent (%s)", type(exc).__name__)
            await asyncio.sleep(RING_INTERVAL)


class ReplicaChanges(BackgroundLoop):
    """Runs while the backend is open; calls ``listeners`` with the key of each change another replica made."""

    task_name = "forklog-change-feed"

    def __init__(
        self,
        url: str,
        settings: PoolSettings,
        replica: str,
        listeners: list[ChangeListener],
        *,
        poll_interval: float = 0.5,
        own: Callable[[int], bool],
    ) -> None:
        self._routes: list[tuple[str, bool]] = [(url, True)]
        self._settings = settings
        self._replica = replica
        self._listeners = listeners
        self._poll_interval = poll_interval
        self._own = own
        self._task: asyncio.Task[None] | None = None
        self._reported: dict[SessionKey, int] = {}
        self._marks: deque[tuple[float, int]] = deque()
        self._high = -1

    def route(self, routes: list[tuple[str, bool]]) -> None:
        """The URLs to follow changes through, the preferred first, each with whether to LISTEN there (set before
        the feed starts)."""
        self._routes = routes

    async def _connect(self) -> tuple[Connection, bool, bool]:
        """A connection of the first route that answers; whether to LISTEN on it, and whether it is a fallback."""
        for index, (url, listens) in enumerate(self._routes):
            try:
                return await connect(url, self._settings), listens, index > 0
            except DRIVER_ERRORS:
                if index == len(self._routes) - 1:
                    raise
        raise AssertionError("the change feed has no route")

    def _report(self, key: SessionKey, change_seq: int) -> None:
        if self._reported.get(key, -1) >= change_seq:
            return
        self._reported[key] = change_seq
        if self._own(change_seq):
            return
        for listener in list(self._listeners):
            try:
                listener(key)
            except Exception:
                logger.exception("a change listener failed")

    def _on_notification(self, _conn: Connection, _pid: int, _channel: str, payload: object) -> None:
        if not isinstance(payload, str):
            return
        try:
            replica, changes = orjson.loads(payload)
            if replica == self._replica:
                return
            for tenant, session_id, change_seq in changes:
                self._report(SessionKey(tenant, session_id), int(change_seq))
        except (orjson.JSONDecodeError, ValueError, TypeError):
            return

    async def _run(self) -> None:
        delay = self._poll_interval
        while True:
            conn: Connection | None = None
            try:
                conn, listens, fallback = await self._connect()
                if self._high < 0:
                    self._high = int(await conn.fetchval(_HIGHEST) or 0)
                if listens:
                    await conn.add_listener(CHANNEL, self._on_notification)
                delay = self._poll_interval
                until = time.monotonic() + PREFERRED_AGAIN if fallback else None
                while until is None or time.monotonic() < until:
                    await self._poll(conn)
                    await asyncio.sleep(self._poll_interval)
                continue  # back to the preferred route
            except asyncio.CancelledError:
                raise
            except DRIVER_ERRORS as exc:
                logger.debug("the change feed lost the database (%s); again in %.1f s", type(exc).__name__, delay)
            finally:
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(conn.close(), timeout=1.0)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def _poll(self, conn: Connection) -> None:
        now = time.monotonic()
        self._marks.append((now, self._high))
        while len(self._marks) > 1 and self._marks[1][0] <= now - LOOKBACK:
            self._marks.popleft()
        low = self._marks[0][1]
        while True:
            # A session row keeps only its latest change number, so a page holds one row per session changed.
            # Bounded: a primary that went silent (paused, cut off) must not hold the feed for a whole command timeout.
            rows = await conn.fetch(_POLL, low, MAX_ROWS, timeout=self._settings.connect_timeout)
            for row in rows:
                change_seq = int(row["change_seq"])
                self._high = max(self._high, change_seq)
                self._report(SessionKey(row["tenant"], row["id"]), change_seq)
            if len(rows) < MAX_ROWS:
                break
            low = int(rows[-1]["change_seq"])
        # What is below every watermark still in use can never be polled again.
        floor = self._marks[0][1]
        if len(self._reported) > 4 * MAX_ROWS:
            self._reported = {key: seq for key, seq in self._reported.items() if seq > floor}
