"""Share links against real servers (spec 18): a live share's stream, ended by a revoke and by expiry; shares that
survive a restart of the files; and two PostgreSQL replicas, where a revoke on one is in force on the other within
1 s, its open streams included."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import StartServer
from tests.e2e.server import Server
from tests.e2e.sse import open_stream

pytestmark = pytest.mark.e2e

TURN = [
    {"type": "turn/start", "data": {"turn": 1}},
    {
        "type": "user/message",
        "surfaceOp": "append",
        "data": {"id": "u1", "role": "user", "content": [{"type": "text", "text": "hi"}], "source": {"kind": "user"}},
    },
    {"type": "turn/end", "data": {"turn": 1, "reason": {"kind": "completed"}}},
]
# Revocation and expiry are in force on every replica within this long (spec 18).
WITHIN = 1.0


def note(text: str) -> dict[str, Any]:
    return {"type": "forklog-test/note", "data": {"text": text}}


def client_of(server: Server) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=server.base, timeout=httpx.Timeout(10.0, read=30.0))


async def shared_session(client: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    assert (await client.post("/sessions", json={"id": "s", "seed": []})).status_code == 201
    assert (await client.post("/sessions/s/events", json={"events": TURN})).status_code == 201
    made = await client.post("/sessions/s/shares", json=body)
    assert made.status_code == 201, made.text
    share: dict[str, Any] = made.json()
    return share


async def ends_within(stream: Any, seconds: float) -> float:
    """How long the stream took to end (comments skipped); fails if it sends an event or outlives ``seconds``."""
    began = time.monotonic()
    while True:
        frame = await stream.frame(timeout=seconds)
        if frame is None:
            return time.monotonic() - began
        assert frame.comment is not None, f"an event reached the stream after its end: {frame}"


def test_a_revoke_ends_the_live_share_stream_and_no_later_event_reaches_it(start_server: StartServer) -> None:
    server = start_server()

    async def run() -> None:
        async with client_of(server) as client:
            share = await shared_session(client, upTo="live")
            async with open_stream(client, f"/shared/{share['token']}/events/stream") as stream:
                assert [frame.id for frame in await stream.events(3)] == ["0", "1", "2"]
                await client.post("/sessions/s/events", json={"events": [note("live")]})
                assert (await stream.events(1))[0].id == "3"
                assert (await client.delete(f"/sessions/s/shares/{share['id']}")).status_code == 204
                await client.post("/sessions/s/events", json={"events": [note("after")]})
                await ends_within(stream, WITHIN)

    asyncio.run(run())


def test_an_expired_share_stream_ends(start_server: StartServer) -> None:
    server = start_server()

    async def run() -> None:
        async with client_of(server) as client:
            share = await shared_session(client, upTo="live", expiresIn="PT1S")
            async with open_stream(client, f"/shared/{share['token']}/events/stream") as stream:
                await stream.events(3)
                await ends_within(stream, 1.0 + WITHIN)
            assert (await client.get(f"/shared/{share['token']}")).status_code == 404

    asyncio.run(run())


def test_shares_and_revokes_survive_a_restart(start_server: StartServer) -> None:
    server = start_server(fsync=True)

    async def make() -> tuple[dict[str, Any], dict[str, Any]]:
        async with client_of(server) as client:
            kept = await shared_session(client, redact=["tools"])
            revoked = (await client.post("/sessions/s/shares", json={})).json()
            assert (await client.delete(f"/sessions/s/shares/{revoked['id']}")).status_code == 204
            return kept, revoked

    kept, revoked = asyncio.run(make())
    server.restart()
    assert server.get(f"/shared/{kept['token']}").status_code == 200
    assert server.get(f"/shared/{revoked['token']}").status_code == 404
    listed = server.get("/sessions/s/shares").json()["items"]
    assert [item["id"] for item in listed] == [kept["id"]] and listed[0]["redact"] == ["tools"]


@pytest.fixture
def replicas(start_server: StartServer, forklog_db: str) -> tuple[Server, Server]:
    return start_server(None, "--database-url", forklog_db), start_server(None, "--database-url", forklog_db)


def test_a_revoke_on_one_replica_is_in_force_on_the_other_within_a_second(replicas: tuple[Server, Server]) -> None:
    first, second = replicas

    async def run() -> None:
        async with client_of(first) as one, client_of(second) as other:
            share = await shared_session(one, upTo="live")
            token = share["token"]
            assert (await other.get(f"/shared/{token}")).status_code == 200
            async with open_stream(other, f"/shared/{token}/events/stream") as stream:
                await stream.events(3)
                assert (await one.delete(f"/sessions/s/shares/{share['id']}")).status_code == 204
                revoked_at = time.monotonic()
                # The other replica refuses the token at once (no share is cached) ...
                answer = await other.get(f"/shared/{token}")
                assert answer.status_code == 404 and answer.json()["code"] == "SHARE_NOT_FOUND"
                # ... and its open stream ends within the second, with no event stored after the revoke.
                await one.post("/sessions/s/events", json={"events": [note("after")]})
                await ends_within(stream, WITHIN)
                assert time.monotonic() - revoked_at < WITHIN + 0.5

    asyncio.run(run())
