"""Fixtures shared by every test package."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import asyncpg
import pytest

from app.backends.postgres.schema import migrate
from tests.support import alone, node_ids
from tests.support.pg_fixtures import pg_bouncer, pg_cluster, pg_server, pg_url, through_bouncer
from tests.support.pgbouncer import PgBouncer
from tests.support.postgres import PostgresCluster, PostgresServer, fresh_database_name

__all__ = [
    "dsh_logs_dir",
    "forklog_db",
    "forklog_db_pooled",
    "forklog_template",
    "pg_bouncer",
    "pg_cluster",
    "pg_server",
    "pg_url",
]

REPO = Path(__file__).resolve().parents[1]
DSH_LOGS = REPO.parent / "shared" / "fixtures" / "dsh-logs"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", alone.MARKER_HELP)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    node_ids.make_unique(items)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    # Setup and teardown included: an ``alone`` test's fixtures (a server it starts) are part of what it times.
    with alone.turn_of(item):
        return (yield)


@pytest.fixture
def dsh_logs_dir() -> Path:
    """The real DSH logs of ../shared/fixtures/dsh-logs: skipped where that folder is absent, a failure on CI."""
    if not DSH_LOGS.is_dir():
        reason = f"../shared/fixtures/dsh-logs not found: {DSH_LOGS}"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return DSH_LOGS


# -- PostgreSQL (tests/support): one server per session, a fresh database per test ------------------------------------
# pg_server, pg_url and pg_cluster come from tests/support/pg_fixtures.py; forklog_db is a database that already holds
# forklog's schema, copied from a template migrated once per session (CREATE DATABASE ... TEMPLATE is far cheaper than
# migrating every test's database).


@pytest.fixture(scope="session")
def forklog_template(pg_server: PostgresServer) -> Iterator[str]:
    name = pg_server.create_database(fresh_database_name("forklog_template"))

    async def migrated() -> None:
        conn = await asyncpg.connect(pg_server.url(name))
        try:
            await migrate(conn)
        finally:
            await conn.close()

    # In a thread of its own: the fixture may be asked for from inside a running event loop (an async fixture).
    with ThreadPoolExecutor(1) as worker:
        worker.submit(asyncio.run, migrated()).result()
    yield name
    pg_server.drop_database(name)


@pytest.fixture
def forklog_db(pg_server: PostgresServer, forklog_template: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """The URL of a new database with forklog's schema, dropped after the test."""
    if isinstance(pg_server, PostgresCluster):
        pg_server.ensure_started()
    name = pg_server.create_database(fresh_database_name(request.node.name), template=forklog_template)
    yield pg_server.url(name)
    if isinstance(pg_server, PostgresCluster):
        pg_server.ensure_started()
    pg_server.drop_database(name)


@pytest.fixture
def forklog_db_pooled(forklog_db: str, pg_bouncer: PgBouncer) -> str:
    """``forklog_db`` through the session's PgBouncer (transaction pooling): what an operator's pooler gives."""
    return through_bouncer(pg_bouncer, forklog_db)
