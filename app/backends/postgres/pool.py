"""The connection pool (the driver's errors become the storage layer's in :mod:`app.backends.postgres.errors`).

asyncpg, with a pool whose ``reset`` does nothing: forklog runs single statements in autocommit and brackets the few
multi-statement changes in ``conn.transaction()``, so a connection comes back idle and the default reset would only
add a round trip to every request. Every wait is bounded: connecting, taking a connection from the pool, and each
statement; a database that is down or unreachable answers a storage error within those bounds, never a hang.
Nothing here ever shows the URL's password.

A URL may name several hosts (:mod:`app.backends.database_url`): a connection is then asked of all of them at
once, and the first that takes writes is used. A host that answers at once that it cannot (it refused the
connection, it is a standby, it is starting) is asked again every ``RETRY_HOST`` seconds while another host has not
answered yet: a connection begun just before a standby is promoted finds the new primary, rather than waiting out a
host that answers nothing (a paused or cut-off server) until the connect timeout.

A connection outside the pool never caches named prepared statements (``statement_cache_size=0``): until
:mod:`~app.backends.postgres.pooler` has looked, a pooler may stand between, and a named statement left on one of its
server connections would collide with another client's. The pool caches them only when no pooler was found.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias, cast

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from app.backends.database_url import DatabaseTarget, redact

if TYPE_CHECKING:
    from app.backends.postgres.pooler import Pooling

__all__ = ["Connection", "PoolSettings", "connect", "open_pool", "redact"]

# A connection of the pool, or one of its own: the statements take either. (asyncpg's classes are generic only in
# its stubs, hence the alias for the type checker alone.)
if TYPE_CHECKING:
    Connection: TypeAlias = asyncpg.Connection[asyncpg.Record] | PoolConnectionProxy[asyncpg.Record]
else:
    Connection = asyncpg.Connection | PoolConnectionProxy

# asyncpg.connect, its keyword arguments passed through as given (its stubs spell each overload out).
_asyncpg_connect: Any = asyncpg.connect

RETRY_HOST = 0.25  # seconds between two tries of a host that answered it cannot take writes now
# A host's answers that it cannot take writes now (as opposed to no answer at all).
NOT_NOW: tuple[type[Exception], ...] = (
    OSError,
    asyncpg.exceptions.TargetServerAttributeNotMatched,
    asyncpg.CannotConnectNowError,
    asyncpg.ReadOnlySQLTransactionError,
)


@dataclass(frozen=True, slots=True)
class PoolSettings:
    min_size: int = 1
    max_size: int = 10
    connect_timeout: float = 5.0  # seconds to open one connection
    acquire_timeout: float = 5.0  # seconds a request waits for a free connection
    command_timeout: float = 30.0  # seconds one statement may run


async def connect(url: str, settings: PoolSettings, **options: Any) -> asyncpg.Connection:
    """One connection to the primary (outside the pool: migrations, notifications, the primary watch; or for it)."""
    target = DatabaseTarget.parse(url)
    options = {
        "timeout": settings.connect_timeout,
        "command_timeout": settings.command_timeout,
        "statement_cache_size": 0,
        **options,
    }
    if not target.several:
        single: asyncpg.Connection = await _asyncpg_connect(url, **options)
        return single
    return await _first_writable(url, target, options)


async def _first_writable(url: str, target: DatabaseTarget, options: dict[str, Any]) -> asyncpg.Connection:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + float(options.pop("timeout"))
    failures: list[BaseException] = []
    in_flight = 0  # attempts sent and not answered yet

    async def one(host: str, port: int) -> asyncpg.Connection:
        nonlocal in_flight
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError(f"{host}:{port} did not answer in time")
            in_flight += 1
            try:
                found: asyncpg.Connection = await _asyncpg_connect(
                    url,
                    host=host,
                    port=port,
                    timeout=remaining,
                    target_session_attrs=target.target_session_attrs,
                    **options,
                )
            except NOT_NOW:
                # Asked again only while another host's attempt is still unanswered: when every host answered that
                # it cannot, fail at once.
                if in_flight <= 1:
                    raise
            else:
                return found
            finally:
                in_flight -= 1
            await asyncio.sleep(min(RETRY_HOST, max(0.0, deadline - loop.time())))

    tasks = [asyncio.ensure_future(one(host, port)) for host, port in target.hosts]
    chosen: asyncpg.Connection | None = None
    try:
        for finished in asyncio.as_completed(tasks):
            try:
                chosen = await finished
            except Exception as exc:  # this host cannot be used; another may
                failures.append(exc)
                continue
            return chosen
        raise _best(failures)
    finally:
        for task in tasks:
            task.cancel()
        for result in await asyncio.gather(*tasks, return_exceptions=True):
            if isinstance(result, asyncpg.Connection) and result is not chosen:
                result.terminate()  # a second host that took writes too: only one is used


def _best(failures: list[BaseException]) -> BaseException:
    """The failure that explains best why no host could be used: a server's refusal of this client (a password,
    a missing database), else a standby found, else the last one."""
    for wanted in (asyncpg.PostgresError, asyncpg.exceptions.TargetServerAttributeNotMatched):
        for failure in failures:
            if isinstance(failure, wanted) and not isinstance(failure, NOT_NOW):
                return failure
    for failure in failures:
        if isinstance(failure, asyncpg.exceptions.TargetServerAttributeNotMatched):
            return failure
    return failures[-1] if failures else TimeoutError("no host of the database URL answered in time")


async def _connect_for_pool(dsn: str, *, settings: PoolSettings, **options: Any) -> asyncpg.Connection:
    options.pop("loop", None)
    return await connect(dsn, settings, **options)


async def _no_reset(_conn: asyncpg.Connection) -> None:
    return None


async def _setup(conn: asyncpg.Connection) -> None:
    # A change is acknowledged only after its commit reached the WAL on disk (and any synchronous standby).
    await conn.execute("SET synchronous_commit TO on")


async def open_pool(url: str, settings: PoolSettings, pooling: Pooling, *, warm: bool = True) -> asyncpg.Pool:
    """A pool of connections to the primary, used as ``pooling`` says (is a pooler between?); without ``warm`` it
    connects only when a connection is asked for."""

    async def connect_one(dsn: str, **options: Any) -> asyncpg.Connection:
        return await _connect_for_pool(dsn, settings=settings, **options)

    pool = asyncpg.create_pool(
        url,
        min_size=settings.min_size if warm else 0,
        max_size=settings.max_size,
        timeout=settings.connect_timeout,
        command_timeout=settings.command_timeout,
        reset=_no_reset,
        # Through a pooler a session's SET would hold for one server connection only (the server's own setting is
        # checked at start instead), and a named statement could meet another client's.
        init=_setup if pooling.sets_session else None,
        statement_cache_size=pooling.statement_cache_size,
        connect=cast(Any, connect_one),  # asyncpg's stubs type the hook narrower than it is called
        # A connection idle this long is closed: after a database restart the pool holds no dead ones for long.
        max_inactive_connection_lifetime=60.0,
    )
    return await asyncio.wait_for(pool, timeout=settings.connect_timeout * 2)
