"""Read-only share links (spec 18), on both backends: made, listed and revoked by a share key; read with no key,
redacted as asked and never past upTo; continued into the caller's tenant; one answer for every token that leads
nowhere; the token in no log line, metric, trace or problem; the per-address rate."""

from __future__ import annotations

import json
import logging
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.testclient import TestClient

from app.api.app import create_app
from app.api.settings import Settings
from app.domain.access import Scope
from app.domain.sharing import REDACTED
from tests.api.builders import close_turn, open_turn, turn
from tests.api.conftest import LOCAL, ClientFactory
from tests.api.helpers import assert_invalid_request, assert_problem, wait_ready
from tests.api.test_access import Keys, write_keys

ACME, BETA = "acme", "beta"
CALLERS: dict[str, tuple[str, tuple[Scope, ...]]] = {
    "owner": (ACME, (Scope.READ, Scope.WRITE)),
    "sharer": (ACME, (Scope.SHARE,)),
    "admin": (ACME, (Scope.ADMIN,)),
    "reader": (ACME, (Scope.READ,)),
    "stranger": (BETA, (Scope.READ, Scope.WRITE, Scope.SHARE)),
}
# Every test reads shares far faster than the default per-address rate: the rate's own test sets its own.
UNLIMITED = "100000:100000"


@pytest.fixture
def keys(tmp_path: Path) -> Keys:
    return write_keys(tmp_path / "keys.jsonl", CALLERS)


@pytest.fixture
def keyed(make_client: ClientFactory, keys: Keys) -> Callable[..., TestClient]:
    return lambda **settings: make_client(keys_file=keys.path, **{"share_rate": UNLIMITED, **settings})


def demo(client: TestClient, keys: Keys, session_id: str = "demo") -> None:
    """acme's session: turn 1 (its turn/end at seq 8), turn 2 (seq 17), then turn 3 left open."""
    auth = keys.auth("owner")
    assert (
        client.post("/sessions", json={"id": session_id, "meta": {"cwd": "/home/secret"}}, headers=auth).status_code
        == 201
    )
    events = [*turn(1), *turn(2), *open_turn(3)]
    assert client.post(f"/sessions/{session_id}/events", json={"events": events}, headers=auth).status_code == 201


def share(
    client: TestClient, keys: Keys, session_id: str = "demo", caller: str = "sharer", **body: Any
) -> dict[str, Any]:
    answer = client.post(f"/sessions/{session_id}/shares", json=body, headers=keys.auth(caller))
    assert answer.status_code == 201, answer.text
    made: dict[str, Any] = answer.json()
    return made


def test_a_share_is_made_with_the_share_scope_or_admin_and_shown_once(
    keyed: Callable[..., TestClient], keys: Keys
) -> None:
    client = keyed()
    demo(client, keys)
    made = share(client, keys, upTo="head", expiresIn="P7D", redact=["tools", "cwd"])
    assert set(made) == {"id", "token", "url", "sessionId", "upTo", "expiresAt", "redact", "createdAt"}
    assert made["upTo"] == 17 and made["sessionId"] == "demo" and made["redact"] == ["tools", "cwd"]
    assert made["expiresAt"] - made["createdAt"] == 7 * 24 * 3600 * 1000
    assert len(made["token"]) >= 43 and made["url"].endswith("/shared/" + made["token"])
    assert share(client, keys, caller="admin", upTo="live")["upTo"] == "live"
    assert_problem(client.post("/sessions/demo/shares", json={}, headers=keys.auth("reader")), 403, "FORBIDDEN")
    assert_problem(client.post("/sessions/demo/shares", json={}, headers=keys.auth("owner")), 403, "FORBIDDEN")
    # Another tenant's key names a session that does not exist for it.
    assert_problem(
        client.post("/sessions/demo/shares", json={}, headers=keys.auth("stranger")), 404, "SESSION_NOT_FOUND"
    )

    listed = client.get("/sessions/demo/shares", headers=keys.auth("sharer")).json()["items"]
    assert [item["id"] for item in listed] == [made["id"], listed[1]["id"]]
    assert all("token" not in item and "url" not in item for item in listed)
    assert made["token"] not in json.dumps(listed)


