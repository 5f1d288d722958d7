"""A multi-host URL (spec 6, Failover): a connection goes to the host that takes writes, a host that answers nothing
(a paused or cut-off server) does not hold it up, and when every host refuses at once the connection fails at once."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from app.backends.postgres.pool import PoolSettings, connect
from tests.support.postgres import free_port

SETTINGS = PoolSettings(connect_timeout=5.0)


@pytest.fixture
def silent_host() -> Iterator[int]:
    """A port whose listener accepts connections (the kernel does) and never answers: a paused server."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield listener.getsockname()[1]


def multi_host(url: str, *ports: int) -> str:
    parts = urlsplit(url)
    hosts = ",".join(f"127.0.0.1:{port}" for port in ports)
    return f"postgresql://{parts.username}@{hosts}{parts.path}?target_session_attrs=read-write"


async def _server_port(url: str) -> tuple[int, float]:
    began = time.monotonic()
    conn = await connect(url, SETTINGS)
    try:
        return int(await conn.fetchval("SELECT current_setting('port')")), time.monotonic() - began
    finally:
        await conn.close()


def test_a_silent_host_listed_first_does_not_hold_up_the_primary(pg_url: str, silent_host: int) -> None:
    primary = urlsplit(pg_url).port
    assert primary is not None

    port, seconds = asyncio.run(_server_port(multi_host(pg_url, silent_host, primary)))

    assert port == primary
    assert seconds < 2.0, f"took {seconds:.1f} s: the silent host held the connection up"


def test_hosts_that_all_refuse_fail_at_once(pg_url: str) -> None:
    url = multi_host(pg_url, free_port(), free_port())
    began = time.monotonic()

    with pytest.raises(OSError):
        asyncio.run(_server_port(url))

    assert time.monotonic() - began < 2.0
