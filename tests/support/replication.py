"""A primary and a synchronous standby made with the installed server binaries, for failover tests (spec 6).

The standby is a ``pg_basebackup -R`` of the primary (streaming replication, ``standby.signal`` written); the primary
names it in ``synchronous_standby_names``, so a commit is acknowledged only once the standby has it. ``kill()`` and
``pause()`` take the primary away as a crash of its machine and as a network cut would (every process of the server
killed, or stopped with SIGSTOP: its connections stay open and answer nothing); ``promote()`` is the HA manager's
``pg_ctl promote``.

``DelayedStandby`` is a primary with an asynchronous hot standby that applies each commit ``delay`` after it was made
(``recovery_min_apply_delay``), for read-replica tests: what a reader sees there lags every write by that much.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg

from tests.support.postgres import PostgresCluster, PostgresError, free_port

__all__ = ["DelayedStandby", "ReplicatedPair", "StandbyCluster", "server_processes"]

SYNC_WAIT_SECONDS = 30.0


class StandbyCluster(PostgresCluster):
    """A hot standby of ``primary``, made on its first start by ``pg_basebackup -R``; ``promote()`` makes it the
    primary. Its own settings drop ``synchronous_standby_names``: once promoted, it has no standby to wait for."""

    def __init__(self, primary: PostgresCluster, name: str = "standby1") -> None:
        super().__init__(bindir=primary.bindir, settings={**primary.settings, "synchronous_standby_names": ""})
        self.primary = primary
        self.name = name

    def start(self) -> None:
        if self.root is not None:
            super().start()
            return
        self._make_root()
        assert self.primary.port is not None
        conninfo = f"host=127.0.0.1 port={self.primary.port} user=postgres application_name={self.name}"
        self._check(
            self._run(self._program("pg_basebackup"), "-d", conninfo, "-D", str(self.data_dir), "-R",
                      "-X", "stream", "--no-sync", "-c", "fast"),
            "pg_basebackup",
        )  # fmt: skip
        self.port = free_port()
        self._write_settings()
        self._pg_ctl_start()

    def promote(self) -> None:
        """``pg_ctl promote``: returns once the server takes writes."""
        self._check(self._run(self._program("pg_ctl"), "promote", "-D", str(self.data_dir), "-w"), "pg_ctl promote")


def server_processes(cluster: PostgresCluster) -> list[int]:
    """The postmaster of ``cluster`` and every process it started (backends, WAL sender, background workers)."""
    postmaster = int((cluster.data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
    found = [postmaster]
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = (entry / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[1]) == postmaster:
                found.append(int(entry.name))
    return found


class ReplicatedPair:
    """A primary with one synchronous standby; the forklog database is made on the primary (and so on both)."""

    def __init__(self, dbname: str = "forklog") -> None:
        self.dbname = dbname
        self.primary = PostgresCluster(settings={"wal_level": "replica"})
        self.standby = StandbyCluster(self.primary)
        self._stopped: list[int] = []

    def start(self) -> ReplicatedPair:
        self.primary.start()
        self.primary.create_database(self.dbname)
        self.standby.start()
        # Synchronous only once the standby exists (before, every commit would wait for it); the standby's own
        # settings leave it out, so that once promoted it waits for nobody.
        with psycopg.connect(self.primary.url(), autocommit=True, connect_timeout=5) as conn:
            conn.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{self.standby.name}'")
            conn.execute("SELECT pg_reload_conf()")
        self.wait_synchronous()
        return self

    def url(self) -> str:
        """The multi-host URL of the pair, primary first, as an operator writes it."""
        return (
            f"postgresql://postgres@127.0.0.1:{self.primary.port},127.0.0.1:{self.standby.port}/{self.dbname}"
            "?target_session_attrs=read-write"
        )

    def wait_synchronous(self) -> None:
        deadline = time.monotonic() + SYNC_WAIT_SECONDS
        while time.monotonic() < deadline:
            with psycopg.connect(self.primary.url(), autocommit=True, connect_timeout=5) as conn:
                row = conn.execute("SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'").fetchone()
            if row is not None and row[0] >= 1:
                return
            time.sleep(0.1)
        raise PostgresError(f"the standby never became synchronous:\n{self.standby.log_tail()}")

    def kill_primary(self) -> None:
        """Every process of the primary killed at once: its machine died."""
        for pid in server_processes(self.primary):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def pause_primary(self) -> None:
        """Every process of the primary stopped (SIGSTOP): its sockets stay open and nothing answers."""
        self._stopped = server_processes(self.primary)
        for pid in self._stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)

    def close(self) -> None:
        for pid in self._stopped:  # a stopped server is killed (SIGKILL reaches a stopped process)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.standby.close()
        self.primary.close()


@contextlib.contextmanager
def replicated_pair() -> Iterator[ReplicatedPair]:
    pair = ReplicatedPair()
    try:
        yield pair.start()
    finally:
        pair.close()


class DelayedStandby:
    """A primary and an asynchronous hot standby whose replay of each commit waits ``delay`` (a PostgreSQL duration,
    ``300ms``); the forklog database is made on the primary before the standby is copied from it."""

    def __init__(self, delay: str = "300ms", dbname: str = "forklog") -> None:
        self.dbname = dbname
        self.primary = PostgresCluster(settings={"wal_level": "replica"})
        self.standby = StandbyCluster(self.primary, name="reader")
        self.standby.settings["recovery_min_apply_delay"] = delay

    def start(self) -> DelayedStandby:
        self.primary.start()
        self.primary.create_database(self.dbname)
        self.standby.start()
        self.wait_streaming()
        return self

    def primary_url(self) -> str:
        return self.primary.url(self.dbname)

    def standby_url(self) -> str:
        return self.standby.url(self.dbname)

    def wait_streaming(self) -> None:
        deadline = time.monotonic() + SYNC_WAIT_SECONDS
        while time.monotonic() < deadline:
            with psycopg.connect(self.primary.url(), autocommit=True, connect_timeout=5) as conn:
                row = conn.execute("SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'").fetchone()
            if row is not None and row[0] >= 1:
                return
            time.sleep(0.1)
        raise PostgresError(f"the standby never streamed:\n{self.standby.log_tail()}")

    def close(self) -> None:
        self.standby.close()
        self.primary.close()
