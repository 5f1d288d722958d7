"""What a forklog older than spec 17 stored without the session's figures, filled from the stored events.

Before spec 17 a session row's ``state`` held 13 columns (no stats, no unanswered calls) and a ``turn/end``'s
checkpoint 4 (no stats). The stats migration lists the logs that hold such rows in ``forklog_stats_fill``; a start
folds each listed log's events once (its fork chain included: :func:`~app.domain.stats.fold_stats` and
:func:`~app.domain.closers.fold_unanswered`, exactly what an append keeps) and writes the missing columns, before the
backend serves. It runs after :mod:`app.backends.postgres.state_fill` (which brings even older rows to 13 and 4
columns), in bounded batches: ``FILL_LOGS`` logs a transaction, ``fill_queue.READ_EVENTS`` events a statement.
Replicas starting together share the list (``SKIP LOCKED``) and each waits until it is empty; a batch leaves the
list in the transaction that fills it, so a start cut short finds the batches committed so far done.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson

from app.backends.postgres.chains import ChainCache
from app.backends.postgres.fill_queue import EventsMissing, stored_lines, work_through
from app.backends.postgres.pool import Connection
from app.domain.closers import NO_UNANSWERED, fold_unanswered, unanswered_columns
from app.domain.stats import SessionStats, fold_stats

__all__ = ["fill_old_stats"]

logger = logging.getLogger("forklog.storage")

OLD_STATE_COLUMNS = 13
OLD_CHECKPOINT_COLUMNS = 4
FILL_LOGS = 50

_SESSION = "SELECT count, state, seed_length FROM forklog_sessions WHERE log = $1"
_OLD_CHECKPOINTS = f"""
SELECT seq, checkpoint FROM forklog_turn_ends
WHERE log = $1 AND json_array_length(checkpoint::json) = {OLD_CHECKPOINT_COLUMNS} ORDER BY seq
"""


async def fill_old_stats(conn: Connection, chains: ChainCache) -> int:
    """Fill every log ``forklog_stats_fill`` lists; how many this call filled (see :func:`.fill_queue.work_through`)."""

    async def fill(log: int) -> None:
        await _fill(conn, chains, log)

    return await work_through(conn, "forklog_stats_fill", fill, batch=FILL_LOGS, what="the stats")


async def _fill(conn: Connection, chains: ChainCache, log: int) -> None:
    session = await conn.fetchrow(_SESSION, log)
    state: list[Any] | None = None
    if session is not None and len(old := orjson.loads(session["state"])) == OLD_STATE_COLUMNS:
        state = old
    checkpoints = {seq: orjson.loads(text) for seq, text in await conn.fetch(_OLD_CHECKPOINTS, log)}
    stop = max(session["count"] if state is not None and session is not None else 0, max(checkpoints, default=-1) + 1)
    if stop == 0 and state is None:
        return
    try:
        chain = await chains.get(conn, log)
    except LookupError:
        return  # reclaimed meanwhile
    seed_length = session["seed_length"] if session is not None else None
    stats = SessionStats(seed_length or 0)
    unanswered = NO_UNANSWERED
    try:
        async for seq, line in stored_lines(conn, chain, log, stop):
            event = orjson.loads(line)
            stats = fold_stats(stats, event)
            unanswered = fold_unanswered(unanswered, event)
            if seq in checkpoints:
                await conn.execute(
                    "UPDATE forklog_turn_ends SET checkpoint = $3 WHERE log = $1 AND seq = $2",
                    log,
                    seq,
                    orjson.dumps([*checkpoints.pop(seq), stats.columns()]).decode(),
                )
    except EventsMissing:
        return
    if state is not None and session is not None:
        columns = [*state, stats.columns(), unanswered_columns(unanswered)]
        await conn.execute(
            "UPDATE forklog_sessions SET state = $2 WHERE log = $1 AND state = $3",
            log,
            orjson.dumps(columns).decode(),
            session["state"],
        )
