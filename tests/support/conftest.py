"""The PostgreSQL fixtures for the tests of this folder, until tests/conftest.py offers them to every package."""

from tests.support.pg_fixtures import pg_cluster, pg_server, pg_url

__all__ = ["pg_cluster", "pg_server", "pg_url"]
