"""Spec 13 against real processes: traces exported over OTLP/HTTP to a receiver this test runs, and a real Prometheus
(Debian's ``prometheus``) scraping ``/metrics`` with a bearer key and answering a query for a forklog metric."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from prometheus_client.parser import text_string_to_metric_families

from app.domain.access import ApiKey, Scope, digest_of, key_line, new_secret
from tests.api.builders import note
from tests.e2e.conftest import StartServer
from tests.e2e.server import GRACEFUL_EXITS, Server, free_port

pytestmark = pytest.mark.e2e

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PROMETHEUS = shutil.which("prometheus")


class Receiver:
    """An OTLP/HTTP trace receiver on loopback: ``POST /v1/traces`` with protobuf, every span kept."""

    def __init__(self) -> None:
        self.spans: list[Any] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                for resource_spans in request.resource_spans:
                    service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                    for scope_spans in resource_spans.scope_spans:
                        receiver.spans.extend((service, span) for span in scope_spans.spans)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200 if self.path == "/v1/traces" else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    running = Receiver()
    yield running
    running.close()


def _attributes(span: Any) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for attribute in span.attributes:
        value = attribute.value
        found[attribute.key] = value.string_value if value.HasField("string_value") else value.int_value
    return found


def test_spans_reach_a_real_otlp_receiver(
    start_server: StartServer, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    server = start_server()
    traceparent = {"traceparent": f"00-{TRACE_ID}-00f067aa0ba902b7-01"}
    assert httpx.post(f"{server.base}/sessions", json={"id": "s1"}, headers=traceparent).status_code == 201
    appended = httpx.post(f"{server.base}/sessions/s1/events", json={"events": [note("a")]}, headers=traceparent)
    assert appended.status_code == 201

    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        names = {span.name for _, span in receiver.spans}
        if {"POST /sessions", "POST /sessions/{id}/events", "forklog.storage.sync"} <= names:
            break
        time.sleep(0.1)
    by_name = {span.name: (service, span) for service, span in receiver.spans}
    service, append = by_name["POST /sessions/{id}/events"]
    assert service["service.name"] == "forklog"
    assert append.trace_id.hex() == TRACE_ID
    assert _attributes(append)["forklog.session.id"] == "s1"
    assert _attributes(append)["http.response.status_code"] == 201
    sync = [
        span
        for _, span in receiver.spans
        if span.name == "forklog.storage.sync" and span.parent_span_id == append.span_id
    ]
    assert sync, "no storage span under the append's span"
    assert f'"traceId":"{TRACE_ID}"' in server.output()


def test_an_unreachable_collector_neither_fails_nor_holds_requests_or_the_shutdown(
    start_server: StartServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    server = start_server()
    assert server.post("/sessions", {"id": "s"}).status_code == 201
    with httpx.Client(base_url=server.base, timeout=10) as client:
        started = time.monotonic()
        statuses = {client.post("/sessions/s/events", json={"events": [note("x")]}).status_code for _ in range(50)}
        elapsed = time.monotonic() - started

    assert statuses == {201}
    assert elapsed < 20
    assert server.stop() in GRACEFUL_EXITS  # within the stop timeout, though the last spans cannot leave


def test_the_stream_gauge_follows_open_streams(start_server: StartServer) -> None:
    server = start_server()
    assert server.post("/sessions", {"id": "s"}).status_code == 201

    def subscribers() -> float:
        line = [
            line for line in server.get("/metrics").text.splitlines() if line.startswith("forklog_stream_subscribers")
        ]
        return float(line[0].split()[1])

    with (
        httpx.Client(timeout=10) as streaming,
        streaming.stream("GET", f"{server.base}/sessions/s/events/stream") as stream,
    ):
        assert stream.status_code == 200
        assert subscribers() == 1
    deadline = time.monotonic() + 10
    while subscribers() != 0:
        assert time.monotonic() < deadline, "the closed stream is still counted"
        time.sleep(0.05)


def _young_collections(server: Server) -> float:
    """The server process's runs of the cyclic collector over its youngest generation, from its own metrics."""
    return next(
        sample.value
        for family in text_string_to_metric_families(server.get("/metrics").text)
        for sample in family.samples
        if sample.name == "python_gc_collections_total" and sample.labels == {"generation": "0"}
    )


def test_durable_appends_from_many_clients_seldom_wake_the_cyclic_collector(start_server: StartServer) -> None:
    # The requests waiting on one sync round keep their objects alive together and free them together. With Python's
    # default threshold, that ran a collection over every waiting request about once a round; the served process
    # collects only when far more objects than that are young.
    server = start_server(fsync=True)
    clients, appends = 32, 40
    for number in range(clients):
        assert server.post("/sessions", {"id": f"s{number}"}).status_code == 201

    async def appender(number: int) -> set[int]:
        async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
            return {
                (await client.post(f"/sessions/s{number}/events", json={"events": [note(str(n))]})).status_code
                for n in range(appends)
            }

    async def load() -> list[set[int]]:
        return await asyncio.gather(*(appender(number) for number in range(clients)))

    before = _young_collections(server)
    assert all(statuses == {201} for statuses in asyncio.run(load()))
    collections = _young_collections(server) - before
    assert collections <= clients * appends / 100, f"{collections:.0f} collections over {clients * appends} appends"


