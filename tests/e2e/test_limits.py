"""Bounded clients against a real server (spec 9): a huge header block gets 431, a client that pauses in its headers
or its body gets 408, headers trickled a byte at a time get 408 within the read timeout in total (a steady body is
bounded between its bytes only), and SIGTERM ends the process within its grace even while an upload is stalled.

These talk raw HTTP over sockets, so that a test can send exactly the bytes a hostile or broken client would.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import StartServer
from tests.e2e.server import GRACEFUL_EXITS

pytestmark = pytest.mark.e2e

READ_TIMEOUT = 1.0
GRACE = 2


def connect(port: int) -> socket.socket:
    conn = socket.create_connection(("127.0.0.1", port), timeout=10)
    conn.settimeout(10)
    return conn


def read_answer(conn: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body of one answer (the server closes the connection after each of these)."""
    data = b""
    while True:
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])}
    return status, headers, body


def assert_problem(answer: tuple[int, dict[str, str], bytes], status: int, code: str) -> None:
    got_status, headers, body = answer
    assert got_status == status, body
    assert headers["content-type"] == "application/problem+json"
    problem = json.loads(body)
    assert problem["status"] == status
    assert problem["code"] == code
    assert problem["detail"]


def test_a_header_block_over_the_limit_gets_431(start_server: StartServer) -> None:
    server = start_server()
    with connect(server.port) as conn:
        conn.sendall(b"GET /sessions HTTP/1.1\r\nHost: localhost\r\nX-Big: " + b"a" * (1024 * 1024) + b"\r\n\r\n")
        assert_problem(read_answer(conn), 431, "HEADERS_TOO_LARGE")
    assert server.get("/healthz").status_code == 200


def test_headers_just_under_the_limit_are_served(start_server: StartServer) -> None:
    server = start_server()
    with connect(server.port) as conn:
        padding = b"X-Pad: " + b"a" * (60 * 1024) + b"\r\n"
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n" + padding + b"\r\n")
        status, _, body = read_answer(conn)
    assert status == 200, body


def assert_408_after_stalling(conn: socket.socket, sent: bytes) -> None:
    """Send ``sent`` and nothing more: the answer is 408 REQUEST_TIMEOUT, after about the read timeout."""
    started = time.monotonic()
    conn.sendall(sent)
    answer = read_answer(conn)
    waited = time.monotonic() - started
    assert_problem(answer, 408, "REQUEST_TIMEOUT")
    assert READ_TIMEOUT * 0.9 <= waited < READ_TIMEOUT + 3


def serve_one_kept_alive(conn: socket.socket) -> None:
    """A whole request in one piece, answered; the connection stays open after it."""
    conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
    first = conn.recv(65536)
    assert first.startswith(b"HTTP/1.1 200 ") and first.endswith(b'{"status":"ok"}'), first


def test_headers_that_stop_arriving_get_408_within_the_read_timeout(start_server: StartServer) -> None:
    server = start_server(None, "--read-timeout", str(READ_TIMEOUT))
    with connect(server.port) as conn:
        assert_408_after_stalling(conn, b"GET /sessions HTTP/1.1\r\nHost: localhost\r\nX-Slow: ")


def test_a_kept_alive_connections_next_headers_that_stop_arriving_get_408(start_server: StartServer) -> None:
    server = start_server(None, "--read-timeout", str(READ_TIMEOUT))
    with connect(server.port) as conn:
        serve_one_kept_alive(conn)
        time.sleep(READ_TIMEOUT * 1.5)  # idle between requests is keep-alive's to bound, not the headers' deadline
        assert_408_after_stalling(conn, b"GET /sessions HTTP/1.1\r\nHost: localhost\r\nX-Slow: ")


def test_headers_that_stall_after_blank_lines_get_408(start_server: StartServer) -> None:
    """Blank lines before a request line are skipped by the parser: the empty line they hold is not the end of the
    headers that follow."""
    server = start_server(None, "--read-timeout", str(READ_TIMEOUT))
    with connect(server.port) as conn:
        serve_one_kept_alive(conn)
        assert_408_after_stalling(conn, b"\r\n\r\nGET /sessions HTTP/1.1\r\nHost: localhost\r\n")


def test_a_body_that_stops_arriving_gets_408_within_the_read_timeout(start_server: StartServer) -> None:
    server = start_server(None, "--read-timeout", str(READ_TIMEOUT))
    with connect(server.port) as conn:
        assert_408_after_stalling(
            conn,
            b"POST /sessions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            b'Content-Length: 1000\r\n\r\n{"id": "slow',
        )
    assert server.get("/sessions/slow").status_code == 404


