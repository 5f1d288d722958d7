"""Reclaiming the rows no live session reads any more: a background sweep, not the delete itself.

A delete only removes the session's row and marks its log orphaned (``orphaned_at``), so it costs the same whatever
the log's length. The sweep (every replica runs it now and then, and soon after its own deletes; an advisory lock
lets one run at a time) takes the logs orphaned longer than ``grace`` ago: a log keeps the rows its children's seeds
need (below the largest ``parent_count`` among the logs forked from it) and loses the rest; a log left with no child
and no session is removed, and then its parent is looked at again. The grace lets a snapshot that is still streaming
a deleted session's seed finish reading rows that cannot change.
"""

from __future__ import annotations

from app.backends.postgres.pool import Connection

__all__ = ["SWEEP_LOCK", "sweep_once"]

SWEEP_LOCK = 0x666F726B6C6F6702  # "forklog" + 2
DELETIONS_KEPT_MS = 3_600_000  # the change poll reads a delete's row for an hour at most

_CANDIDATES = """
SELECT l.id, COALESCE((SELECT max(c.parent_count) FROM forklog_logs c WHERE c.parent = l.id), 0) AS keep,
       EXISTS (SELECT 1 FROM forklog_logs c WHERE c.parent = l.id) AS has_children
FROM forklog_logs l
WHERE l.orphaned_at IS NOT NULL AND l.orphaned_at <= $1
ORDER BY l.id
"""
# A pack never holds a turn/end but as its last event, and ``keep`` is a fork point: whole packs go.
_DELETE_PACKS = """
WITH gone AS (DELETE FROM forklog_packs WHERE log = $1 AND seq >= $2 RETURNING count)
SELECT coalesce(sum(count), 0) FROM gone
"""


async def sweep_once(conn: Connection, *, now: int, grace_ms: int) -> int:
    """One sweep; the number of events reclaimed (0 if another replica is sweeping right now)."""
    reclaimed = 0
    async with conn.transaction():
        if not await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", SWEEP_LOCK):
            return 0
        while True:
            removed_logs = 0
            for row in await conn.fetch(_CANDIDATES, now - grace_ms):
                log, keep = row["id"], row["keep"]
                await conn.execute("SELECT id FROM forklog_logs WHERE id = $1 FOR UPDATE", log)  # the packer's lock
                status = await conn.execute("DELETE FROM forklog_events WHERE log = $1 AND seq >= $2", log, keep)
                reclaimed += int(status.split()[-1])
                reclaimed += int(await conn.fetchval(_DELETE_PACKS, log, keep))
                await conn.execute("DELETE FROM forklog_surface WHERE log = $1 AND seq >= $2", log, keep)
                await conn.execute("DELETE FROM forklog_turn_ends WHERE log = $1 AND seq >= $2", log, keep)
                if not row["has_children"]:
                    await conn.execute("DELETE FROM forklog_logs WHERE id = $1", log)
                    removed_logs += 1
            if removed_logs == 0:
                break
        await conn.execute("DELETE FROM forklog_deletions WHERE deleted_at < $1", now - DELETIONS_KEPT_MS)
    return reclaimed
