"""``GET /metrics`` (spec 13): the Prometheus text format, OpenTelemetry's HTTP names by route template, forklog's
own counts of what was stored, and no label that names a session, a key or a path."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from app.api.app import create_app
from app.api.settings import Settings
from app.domain.access import Scope
from tests.api.builders import note, turn
from tests.api.conftest import LOCAL, ClientFactory
from tests.api.helpers import assert_problem, wait_ready
from tests.api.test_access import write_keys

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(client: TestClient, headers: dict[str, str] | None = None) -> Samples:
    answer = client.get("/metrics", headers=headers)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_the_process_and_its_collector_are_reported_as_prometheus_client_reports_them(
    make_client: ClientFactory,
) -> None:
    samples = scrape(make_client())
    assert value(samples, "process_resident_memory_bytes") > 0
    assert value(samples, "process_cpu_seconds_total") > 0
    assert {labels for name, labels in samples if name == "python_gc_collections_total"} == {
        (("generation", str(generation)),) for generation in range(3)
    }


def test_forklog_counts_what_it_stored_and_how_it_synced(make_client: ClientFactory) -> None:
    client = make_client()
    assert client.post("/sessions", json={"id": "s1", "seed": turn(1)}).status_code == 201
    appended = client.post("/sessions/s1/events", json={"events": turn(2)})
    assert appended.status_code == 201
    stored = len(appended.json()["events"])
    keyed = {"Idempotency-Key": "once"}
    for _ in range(2):  # the second is a replay
        assert client.post("/sessions/s1/events", json={"events": [note("n")]}, headers=keyed).status_code == 201
    fork = {"sessionId": "child", "atSeq": len(turn(1)) + stored - 1}
    assert client.post("/sessions/s1/fork", json=fork).status_code == 201
    assert client.post("/sessions", json={"id": "gone"}).status_code == 201
    assert client.delete("/sessions/gone").status_code == 204

    samples = scrape(client)

    assert value(samples, "forklog_events_appended_total") == stored + 1  # seeds are not appends
    # The appended events' stored lines: the JSON array GET .../events answers, less its brackets and commas, plus
    # a newline each.
    page = client.get("/sessions/s1/events", params={"from": len(turn(1))}).content
    array = page.removeprefix(b'{"events":').split(b',"nextSeq"')[0]
    assert value(samples, "forklog_event_bytes_appended_total") == len(array) - 1
    assert value(samples, "forklog_append_batch_events_sum") == stored + 1
    assert value(samples, "forklog_append_batch_events_count") == 2
    assert value(samples, "forklog_storage_sync_seconds_count") == 2
    assert value(samples, "forklog_storage_sync_seconds_sum") > 0
    assert value(samples, "forklog_sessions_created_total") == 2
    assert value(samples, "forklog_forks_total") == 1
    assert value(samples, "forklog_sessions_deleted_total") == 1
    assert value(samples, "forklog_sessions") == 2  # s1 and child
    assert value(samples, "forklog_idempotent_replays_total") == 1
    assert value(samples, "forklog_stream_subscribers") == 0


@pytest.mark.files_only
def test_requests_are_counted_by_route_template_method_and_status(client: TestClient) -> None:
    assert client.post("/sessions", json={"id": "secret-id"}).status_code == 201
    assert client.post("/sessions/secret-id/events", json={"events": [note("a")]}).status_code == 201
    assert_problem(client.get("/sessions/no-such-id"), 404, "SESSION_NOT_FOUND")
    assert_problem(client.post("/sessions/secret-id/events", json={"evnts": []}), 422, "INVALID_REQUEST")
    assert_problem(client.get("/no/such/path/anywhere"), 404, "NOT_FOUND")
    assert client.request("BREW", "/sessions").status_code == 405

    text = client.get("/metrics").text
    samples = scrape(client)

    duration = "http_server_request_duration_seconds_count"
    events = {"http_request_method": "POST", "http_route": "/sessions/{id}/events"}
    assert value(samples, duration, **events, http_response_status_code="201") == 1
    assert value(samples, duration, **events, http_response_status_code="422") == 1
    one = {"http_request_method": "GET", "http_route": "/sessions/{id}", "http_response_status_code": "404"}
    assert value(samples, duration, **one) == 1
    unmatched = {"http_request_method": "GET", "http_route": "unmatched", "http_response_status_code": "404"}
    assert value(samples, duration, **unmatched) == 1
    other = {"http_request_method": "_OTHER", "http_route": "/sessions", "http_response_status_code": "405"}
    assert value(samples, duration, **other) == 1
    assert value(samples, "http_server_active_requests", http_request_method="POST") == 0
    assert value(samples, "http_server_active_requests", http_request_method="GET") == 1  # this scrape
    assert value(samples, "forklog_problems_total", code="SESSION_NOT_FOUND") == 1
    assert value(samples, "forklog_problems_total", code="INVALID_REQUEST") == 1
    assert value(samples, "forklog_problems_total", code="NOT_FOUND") == 1
    for private in ("secret-id", "no-such-id", "/no/such", "BREW"):
        assert private not in text
    assert "tenant=" not in text
    assert re.search(r"_created[{ ]", text) is None  # no *_created series


@pytest.mark.files_only
def test_two_apps_in_one_process_count_apart(make_client: ClientFactory, tmp_path: Path) -> None:
    first = make_client()
    second = make_client(create_app(Settings(data_dir=tmp_path / "second", fsync=False)))
    assert first.post("/sessions", json={"id": "a"}).status_code == 201

    assert value(scrape(first), "forklog_sessions_created_total") == 1
    assert value(scrape(second), "forklog_sessions_created_total") == 0


@pytest.mark.files_only
def test_the_tenant_label_only_when_asked(make_client: ClientFactory, tmp_path: Path) -> None:
    keys = write_keys(tmp_path / "keys.jsonl", {"ops": ("acme", (Scope.ADMIN, Scope.READ, Scope.WRITE))})
    client = make_client(keys_file=keys.path, metrics_tenant_label=True)
    assert client.post("/sessions", json={"id": "a"}, headers=keys.auth("ops")).status_code == 201

    samples = scrape(client, keys.auth("ops"))

    assert value(samples, "forklog_sessions_created_total", tenant="acme") == 1
    route = {"http_request_method": "POST", "http_route": "/sessions", "http_response_status_code": "201"}
    assert value(samples, "http_server_request_duration_seconds_count", **route, tenant="acme") == 1


@pytest.mark.files_only
def test_metrics_need_an_admin_key_with_a_keys_file(make_client: ClientFactory, tmp_path: Path) -> None:
    keys = write_keys(tmp_path / "keys.jsonl")
    client = make_client(keys_file=keys.path)

    assert_problem(client.get("/metrics"), 401, "UNAUTHENTICATED")
    assert_problem(client.get("/metrics", headers=keys.auth("readwrite")), 403, "FORBIDDEN")
    assert "forklog_sessions" in client.get("/metrics", headers=keys.auth("admin")).text


@pytest.mark.files_only
def test_metrics_off_serve_no_metrics(make_client: ClientFactory) -> None:
    client = make_client(metrics=False)
    assert client.post("/sessions", json={"id": "a"}).status_code == 201

    assert_problem(client.get("/metrics"), 404, "NOT_FOUND")
    assert client.get("/sessions/a").headers["x-request-id"]  # request ids do not depend on metrics


@pytest.mark.files_only
def test_a_bug_is_counted_as_an_internal_problem(tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=tmp_path / "data", fsync=False))

    async def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug")

    with TestClient(app, base_url=LOCAL, raise_server_exceptions=False) as client:
        wait_ready(client)
        app.state.service.reads.get = broken
        answer = client.get("/sessions/x")
        assert_problem(answer, 500, "INTERNAL")
        assert answer.headers["x-request-id"] == answer.json()["requestId"]
        samples = scrape(client)

    assert value(samples, "forklog_problems_total", code="INTERNAL") == 1
    bug = {"http_request_method": "GET", "http_route": "/sessions/{id}", "http_response_status_code": "500"}
    assert value(samples, "http_server_request_duration_seconds_count", **bug) == 1


@pytest.mark.files_only
def test_requests_without_a_tenant_are_labelled_with_a_tenant_no_one_can_be_named(
    make_client: ClientFactory, tmp_path: Path
) -> None:
    callers = {"ops": ("acme", (Scope.ADMIN, Scope.READ, Scope.WRITE)), "dflt": ("default", (Scope.READ,))}
    keys = write_keys(tmp_path / "keys.jsonl", callers)
    client = make_client(keys_file=keys.path, metrics_tenant_label=True)  # (it waited on a keyless /readyz)
    assert_problem(client.get("/sessions"), 401, "UNAUTHENTICATED")
    assert client.get("/readyz").status_code == 200
    assert client.get("/sessions", headers=keys.auth("dflt")).status_code == 200  # a tenant named "default"

    samples = scrape(client, keys.auth("ops"))

    duration = "http_server_request_duration_seconds_count"
    refused = {"http_request_method": "GET", "http_route": "/sessions", "http_response_status_code": "401"}
    assert value(samples, duration, **refused, tenant="-") == 1
    assert value(samples, "forklog_problems_total", code="UNAUTHENTICATED", tenant="-") == 1
    ready = {"http_request_method": "GET", "http_route": "/readyz", "http_response_status_code": "200"}
    assert value(samples, duration, **ready, tenant="-") >= 1
    listed = {"http_request_method": "GET", "http_route": "/sessions", "http_response_status_code": "200"}
    assert value(samples, duration, **listed, tenant="default") == 1
    as_default = [dict(labels) for _, labels in samples if ("tenant", "default") in labels]
    assert {labels.get("http_route") for labels in as_default} == {"/sessions"}  # the real tenant's request only
