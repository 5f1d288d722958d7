"""The throwaway PostgreSQL server of the tests: databases on it, a crash and a restart, and how it is chosen."""

from __future__ import annotations

import os
from pathlib import Path

import psycopg
import pytest

from tests.support import postgres
from tests.support.postgres import ENV_URL, ExternalPostgres, PostgresCluster, PostgresServer, fresh_database_name


def count_rows(url: str) -> int:
    with psycopg.connect(url, connect_timeout=5) as conn:
        row = conn.execute("SELECT count(*) FROM t").fetchone()
        assert row is not None
        return int(row[0])


def test_two_databases_survive_an_immediate_stop_and_restart(pg_cluster: PostgresCluster) -> None:
    names = [pg_cluster.create_database(fresh_database_name(f"crash_{i}")) for i in range(2)]
    try:
        for rows, name in enumerate(names, start=1):
            with psycopg.connect(pg_cluster.url(name)) as conn:
                conn.execute("CREATE TABLE t (x int)")
                conn.execute("INSERT INTO t SELECT generate_series(1, %s)", (rows,))
        port = pg_cluster.port

        pg_cluster.stop("immediate")
        assert not pg_cluster.running
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(pg_cluster.url(names[0]), connect_timeout=2).close()

        pg_cluster.restart()
        assert pg_cluster.port == port
        # Committed with synchronous_commit on, so crash recovery replays them from the WAL.
        assert [count_rows(pg_cluster.url(name)) for name in names] == [1, 2]
    finally:
        for name in names:
            pg_cluster.drop_database(name)


def test_cluster_listens_on_loopback_only_with_its_socket_inside_its_directory(pg_cluster: PostgresCluster) -> None:
    with psycopg.connect(pg_cluster.url()) as conn:
        settings: dict[str, str] = dict(conn.execute("SELECT name, setting FROM pg_settings").fetchall())
    assert settings["listen_addresses"] == "127.0.0.1"
    assert settings["port"] == str(pg_cluster.port)
    assert settings["unix_socket_directories"] == str(pg_cluster.socket_dir)
    assert settings["fsync"] == "off"
    assert settings["synchronous_commit"] == "on"
    assert int(settings["max_connections"]) >= 100
    assert (pg_cluster.socket_dir / f".s.PGSQL.{pg_cluster.port}").is_socket()
    assert "database system is ready to accept connections" in pg_cluster.log_tail(1000)


def test_each_test_gets_an_empty_database(pg_url: str) -> None:
    with psycopg.connect(pg_url) as conn:
        tables = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()
        assert tables == (0,)
        conn.execute("CREATE TABLE t (x int)")


def test_an_existing_server_is_used_as_it_is(pg_server: PostgresServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_URL, pg_server.url())
    external = postgres.server_for_tests()
    assert isinstance(external, ExternalPostgres)
    name = external.create_database(fresh_database_name("external"))
    try:
        assert external.url(name).endswith("/" + name)
        with psycopg.connect(external.url(name)) as conn:
            assert conn.execute("SELECT current_database()").fetchone() == (name,)
    finally:
        external.drop_database(name)
        external.close()


def test_without_server_binaries_tests_skip_but_ci_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_URL, raising=False)
    monkeypatch.setattr(postgres, "find_server_bindir", lambda: None)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no PostgreSQL server binaries"):
        postgres.server_for_tests()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="no PostgreSQL server binaries"):
        postgres.server_for_tests()


def test_server_binaries_are_found_on_path_else_newest_debian_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fake_bindir(path: Path) -> Path:
        path.mkdir(parents=True)
        for program in postgres.SERVER_PROGRAMS:
            (path / program).write_text("#!/bin/sh\n")
            (path / program).chmod(0o755)
        return path

    for version in ("9.6", "16", "15"):
        fake_bindir(tmp_path / "lib" / version / "bin")
    (tmp_path / "lib" / "17" / "bin").mkdir(parents=True)  # a client-only install: no server programs
    monkeypatch.setattr(postgres, "DEBIAN_VERSIONS_DIR", tmp_path / "lib")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert postgres.find_server_bindir() == tmp_path / "lib" / "16" / "bin"

    on_path = fake_bindir(tmp_path / "local" / "bin")
    monkeypatch.setenv("PATH", os.pathsep.join([str(tmp_path / "empty"), str(on_path)]))
    assert postgres.find_server_bindir() == on_path
