"""A throwaway Patroni cluster for the HA tests (spec 6, An HA manager): one etcd, two PostgreSQL servers under Debian's
``patroni`` in synchronous mode, all on free loopback ports in a temporary directory.

``PatroniCluster().start()`` starts etcd, then both nodes (each bootstraps or joins from the leader by
``pg_basebackup``), and returns once one is the leader and the other its synchronous standby. ``url(dbname)`` is the
multi-host URL forklog is given (``target_session_attrs=read-write``). ``kill_postmaster(node)`` is a crash of the
server alone (Patroni restarts it in place and keeps the leader lock); ``kill_node(node)`` is a crash of the machine
(its Patroni and its server killed together). ``promoted_at(node)`` reads the promotion's time from Patroni's REST
API (``GET /history``). Patroni and PostgreSQL run as user ``postgres`` when the tests run as root. The configuration is
deploy/patroni/patroni.yml, the one the compose file's ``ha`` profile runs, with the test's addresses and paths.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.postgres import SERVER_OS_USER, find_server_bindir, free_port

REPO = Path(__file__).resolve().parents[2]
# The compose file's `ha` profile runs this configuration; the tests run it with their own addresses and paths.
DEPLOYED_CONFIG = REPO / "deploy" / "patroni" / "patroni.yml"
POST_BOOTSTRAP = REPO / "deploy" / "patroni" / "post-bootstrap.sh"
START_SECONDS = 120.0


def etcd_command(
    program: str, *, name: str, data_dir: str, client: str, advertise: str, peer: str, advertise_peer: str
) -> list[str]:
    """etcd's command line: one member listening for clients at ``client`` and for peers at ``peer``, known to them
    as ``advertise`` and ``advertise_peer`` (the compose file's etcd command too: tests/e2e/test_compose_ha.py
    checks it against this)."""
    return [
        program, "--name", name, "--data-dir", data_dir, "--listen-client-urls", client,
        "--advertise-client-urls", advertise, "--listen-peer-urls", peer, "--initial-advertise-peer-urls",
        advertise_peer, "--initial-cluster", f"{name}={advertise_peer}", "--initial-cluster-state", "new",
    ]  # fmt: skip


def programs() -> tuple[str, str]:
    """``patroni`` and ``etcd``, or a skip (a failure when ``CI=true``: .ci/run installs them)."""
    found = shutil.which("patroni"), shutil.which("etcd")
    if None in found or find_server_bindir() is None:
        reason = "patroni, etcd (Debian's patroni, etcd-server) and the PostgreSQL server binaries are needed"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return found[0] or "", found[1] or ""


def versions() -> dict[str, str]:
    """The first line of each program's ``--version`` (for the docs and the test's report)."""
    patroni, etcd = programs()
    bindir = find_server_bindir()
    assert bindir is not None
    found = {}
    for name, command in (("patroni", patroni), ("etcd", etcd), ("postgres", str(bindir / "postgres"))):
        output = subprocess.run([command, "--version"], capture_output=True, text=True, check=False).stdout
        found[name] = output.splitlines()[0].strip() if output else "?"
    return found


@dataclass
class Node:
    name: str
    root: Path
    pg_port: int
    api_port: int
    process: subprocess.Popen[bytes] | None = None

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None

    def status(self) -> dict[str, Any] | None:
        """Patroni's ``GET /patroni`` of this node, or None if its REST API does not answer."""
        try:
            response = httpx.get(f"{self.api}/patroni", timeout=1.0)
        except httpx.TransportError:
            return None
        result: dict[str, Any] = response.json()
        return result

    def answers(self, endpoint: str) -> bool:
        """Whether ``GET /<endpoint>`` (``primary``, ``sync``...) answers 200: Patroni's health checks."""
        try:
            return httpx.get(f"{self.api}/{endpoint}", timeout=1.0).status_code == 200
        except httpx.TransportError:
            return False


