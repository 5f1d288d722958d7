"""End-to-end fixtures: real ``python -m app`` processes on temporary data directories, killed at teardown."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.server import Server

StartServer = Callable[..., Server]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "e2e: starts real server processes (deselect with -m 'not e2e')")


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[StartServer]:
    """``start_server(data_dir=None, fsync=False, *args)``: a ready server (``args`` are more command-line flags);
    every one still running is killed at teardown."""
    started: list[Server] = []

    def start(data_dir: Path | None = None, *args: str, fsync: bool = False) -> Server:
        log = tmp_path / f"server-{len(started)}.log"
        server = Server(data_dir or tmp_path / "data", log, fsync=fsync, args=args)
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.kill()


@pytest.fixture
def server(start_server: StartServer) -> Server:
    return start_server()
