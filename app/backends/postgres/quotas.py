"""Quotas on PostgreSQL (spec 14), checked in the transaction of each create, fork and append, exactly across
replicas.

A change that a quota applies to takes a transaction-scoped advisory lock of its tenant first, then sums what the
tenant holds (``count(*)`` and ``sum(bytes)`` of its sessions), refuses if the change would go past a quota, and
makes the change before it commits (which releases the lock). So two replicas racing for a tenant's last slot
take turns, and the second one sees the first one's session. Changes of a tenant without quotas take no lock.

``forklog_sessions.bytes`` is each session's log as ``export`` writes it (the header line, then its event lines),
kept by every create and append. It is NULL where it is not known yet (a session an older forklog made, or a fork
at an earlier boundary made while its tenant had no bytes quota: its seed's length would cost a pass over the
seed): the sum fills those in first, once each.
"""

from __future__ import annotations

from app.backends.postgres.chains import ChainCache
from app.backends.postgres.pool import Connection
from app.backends.postgres.rows import header_of_row
from app.domain.dsh_records import header_bytes
from app.domain.limits import TenantLimits, quota_refusal
from app.domain.session import SessionHeader

__all__ = ["QUOTA_LOCK_CLASS", "bytes_without_created_at", "check_quota", "seed_bytes"]

# pg_advisory_xact_lock(class, key)'s class for tenants' quotas (the key is the tenant's hashtext); any fixed int4.
QUOTA_LOCK_CLASS = 0x666B7131  # "fkq1"

_LOCK = "SELECT pg_advisory_xact_lock($1, hashtext($2))"
_USAGE = (
    "SELECT count(*) AS sessions, coalesce(sum(bytes), 0) AS bytes, count(*) FILTER (WHERE bytes IS NULL) AS unknown "
    "FROM forklog_sessions WHERE tenant = $1"
)
_UNKNOWN = (
    "SELECT id, instance, created_at, cwd, parent_session, seed_length, origin, delegation_depth, agent_preset, log, "
    "count FROM forklog_sessions WHERE tenant = $1 AND bytes IS NULL"
)
_FILL = "UPDATE forklog_sessions SET bytes = $4 WHERE tenant = $1 AND id = $2 AND log = $3 AND count = $5"
# The bytes of a chain's pieces' lines ($1 logs, $2 starts, $3 stops), newlines included: the packs' sizes (a piece
# starts and ends at a fork point or the log's end, never inside a pack) and the small rows' lines.
_LINE_BYTES = """
SELECT coalesce(sum(x.size), 0)
FROM unnest($1::bigint[], $2::bigint[], $3::bigint[]) AS p(log, lo, hi)
CROSS JOIN LATERAL (
    SELECT k.size FROM forklog_packs k WHERE k.log = p.log AND k.seq >= p.lo AND k.seq < p.hi
    UNION ALL
    SELECT octet_length(e.line) + 1 FROM forklog_events e WHERE e.log = p.log AND e.seq >= p.lo AND e.seq < p.hi
) AS x
"""


def bytes_without_created_at(header: SessionHeader) -> int:
    """The header line's bytes but the digits of its ``createdAt`` (which the database assigns)."""
    return header_bytes(header) - len(str(header.created_at))


async def seed_bytes(conn: Connection, chains: ChainCache, log: int, count: int) -> int:
    """The bytes of the first ``count`` event lines of the log ``log`` (a pass over them)."""
    if count <= 0:
        return 0
    chain = await chains.get(conn, log)
    return int(await conn.fetchval(_LINE_BYTES, *chain.arrays(0, count)))


async def _usage(conn: Connection, chains: ChainCache, tenant: str) -> tuple[int, int]:
    row = await conn.fetchrow(_USAGE, tenant)
    assert row is not None  # an aggregate always answers one row
    sessions, size = int(row["sessions"]), int(row["bytes"])
    if row["unknown"]:
        for unknown in await conn.fetch(_UNKNOWN, tenant):
            measured = header_bytes(header_of_row(unknown["id"], unknown)) + await seed_bytes(
                conn, chains, unknown["log"], unknown["count"]
            )
            # Kept only if no append moved the session meanwhile (one without a quota takes no lock).
            await conn.execute(_FILL, tenant, unknown["id"], unknown["log"], measured, unknown["count"])
            size += measured
    return sessions, size


async def check_quota(
    conn: Connection, chains: ChainCache, tenant: str, limits: TenantLimits, sessions: int, size: int
) -> None:
    """In the caller's transaction: take the tenant's lock and refuse (QUOTA_EXCEEDED) a change adding ``sessions``
    and ``size`` bytes beyond a quota."""
    if not limits.quotas:
        return
    await conn.execute(_LOCK, QUOTA_LOCK_CLASS, tenant)
    refusal = quota_refusal(tenant, limits, await _usage(conn, chains, tenant), (sessions, size))
    if refusal is not None:
        raise refusal
