"""The database schema, as versioned migrations kept in the package, and the one function that applies them.

Every start runs :func:`migrate`: under a transaction-scoped advisory lock it reads the stored version, refuses a
database newer than this forklog (:class:`~app.backends.errors.StartRefused`, naming both versions) and applies the
missing migrations in order, each with the version bump in the same transaction. Replicas starting at the same
moment wait on the lock; the first applies, the others find the schema current.

Tables (every name starts with ``forklog_``):

- ``sessions``: one row per live session, keyed by (tenant, id) (compared byte by byte, ``COLLATE "C"``, so that
  lists are in the same order whatever the database's locale): the header, the log it reads (``log``), its length
  (``count``, the head an append is conditional on), the rules' state after its last event (``state``, JSON without
  the surface nodes), ``updated_at`` (its last activity, for the order of spec 12), ``changed_at`` (when the
  server acknowledged its last change, by the server's clock: retention counts from it, version 7) and
  ``change_seq`` (from a global sequence, for the change poll).
- ``logs``: the stored logs. A session incarnation has its own log; a fork's log starts with the first
  ``parent_count`` events of its ``parent`` log (shared rows, not copies) and holds its own rows from there on.
  ``orphaned_at`` is set when its session is deleted (the sweep reclaims what no live session still reads).
- ``events``: one row per event of a log's open turn (and of an older forklog's logs not repacked yet), its exact
  canonical JSON text (``text``, not ``jsonb``), keyed by (log, seq).
- ``packs`` (version 9): the events of ended turns, up to 1,024 a row, their lines concatenated and compressed
  (:mod:`app.backends.postgres.packs`); ``pack_queue``: the logs an older forklog stored, for the packer
  (:mod:`app.backends.postgres.packing`) to repack.
- ``surface``: one row per surface event (what it did to the model-visible surface), to rebuild the surface nodes.
- ``turn_ends``: one row per ``turn/end`` with its time and the rules' checkpoint right after it (a fork's state).
- ``deletions``: recent deletes, for the change poll of other replicas.
- ``remembered``: idempotency records, written in the transaction of their change.
- ``tenant_clocks``: per tenant, the largest ``createdAt`` given so far (one row per tenant, locked by each of its
  creates until commit: creates of one tenant follow each other on every replica, and no tenant waits on another's
  or can count them). ``clock``, the one row of schema version 1 that all tenants shared, is no longer written (kept
  for a version-1 replica still running during an upgrade).

- ``search``: per session, the words of its searchable text as a ``tsvector`` (GIN index) and the incarnation and
  count of events they cover (version 5; :mod:`app.backends.postgres.search`), each word after its tenant's tag
  (version 7, which emptied the untagged rows).

- ``state_fill``: the logs whose rows an older forklog wrote without the sidebar's members (version 6), emptied by
  the next start (:mod:`app.backends.postgres.state_fill`).
- ``stats_fill``: the logs whose rows an older forklog wrote without the session's figures of spec 17 (the stats
  migration), emptied by the next start (:mod:`app.backends.postgres.stats_fill`).

``sessions.archived`` says whether the session is archived (spec 17): never cached by a replica but in the tip an
append checks, which the append's own statement confirms (a moved flag is a stale tip, read again).

``sessions.bytes`` (version 3) is the session's log as ``export`` writes it, header line included, or NULL where it
is not known yet (see :mod:`app.backends.postgres.quotas`).
"""

from __future__ import annotations

from app.backends.errors import StartRefused
from app.backends.postgres.pool import Connection

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "migrate", "stored_version"]

