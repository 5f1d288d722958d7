"""A throwaway PgBouncer (Debian's ``pgbouncer``) in front of a test server, for the pooler tests (spec 6).

``PgBouncer(upstream_port, pool_mode=..., pool_size=...)`` writes an ini file in a temporary directory, starts
``pgbouncer -d`` on a free loopback port (as user ``postgres`` when run as root: PgBouncer refuses root), and routes
every database name to the upstream server (``* = host=127.0.0.1 port=...``), so a test's fresh database is reached
through it without a reload. ``url(dbname)`` is a URL through the pooler; ``show(what)`` asks its admin console
(``SHOW POOLS``, ``SHOW CLIENTS``...) through psql, since the console speaks only the simple query protocol.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Literal, Self

import pytest

from tests.support.postgres import SERVER_OS_USER, SUPERUSER, find_server_bindir, free_port

PoolMode = Literal["session", "transaction", "statement"]
START_SECONDS = 15


def pgbouncer_program() -> str:
    """The pgbouncer binary, or a skip (a failure when ``CI=true``: .ci/run installs it)."""
    found = shutil.which("pgbouncer") or ("/usr/sbin/pgbouncer" if os.access("/usr/sbin/pgbouncer", os.X_OK) else None)
    if found is None:
        reason = "pgbouncer is not installed (Debian's pgbouncer; .ci/run installs it)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return found


def pgbouncer_version() -> str:
    """``PgBouncer 1.18.0`` (the first line of ``pgbouncer --version``)."""
    result = subprocess.run([pgbouncer_program(), "--version"], capture_output=True, text=True, check=True)
    return result.stdout.splitlines()[0].strip()


class PgBouncer:
    """A PgBouncer of its own on 127.0.0.1 in front of the server at ``upstream_port``."""

    def __init__(
        self,
        upstream_port: int,
        *,
        pool_mode: PoolMode = "transaction",
        pool_size: int = 20,
        max_client_conn: int = 1000,
        upstream_host: str = "127.0.0.1",
    ) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.pool_mode = pool_mode
        self.pool_size = pool_size
        self.max_client_conn = max_client_conn
        self.root: Path | None = None
        self.port: int | None = None
        self._as_user = _server_user_prefix()

    @property
    def log_path(self) -> Path:
        assert self.root is not None
        return self.root / "pgbouncer.log"

    def url(self, dbname: str = "postgres") -> str:
        assert self.port is not None, "start() it first"
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{dbname}"

    def start(self) -> Self:
        program = pgbouncer_program()
        self.root = Path(tempfile.mkdtemp(prefix="forklog-pgbouncer-"))
        atexit.register(self.close)
        if self._as_user:
            account = pwd.getpwnam(SERVER_OS_USER)
            os.chown(self.root, account.pw_uid, account.pw_gid)
        (self.root / "userlist.txt").write_text(f'"{SUPERUSER}" ""\n')
        for attempt in range(5):
            self.port = free_port()
            ini = self.root / "pgbouncer.ini"
            ini.write_text(self.ini_text())
            subprocess.run([*self._as_user, program, "-d", "-q", str(ini)], cwd=self.root, check=True, timeout=30)
            if self._wait_listening():
                return self
            if attempt == 4:
                break
        raise RuntimeError(f"pgbouncer did not start; its log:\n{self.log_tail()}")

    def ini_text(self) -> str:
        """The ini file: the one shown in docs/operations/postgresql.md, with the test's ports and paths."""
        assert self.root is not None and self.port is not None
        host, port = self.upstream
        return (
            "[databases]\n"
            f"* = host={host} port={port}\n"
            "\n[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = trust\n"
            f"auth_file = {self.root / 'userlist.txt'}\n"
            f"admin_users = {SUPERUSER}\n"
            f"pool_mode = {self.pool_mode}\n"
            f"default_pool_size = {self.pool_size}\n"
            f"max_db_connections = {self.pool_size}\n"
            f"max_client_conn = {self.max_client_conn}\n"
            # A dropped test database's server connections go soon; clients wait for a server rather than fail.
            "server_idle_timeout = 5\n"
            "server_login_retry = 1\n"
            "query_wait_timeout = 60\n"
            f"logfile = {self.root / 'pgbouncer.log'}\n"
            f"pidfile = {self.root / 'pgbouncer.pid'}\n"
        )

    def show(self, what: str) -> list[dict[str, str]]:
        """The rows of the admin console's ``SHOW <what>`` (e.g. ``POOLS``, ``CLIENTS``)."""
        assert self.port is not None
        bindir = find_server_bindir()
        psql = str(bindir / "psql") if bindir is not None and (bindir / "psql").exists() else "psql"
        result = subprocess.run(
            [psql, "-h", "127.0.0.1", "-p", str(self.port), "-U", SUPERUSER, "-d", "pgbouncer", "-A", "-F", "\t",
             "-P", "footer=off", "-c", f"SHOW {what}"],
            capture_output=True, text=True, check=True, timeout=30,
        )  # fmt: skip
        lines = result.stdout.splitlines()
        header = lines[0].split("\t")
        return [dict(zip(header, line.split("\t"), strict=False)) for line in lines[1:]]

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def _pid(self) -> int | None:
        if self.root is None:
            return None
        try:
            return int((self.root / "pgbouncer.pid").read_text().strip())
        except (OSError, ValueError):
            return None

    def _wait_listening(self) -> bool:
        assert self.port is not None
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
            if "could not bind" in self.log_tail() or "Address already in use" in self.log_tail():
                return False
            time.sleep(0.05)
        return False

    def close(self) -> None:
        atexit.unregister(self.close)
        pid = self._pid()
        if pid is not None:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                try:
                    os.kill(pid, 0)
                except OSError:
                    break
                time.sleep(0.02)
            else:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
        self.root = None
        self.port = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _server_user_prefix() -> list[str]:
    if os.geteuid() != 0:
        return []
    runuser = shutil.which("runuser") or "/usr/sbin/runuser"
    return [runuser, "-u", SERVER_OS_USER, "--"]