def test_bad_share_requests_name_their_field(keyed: Callable[..., TestClient], keys: Keys) -> None:
    client = keyed()
    auth = keys.auth("sharer")
    assert client.post("/sessions", json={"id": "fresh"}, headers=keys.auth("owner")).status_code == 201
    assert_problem(
        client.post("/sessions/fresh/shares", json={"upTo": "head"}, headers=auth), 409, "NOT_AT_TURN_BOUNDARY"
    )
    demo(client, keys)
    assert_problem(client.post("/sessions/demo/shares", json={"upTo": 3}, headers=auth), 422, "INVALID_BOUNDARY")
    assert_problem(client.post("/sessions/demo/shares", json={"upTo": 99}, headers=auth), 422, "INVALID_BOUNDARY")
    for body, field in [
        ({"upTo": "tail"}, "upTo"),
        ({"upTo": -1}, "upTo"),
        ({"expiresIn": "P366D"}, "expiresIn"),
        ({"expiresIn": "30 days"}, "expiresIn"),
        ({"redact": ["reasoning", "secrets"]}, "redact"),
        ({"redact": "tools"}, "redact"),
        ({"color": "red"}, "color"),
    ]:
        assert_invalid_request(client.post("/sessions/demo/shares", json=body, headers=auth), field)
    assert share(client, keys, upTo=8, expiresIn="P365D")["upTo"] == 8


def test_a_frozen_share_shows_the_session_up_to_its_turn_end_and_never_past_it(
    keyed: Callable[..., TestClient], keys: Keys
) -> None:
    client = keyed()
    demo(client, keys)
    token = share(client, keys, upTo=8)["token"]
    shown = client.get(f"/shared/{token}")
    assert shown.status_code == 200, shown.text
    session = shown.json()
    assert not {"id", "instance", "parentSession"} & set(session)
    assert session["eventCount"] == 9 and session["lastTurnEndSeq"] == 8 and session["lastEventType"] == "turn/end"
    assert session["cwd"] == "/home/secret"

    page = client.get(f"/shared/{token}/events", params={"from": 0, "limit": 1000}).json()
    assert [event["seq"] for event in page["events"]] == list(range(9))
    assert page["eventCount"] == 9 and page["nextSeq"] == 9
    assert client.get(f"/shared/{token}/events", params={"from": 9}).json()["events"] == []
    history = client.get(f"/shared/{token}/history").json()
    assert history["eventCount"] == 9
    assert "answer 2" not in json.dumps(history) and "answer 1" in json.dumps(history)

    # The session grows; the share does not.
    client.post("/sessions/demo/events", json={"events": close_turn(3)}, headers=keys.auth("owner"))
    assert client.get(f"/shared/{token}").json()["eventCount"] == 9
    assert_problem(client.get(f"/shared/{token}/events/stream"), 409, "SHARE_NOT_LIVE")


def test_a_live_share_follows_the_session(keyed: Callable[..., TestClient], keys: Keys) -> None:
    client = keyed()
    demo(client, keys)
    token = share(client, keys, upTo="live")["token"]
    before = client.get(f"/shared/{token}").json()["eventCount"]
    grown = [*close_turn(3), *turn(4)]
    assert client.post("/sessions/demo/events", json={"events": grown}, headers=keys.auth("owner")).status_code == 201
    assert client.get(f"/shared/{token}").json()["eventCount"] == before + len(grown)
    events = client.get(f"/shared/{token}/events", params={"limit": 10000}).json()["events"]
    assert len(events) == before + len(grown)


def test_redaction_of_tools_cwd_and_meta(keyed: Callable[..., TestClient], keys: Keys) -> None:
    client = keyed()
    demo(client, keys)
    token = share(client, keys, upTo=17, redact=["tools", "cwd", "meta"])["token"]
    session = client.get(f"/shared/{token}").json()
    assert session["cwd"] is None and session["agentPreset"] is None and session["createdAt"] > 0
    text = client.get(f"/shared/{token}/events", params={"limit": 1000}).text
    assert "result 1" not in text and "result 2" not in text and "/home/secret" not in text
    events = client.get(f"/shared/{token}/events", params={"limit": 1000}).json()["events"]
    calls = [event for event in events if event["type"] == "tool/call"]
    assert calls and all(event["data"]["arguments"] == REDACTED for event in calls)
    assert "result 1" not in client.get(f"/shared/{token}/history").text


