"""pytest fixtures over ``tests.support.postgres``: one PostgreSQL server per session, a fresh database per test.

- ``pg_server`` (session): ``FORKLOG_TEST_DATABASE_URL``'s server, else a throwaway cluster started once (~1-2 s);
  skipped without server binaries, failed on CI.
- ``pg_url`` (test): the URL of a new empty database on it, dropped afterwards.
- ``pg_cluster`` (test): the session's cluster itself, for fault tests that stop and restart it; skipped on an external
  server, which tests may not stop. It is running again after each such test, whatever the test left.
- ``pg_bouncer`` (session): a PgBouncer in ``transaction`` mode (pool of 20) in front of the session's cluster
  (``tests/support/pgbouncer.py``); ``through_bouncer(url)`` is a database URL of that server through it.

These are meant for a conftest (``tests/conftest.py``); ``tests/support/conftest.py`` imports them for this folder only.
"""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.support.pgbouncer import PgBouncer
from tests.support.postgres import ENV_URL, PostgresCluster, PostgresServer, fresh_database_name, server_for_tests


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    server = server_for_tests()
    yield server
    server.close()


@pytest.fixture
def pg_url(pg_server: PostgresServer, request: pytest.FixtureRequest) -> Iterator[str]:
    # A fault test before (or beside) this one may have left the shared cluster stopped.
    if isinstance(pg_server, PostgresCluster):
        pg_server.ensure_started()
    name = pg_server.create_database(fresh_database_name(request.node.name))
    yield pg_server.url(name)
    if isinstance(pg_server, PostgresCluster):
        pg_server.ensure_started()
    pg_server.drop_database(name)


@pytest.fixture
def pg_cluster(pg_server: PostgresServer) -> Iterator[PostgresCluster]:
    if not isinstance(pg_server, PostgresCluster):
        pytest.skip(f"{ENV_URL} names a server that tests may not stop")
    pg_server.ensure_started()
    yield pg_server
    pg_server.ensure_started()


@pytest.fixture(scope="session")
def pg_bouncer(pg_server: PostgresServer) -> Iterator[PgBouncer]:
    if not isinstance(pg_server, PostgresCluster) or pg_server.port is None:
        pytest.skip(f"the PgBouncer runs sit in front of the throwaway cluster (its trust logins), not {ENV_URL}'s")
    pg_server.ensure_started()
    with PgBouncer(pg_server.port) as bouncer:
        yield bouncer


def through_bouncer(bouncer: PgBouncer, url: str) -> str:
    """``url`` (a database of the server behind ``bouncer``) reached through ``bouncer`` instead."""
    assert bouncer.port is not None
    parts = urlsplit(url)
    user = f"{parts.username}@" if parts.username else ""
    return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{bouncer.port}"))
