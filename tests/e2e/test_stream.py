"""The live tail against a real server (spec 7): catch-up then live, resume by Last-Event-ID, the end of a deleted
session, refusals before the stream starts, many streams at once, a reader that never reads, and shutdown."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import StartServer
from tests.e2e.server import GRACEFUL_EXITS, Server
from tests.e2e.sse import Stream, open_stream

pytestmark = pytest.mark.e2e


def note(text: str) -> dict[str, Any]:
    return {"type": "forklog-test/note", "data": {"text": text}}


def client_of(server: Server) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=server.base, timeout=httpx.Timeout(10.0, read=30.0))


async def append(client: httpx.AsyncClient, session_id: str, *texts: str) -> list[dict[str, Any]]:
    answer = await client.post(f"/sessions/{session_id}/events", json={"events": [note(text) for text in texts]})
    assert answer.status_code == 201, answer.text
    events: list[dict[str, Any]] = answer.json()["events"]
    return events


async def stored(client: httpx.AsyncClient, session_id: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = (await client.get(f"/sessions/{session_id}/events")).json()["events"]
    return events


def check(frames: list[Any], events: list[dict[str, Any]]) -> None:
    """Each frame is one event: ``id`` its seq, ``data`` its JSON as GET …/events returns it, no ``event:``."""
    assert [frame.id for frame in frames] == [str(event["seq"]) for event in events]
    assert [json.loads(frame.text) for frame in frames] == events
    assert all(frame.event is None for frame in frames)


def test_catch_up_then_live_with_no_gap_and_no_duplicate(start_server: StartServer) -> None:
    server = start_server()

    async def run() -> None:
        async with client_of(server) as client:
            await client.post("/sessions", json={"id": "s"})
            before = await append(client, "s", "a", "b", "c")
            async with open_stream(client, "/sessions/s/events/stream?from=1") as stream:
                headers = stream.response.headers
                assert headers["content-type"].startswith("text/event-stream")
                assert headers["cache-control"] == "no-cache"
                assert headers["x-accel-buffering"] == "no"
                check(await stream.events(2), before[1:])
                later = await append(client, "s", "d", "e")
                check(await stream.events(2), later)
            assert await stored(client, "s") == before + later

    asyncio.run(run())


def test_last_event_id_resumes_after_it_and_wins_over_from(start_server: StartServer) -> None:
    server = start_server()

    async def run() -> None:
        async with client_of(server) as client:
            await client.post("/sessions", json={"id": "s"})
            events = await append(client, "s", *"abcdef")
            async with open_stream(client, "/sessions/s/events/stream") as stream:
                seen = await stream.events(3)
            resume = {"Last-Event-ID": seen[-1].id or ""}
            async with open_stream(client, "/sessions/s/events/stream?from=0", headers=resume) as stream:
                rest = await stream.events(3)
            check(seen + rest, events)

    asyncio.run(run())


def test_a_deleted_session_ends_its_streams_with_a_deleted_event(start_server: StartServer) -> None:
    server = start_server()

    async def run() -> None:
        async with client_of(server) as client:
            await client.post("/sessions", json={"id": "s"})
            await append(client, "s", "a")
            async with open_stream(client, "/sessions/s/events/stream") as stream:
                await stream.events(1)
                assert (await client.delete("/sessions/s")).status_code == 204
                frame = await stream.frame()
                assert frame is not None and frame.event == "deleted"
                assert json.loads(frame.text) == {"id": "s"}
                assert await stream.frame() is None  # and the stream ends

    asyncio.run(run())


@pytest.mark.parametrize(
    ("path", "headers", "status", "code", "field"),
    [
        ("/sessions/nope/events/stream", {}, 404, "SESSION_NOT_FOUND", None),
        ("/sessions/s/events/stream?instance=stale", {}, 409, "SESSION_NOT_LIVE", None),
        ("/sessions/s/events/stream?from=3", {}, 422, "INVALID_REQUEST", "from"),
        ("/sessions/s/events/stream?from=-1", {}, 422, "INVALID_REQUEST", "from"),
        ("/sessions/s/events/stream?from=one", {}, 422, "INVALID_REQUEST", "from"),
        ("/sessions/s/events/stream", {"Last-Event-ID": "2"}, 422, "INVALID_REQUEST", "Last-Event-ID"),
        ("/sessions/s/events/stream", {"Last-Event-ID": "-1"}, 422, "INVALID_REQUEST", "Last-Event-ID"),
        ("/sessions/s/events/stream", {"Last-Event-ID": "1e3"}, 422, "INVALID_REQUEST", "Last-Event-ID"),
        ("/sessions/s/events/stream", {"Last-Event-ID": str(2**63)}, 422, "INVALID_REQUEST", "Last-Event-ID"),
        ("/sessions/s/events/stream", {"Last-Event-ID": "last"}, 422, "INVALID_REQUEST", "Last-Event-ID"),
        ("/sessions/-bad/events/stream", {}, 422, "INVALID_REQUEST", "id"),
    ],
)
def test_refusals_come_as_problems_before_the_stream_starts(
    server: Server, path: str, headers: dict[str, str], status: int, code: str, field: str | None
) -> None:
    assert server.post("/sessions", {"id": "s"}).status_code in (201, 409)
    httpx.post(f"{server.base}/sessions/s/events", json={"events": [note("a"), note("b")]}, timeout=10)
    response = httpx.get(server.base + path, headers=headers, timeout=10)
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["code"] == code
    if field is not None:
        assert [error["field"] for error in body["errors"]] == [field]


def test_two_hundred_streams_on_one_session_each_get_every_event(start_server: StartServer) -> None:
    server = start_server()
    readers = 200

    async def run() -> None:
        limits = httpx.Limits(max_connections=readers + 10)
        async with httpx.AsyncClient(base_url=server.base, timeout=30, limits=limits) as client:
            await client.post("/sessions", json={"id": "s"})

            async def reader(ready: asyncio.Event, started: list[int]) -> list[Any]:
                async with open_stream(client, "/sessions/s/events/stream", timeout=30) as stream:
                    started.append(1)
                    if len(started) == readers:
                        ready.set()
                    return await stream.events(50, timeout=30)

            ready, started = asyncio.Event(), list[int]()
            tasks = [asyncio.ensure_future(reader(ready, started)) for _ in range(readers)]
            await asyncio.wait_for(ready.wait(), 60)
            sent: list[dict[str, Any]] = []
            for batch in range(10):
                sent += await append(client, "s", *(f"{batch}-{item}" for item in range(5)))
            for frames in await asyncio.gather(*tasks):
                check(frames, sent)

    asyncio.run(run())


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_a_reader_that_never_reads_costs_bounded_memory(start_server: StartServer) -> None:
    server = start_server()
    assert server.process is not None
    server.post("/sessions", {"id": "s"})
    stalled = socket.create_connection(("127.0.0.1", server.port))
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        stalled.sendall(b"GET /sessions/s/events/stream HTTP/1.1\r\nHost: localhost\r\n\r\n")
        time.sleep(0.3)
        before = rss_kb(server.process.pid)
        with httpx.Client(base_url=server.base, timeout=30) as client:
            text = "x" * 200
            for batch in range(20):
                answer = client.post("/sessions/s/events", json={"events": [note(f"{batch} {text}")] * 1000})
                assert answer.status_code == 201, answer.text
            grown_mb = (rss_kb(server.process.pid) - before) / 1024
            assert client.get("/sessions/s").json()["eventCount"] == 20_000
        assert grown_mb < 50, f"the server grew by {grown_mb:.1f} MB while one reader read nothing"
    finally:
        stalled.close()


def test_sigterm_ends_open_streams_cleanly_and_at_once(start_server: StartServer, tmp_path: Path) -> None:
    server = start_server(tmp_path / "data", "--shutdown-grace", "10")
    assert server.process is not None

    async def run() -> float:
        async with client_of(server) as client:
            await client.post("/sessions", json={"id": "s"})
            await append(client, "s", "a")
            streams: list[Stream] = []
            async with (
                open_stream(client, "/sessions/s/events/stream") as first,
                open_stream(client, "/sessions/s/events/stream") as second,
            ):
                streams = [first, second]
                for stream in streams:
                    await stream.events(1)
                started = time.monotonic()
                os.kill(server.pid, signal.SIGTERM)
                for stream in streams:
                    while (frame := await stream.frame(timeout=8)) is not None:
                        assert frame.comment is not None  # only pings may come before the end
            return time.monotonic() - started

    ended_after = asyncio.run(run())
    assert ended_after < 5, f"the streams ended {ended_after:.1f} s after SIGTERM"
    assert server.process.wait(timeout=10) in GRACEFUL_EXITS
    assert "Application shutdown complete" in server.output(), "the shutdown did not finish cleanly"


def test_a_quiet_stream_gets_a_comment_line_at_least_every_fifteen_seconds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stream sends a ``: ping`` comment every ``PING_SECONDS``: 15 s, which the spec allows at most. The wait is
    shortened here to see the comments arrive."""
    import threading

    import uvicorn

    from app.api.app import create_app
    from app.api.routes import stream
    from app.api.settings import Settings
    from tests.e2e.server import free_port

    assert stream.PING_SECONDS <= 15
    monkeypatch.setattr(stream, "PING_SECONDS", 0.3)
    port = free_port()
    app = create_app(Settings(data_dir=tmp_path / "data", fsync=False, log_level="warning"))
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()

    async def run() -> None:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            deadline = time.monotonic() + 10
            while True:
                try:
                    if (await client.get("/readyz")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
            await client.post("/sessions", json={"id": "quiet"})
            async with open_stream(client, "/sessions/quiet/events/stream") as stream:
                started = time.monotonic()
                comments = [await stream.frame(timeout=3) for _ in range(3)]
                assert all(frame is not None and frame.comment == "ping" for frame in comments)
                assert time.monotonic() - started < 3

    try:
        asyncio.run(run())
    finally:
        server.should_exit = True
        thread.join(10)