def test_one_answer_for_every_token_that_leads_nowhere(keyed: Callable[..., TestClient], keys: Keys) -> None:
    client = keyed()
    demo(client, keys)
    demo(client, keys, "gone")
    revoked = share(client, keys)
    client.delete(f"/sessions/demo/shares/{revoked['id']}", headers=keys.auth("sharer"))
    expired = share(client, keys, expiresIn="PT0.2S")["token"]
    deleted = share(client, keys, "gone")["token"]
    assert client.delete("/sessions/gone", headers=keys.auth("owner")).status_code == 204
    time.sleep(0.3)
    tokens = {
        "unknown": "A" * 43,
        "malformed": "not a token%",
        "revoked": revoked["token"],
        "expired": expired,
        "deleted": deleted,
    }
    bodies = set()
    for token in tokens.values():
        for path in ("", "/events", "/history", "/events/stream"):
            answer = client.get(f"/shared/{token}{path}")
            body = assert_problem(answer, 404, "SHARE_NOT_FOUND")
            assert token not in answer.text
            bodies.add(json.dumps({k: v for k, v in body.items() if k != "requestId"}, sort_keys=True))
        assert_problem(client.post(f"/shared/{token}/fork", headers=keys.auth("owner")), 404, "SHARE_NOT_FOUND")
    assert len(bodies) == 4  # one body a route (its instance is its path, the token written …)


def test_a_session_made_anew_under_the_same_id_is_not_shared(keyed: Callable[..., TestClient], keys: Keys) -> None:
    client = keyed()
    demo(client, keys)
    token = share(client, keys)["token"]
    client.delete("/sessions/demo", headers=keys.auth("owner"))
    demo(client, keys)
    assert_problem(client.get(f"/shared/{token}"), 404, "SHARE_NOT_FOUND")
    assert client.get("/sessions/demo/shares", headers=keys.auth("sharer")).json()["items"] == []


def test_a_fork_of_a_shared_session_keeps_its_own_life(keyed: Callable[..., TestClient], keys: Keys) -> None:
    client = keyed()
    demo(client, keys)
    token = share(client, keys)["token"]
    fork = client.post("/sessions/demo/fork", json={"atSeq": 8, "sessionId": "kid"}, headers=keys.auth("owner"))
    assert fork.status_code == 201
    assert client.get("/sessions/kid/shares", headers=keys.auth("sharer")).json()["items"] == []
    client.delete("/sessions/kid", headers=keys.auth("owner"))
    assert client.get(f"/shared/{token}").status_code == 200


def test_continuing_a_share_makes_a_session_of_the_callers_tenant(keyed: Callable[..., TestClient], keys: Keys) -> None:
    client = keyed()
    demo(client, keys)
    token = share(client, keys, upTo="live", redact=["tools"])["token"]
    assert_problem(client.post(f"/shared/{token}/fork"), 401, "UNAUTHENTICATED")
    assert_problem(client.post(f"/shared/{token}/fork", headers=keys.auth("sharer")), 403, "FORBIDDEN")
    made = client.post(f"/shared/{token}/fork", headers=keys.auth("stranger"))
    assert made.status_code == 201, made.text
    child = made.json()
    assert made.headers["location"] == f"/sessions/{child['id']}"
    assert child["parentSession"] is None and child["origin"] == "share"
    assert child["eventCount"] == 18 and child["lastTurnEndSeq"] == 17  # the live share's last turn/end
    mine = client.get(f"/sessions/{child['id']}/events", params={"limit": 1000}, headers=keys.auth("stranger"))
    assert mine.status_code == 200 and "result 1" not in mine.text and REDACTED in mine.text
    # It is the stranger's (beta's), not acme's.
    assert_problem(client.get(f"/sessions/{child['id']}", headers=keys.auth("owner")), 404, "SESSION_NOT_FOUND")