def test_sigterm_ends_the_process_within_its_grace_during_a_stalled_upload(
    start_server: StartServer, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    server = start_server(data_dir, "--shutdown-grace", str(GRACE))
    turn = [
        {"type": "turn/start", "data": {"turn": 1}},
        {"type": "turn/end", "data": {"turn": 1, "reason": {"kind": "completed"}}},
    ]
    assert server.post("/sessions", {"id": "kept", "seed": turn}).status_code == 201
    with connect(server.port) as stalled, connect(server.port) as idle:
        stalled.sendall(
            b"POST /sessions/kept/events HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            b'Content-Length: 100000\r\n\r\n{"events": ['
        )
        idle.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")  # a keep-alive connection left open
        time.sleep(0.3)
        started = time.monotonic()
        status = server.stop()
        stopped = time.monotonic() - started
    assert status in GRACEFUL_EXITS, server.output()
    assert stopped < GRACE + 3, f"SIGTERM took {stopped:.1f} s with a grace of {GRACE} s"
    assert b"kept" in (data_dir / "index" / "checkpoints").read_bytes(), "the clean stop did not checkpoint"


# -- headers bounded in total (a byte now and then does not move the deadline) --------------------------------------

TOTAL_TIMEOUT = 2.0
PACE = 0.5  # a pause well under the read timeout
MARGIN = 2.0  # a loaded machine's lateness
SLOW_HEADERS = b"GET /sessions HTTP/1.1\r\nHost: localhost\r\nX-Slow: " + b"a" * 120  # a minute at PACE


async def trickle_headers(port: int) -> tuple[bytes, float]:
    """Send a header block a byte every :data:`PACE` seconds until the server answers; the answer and when it came
    (from the connection's start)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started = time.monotonic()
    answer = asyncio.ensure_future(reader.read())
    try:
        for byte in SLOW_HEADERS:
            if answer.done():
                break
            with contextlib.suppress(ConnectionError):
                writer.write(bytes([byte]))
                await writer.drain()
            await asyncio.wait([answer], timeout=PACE)
        return await asyncio.wait_for(answer, 10), time.monotonic() - started
    finally:
        answer.cancel()
        writer.close()


def assert_408(answer: bytes) -> None:
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), answer[:200]
    assert b"content-type: application/problem+json" in head.lower()
    assert json.loads(body)["code"] == "REQUEST_TIMEOUT"


def test_headers_trickled_a_byte_at_a_time_get_408_within_the_read_timeout_in_total(start_server: StartServer) -> None:
    server = start_server(None, "--read-timeout", str(TOTAL_TIMEOUT))
    answer, waited = asyncio.run(trickle_headers(server.port))
    assert_408(answer)
    assert TOTAL_TIMEOUT * 0.9 <= waited < TOTAL_TIMEOUT + MARGIN, f"answered after {waited:.1f} s"


def test_many_trickling_clients_are_all_closed_in_time_and_others_are_served(start_server: StartServer) -> None:
    server = start_server(None, "--read-timeout", str(TOTAL_TIMEOUT))

    async def scenario() -> tuple[list[tuple[bytes, float]], list[float]]:
        trickles = asyncio.gather(*(trickle_headers(server.port) for _ in range(40)))
        served: list[float] = []
        async with httpx.AsyncClient(base_url=server.base, timeout=10) as client:
            while not trickles.done():
                started = time.monotonic()
                assert (await client.get("/sessions")).status_code == 200
                served.append(time.monotonic() - started)
                await asyncio.sleep(0.2)
        return await trickles, served

    trickled, served = asyncio.run(scenario())
    for answer, waited in trickled:
        assert_408(answer)
        assert waited < TOTAL_TIMEOUT + MARGIN, f"answered after {waited:.1f} s"
    assert len(served) >= 5 and max(served) < 1.0, served


def test_a_slow_but_steady_body_is_still_read(start_server: StartServer) -> None:
    """A body is bounded between its bytes (spec 9: a client that *stops* sending), not in total."""
    server = start_server(None, "--read-timeout", str(TOTAL_TIMEOUT))
    body = b'{"id": "steady"' + b" " * 50 + b"}"
    pieces = [body[i : i + 10] for i in range(0, len(body), 10)]
    assert len(pieces) * PACE > TOTAL_TIMEOUT * 1.5
    with connect(server.port) as conn:
        conn.sendall(
            b"POST /sessions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body)
        )
        for piece in pieces:
            time.sleep(PACE)
            conn.sendall(piece)
        status, _, answer = read_answer(conn)
    assert status == 201, answer
    assert server.get("/sessions/steady").status_code == 200
