"""The statements of the PostgreSQL backend, in one place (asyncpg prepares each once per connection)."""

from __future__ import annotations

from typing import Any

from app.backends.postgres.packs import PARTS, PARTS_AT, range_parts
from app.domain.listing import CREATED, PageRequest

__all__ = [
    "APPEND",
    "APPEND_REMEMBERING",
    "CLAIM_SOURCE",
    "COUNT_SESSIONS",
    "COUNT_TENANT_SESSIONS",
    "CREATE_SESSION",
    "DELETE_SESSION",
    "DELETE_SHARE",
    "EVENTS_AT",
    "FIND",
    "FIND_SHARE",
    "FORGET",
    "INCARNATION_LOG",
    "INSERT_REMEMBERED",
    "INSERT_SHARE",
    "LINES",
    "NEW_LOG_ID",
    "NOTIFY",
    "READ_OWN",
    "RECALL",
    "RESTORE_SESSION",
    "SESSION_COLUMNS",
    "SESSION_SHARES",
    "SET_ARCHIVED",
    "SURFACE",
    "TENANTS",
    "TURN_END",
    "page_query",
]

SESSION_COLUMNS = (
    "instance, created_at, cwd, parent_session, seed_length, origin, delegation_depth, agent_preset, log, count, "
    "state, changed_at, archived"
)

FIND = f"SELECT {SESSION_COLUMNS} FROM forklog_sessions WHERE tenant = $1 AND id = $2"


def page_query(tenant: str, request: PageRequest) -> tuple[str, list[Any]]:
    """A page of a tenant's sessions in the query's order (by (created_at, id) or (updated_at, id), each served by
    an index on (tenant, that column, id)) after the key ``after``, with its filters; and its parameters."""
    query, after = request.query, request.after
    params: list[Any] = [tenant, request.limit]
    conditions = ["tenant = $1"]
    for column, value in (
        ("parent_session", query.parent),
        ("cwd", query.cwd),
        ("origin", query.origin),
        ("agent_preset", query.agent_preset),
    ):
        if value is not None and "\x00" in value:
            # No text column holds U+0000 (and PostgreSQL refuses it as a parameter): no session has that value.
            conditions.append("FALSE")
        elif value is not None:
            params.append(value)
            conditions.append(f"{column} = ${len(params)}")
    if query.archived is not None:
        conditions.append("archived" if query.archived else "NOT archived")
    column = "created_at" if query.order == CREATED else "updated_at"
    if after is not None:
        params.extend(after)
        comparison = "<" if query.descending else ">"
        conditions.append(f"({column}, id) {comparison} (${len(params) - 1}, ${len(params)})")
    direction = " DESC" if query.descending else ""
    statement = (
        f"SELECT id, {SESSION_COLUMNS} FROM forklog_sessions WHERE {' AND '.join(conditions)} "
        f"ORDER BY {column}{direction}, id{direction} LIMIT $2"
    )
    return statement, params


COUNT_SESSIONS = "SELECT count(*) FROM forklog_sessions"
# Answered from the primary key's index (tenant, id): the tenant's rows only.
COUNT_TENANT_SESSIONS = "SELECT count(*) FROM forklog_sessions WHERE tenant = $1"
TENANTS = "SELECT DISTINCT tenant FROM forklog_sessions ORDER BY tenant"

# The parts (packs and small rows, see app.backends.postgres.packs) of a chain's pieces ($1 logs, $2 starts, $3 stops).
LINES = PARTS
# A read in one statement when the range lies in the session's own rows (seq >= its log's parent_count): the head,
# the log, where its own rows start, and the parts of events $3 .. $4 - 1 (a row with NULL parts when there are none).
READ_OWN = f"""
SELECT s.log, s.count, l.parent_count, x.seq, x.n, x.z, x.body
FROM forklog_sessions s
JOIN forklog_logs l ON l.id = s.log
LEFT JOIN LATERAL ({range_parts("s.log", "GREATEST($3::bigint, l.parent_count)", "LEAST($4::bigint, s.count)")}) AS x
    ON true
WHERE s.tenant = $1 AND s.id = $2
ORDER BY x.seq
"""
# The parts holding single events by (log, seq).
EVENTS_AT = PARTS_AT
SURFACE = """
SELECT s.seq, s.start_seq, s.end_seq
FROM unnest($1::bigint[], $2::bigint[], $3::bigint[]) AS p(log, lo, hi)
JOIN forklog_surface s ON s.log = p.log AND s.seq >= p.lo AND s.seq < p.hi
ORDER BY s.seq
"""
TURN_END = "SELECT time, checkpoint FROM forklog_turn_ends WHERE log = $1 AND seq = $2"
INCARNATION_LOG = "SELECT id FROM forklog_logs WHERE tenant = $1 AND session_id = $2 AND instance = $3"