def test_continuing_a_share_counts_against_the_callers_quota(make_client: ClientFactory, tmp_path: Path) -> None:
    keys = write_keys(tmp_path / "keys.jsonl", CALLERS)
    with keys.path.open("ab") as lines:
        lines.write(b'{"tenant": "beta", "maxSessions": 0}\n')
    client = make_client(keys_file=keys.path, share_rate=UNLIMITED)
    demo(client, keys)
    token = share(client, keys)["token"]
    assert_problem(client.post(f"/shared/{token}/fork", headers=keys.auth("stranger")), 429, "QUOTA_EXCEEDED")


def test_the_token_is_in_no_log_line_metric_trace_or_problem(
    data_dir: Path, keys: Keys, caplog: pytest.LogCaptureFixture, store: str, request: pytest.FixtureRequest
) -> None:
    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    settings: dict[str, Any] = {"database_url": request.getfixturevalue("forklog_db")} if store == "postgres" else {}
    app = create_app(
        Settings(data_dir=data_dir, fsync=False, keys_file=keys.path, share_rate="1:3", **settings),
        tracer_provider=provider,
    )
    with caplog.at_level(logging.INFO), TestClient(app, base_url=LOCAL) as client:
        wait_ready(client)
        demo(client, keys)
        token = share(client, keys, upTo="live")["token"]
        answers = [
            client.get(f"/shared/{token}"),
            client.get(f"/shared/{token}/events"),
            client.get(f"/shared/{token}/nothing-here"),
            client.post(f"/shared/{token}/fork", headers=keys.auth("owner")),
            client.get(f"/shared/{token}/history"),  # beyond the rate: 429
            client.get(f"/ui/shared/{token}"),
        ]
        assert answers[0].status_code == 200 and answers[4].status_code == 429
        metrics = client.get("/metrics", headers=keys.auth("admin")).text
    assert token not in metrics and "/shared/{token}" in metrics
    for answer in answers[2:]:
        assert token not in answer.text
    lines = [record.getMessage() for record in caplog.records if record.name.startswith("forklog")]
    access = [json.loads(record.getMessage()) for record in caplog.records if record.name == "forklog.access"]
    assert {"/shared/…", "/shared/…/events", "/shared/…/fork", "/ui/shared/…"} <= {line["path"] for line in access}
    assert not [line for line in lines if token in line]
    spans = exported.get_finished_spans()
    assert spans
    for span in spans:
        assert token not in span.name
        assert not [value for value in (span.attributes or {}).values() if token in str(value)]


def test_share_reads_are_rated_per_address(keyed: Callable[..., TestClient], keys: Keys) -> None:
    client = keyed(share_rate="1:2")
    demo(client, keys)
    token = share(client, keys)["token"]
    assert client.get(f"/shared/{token}").status_code == 200
    assert client.get("/shared/" + "B" * 43).status_code == 404
    refused = client.get(f"/shared/{token}")
    assert_problem(refused, 429, "RATE_LIMITED")
    assert int(refused.headers["retry-after"]) >= 1 and refused.json()["retryAfterMs"] >= 1
    assert client.get("/sessions/demo", headers=keys.auth("owner")).status_code == 200  # other routes are not rated


def test_a_missing_a_revoked_and_a_malformed_token_take_about_the_same_time(
    keyed: Callable[..., TestClient], keys: Keys
) -> None:
    client = keyed()
    demo(client, keys)
    revoked = share(client, keys)
    client.delete(f"/sessions/demo/shares/{revoked['id']}", headers=keys.auth("sharer"))
    tokens = {"missing": "C" * 43, "revoked": revoked["token"], "malformed": "%%not-a-token"}
    times: dict[str, list[float]] = {name: [] for name in tokens}
    for _ in range(60):
        for name, token in tokens.items():  # interleaved: a slow moment of the machine costs each kind alike
            began = time.perf_counter()
            assert client.get(f"/shared/{token}").status_code == 404
            times[name].append(time.perf_counter() - began)
    medians = {name: statistics.median(spent) for name, spent in times.items()}
    assert max(medians.values()) / min(medians.values()) < 1.5, medians
