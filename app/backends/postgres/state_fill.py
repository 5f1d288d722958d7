"""What a forklog older than schema version 6 stored without the sidebar's members, filled from the stored events.

Before spec 12 a session row's ``state`` held 8 columns and a ``turn/end``'s checkpoint 3: neither the bytes of the
log (``body_bytes``), nor its title and preview (and their seqs). Migration 6 lists the logs that hold such rows in
``forklog_state_fill``; a start reads each listed log's events once (its fork chain included) and writes the
missing columns, before the backend serves: an old session then reads, lists, searches, forks and appends as a new
one. Replicas starting together share the list (``SKIP LOCKED``) and each waits until it is empty. A batch leaves
the list in the transaction that fills it: a start cut short by an outage (which the start waits out and then runs
again) finds the logs of the batches committed so far done, and fills the rest.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import orjson

from app.backends.postgres.chains import ChainCache
from app.backends.postgres.fill_queue import EventsMissing, stored_lines, work_through
from app.backends.postgres.pool import Connection
from app.domain.summary import TITLE_TYPE, preview_of, title_of

__all__ = ["fill_old_states"]

logger = logging.getLogger("forklog.storage")

OLD_STATE_COLUMNS = 8
OLD_CHECKPOINT_COLUMNS = 3
# Logs filled per transaction, and events read per statement.
FILL_LOGS = 50

_SESSION = "SELECT count, state FROM forklog_sessions WHERE log = $1"
_OLD_CHECKPOINTS = f"""
SELECT seq, checkpoint FROM forklog_turn_ends
WHERE log = $1 AND jsonb_array_length(checkpoint::jsonb) = {OLD_CHECKPOINT_COLUMNS} ORDER BY seq
"""


@dataclass(slots=True)
class _Summary:
    """What the new columns say of a log's first events, read one event at a time."""

    body_bytes: int = 0
    title: str | None = None
    title_seq: int | None = None
    preview: str | None = None
    preview_seq: int | None = None

    def add(self, seq: int, line: str) -> None:
        self.body_bytes += len(line.encode()) + 1
        if TITLE_TYPE not in line and "user/message" not in line:
            return  # neither a title nor a message: nothing to parse
        event = orjson.loads(line)
        kind = event.get("type")
        if kind == TITLE_TYPE:
            self.title, self.title_seq = title_of(event.get("data")), seq
        elif kind == "user/message" and self.preview_seq is None:
            self.preview, self.preview_seq = preview_of(event.get("data")), seq


async def fill_old_states(conn: Connection, chains: ChainCache) -> int:
    """Fill every log ``forklog_state_fill`` lists; how many this call filled (see :func:`.fill_queue.work_through`)."""

    async def fill(log: int) -> None:
        await _fill(conn, chains, log)

    return await work_through(conn, "forklog_state_fill", fill, batch=FILL_LOGS, what="the sidebar's members")


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
    summary = _Summary()
    try:
        async for seq, line in stored_lines(conn, chain, log, stop):
            summary.add(seq, line.decode())
            if seq in checkpoints:
                await conn.execute(
                    "UPDATE forklog_turn_ends SET checkpoint = $3 WHERE log = $1 AND seq = $2",
                    log,
                    seq,
                    orjson.dumps([*checkpoints.pop(seq), summary.body_bytes]).decode(),
                )
    except EventsMissing:
        return
    if state is not None and session is not None:
        columns = [*state, summary.body_bytes, summary.title, summary.title_seq, summary.preview, summary.preview_seq]
        await conn.execute(
            "UPDATE forklog_sessions SET state = $2 WHERE log = $1 AND state = $3",
            log,
            orjson.dumps(columns).decode(),
            session["state"],
        )
