"""A connection pooler between forklog and the database (PgBouncer and its kind), found rather than guessed (spec 6,
A connection pooler).

The probe: a server's BackendKeyData (the process id the driver is told at connect, ``get_server_pid()``) is the
backend that serves the connection, so ``pg_backend_pid()`` answers the same on a direct connection, always. A pooler
hands the client a key of its own (PgBouncer: a random one, to route cancel requests) and serves its statements
from whichever server connection is free, so the two differ. A pooler found is taken to pool transactions (the mode
that breaks the most; session pooling works the same way, only less is shared):

- **Prepared statements** live in a server session. asyncpg's named statements (its statement cache) would be
  prepared on one server connection and used or prepared again on another (``prepared statement
  "__asyncpg_stmt_5__" already exists``), so through a pooler the cache is off: asyncpg then prepares each statement
  unnamed, re-parsed in the same Bind/Execute/Sync exchange that runs it (one server connection throughout).
- **Session-level SET** (``synchronous_commit TO on`` at connect) lands on one server connection and is not held by
  the next transaction; through a pooler forklog relies on the server's own setting, and checks it at start.
- **LISTEN** needs one server session that stays: the change feed listens over ``FORKLOG_DATABASE_DIRECT_URL`` when
  it is set, and otherwise polls alone (every ``poll_interval``; notifications only hasten what polling finds).
- **Locks** are all transaction-scoped (``pg_advisory_xact_lock``), and a transaction keeps its server connection.

What no setting of forklog can make work refuses the start, saying what to set: a pooler in ``statement`` mode
(it refuses transactions), and a server whose own ``synchronous_commit`` would acknowledge a change before its commit
is durable.
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from app.backends.errors import StartRefused
from app.backends.postgres.pool import Connection

__all__ = ["DIRECT", "DURABLE_COMMITS", "Pooling", "behind_pooler", "pooled_direct_url", "pooling_of"]

# synchronous_commit values under which a commit returns only after its WAL is flushed (and, with
# synchronous_standby_names set, reached the synchronous standby): what forklog's own SET asks for, or more.
DURABLE_COMMITS = frozenset({"on", "remote_apply"})


@dataclass(frozen=True, slots=True)
class Pooling:
    """How forklog must use the connections of its URL: ``pooled`` when a pooler stands between."""

    pooled: bool

    @property
    def statement_cache_size(self) -> int:
        """asyncpg's cache of named prepared statements: off through a pooler (see the module's docstring)."""
        return 0 if self.pooled else 100

    @property
    def sets_session(self) -> bool:
        """Whether a session-level SET made at connect holds for the connection's later statements."""
        return not self.pooled


DIRECT = Pooling(pooled=False)


async def behind_pooler(conn: Connection) -> bool:
    """Whether ``conn`` reaches its server through a pooler: the process id it was given at connect is not the one of
    the backend that answers. (Opened with ``statement_cache_size=0``, as every connection is before this is known.)"""
    served_by = await conn.fetchval("SELECT pg_backend_pid()")
    return int(served_by) != conn.get_server_pid()


async def pooling_of(conn: Connection, where: str) -> Pooling:
    """How to use the connections of the URL ``conn`` came from (``where``, without its password); StartRefused
    for a pooler forklog cannot keep its rules through."""
    if not await behind_pooler(conn):
        return DIRECT
    try:
        async with conn.transaction():
            setting = str(await conn.fetchval("SELECT current_setting('synchronous_commit')"))
    except asyncpg.exceptions.ConnectionDoesNotExistError as exc:  # PgBouncer ends the client at BEGIN
        raise StartRefused(
            f"the database URL {where} reaches PostgreSQL through a connection pooler that refuses transactions "
            f"({exc}): forklog needs PgBouncer's pool_mode = transaction (or session) for its database"
        ) from None
    if setting not in DURABLE_COMMITS:
        raise StartRefused(
            f"the database URL {where} reaches PostgreSQL through a connection pooler, where forklog's own "
            f"'SET synchronous_commit TO on' does not hold, and the server's synchronous_commit is {setting!r}: a "
            "change could be acknowledged before its commit is durable. Set it for forklog's role or database "
            "(ALTER ROLE <user> SET synchronous_commit = on; or in postgresql.conf), or point FORKLOG_DATABASE_URL "
            "at the server itself"
        )
    return Pooling(pooled=True)


def pooled_direct_url(where: str) -> StartRefused:
    """The refusal of a FORKLOG_DATABASE_DIRECT_URL (``where``, without its password) that a pooler answers too."""
    return StartRefused(
        f"FORKLOG_DATABASE_DIRECT_URL {where} reaches PostgreSQL through a connection pooler too: it must name the "
        "database server itself (the change feed's LISTEN needs a session of its own)"
    )
