"""The queue of an upgrade's fill: a table of the log ids an older forklog stored without what a migration added,
worked through at start by every replica at once, a batch a transaction (each log's fill commits with its removal
from the queue, so an outage or a restart resumes from what is left)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from app.backends.postgres.chains import Chain
from app.backends.postgres.packs import PARTS, assemble
from app.backends.postgres.pool import Connection

__all__ = ["EventsMissing", "stored_lines", "work_through"]

READ_EVENTS = 20_000  # events a statement of a fill reads


class EventsMissing(Exception):
    """A log's events are not all stored (a fill leaves its old rows as they are)."""


logger = logging.getLogger("forklog.storage")


async def work_through(
    conn: Connection, queue: str, fill: Callable[[int], Awaitable[None]], *, batch: int, what: str
) -> int:
    """Fill every log listed in the table ``queue`` (waiting for those another replica fills); how many this call
    filled. A database with none listed is only read (a read-only role or a standby starts as before)."""
    take = f"SELECT log FROM {queue} ORDER BY log LIMIT $1 FOR UPDATE SKIP LOCKED"
    filled = 0
    while await conn.fetchval(f"SELECT EXISTS (SELECT 1 FROM {queue})"):
        async with conn.transaction():
            logs = [row["log"] for row in await conn.fetch(take, batch)]
            for log in logs:
                await fill(log)
                await conn.execute(f"DELETE FROM {queue} WHERE log = $1", log)
        filled += len(logs)
        if logs:
            logger.info("filled %s of %d sessions stored by an older forklog", what, filled)
        else:
            await asyncio.sleep(0.2)  # another replica fills the rest
    return filled


async def stored_lines(conn: Connection, chain: Chain, log: int, stop: int) -> AsyncIterator[tuple[int, bytes]]:
    """Each event ``seq, line`` of ``log`` before ``stop``, as stored (small rows and packs alike, a pack cut back to
    the range), READ_EVENTS a statement; EventsMissing (logged) if some are not there."""
    for start in range(0, stop, READ_EVENTS):
        end = min(stop, start + READ_EVENTS)
        body, count = assemble(await conn.fetch(PARTS, *chain.arrays(start, end)), start, end)
        if count != end - start:
            logger.warning("log %d: events %d..%d are not all stored; its old rows stay as they are", log, start, end)
            raise EventsMissing(log)
        for seq, line in enumerate(body.split(b"\n")[:-1], start):
            yield seq, line
