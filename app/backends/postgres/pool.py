"""The connection pool (the driver's errors become the storage layer's in :mod:`app.backends.postgres.errors`).

asyncpg, with a pool whose ``reset`` does nothing: forklog runs single statements in autocommit and brackets the few
multi-statement changes in ``conn.transaction()``, so a connection comes back idle and the default reset would only
add a round trip to every request. Every wait is bounded: connecting, taking a connection from the pool, and each
statement; a database that is down or unreachable answers a storage error within those bounds, never a hang.
Nothing here ever shows the URL's password.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias
from urllib.parse import urlsplit, urlunsplit

import asyncpg
from asyncpg.pool import PoolConnectionProxy

__all__ = ["Connection", "PoolSettings", "connect", "open_pool", "redact"]

# A connection of the pool, or one of its own: the statements take either. (asyncpg's classes are generic only in
# its stubs, hence the alias for the type checker alone.)
if TYPE_CHECKING:
    Connection: TypeAlias = asyncpg.Connection[asyncpg.Record] | PoolConnectionProxy[asyncpg.Record]
else:
    Connection = asyncpg.Connection | PoolConnectionProxy


@dataclass(frozen=True, slots=True)
class PoolSettings:
    min_size: int = 1
    max_size: int = 10
    connect_timeout: float = 5.0  # seconds to open one connection
    acquire_timeout: float = 5.0  # seconds a request waits for a free connection
    command_timeout: float = 30.0  # seconds one statement may run


def redact(url: str) -> str:
    """``url`` with its password replaced by ``***`` (for messages and logs)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "(a malformed URL)"
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


async def connect(url: str, settings: PoolSettings) -> asyncpg.Connection:
    """One connection outside the pool (migrations, notifications)."""
    return await asyncpg.connect(url, timeout=settings.connect_timeout, command_timeout=settings.command_timeout)


async def _no_reset(_conn: asyncpg.Connection) -> None:
    return None


async def _setup(conn: asyncpg.Connection) -> None:
    # A change is acknowledged only after its commit reached the WAL on disk (and any synchronous standby).
    await conn.execute("SET synchronous_commit TO on")


async def open_pool(url: str, settings: PoolSettings) -> asyncpg.Pool:
    pool = asyncpg.create_pool(
        url,
        min_size=settings.min_size,
        max_size=settings.max_size,
        timeout=settings.connect_timeout,
        command_timeout=settings.command_timeout,
        reset=_no_reset,
        init=_setup,
        # A connection idle this long is closed: after a database restart the pool holds no dead ones for long.
        max_inactive_connection_lifetime=60.0,
    )
    return await asyncio.wait_for(pool, timeout=settings.connect_timeout * 2)