# The state's first column (the last event's time) is read off its text, never through jsonb: a title or a preview
# may hold U+0000, which jsonb refuses. The state is written by orjson, so it starts "[<digits>," (or "[null,").
# An append, one statement: the head moves only if it is where the batch was staged ($3 log, $6 count), and the rows
# go in only if it moved ($7..$14 the small rows, surface rows and turn/ends, $16..$20 the packs of a large batch);
# $15 is when it is acknowledged, by the server's clock (retention counts from it); $21 the archived flag of the
# cached tip (another replica's archive makes the tip stale, and the answer would tell it). (No NOTIFY in it:
# notifications serialize commits, so they are sent after, in batches.)
_APPEND_HEAD = """
WITH head AS (
    UPDATE forklog_sessions SET count = $4, state = $5, change_seq = nextval('forklog_changes'),
        bytes = bytes + (SELECT coalesce(sum(octet_length(u.line) + 1), 0) FROM unnest($8::text[]) AS u(line))
            + (SELECT coalesce(sum(u.size), 0) FROM unnest($18::int[]) AS u(size)),
        updated_at = GREATEST(updated_at, (substring($5::text from '^[[]([0-9]+),'))::bigint), changed_at = $15
    WHERE tenant = $1 AND id = $2 AND log = $3 AND count = $6 AND archived = $21
    RETURNING log, change_seq
), events AS (
    INSERT INTO forklog_events (log, seq, line)
    SELECT head.log, u.seq, u.line FROM head, unnest($7::bigint[], $8::text[]) AS u(seq, line)
), surface AS (
    INSERT INTO forklog_surface (log, seq, start_seq, end_seq)
    SELECT head.log, u.seq, u.s, u.e FROM head, unnest($9::bigint[], $10::bigint[], $11::bigint[]) AS u(seq, s, e)
), turn_ends AS (
    INSERT INTO forklog_turn_ends (log, seq, time, checkpoint)
    SELECT head.log, u.seq, u.t, u.c FROM head, unnest($12::bigint[], $13::bigint[], $14::text[]) AS u(seq, t, c)
), packs AS (
    INSERT INTO forklog_packs (log, seq, count, size, compressed, body)
    SELECT head.log, u.* FROM head, unnest($16::bigint[], $17::int[], $18::int[], $19::bool[], $20::bytea[]) AS u
)"""
_REMEMBERED_COLUMNS = (
    "tenant, key, fingerprint, status, location, body, created_at, session, instance, first_seq, end_seq"
)
_REMEMBERED_ARRAYS = (
    "unnest($22::text[], $23::text[], $24::text[], $25::int[], $26::text[], $27::bytea[], $28::bigint[], "
    "$29::text[], $30::text[], $31::bigint[], $32::bigint[])"
)
APPEND = _APPEND_HEAD + "\nSELECT head.change_seq FROM head"
APPEND_REMEMBERING = (
    _APPEND_HEAD
    + f""", remembered AS (
    INSERT INTO forklog_remembered ({_REMEMBERED_COLUMNS})
    SELECT u.* FROM head, {_REMEMBERED_ARRAYS} AS u
)
SELECT head.change_seq FROM head"""
)

NEW_LOG_ID = "SELECT nextval('forklog_log_ids')"
INSERT_REMEMBERED = (
    f"INSERT INTO forklog_remembered ({_REMEMBERED_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
)

# A fork's source must be live (that incarnation) until the fork commits: KEY SHARE keeps a delete out, not appends.
CLAIM_SOURCE = (
    "SELECT log, count, state FROM forklog_sessions WHERE tenant = $1 AND id = $2 AND instance = $3 FOR KEY SHARE"
)

