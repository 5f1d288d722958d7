"""Throwaway PostgreSQL servers for tests and benchmarks.

Two kinds share one interface, ``PostgresServer`` (``url(dbname)``, ``create_database``, ``drop_database``, ``close``):

- ``PostgresCluster``: a cluster of its own, made with the installed server binaries (``initdb``, ``pg_ctl``,
  ``postgres``) in a temporary directory. It listens only on 127.0.0.1 at a free port, keeps its unix socket and its
  log in that directory, trusts loopback connections, and can be stopped (``fast``, or ``immediate`` as a crash) and
  started again on the same port and data, for fault tests.
- ``ExternalPostgres``: the existing server that ``FORKLOG_TEST_DATABASE_URL`` names; nothing is started or stopped,
  only databases are created and dropped on it.

``server_for_tests()`` picks one for a pytest session; ``tests/support/pg_fixtures.py`` has the fixtures built on it.
"""

from __future__ import annotations

import abc
import atexit
import contextlib
import os
import pwd
import re
import secrets
import shutil
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Literal, Self
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql

ENV_URL = "FORKLOG_TEST_DATABASE_URL"
SERVER_PROGRAMS = ("initdb", "pg_ctl", "postgres")
DEBIAN_VERSIONS_DIR = Path("/usr/lib/postgresql")
# initdb refuses to run as root; Debian's package creates this OS user, so root runs the server as it.
SERVER_OS_USER = "postgres"
SUPERUSER = "postgres"
LOG_TAIL_LINES = 40
PG_CTL_WAIT_SECONDS = 60

StopMode = Literal["smart", "fast", "immediate"]

# Settings for a cluster that only tests use. fsync off: the cluster is thrown away, so losing it to an OS crash costs
# nothing, and every commit would otherwise wait for the disk. synchronous_commit stays on, so a commit still waits for
# its WAL write as it does in production; that is what the spec's durability tests exercise.
TEST_SETTINGS: Mapping[str, str] = {
    # Room for several forklog replicas with pools of 10-20 each, plus the test's own connections.
    "max_connections": "200",
    "shared_buffers": "32MB",
    "timezone": "UTC",
    "log_timezone": "UTC",
}
NO_FSYNC_SETTINGS: Mapping[str, str] = {
    "fsync": "off",
    # Torn pages only matter after an OS crash, which a cluster without fsync does not survive anyway.
    "full_page_writes": "off",
}


class PostgresError(RuntimeError):
    """A server could not be set up, started, stopped or reached; the message carries the server log's tail."""


def find_server_bindir() -> Path | None:
    """The directory of ``initdb``, ``pg_ctl`` and ``postgres``: the one on PATH, else the newest Debian version's."""
    on_path = shutil.which("initdb")
    if on_path is not None:
        # An initdb on PATH is usually a symlink into a versioned bin directory; its siblings are there, of its version.
        for candidate in (Path(on_path).resolve().parent, Path(on_path).parent):
            if _has_server_programs(candidate):
                return candidate
    versions = sorted(DEBIAN_VERSIONS_DIR.glob("*/bin"), key=lambda p: _version_key(p.parent.name), reverse=True)
    return next((bindir for bindir in versions if _has_server_programs(bindir)), None)


def _has_server_programs(bindir: Path) -> bool:
    return all(os.access(bindir / name, os.X_OK) for name in SERVER_PROGRAMS)


def _version_key(name: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in name.split("."))
    except ValueError:
        return (-1,)


