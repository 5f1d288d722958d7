"""Tenant quotas (spec 14): ``maxSessions`` and ``maxBytes`` from the keys file's tenant lines, or from the settings
without one; 429 QUOTA_EXCEEDED with its facts and nothing stored; exact under concurrency; a delete frees at once."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

from app.domain.access import ApiKey, Scope, digest_of, key_line, new_secret
from app.domain.dsh_frames import decode_log
from app.domain.dsh_records import encode_header
from app.domain.jsonvalue import dumps
from app.domain.session import HEADER_FIELDS, SessionHeader
from tests.api.builders import note, turn
from tests.api.conftest import LOCAL, AppFactory, ClientFactory
from tests.api.helpers import assert_problem, events_of, get_session, serve, wait_ready


def exported_bytes(client: TestClient, session_id: str, headers: dict[str, str] | None = None) -> int:
    """The session's ``bytes`` as spec 12 defines it: its log as ``export`` writes it (header line, event lines),
    rebuilt from what the API answers."""
    session = client.get(f"/sessions/{session_id}", headers=headers).json()
    fields = {field.attr: session[field.key] for field in HEADER_FIELDS if session.get(field.key) is not None}
    header = SessionHeader(id=session["id"], created_at=session["createdAt"], instance=session["instance"], **fields)
    answer = client.get(f"/sessions/{session_id}/events", params={"limit": 10000}, headers=headers).json()
    return len(encode_header(header)) + sum(len(dumps(event)) + 1 for event in answer["events"])


def listed(client: TestClient, headers: dict[str, str] | None = None) -> list[str]:
    return [item["id"] for item in client.get("/sessions", headers=headers).json()["items"]]


def test_max_sessions_refuses_a_create_or_fork_beyond_it_and_stores_nothing(make_client: ClientFactory) -> None:
    client = make_client(max_sessions=2)
    assert client.post("/sessions", json={"id": "a", "seed": turn(1)}).status_code == 201
    assert client.post("/sessions", json={"id": "b"}).status_code == 201

    created = client.post("/sessions", json={"id": "c"})
    forked = client.post("/sessions/a/fork", json={"sessionId": "d"})

    assert_problem(created, 429, "QUOTA_EXCEEDED", quota="sessions", limit=2, used=2)
    assert_problem(forked, 429, "QUOTA_EXCEEDED", quota="sessions", limit=2, used=2)
    assert listed(client) == ["a", "b"]
    assert client.get("/sessions/c").status_code == 404
    assert client.get("/sessions/d").status_code == 404
    # appends add no session: they go on
    assert client.post("/sessions/b/events", json={"events": [note("x")]}).status_code == 201


def test_a_delete_frees_its_slot_at_once(make_client: ClientFactory) -> None:
    client = make_client(max_sessions=1)
    assert client.post("/sessions", json={"id": "a"}).status_code == 201
    assert_problem(client.post("/sessions", json={"id": "b"}), 429, "QUOTA_EXCEEDED")
    assert client.delete("/sessions/a").status_code == 204
    assert client.post("/sessions", json={"id": "b"}).status_code == 201


def test_concurrent_creates_take_exactly_the_free_slots(make_app: AppFactory) -> None:
    async def run() -> list[int]:
        async with serve(make_app(max_sessions=5)) as client:
            answers = await asyncio.gather(*(client.post("/sessions", json={"id": f"s{n}"}) for n in range(20)))
            for answer in answers:
                if answer.status_code != 201:
                    assert_problem(answer, 429, "QUOTA_EXCEEDED", quota="sessions", limit=5, used=5)
            items = (await client.get("/sessions")).json()["items"]
            assert len(items) == 5
            return [answer.status_code for answer in answers]

    codes = asyncio.run(run())
    assert codes.count(201) == 5 and codes.count(429) == 15


def test_concurrent_appends_take_exactly_the_free_bytes(make_app: AppFactory) -> None:
    event = note("x" * 100)

    async def run() -> None:
        async with serve(make_app(max_bytes=10_000)) as client:
            assert (await client.post("/sessions", json={"id": "s"})).status_code == 201
            session = (await client.get("/sessions/s")).json()
            header = len(encode_header(SessionHeader(id="s", created_at=session["createdAt"], instance="0" * 32)))
            answers = await asyncio.gather(
                *(client.post("/sessions/s/events", json={"events": [event]}) for _ in range(80))
            )
            stored = sum(1 for answer in answers if answer.status_code == 201)
            for answer in answers:
                if answer.status_code != 201:
                    assert_problem(answer, 429, "QUOTA_EXCEEDED", quota="bytes", limit=10_000)
            assert 0 < stored < 80
            assert (await client.get("/sessions/s")).json()["eventCount"] == stored
            lines = (await client.get("/sessions/s/events", params={"limit": 10000})).json()["events"]
            sizes = [len(dumps(stored_event)) + 1 for stored_event in lines]
            used = header + sum(sizes)
            assert used <= 10_000
            assert used + sizes[-1] > 10_000  # no room was left for one more (the next seq is no shorter)

    asyncio.run(run())


def test_max_bytes_counts_each_log_as_export_writes_it(make_client: ClientFactory) -> None:
    client = make_client(max_bytes=4000)
    assert client.post("/sessions", json={"id": "a", "meta": {"cwd": "/work"}, "seed": turn(1)}).status_code == 201
    used = exported_bytes(client, "a")

    too_big = [note("y" * (4000 - used))]  # its line is longer than the text: one byte too many and more
    refused = client.post("/sessions/a/events", json={"events": too_big})

    assert_problem(refused, 429, "QUOTA_EXCEEDED", quota="bytes", limit=4000, used=used)
    assert len(events_of(client, "a")) == len(turn(1))
    # exactly up to the limit is allowed
    probe = client.post("/sessions/a/events", json={"events": [note("")]})
    assert probe.status_code == 201
    stored = probe.json()["events"][0]
    line = len(dumps(stored)) + 1
    used += line
    longer_seq = len(str(stored["seq"] + 1)) - len(str(stored["seq"]))
    fits = [note("z" * (4000 - used - line - longer_seq))]
    assert client.post("/sessions/a/events", json={"events": fits}).status_code == 201
    assert exported_bytes(client, "a") == 4000
    assert_problem(client.post("/sessions/a/events", json={"events": [note("")]}), 429, "QUOTA_EXCEEDED", used=4000)
    assert_problem(client.post("/sessions", json={}), 429, "QUOTA_EXCEEDED", quota="bytes", used=4000)


@pytest.mark.files_only
def test_bytes_are_the_raw_files_length_on_the_file_backend(make_client: ClientFactory, data_dir: Path) -> None:
    client = make_client()
    assert client.post("/sessions", json={"id": "a", "meta": {"cwd": "/w"}, "seed": turn(1)}).status_code == 201
    assert client.post("/sessions/a/events", json={"events": [note("é ☃")]}).status_code == 201
    # the log's bytes as its raw .jsonl holds them: a compressed file's are its frames' text
    assert exported_bytes(client, "a") == len(decode_log((data_dir / "sessions" / "a.jsonl.zstd").read_bytes()))


def test_a_fork_counts_its_whole_log_and_a_delete_frees_it(make_app: AppFactory) -> None:
    with TestClient(make_app(), base_url=LOCAL) as probe:
        wait_ready(probe)
        assert probe.post("/sessions", json={"id": "a", "seed": turn(1)}).status_code == 201
        source = exported_bytes(probe, "a")
        child = exported_bytes(probe, probe.post("/sessions/a/fork", json={"sessionId": "b"}).json()["id"])
        assert child > source  # the seed's lines are counted, though shared; the child's header is longer
        assert probe.delete("/sessions/b").status_code == 204

    # a restart reads what the tenant holds
    with TestClient(make_app(max_bytes=source + child - 1), base_url=LOCAL) as tight:
        wait_ready(tight)
        refused = tight.post("/sessions/a/fork", json={"sessionId": "b"})
        assert_problem(refused, 429, "QUOTA_EXCEEDED", quota="bytes", limit=source + child - 1, used=source)
        assert tight.get("/sessions/b").status_code == 404

    with TestClient(make_app(max_bytes=source + child), base_url=LOCAL) as roomy:
        wait_ready(roomy)
        assert roomy.post("/sessions/a/fork", json={"sessionId": "b"}).status_code == 201
        full = roomy.post("/sessions/a/fork", json={"sessionId": "c"})
        assert_problem(full, 429, "QUOTA_EXCEEDED", used=source + child)
        assert roomy.delete("/sessions/a").status_code == 204  # its child keeps its log and its bytes
        assert get_session(roomy, "b")["eventCount"] == len(turn(1))
        assert roomy.post("/sessions", json={"id": "a", "seed": turn(1)}).status_code == 201


def test_a_fork_with_events_counts_their_stored_lines_exactly(make_app: AppFactory) -> None:
    with TestClient(make_app(), base_url=LOCAL) as probe:
        wait_ready(probe)
        assert probe.post("/sessions", json={"id": "a", "seed": turn(1)}).status_code == 201
        source = exported_bytes(probe, "a")
        assert probe.post("/sessions/a/fork", json={"sessionId": "b", "events": turn(2)}).status_code == 201
        child = exported_bytes(probe, "b")
        assert probe.delete("/sessions/b").status_code == 204

    with TestClient(make_app(max_bytes=source + child - 1), base_url=LOCAL) as tight:
        wait_ready(tight)
        refused = tight.post("/sessions/a/fork", json={"sessionId": "b", "events": turn(2)})
        assert_problem(refused, 429, "QUOTA_EXCEEDED", quota="bytes", limit=source + child - 1, used=source)

    # exactly up to the limit is allowed, as for an append: the events' lines are counted as stored
    with TestClient(make_app(max_bytes=source + child), base_url=LOCAL) as exact:
        wait_ready(exact)
        assert exact.post("/sessions/a/fork", json={"sessionId": "b", "events": turn(2)}).status_code == 201
        assert exported_bytes(exact, "a") + exported_bytes(exact, "b") == source + child


# -- tenant lines of the keys file -------------------------------------------------------------------------------


def _keys(path: Path, secrets: dict[str, str], *tenant_lines: dict[str, Any]) -> None:
    lines = [
        key_line(ApiKey(name, name, frozenset({Scope.READ, Scope.WRITE}), digest_of(secret)))
        for name, secret in secrets.items()
    ]
    path.write_bytes(b"".join(lines) + b"".join(orjson.dumps(line) + b"\n" for line in tenant_lines))


def test_tenant_lines_set_each_tenants_limits_and_changes_take_effect(
    make_client: ClientFactory, tmp_path: Path
) -> None:
    secrets = {"acme": new_secret(), "beta": new_secret()}
    acme, beta = ({"Authorization": f"Bearer {secrets[name]}"} for name in ("acme", "beta"))
    keys = tmp_path / "keys.jsonl"
    _keys(keys, secrets, {"tenant": "acme", "maxSessions": 1})
    client = make_client(keys_file=keys, max_sessions=0)  # the settings' limits are for the keyless mode only

    assert client.post("/sessions", json={"id": "a"}, headers=acme).status_code == 201
    assert_problem(client.post("/sessions", json={"id": "b"}, headers=acme), 429, "QUOTA_EXCEEDED", limit=1)
    for n in range(3):
        assert client.post("/sessions", json={"id": f"b{n}"}, headers=beta).status_code == 201

    _keys(keys, secrets, {"tenant": "acme", "maxSessions": 2}, {"tenant": "beta", "maxSessions": 3})
    deadline = time.monotonic() + 5
    while (answer := client.post("/sessions", json={"id": "b"}, headers=acme)).status_code == 429:
        assert time.monotonic() < deadline, "the new quota did not take effect within 5 s"
        time.sleep(0.1)
    assert answer.status_code == 201
    assert_problem(client.post("/sessions", json={"id": "x"}, headers=beta), 429, "QUOTA_EXCEEDED", used=3, limit=3)


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ({"tenant": "acme", "maxSessions": -1}, "maxSessions"),
        ({"tenant": "acme", "maxSessions": 1.5}, "maxSessions"),
        ({"tenant": "acme", "maxBytes": "10"}, "maxBytes"),
        ({"tenant": "acme", "retention": "30 days"}, "retention"),
        ({"tenant": "acme", "retention": "PT0S"}, "retention"),
        ({"tenant": "acme", "color": "red"}, "unknown member color"),
        ({"tenant": "-bad"}, "tenant"),
    ],
)
def test_a_bad_tenant_line_stops_the_start(
    make_app: AppFactory, tmp_path: Path, line: dict[str, Any], reason: str
) -> None:
    from app.api.edge.keys_file import KeysFileError

    keys = tmp_path / "keys.jsonl"
    _keys(keys, {"acme": new_secret()}, line)
    with pytest.raises(KeysFileError, match=f"line 2: {reason}"):
        make_app(keys_file=keys)


def test_two_tenant_lines_for_one_tenant_are_a_bad_line(make_app: AppFactory, tmp_path: Path) -> None:
    from app.api.edge.keys_file import KeysFileError

    keys = tmp_path / "keys.jsonl"
    _keys(keys, {"acme": new_secret()}, {"tenant": "acme", "maxSessions": 1}, {"tenant": "acme", "maxBytes": 9})
    with pytest.raises(KeysFileError, match="line 3: tenant 'acme' has a tenant line already"):
        make_app(keys_file=keys)
