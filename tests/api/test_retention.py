"""Retention (spec 14): a session idle for longer than its tenant's retention is deleted by the service itself, as
DELETE would delete it, within 10 s of expiring; until then it never shows in lists or lineage."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import orjson
from starlette.testclient import TestClient

from app.domain.access import ApiKey, Scope, digest_of, key_line, new_secret
from tests.api.builders import as_seed, note, turn
from tests.api.conftest import AppFactory, ClientFactory
from tests.api.helpers import events_of, serve

RETENTION_S = 2.0
WITHIN_S = 10.0
# 2100-01-01 in epoch ms: a seed's events may carry any time (spec 1.4), and appends after them follow it.
YEAR_2100_MS = 4_102_444_800_000


def wait_gone(client: TestClient, session_id: str, since: float, headers: dict[str, str] | None = None) -> float:
    """Seconds from ``since`` until the session answers 404 (fails after the retention and 10 s)."""
    while client.get(f"/sessions/{session_id}", headers=headers).status_code != 404:
        assert time.monotonic() - since < RETENTION_S + WITHIN_S, f"{session_id} was not deleted in time"
        time.sleep(0.1)
    return time.monotonic() - since


def test_an_idle_session_is_deleted_and_a_busy_one_kept(make_client: ClientFactory) -> None:
    client = make_client(retention="PT2S")
    assert client.post("/sessions", json={"id": "idle", "seed": turn(1)}).status_code == 201
    idle_since = time.monotonic()
    assert client.post("/sessions", json={"id": "busy"}).status_code == 201
    appended = 0

    while client.get("/sessions/idle").status_code != 404:
        assert time.monotonic() - idle_since < RETENTION_S + WITHIN_S, "the idle session was not deleted in time"
        assert client.post("/sessions/busy/events", json={"events": [note("still here")]}).status_code == 201
        appended += 1
        time.sleep(0.25)

    assert time.monotonic() - idle_since >= RETENTION_S - 0.1  # not before it expired
    assert len(events_of(client, "busy")) == appended
    assert [item["id"] for item in client.get("/sessions").json()["items"]] == ["busy"]
    assert client.app.state.service.sessions_expired_total == 1  # type: ignore[attr-defined]
    scraped = client.get("/metrics").text
    assert "forklog_sessions_expired_total 1.0" in scraped.splitlines()


def test_a_child_keeps_its_log_when_its_parent_expires(make_client: ClientFactory) -> None:
    client = make_client(retention="PT2S")
    assert client.post("/sessions", json={"id": "parent", "seed": turn(1)}).status_code == 201
    assert client.post("/sessions/parent/fork", json={"sessionId": "child"}).status_code == 201
    since = time.monotonic()
    while client.get("/sessions/parent").status_code != 404:
        assert time.monotonic() - since < RETENTION_S + WITHIN_S, "the parent was not deleted in time"
        assert client.post("/sessions/child/events", json={"events": [note("later")]}).status_code == 201
        time.sleep(0.25)

    events = events_of(client, "child")
    assert [event["type"] for event in events[: len(turn(1))]] == [event["type"] for event in turn(1)]
    assert all(event["type"] == "forklog-test/note" for event in events[len(turn(1)) :])
    lineage = client.get("/sessions/child/lineage").json()
    assert lineage["ancestors"] == [] and lineage["missingAncestor"] == "parent"


def test_the_stream_of_an_expired_session_ends_with_deleted(make_app: AppFactory) -> None:
    async def run() -> bytes:
        async with serve(make_app(retention="PT2S")) as client:
            assert (await client.post("/sessions", json={"id": "s", "seed": turn(1)})).status_code == 201
            # The in-process transport answers once the stream has ended.
            answer = await asyncio.wait_for(client.get("/sessions/s/events/stream"), RETENTION_S + WITHIN_S)
            assert answer.status_code == 200
            return answer.content.replace(b"\r\n", b"\n")

    body = asyncio.run(run())
    assert body.count(b"\nid: ") + body.startswith(b"id: ") == len(turn(1))
    assert body.rstrip().endswith(b'event: deleted\ndata: {"id":"s"}')


def test_expired_sessions_never_show_in_lists_or_lineage_before_they_are_deleted(make_client: ClientFactory) -> None:
    client = make_client(retention="PT2S")
    service = client.app.state.service  # type: ignore[attr-defined]
    client.portal.call(service.retention.stop)  # type: ignore[union-attr]  # no sweep: only the reads' filter
    assert client.post("/sessions", json={"id": "old", "seed": turn(1)}).status_code == 201
    assert client.post("/sessions/old/fork", json={"sessionId": "old-child"}).status_code == 201
    time.sleep(RETENTION_S + 0.2)
    assert client.post("/sessions", json={"id": "new", "seed": turn(1)}).status_code == 201
    assert client.post("/sessions/new/fork", json={"sessionId": "new-child"}).status_code == 201
    assert client.post("/sessions/old/fork", json={"sessionId": "late-child"}).status_code == 201

    assert [item["id"] for item in client.get("/sessions").json()["items"]] == ["new", "new-child", "late-child"]
    assert client.get("/sessions", params={"parent": "old"}).json()["items"][0]["id"] == "late-child"
    assert [item["id"] for item in client.get("/sessions", params={"limit": 1}).json()["items"]] == ["new"]
    lineage = client.get("/sessions/late-child/lineage").json()
    assert lineage["ancestors"] == [] and lineage["missingAncestor"] == "old"
    assert [child["id"] for child in client.get("/sessions/old/lineage").json()["children"]] == ["late-child"]


def test_a_tenant_lines_retention_applies_to_that_tenant_only(make_client: ClientFactory, tmp_path: Path) -> None:
    secrets = {"acme": new_secret(), "beta": new_secret()}
    keys = tmp_path / "keys.jsonl"
    lines = [
        key_line(ApiKey(name, name, frozenset({Scope.READ, Scope.WRITE}), digest_of(secret)))
        for name, secret in secrets.items()
    ]
    keys.write_bytes(b"".join(lines) + orjson.dumps({"tenant": "acme", "retention": "PT2S"}) + b"\n")
    acme, beta = ({"Authorization": f"Bearer {secrets[name]}"} for name in ("acme", "beta"))
    client = make_client(keys_file=keys)
    assert client.post("/sessions", json={"id": "s"}, headers=acme).status_code == 201
    assert client.post("/sessions", json={"id": "s"}, headers=beta).status_code == 201

    wait_gone(client, "s", time.monotonic(), acme)

    assert client.get("/sessions/s", headers=beta).status_code == 200


def test_a_session_seeded_in_the_future_expires_by_the_servers_clock_and_so_does_its_fork(
    make_client: ClientFactory,
) -> None:
    client = make_client(retention="PT2S")
    future = as_seed(turn(1), first_time=YEAR_2100_MS)
    for session_id in ("seeded", "busy"):
        assert client.post("/sessions", json={"id": session_id, "seed": future}).status_code == 201
    assert client.post("/sessions/seeded/fork", json={"sessionId": "seeded-child"}).status_code == 201
    since = time.monotonic()
    appended = 0

    while {client.get(f"/sessions/{gone}").status_code for gone in ("seeded", "seeded-child")} != {404}:
        assert time.monotonic() - since < RETENTION_S + WITHIN_S, "a session seeded in 2100 was not deleted in time"
        assert client.post("/sessions/busy/events", json={"events": [note("still here")]}).status_code == 201
        appended += 1
        time.sleep(0.25)

    assert time.monotonic() - since >= RETENTION_S - 0.1  # not before it expired
    busy = client.get("/sessions/busy").json()
    assert busy["eventCount"] == len(future) + appended
    assert busy["updatedAt"] >= YEAR_2100_MS  # the sidebar's order still follows the events' times (spec 12)
    assert [item["id"] for item in client.get("/sessions").json()["items"]] == ["busy"]


def test_the_servers_clock_of_a_last_change_survives_a_restart(make_client: ClientFactory) -> None:
    future = as_seed(turn(1), first_time=YEAR_2100_MS)
    before = make_client()
    assert before.post("/sessions", json={"id": "quiet", "seed": future}).status_code == 201
    assert before.post("/sessions/quiet/fork", json={"sessionId": "quiet-child"}).status_code == 201
    assert before.post("/sessions", json={"id": "appended", "seed": future}).status_code == 201
    time.sleep(3.3)
    assert before.post("/sessions/appended/events", json={"events": [note("just now")]}).status_code == 201
    assert before.post("/sessions", json={"id": "recent", "seed": future}).status_code == 201
    before.__exit__(None, None, None)  # a clean shutdown

    after = make_client(retention="PT3S")

    # Counted from the changes the first run acknowledged, not from the restart nor from the events' times.
    assert [item["id"] for item in after.get("/sessions").json()["items"]] == ["appended", "recent"]
    wait_gone(after, "quiet", time.monotonic())