# A new session, one statement: $1 tenant, $2 id, $3 instance, $4 now (or the restored createdAt), $5..$10 the
# header's optional fields, $11 log, $12 count, $13 state, $14 parent log, $15 parent count, $16..$23 the seed's
# small rows (as in an append; empty when they were copied in before), $24 its bytes but the createdAt's digits (or
# NULL: not known yet), $25 when it is acknowledged (by the server's clock: retention counts from it), $26..$30 the
# packs of its ended turns, $31 whether it is archived (a restored one may be; a new one never is). The createdAt is
# max(now, 1 + the largest given to the tenant) from the tenant's clock row, made on its first create and locked
# until commit, so that a tenant's creates on every replica follow each other (and other tenants' creates neither
# wait for it nor show in it). A taken id inserts nothing (and the caller's transaction, if
# any, is rolled back).
_NEW_SESSION = """
, session AS (
    INSERT INTO forklog_sessions (tenant, id, instance, created_at, cwd, parent_session, seed_length, origin,
                                  delegation_depth, agent_preset, log, count, state, change_seq, bytes, updated_at,
                                  changed_at, archived)
    SELECT $1, $2, $3, clock.created_at, $5, $6, $7, $8, $9, $10, $11, $12, $13, nextval('forklog_changes'),
           $24::bigint + length(clock.created_at::text),
           GREATEST(clock.created_at, COALESCE((substring($13::text from '^[[]([0-9]+),'))::bigint, clock.created_at)),
           $25, $31
    FROM clock
    ON CONFLICT (tenant, id) DO NOTHING
    RETURNING created_at, change_seq
), log AS (
    INSERT INTO forklog_logs (id, tenant, session_id, instance, parent, parent_count)
    SELECT $11, $1, $2, $3, $14, $15 FROM session
), events AS (
    INSERT INTO forklog_events (log, seq, line)
    SELECT $11, u.seq, u.line FROM session, unnest($16::bigint[], $17::text[]) AS u(seq, line)
), surface AS (
    INSERT INTO forklog_surface (log, seq, start_seq, end_seq)
    SELECT $11, u.seq, u.s, u.e FROM session, unnest($18::bigint[], $19::bigint[], $20::bigint[]) AS u(seq, s, e)
), turn_ends AS (
    INSERT INTO forklog_turn_ends (log, seq, time, checkpoint)
    SELECT $11, u.seq, u.t, u.c FROM session, unnest($21::bigint[], $22::bigint[], $23::text[]) AS u(seq, t, c)
), packs AS (
    INSERT INTO forklog_packs (log, seq, count, size, compressed, body)
    SELECT $11, u.* FROM session, unnest($26::bigint[], $27::int[], $28::int[], $29::bool[], $30::bytea[]) AS u
)
SELECT session.created_at, session.change_seq FROM session
"""
_TENANT_CLOCK = (
    "WITH clock AS (INSERT INTO forklog_tenant_clocks AS kept (tenant, last_created_at) VALUES ($1, $4::bigint) "
    "ON CONFLICT (tenant) DO UPDATE SET last_created_at = GREATEST(excluded.last_created_at, kept.last_created_at{}) "
)
CREATE_SESSION = _TENANT_CLOCK.format(" + 1") + "RETURNING last_created_at AS created_at)" + _NEW_SESSION
RESTORE_SESSION = _TENANT_CLOCK.format("") + "RETURNING $4::bigint AS created_at)" + _NEW_SESSION

# Archive or unarchive an incarnation ($3), only at the log length $5 when given; no event, no change_seq (nothing
# another replica caches but a tip, which the next append's own statement confirms).
SET_ARCHIVED = f"""
UPDATE forklog_sessions SET archived = $4
WHERE tenant = $1 AND id = $2 AND instance = $3 AND ($5::bigint IS NULL OR count = $5)
RETURNING {SESSION_COLUMNS}
"""

DELETE_SESSION = """
WITH gone AS (
    DELETE FROM forklog_sessions WHERE tenant = $1 AND id = $2 RETURNING log
), unshared AS (
    DELETE FROM forklog_shares WHERE tenant = $1 AND session_id = $2
), orphan AS (
    UPDATE forklog_logs SET orphaned_at = $3 WHERE id IN (SELECT log FROM gone)
), tomb AS (
    INSERT INTO forklog_deletions (tenant, id, change_seq, deleted_at)
    SELECT $1, $2, nextval('forklog_changes'), $3 FROM gone
    RETURNING change_seq
)
SELECT tomb.change_seq FROM tomb
"""

RECALL = (
    "SELECT fingerprint, status, location, body, created_at, session, instance, first_seq, end_seq "
    "FROM forklog_remembered WHERE tenant = $1 AND key = $2"
)
FORGET = "DELETE FROM forklog_remembered WHERE created_at < $1"

# The doorbell: one statement rings for a batch of changes ($1 the payloads, see changes.Doorbell).
NOTIFY = "SELECT count(pg_notify('forklog_changes', payload)) FROM unnest($1::text[]) AS payload"

# Share links (spec 18): looked up by their token's SHA-256 only; never cached (a revoke is seen by the next read).
SHARE_COLUMNS = "id, tenant, session_id, instance, digest, up_to, redact, created_at, expires_at"
INSERT_SHARE = f"INSERT INTO forklog_shares ({SHARE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
FIND_SHARE = f"SELECT {SHARE_COLUMNS} FROM forklog_shares WHERE digest = $1"
SESSION_SHARES = (
    f"SELECT {SHARE_COLUMNS} FROM forklog_shares WHERE tenant = $1 AND session_id = $2 ORDER BY created_at, id"
)
DELETE_SHARE = "DELETE FROM forklog_shares WHERE tenant = $1 AND session_id = $2 AND id = $3 RETURNING id"