def fresh_database_name(hint: str = "") -> str:
    """A new database name: ``t_`` + a readable slug of ``hint`` + a random suffix, within PostgreSQL's 63 bytes."""
    slug = re.sub(r"[^a-z0-9]+", "_", hint.lower()).strip("_")[:40]
    return f"t_{slug}_{secrets.token_hex(4)}" if slug else f"t_{secrets.token_hex(4)}"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now (the server retries if another takes it first)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class PostgresServer(abc.ABC):
    """A PostgreSQL server that tests may create databases on."""

    @abc.abstractmethod
    def url(self, dbname: str = "postgres") -> str:
        """A ``postgresql://`` URL of database ``dbname`` on this server."""

    def create_database(self, name: str, template: str | None = None) -> str:
        """Create database ``name`` (copied from ``template`` when given, e.g. one with the schema already in it)."""
        query = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template is not None:
            query = sql.SQL("{} TEMPLATE {}").format(query, sql.Identifier(template))
        self._admin(query)
        return name

    def drop_database(self, name: str) -> None:
        """Drop database ``name`` if it exists, ending the sessions still connected to it."""
        try:
            self._admin(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        except psycopg.errors.SyntaxError:
            # Engines that only speak PostgreSQL's wire protocol (CockroachDB, older YugabyteDB) lack WITH (FORCE).
            self._admin(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))

    def admin_url(self) -> str:
        """The URL that CREATE and DROP DATABASE are sent to."""
        return self.url("postgres")

    @abc.abstractmethod
    def close(self) -> None:
        """Release what this object set up."""

    def _admin(self, query: sql.Composed) -> None:
        # CREATE/DROP DATABASE cannot run inside a transaction block, hence autocommit.
        with psycopg.connect(self.admin_url(), autocommit=True, connect_timeout=10) as conn:
            conn.execute(query)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class ExternalPostgres(PostgresServer):
    """The existing server of a URL (``FORKLOG_TEST_DATABASE_URL``); its database in the URL is the admin database."""

    def __init__(self, admin_url: str) -> None:
        parts = urlsplit(admin_url)
        if parts.scheme not in ("postgresql", "postgres"):
            raise PostgresError(f"{ENV_URL} must be a postgresql:// URL, not {admin_url!r}")
        self._admin_url = admin_url
        self._parts = parts

    def url(self, dbname: str = "postgres") -> str:
        return urlunsplit(self._parts._replace(path="/" + dbname))

    def admin_url(self) -> str:
        return self._admin_url

    def close(self) -> None:
        """Nothing to release: the server is not ours."""