# One migration per version, applied in order; never edit a released one, add the next.
MIGRATIONS: tuple[str, ...] = (
    # 1: the first schema.
    """
    CREATE TABLE forklog_clock (
        singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
        last_created_at bigint NOT NULL
    );
    INSERT INTO forklog_clock VALUES (true, -1);
    CREATE SEQUENCE forklog_changes;
    CREATE SEQUENCE forklog_log_ids;
    CREATE TABLE forklog_logs (
        id bigint PRIMARY KEY,
        tenant text NOT NULL,
        session_id text NOT NULL,
        instance text NOT NULL,
        parent bigint,
        parent_count bigint NOT NULL,
        orphaned_at bigint
    );
    CREATE INDEX forklog_logs_parent ON forklog_logs (parent) WHERE parent IS NOT NULL;
    CREATE INDEX forklog_logs_orphaned ON forklog_logs (orphaned_at) WHERE orphaned_at IS NOT NULL;
    CREATE INDEX forklog_logs_incarnation ON forklog_logs (tenant, session_id, instance);
    CREATE TABLE forklog_sessions (
        tenant text COLLATE "C" NOT NULL,
        id text COLLATE "C" NOT NULL,
        instance text NOT NULL,
        created_at bigint NOT NULL,
        cwd text,
        parent_session text,
        seed_length bigint,
        origin text,
        delegation_depth bigint NOT NULL,
        agent_preset text,
        log bigint NOT NULL,
        count bigint NOT NULL,
        state text NOT NULL,
        change_seq bigint NOT NULL,
        PRIMARY KEY (tenant, id)
    );
    CREATE INDEX forklog_sessions_order ON forklog_sessions (tenant, created_at, id);
    CREATE INDEX forklog_sessions_children ON forklog_sessions (tenant, parent_session, created_at, id)
        WHERE parent_session IS NOT NULL;
    CREATE INDEX forklog_sessions_changes ON forklog_sessions (change_seq);
    CREATE TABLE forklog_events (
        log bigint NOT NULL,
        seq bigint NOT NULL,
        line text NOT NULL,
        PRIMARY KEY (log, seq)
    );
    CREATE TABLE forklog_surface (
        log bigint NOT NULL,
        seq bigint NOT NULL,
        start_seq bigint NOT NULL,
        end_seq bigint NOT NULL,
        PRIMARY KEY (log, seq)
    );
    CREATE TABLE forklog_turn_ends (
        log bigint NOT NULL,
        seq bigint NOT NULL,
        time bigint NOT NULL,
        checkpoint text NOT NULL,
        PRIMARY KEY (log, seq)
    );
    CREATE TABLE forklog_deletions (
        tenant text NOT NULL,
        id text NOT NULL,
        change_seq bigint NOT NULL,
        deleted_at bigint NOT NULL
    );
    CREATE INDEX forklog_deletions_changes ON forklog_deletions (change_seq);
    CREATE TABLE forklog_remembered (
        tenant text NOT NULL,
        key text NOT NULL,
        fingerprint text NOT NULL,
        status integer NOT NULL,
        location text,
        body bytea NOT NULL,
        created_at bigint NOT NULL,
        session text NOT NULL,
        instance text NOT NULL,
        first_seq bigint NOT NULL,
        end_seq bigint NOT NULL,
        PRIMARY KEY (tenant, key)
    );
    CREATE INDEX forklog_remembered_age ON forklog_remembered (created_at);
    """,
    # 2: the createdAt clock per tenant (spec 9: nothing in an answer counts another tenant's creates), starting
    # from each tenant's largest createdAt.
    """
    CREATE TABLE forklog_tenant_clocks (
        tenant text COLLATE "C" PRIMARY KEY,
        last_created_at bigint NOT NULL
    );
    INSERT INTO forklog_tenant_clocks (tenant, last_created_at)
    SELECT tenant, max(created_at) FROM forklog_sessions GROUP BY tenant;
    """,
    # 3: each session's bytes (spec 14's quotas): its log as export writes it; NULL until it is first needed (a
    # session of an older forklog, or a fork at an earlier boundary while its tenant has no bytes quota).
    """
    ALTER TABLE forklog_sessions ADD COLUMN bytes bigint;
    """,
    # 4: the order by last activity (spec 12): updatedAt, the later of created_at and the last event's time (the
    # first column of the state), kept by every create and append.
    """
    ALTER TABLE forklog_sessions ADD COLUMN updated_at bigint;
    UPDATE forklog_sessions
        SET updated_at = GREATEST(created_at, COALESCE((state::jsonb ->> 0)::bigint, created_at));
    ALTER TABLE forklog_sessions ALTER COLUMN updated_at SET NOT NULL;
    CREATE INDEX forklog_sessions_updated ON forklog_sessions (tenant, updated_at, id);
    """,
    # 5: search (spec 12) with PostgreSQL's own full-text search: each session's words (see
    # app.backends.postgres.search), filled in the background by every replica (sessions without a row yet are
    # searched directly meanwhile).
    """
    CREATE TABLE forklog_search (
        tenant text COLLATE "C" NOT NULL,
        id text COLLATE "C" NOT NULL,
        instance text NOT NULL,
        count bigint NOT NULL,
        size bigint NOT NULL,
        words tsvector,
        PRIMARY KEY (tenant, id)
    );
    CREATE INDEX forklog_search_words ON forklog_search USING gin (words);
    CREATE INDEX forklog_search_unbounded ON forklog_search (tenant) WHERE words IS NULL;
    """,
    # 6: the logs whose rows an older forklog wrote without the sidebar's members (a state of 8 columns, a
    # checkpoint of 3), filled from their events by the next start (app.backends.postgres.state_fill).
    """
    CREATE TABLE forklog_state_fill (log bigint PRIMARY KEY);
    INSERT INTO forklog_state_fill (log)
        SELECT log FROM forklog_sessions WHERE jsonb_array_length(state::jsonb) = 8
        UNION
        SELECT DISTINCT log FROM forklog_turn_ends WHERE jsonb_array_length(checkpoint::jsonb) = 3;
    """,
    # 7: search's words carry their tenant's tag (app.backends.postgres.search), so that no search reaches another
    # tenant's words: the untagged rows go, and the replicas fill them anew (the index is derived data; sessions
    # without a row are searched directly meanwhile).
    """
    TRUNCATE forklog_search;
    """,
    # 8: when the server acknowledged each session's last change (its create, fork or latest append), by its clock:
    # what retention counts from (spec 14), never the events' times, which a seed may set to anything. A session an
    # older forklog stored counts from its last activity, or from now where that lies in the future. The default is
    # for the creates of an older replica still running during the upgrade.
    """
    ALTER TABLE forklog_sessions ADD COLUMN changed_at bigint;
    UPDATE forklog_sessions
        SET changed_at = LEAST(updated_at, (extract(epoch FROM clock_timestamp()) * 1000)::bigint);
    ALTER TABLE forklog_sessions ALTER COLUMN changed_at SET NOT NULL;
    ALTER TABLE forklog_sessions
        ALTER COLUMN changed_at SET DEFAULT (extract(epoch FROM clock_timestamp()) * 1000)::bigint;
    """,
    # 9: packed rows (spec 16, bytes at rest): the events of ended turns as packs of up to 1,024 events, their lines
    # concatenated and compressed (app.backends.postgres.packs); the open turn's events stay one small row each in
    # forklog_events until the packer replaces them. Every log an older forklog stored is queued for the packer,
    # which repacks it in bounded batches (reads serve its small rows meanwhile). Idempotent: a database taken back
    # to an older version by hand keeps its packs. The small rows come and go: vacuumed soon, whatever their count.
    """
    CREATE TABLE IF NOT EXISTS forklog_packs (
        log bigint NOT NULL,
        seq bigint NOT NULL,
        count integer NOT NULL,
        size integer NOT NULL,
        compressed boolean NOT NULL,
        body bytea NOT NULL,
        PRIMARY KEY (log, seq)
    );
    ALTER TABLE forklog_packs ALTER COLUMN body SET STORAGE EXTERNAL;
    CREATE TABLE IF NOT EXISTS forklog_pack_queue (log bigint PRIMARY KEY);
    INSERT INTO forklog_pack_queue (log) SELECT id FROM forklog_logs ON CONFLICT DO NOTHING;
    ALTER TABLE forklog_events SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000);
    """,
    # 10: stats: the logs whose rows an older forklog wrote without the session's figures (spec 17: a state of fewer
    # than 15 columns, a checkpoint of fewer than 5), filled from their events by the next start
    # (app.backends.postgres.stats_fill).
    """
    CREATE TABLE IF NOT EXISTS forklog_stats_fill (log bigint PRIMARY KEY);
    INSERT INTO forklog_stats_fill (log)
        SELECT log FROM forklog_sessions WHERE json_array_length(state::json) < 15
        UNION
        SELECT DISTINCT log FROM forklog_turn_ends WHERE json_array_length(checkpoint::json) < 5
    ON CONFLICT DO NOTHING;
    """,
    # 11: archived (spec 17): hidden from lists and searches unless asked for; kept in the row, beside the log, so that
    # every replica reads it from the database (the default serves the creates of an older replica meanwhile).
    """
    ALTER TABLE forklog_sessions ADD COLUMN IF NOT EXISTS archived boolean NOT NULL DEFAULT false;
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)

# pg_advisory_xact_lock's key for migrations: any fixed 64-bit number, the same in every forklog.
MIGRATION_LOCK = 0x666F726B6C6F6701  # "forklog" + 1

_VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS forklog_schema (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    version integer NOT NULL
)
"""


def newer_schema(found: int) -> StartRefused:
    return StartRefused(
        f"the database holds forklog schema version {found}, newer than this forklog's version {SCHEMA_VERSION}: "
        "it was migrated by a newer forklog; run that version (or newer) against it"
    )


async def stored_version(conn: Connection) -> int:
    """The schema version the database holds (0 for one forklog never touched)."""
    exists = await conn.fetchval("SELECT to_regclass('forklog_schema') IS NOT NULL")
    if not exists:
        return 0
    version = await conn.fetchval("SELECT version FROM forklog_schema")
    return int(version) if version is not None else 0


async def migrate(conn: Connection) -> int:
    """Bring the schema to :data:`SCHEMA_VERSION` (once, whoever else starts now); the version found before."""
    found = await stored_version(conn)
    if found > SCHEMA_VERSION:
        raise newer_schema(found)
    if found == SCHEMA_VERSION:
        return found  # current: no lock, no DDL (a role without CREATE rights may serve a migrated database)
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK)
        await conn.execute(_VERSION_TABLE)
        found = await stored_version(conn)
        if found > SCHEMA_VERSION:
            raise newer_schema(found)
        for version in range(found + 1, SCHEMA_VERSION + 1):
            await conn.execute(MIGRATIONS[version - 1])
            await conn.execute(
                "INSERT INTO forklog_schema (singleton, version) VALUES (true, $1) "
                "ON CONFLICT (singleton) DO UPDATE SET version = excluded.version",
                version,
            )
        return found
