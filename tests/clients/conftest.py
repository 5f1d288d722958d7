"""The client libraries' fixtures: one real server per module, and a fault proxy in front of it per test."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from tests.clients.proxy import FaultProxy
from tests.e2e.server import REPO, Server

# The library is imported from its folder, as it is (its installation is tested by test_packaging.py).
sys.path.insert(0, str(REPO / "clients" / "python"))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "e2e: starts real server processes (deselect with -m 'not e2e')")


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server for every client test (each test uses session ids of its own)."""
    root = tmp_path_factory.mktemp("server")
    running = Server(root / "data", root / "server.log").start()
    yield running
    running.kill()


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Backoff from 20 ms instead of 0.5 s: what these tests check does not depend on the wait's length (which
    test_python_backoff.py checks), and the suite stays quick."""
    import forklog_client._retry

    monkeypatch.setattr(forklog_client._retry, "FIRST_WAIT", 0.02)


@pytest.fixture
def proxy(server: Server) -> Iterator[FaultProxy]:
    running = FaultProxy(server.port).start()
    yield running
    running.stop()