class PostgresCluster(PostgresServer):
    """A throwaway cluster in a temporary directory, made and run with the installed server binaries.

    ``start()`` runs initdb the first time, then ``pg_ctl start``; ``stop()`` and ``restart()`` keep the port and the
    data; ``close()`` stops the server and removes the directory (also at interpreter exit, if a test forgot)."""

    def __init__(
        self,
        *,
        bindir: Path | None = None,
        fsync: bool = False,
        settings: Mapping[str, str] | None = None,
        base_dir: Path | None = None,
    ) -> None:
        found = bindir if bindir is not None else find_server_bindir()
        if found is None:
            raise PostgresError(
                "no PostgreSQL server binaries (initdb, pg_ctl, postgres) on PATH or in "
                f"{DEBIAN_VERSIONS_DIR}/*/bin: install Debian's postgresql, or set {ENV_URL}"
            )
        self.bindir = found
        self.fsync = fsync
        self.settings = {**TEST_SETTINGS, **({} if fsync else NO_FSYNC_SETTINGS), **(settings or {})}
        self._base_dir = base_dir
        self.root: Path | None = None
        self.port: int | None = None
        # Seconds the last start() took, initdb included on the first: the test suite's fixed cost.
        self.last_start_seconds: float | None = None
        self._as_server_user = self._server_user_prefix()

    # --- where things are ---

    @property
    def data_dir(self) -> Path:
        return self._root() / "data"

    @property
    def log_path(self) -> Path:
        return self._root() / "server.log"

    @property
    def socket_dir(self) -> Path:
        return self._root()

    def url(self, dbname: str = "postgres") -> str:
        if self.port is None:
            raise PostgresError("the cluster has not been started")
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{dbname}"

    # --- lifecycle ---

    def start(self) -> None:
        """Start the server (making the cluster on the first start); returns once it accepts connections."""
        began = time.monotonic()
        if self.root is None:
            self._make_root()
            self._initdb()
            # Another process may bind the free port between our look and the server's bind: then try another one.
            for attempt in range(5):
                self.port = free_port()
                self._write_settings()
                try:
                    self._pg_ctl_start()
                    break
                except PostgresError:
                    if attempt == 4 or "could not bind" not in self.log_tail():
                        raise
        else:
            self._pg_ctl_start()
        self.last_start_seconds = time.monotonic() - began

    def stop(self, mode: StopMode = "fast") -> None:
        """Stop the server: ``fast`` rolls back sessions and checkpoints, ``immediate`` is a crash (recovery on start).

        Does nothing if it is not running."""
        if not self.running:
            return
        self._check(self._run(self._program("pg_ctl"), "stop", "-D", str(self.data_dir), "-m", mode, "-w",
                              "-t", str(PG_CTL_WAIT_SECONDS)), "pg_ctl stop")  # fmt: skip

    def restart(self, mode: StopMode = "fast") -> None:
        """Stop (if running) and start again on the same port and data."""
        self.stop(mode)
        self.start()

    def ensure_started(self) -> None:
        """Start the server unless it runs, e.g. after a fault test that left it stopped."""
        if self.root is None or not self.running:
            self.start()

    @property
    def running(self) -> bool:
        # What `pg_ctl status` checks, without its process start: the fixtures ask before every test.
        if self.root is None:
            return False
        try:
            pid = int((self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
            os.kill(pid, 0)
        except (OSError, ValueError):
            return False
        return True

    def close(self) -> None:
        """Stop the server at once and remove its directory."""
        atexit.unregister(self.close)
        if self.root is None:
            return
        with contextlib.suppress(PostgresError, subprocess.SubprocessError):
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)
        self.root = None
        self.port = None

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last lines of the server log, for failure messages."""
        try:
            text = self.log_path.read_text(errors="replace")
        except (OSError, PostgresError):
            return "(no server log)"
        return "\n".join(text.splitlines()[-lines:])

    # --- internals ---

    def _root(self) -> Path:
        if self.root is None:
            raise PostgresError("the cluster has not been started")
        return self.root

    def _program(self, name: str) -> str:
        return str(self.bindir / name)

    @staticmethod
    def _server_user_prefix() -> list[str]:
        if os.geteuid() != 0:
            return []
        runuser = shutil.which("runuser") or "/usr/sbin/runuser"
        try:
            pwd.getpwnam(SERVER_OS_USER)
        except KeyError:
            raise PostgresError(
                f"running as root, but initdb refuses root and there is no OS user {SERVER_OS_USER!r} to run it as"
            ) from None
        return [runuser, "-u", SERVER_OS_USER, "--"]

    def _make_root(self) -> None:
        root = Path(tempfile.mkdtemp(prefix="forklog-pg-", dir=self._base_dir))
        # Registered before anything can fail, so a half-made cluster is removed too.
        self.root = root
        atexit.register(self.close)
        if self._as_server_user:
            account = pwd.getpwnam(SERVER_OS_USER)
            os.chown(root, account.pw_uid, account.pw_gid)
            blocked = _untraversable_ancestor(root, account)
            if blocked is not None:
                raise PostgresError(
                    f"user {SERVER_OS_USER!r} cannot reach {root}: {blocked} is not searchable by it "
                    "(point TMPDIR or base_dir at a directory such as /tmp)"
                )

    def _initdb(self) -> None:
        self._check(
            self._run(
                self._program("initdb"),
                "-D", str(self.data_dir),
                "-U", SUPERUSER,
                "--auth=trust",  # initdb writes trust lines for local sockets and loopback only.
                "--encoding=UTF8",
                "--locale=C",  # the environment's locale may be absent on a fresh machine; C is fast and stable.
                "--no-sync",  # a throwaway cluster need not reach the disk; saves most of initdb's time.
                "--no-instructions",
            ),
            "initdb",
        )  # fmt: skip

    def _write_settings(self) -> None:
        settings = {
            **self.settings,
            "listen_addresses": "127.0.0.1",
            "port": str(self.port),
            "unix_socket_directories": str(self.socket_dir),
        }
        # An included file of our own, rewritten whole when the port changes; postgresql.conf keeps initdb's text.
        included = self.data_dir / "forklog-test.conf"
        included.write_text("".join(f"{key} = {_conf_quote(value)}\n" for key, value in settings.items()))
        conf = self.data_dir / "postgresql.conf"
        if "forklog-test.conf" not in conf.read_text():
            with conf.open("a") as handle:
                handle.write("\ninclude 'forklog-test.conf'\n")
        if self._as_server_user:
            account = pwd.getpwnam(SERVER_OS_USER)
            os.chown(included, account.pw_uid, account.pw_gid)

    def _pg_ctl_start(self) -> None:
        # -l matters beyond logging: without it the server inherits pg_ctl's stdout, our capture pipe, and
        # subprocess.run would wait for the server to exit.
        self._check(
            self._run(self._program("pg_ctl"), "start", "-D", str(self.data_dir), "-l", str(self.log_path), "-w",
                      "-t", str(PG_CTL_WAIT_SECONDS)),
            "pg_ctl start",
        )  # fmt: skip

    def _run(self, *command: str) -> subprocess.CompletedProcess[str]:
        # cwd inside our directory: as user postgres, initdb and pg_ctl complain when they cannot read the cwd
        # (e.g. /root), and a relative path in a message then still makes sense.
        return subprocess.run(
            [*self._as_server_user, *command],
            cwd=self.root,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=PG_CTL_WAIT_SECONDS + 30,
            check=False,
        )

    def _check(self, result: subprocess.CompletedProcess[str], what: str) -> None:
        if result.returncode == 0:
            return
        output = (result.stdout + result.stderr).strip()
        raise PostgresError(
            f"{what} failed (exit {result.returncode}) in {self.root}:\n{output}\n"
            f"--- last lines of {self.log_path} ---\n{self.log_tail()}"
        )


def _conf_quote(value: str) -> str:
    escaped = value.replace("'", "''")
    return f"'{escaped}'"


def _untraversable_ancestor(path: Path, account: pwd.struct_passwd) -> Path | None:
    """The first ancestor of ``path`` that ``account`` may not enter (root's own os.access cannot tell)."""
    for ancestor in reversed(path.parents):
        mode = ancestor.stat()
        if mode.st_uid == account.pw_uid:
            allowed = mode.st_mode & stat.S_IXUSR
        elif mode.st_gid == account.pw_gid or mode.st_gid in os.getgrouplist(account.pw_name, account.pw_gid):
            allowed = mode.st_mode & stat.S_IXGRP
        else:
            allowed = mode.st_mode & stat.S_IXOTH
        if not allowed:
            return ancestor
    return None


def server_for_tests() -> PostgresServer:
    """The server of a pytest session: ``FORKLOG_TEST_DATABASE_URL``'s if set, else a started ``PostgresCluster``.

    Without server binaries it skips the calling test, and fails it when ``CI=true``: CI must test PostgreSQL."""
    url = os.environ.get(ENV_URL)
    if url:
        return ExternalPostgres(url)
    bindir = find_server_bindir()
    if bindir is None:
        reason = (
            "no PostgreSQL server binaries (initdb, pg_ctl, postgres) on PATH or in "
            f"{DEBIAN_VERSIONS_DIR}/*/bin: install Debian's postgresql (.ci/run does), or set {ENV_URL}"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    cluster = PostgresCluster(bindir=bindir)
    try:
        cluster.start()
    except BaseException:
        cluster.close()
        raise
    return cluster