class PatroniCluster:
    def __init__(self, nodes: int = 2) -> None:
        self.patroni, self.etcd = programs()
        bindir = find_server_bindir()
        assert bindir is not None
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="forklog-patroni-"))
        atexit.register(self.close)
        self._account = pwd.getpwnam(SERVER_OS_USER) if os.geteuid() == 0 else None
        self.etcd_port = free_port()
        self.etcd_peer_port = free_port()
        self.etcd_process: subprocess.Popen[bytes] | None = None
        self.nodes = [Node(f"node{index + 1}", self.root / f"node{index + 1}", free_port(), free_port())
                      for index in range(nodes)]  # fmt: skip

    # -- configuration ----------------------------------------------------------------------------------------------

    def config(self, node: Node) -> dict[str, Any]:
        """The node's Patroni configuration: deploy/patroni/patroni.yml (what the compose file's ``ha`` profile runs)
        with the test's addresses, paths and pg_hba (trust on loopback), and fsync off (a throwaway cluster)."""
        yaml = pytest.importorskip("yaml", reason="PyYAML reads deploy/patroni/patroni.yml")
        config: dict[str, Any] = yaml.safe_load(DEPLOYED_CONFIG.read_text())
        config["name"] = node.name
        config["restapi"] = {"listen": f"127.0.0.1:{node.api_port}", "connect_address": f"127.0.0.1:{node.api_port}"}
        config["etcd3"] = {"hosts": [f"127.0.0.1:{self.etcd_port}"]}
        bootstrap = config["bootstrap"]
        bootstrap["initdb"] = [*bootstrap["initdb"], "no-sync"]  # a throwaway cluster need not reach the disk
        bootstrap["pg_hba"] = [
            "local all all trust",
            "host all all 127.0.0.1/32 trust",
            "host replication all 127.0.0.1/32 trust",
        ]
        script = node.root / "post-bootstrap.sh"
        shutil.copy(POST_BOOTSTRAP, script)
        self._own(script)
        bootstrap["post_bootstrap"] = str(script)
        postgresql = config["postgresql"]
        postgresql.update(
            listen=f"127.0.0.1:{node.pg_port}",
            connect_address=f"127.0.0.1:{node.pg_port}",
            data_dir=str(node.data_dir),
            bin_dir=str(self.bindir),
            pgpass=str(node.root / "pgpass"),
            parameters={
                "unix_socket_directories": str(node.root),
                "fsync": "off",
                "full_page_writes": "off",
                "shared_buffers": "32MB",
            },
        )
        return config

    def url(self, dbname: str = "forklog", user: str = "forklog") -> str:
        """The multi-host URL forklog is given (the database and role that post-bootstrap.sh made)."""
        hosts = ",".join(f"127.0.0.1:{node.pg_port}" for node in self.nodes)
        return f"postgresql://{user}@{hosts}/{dbname}?target_session_attrs=read-write"

    # -- lifecycle --------------------------------------------------------------------------------------------------

    def start(self) -> PatroniCluster:
        self._own(self.root)
        self._start_etcd()
        for node in self.nodes:
            self.start_node(node)
        self.wait_healthy()
        return self

    def _start_etcd(self) -> None:
        data = self.root / "etcd"
        client = f"http://127.0.0.1:{self.etcd_port}"
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        with (self.root / "etcd.log").open("ab") as log:
            command = etcd_command(
                self.etcd,
                name="etcd1",
                data_dir=str(data),
                client=client,
                advertise=client,
                peer=peer,
                advertise_peer=peer,
            )
            self.etcd_process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=self.root
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{client}/health", timeout=1.0).status_code == 200:
                    return
            time.sleep(0.1)
        raise RuntimeError(f"etcd did not start:\n{self.log_tail(self.root / 'etcd.log')}")

    def start_node(self, node: Node) -> None:
        """Start the node's Patroni (again, after ``kill_node``): it starts, bootstraps or joins its server."""
        node.root.mkdir(exist_ok=True)
        self._own(node.root)
        config = node.root / "patroni.yml"
        config.write_text(json.dumps(self.config(node), indent=1))  # JSON is YAML
        self._own(config)
        log = (node.root / "patroni.log").open("ab")
        account = self._account
        node.process = subprocess.Popen(
            [self.patroni, str(config)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=node.root,
            user=account.pw_uid if account else None, group=account.pw_gid if account else None,
            extra_groups=[] if account else None,
            env={**os.environ, "HOME": str(node.root), "PATRONI_LOG_LEVEL": "INFO"},
        )  # fmt: skip
        log.close()

    def wait_healthy(self, timeout: float = START_SECONDS) -> Node:
        """Wait until a leader takes writes and another node is its synchronous standby; the leader."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            leaders = [node for node in self.nodes if node.answers("primary")]
            standbys = [node for node in self.nodes if node.answers("sync")]
            if len(leaders) == 1 and standbys and standbys[0] is not leaders[0]:
                return leaders[0]
            time.sleep(0.2)
        tails = "\n".join(f"--- {node.name}:\n{self.log_tail(node.root / 'patroni.log')}" for node in self.nodes)
        raise RuntimeError(f"the Patroni cluster did not become healthy in {timeout} s:\n{tails}")

    def leader(self) -> Node:
        return next(node for node in self.nodes if node.answers("primary"))

    def kill_postmaster(self, node: Node) -> None:
        """SIGKILL the node's postmaster alone (its backends end when they notice); Patroni stays."""
        pid = node.postmaster_pid()
        assert pid is not None
        os.kill(pid, signal.SIGKILL)

    def kill_node(self, node: Node) -> None:
        """The node's machine dies: its Patroni and its postmaster SIGKILLed at once."""
        assert node.process is not None
        pid = node.postmaster_pid()
        node.process.kill()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        node.process.wait(timeout=10)

    def promoted_at(self, node: Node, after: float) -> float | None:
        """The wall-clock time (epoch seconds) Patroni's ``GET /history`` gives for the newest promotion to ``node``
        later than ``after``, or None."""
        try:
            history = httpx.get(f"{node.api}/history", timeout=1.0).json()
        except (httpx.TransportError, ValueError):
            return None
        times = [
            datetime.fromisoformat(entry[3]).timestamp()
            for entry in history
            if len(entry) >= 5 and entry[4] == node.name and entry[3]
        ]
        later = [moment for moment in times if moment > after]
        return max(later) if later else None

    def log_tail(self, path: Path, lines: int = 30) -> str:
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def close(self) -> None:
        atexit.unregister(self.close)
        for node in self.nodes:
            if node.process is not None and node.process.poll() is None:
                node.process.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    node.process.wait(timeout=10)
            pid = node.postmaster_pid()
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        if self.etcd_process is not None and self.etcd_process.poll() is None:
            self.etcd_process.kill()
            self.etcd_process.wait(timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)

    def _own(self, path: Path) -> None:
        if self._account is not None:
            os.chown(path, self._account.pw_uid, self._account.pw_gid)
            if path.is_dir():
                path.chmod(0o700)