@pytest.fixture
def prometheus_binary() -> str:
    if PROMETHEUS is None:
        if os.environ.get("CI") == "true":
            pytest.fail("prometheus is not installed (.ci/run installs Debian's prometheus)")
        pytest.skip("prometheus is not installed (apt-get install prometheus)")
    return PROMETHEUS


def test_a_real_prometheus_scrapes_forklog_with_a_bearer_key(
    start_server: StartServer, prometheus_binary: str, tmp_path: Path
) -> None:
    scraper, writer = new_secret(), new_secret()
    keys = tmp_path / "keys.jsonl"
    keys.write_bytes(
        key_line(ApiKey("prometheus", "ops", frozenset({Scope.ADMIN}), digest_of(scraper)))
        + key_line(ApiKey("app", "acme", frozenset({Scope.WRITE}), digest_of(writer)))
    )
    server = start_server(None, "--keys-file", str(keys))
    created = httpx.post(f"{server.base}/sessions", json={"id": "s"}, headers={"Authorization": f"Bearer {writer}"})
    assert created.status_code == 201
    assert httpx.get(f"{server.base}/metrics").status_code == 401
    token = tmp_path / "prometheus.token"
    token.write_text(scraper)
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n"
        "scrape_configs:\n"
        "  - job_name: forklog\n"
        "    scrape_interval: 1s\n"
        "    authorization:\n"
        f"      credentials_file: {token}\n"
        "    static_configs:\n"
        f"      - targets: ['127.0.0.1:{server.port}']\n"
    )
    port = free_port()
    log = (tmp_path / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [
            prometheus_binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
    )
    try:
        found: list[Any] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not found:
            time.sleep(0.5)
            try:
                answer = httpx.get(
                    f"http://127.0.0.1:{port}/api/v1/query",
                    params={"query": 'forklog_sessions_created_total{job="forklog"}'},
                )
            except httpx.TransportError:
                continue
            if answer.status_code == 200:
                found = answer.json()["data"]["result"]
        assert found, (tmp_path / "prometheus.log").read_text(errors="replace")[-3000:]
        assert float(found[0]["value"][1]) == 1
        up = httpx.get(f"http://127.0.0.1:{port}/api/v1/query", params={"query": 'up{job="forklog"}'}).json()
        assert up["data"]["result"][0]["value"][1] == "1"
    finally:
        process.terminate()
        process.wait(timeout=20)
        log.close()


REPO = Path(__file__).resolve().parents[2]
EXPOSED = {
    "http_server_request_duration_seconds",
    "http_server_active_requests",
    "forklog_events_appended_total",
    "forklog_event_bytes_appended_total",
    "forklog_append_batch_events",
    "forklog_storage_sync_seconds",
    "forklog_forks_total",
    "forklog_sessions_created_total",
    "forklog_sessions_deleted_total",
    "forklog_sessions_expired_total",
    "forklog_sessions",
    "forklog_stream_subscribers",
    "forklog_idempotent_replays_total",
    "forklog_problems_total",
    "forklog_trace_spans_dropped_total",
    "forklog_standby_reads_total",
}
# The process's standard metrics (prometheus-client's process and collector ones) that the dashboard charts.
PROCESS_CHARTED = {"process_cpu_seconds_total", "process_resident_memory_bytes", "python_gc_collections_total"}


def test_the_metrics_profile_scrapes_each_replica_with_a_bearer_key() -> None:
    yaml = pytest.importorskip("yaml", reason="PyYAML reads docker-compose.yml")
    document = yaml.safe_load((REPO / "docker-compose.yml").read_text(encoding="utf-8"))
    prometheus = document["services"]["prometheus"]
    assert prometheus["profiles"] == ["metrics"]
    config_mount = next(mount for mount in prometheus["volumes"] if mount.startswith("./"))
    config = yaml.safe_load((REPO / config_mount.split(":")[0]).read_text(encoding="utf-8"))
    (job,) = config["scrape_configs"]
    (secret,) = prometheus["secrets"]
    assert job["authorization"]["credentials_file"] == f"/run/secrets/{secret}"
    replicas = [
        name
        for name, service in document["services"].items()
        if "FORKLOG_DATABASE_URL" in service.get("environment", {}) and "postgres" in service.get("profiles", [])
    ]
    assert sorted(job["static_configs"][0]["targets"]) == sorted(f"{name}:8000" for name in replicas)
    ignored = (REPO / ".gitignore").read_text() + (REPO / ".dockerignore").read_text()
    assert document["secrets"][secret]["file"].removeprefix("./") in ignored


def test_the_dashboard_charts_every_metric_and_only_those_served() -> None:
    dashboard = json.loads((REPO / "deploy" / "grafana-dashboard.json").read_text(encoding="utf-8"))
    expressions = " ".join(target["expr"] for panel in dashboard["panels"] for target in panel["targets"])
    named = {
        re.sub(r"_(bucket|sum|count)$", "", name)
        for name in re.findall(r"\b((?:http_server|forklog)_\w+)", expressions)
    }
    assert named == EXPOSED
    assert set(re.findall(r"\b((?:process|python_gc)_\w+)", expressions)) == PROCESS_CHARTED
