"""Traces (spec 13) through the OpenTelemetry SDK's in-memory exporter: a server span per request named ``METHOD
route``, continuing a ``traceparent``, with a child span for the storage's sync; none without an exporter; an
exporter that stalls never slows a request."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from starlette.testclient import TestClient

from app.api.app import create_app
from app.api.settings import Settings
from app.api.telemetry.tracing import provider_from_environment
from tests.api.builders import note
from tests.api.conftest import LOCAL
from tests.api.helpers import serve, wait_ready

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"


@pytest.fixture
def exported() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def traced(
    data_dir: Path, store: str, request: pytest.FixtureRequest, exported: InMemorySpanExporter
) -> Iterator[TestClient]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    settings = {"database_url": request.getfixturevalue("forklog_db")} if store == "postgres" else {}
    app = create_app(Settings(data_dir=data_dir, fsync=False, **settings), tracer_provider=provider)
    with TestClient(app, base_url=LOCAL) as client:
        wait_ready(client)
        exported.clear()
        yield client


def server_spans(exported: InMemorySpanExporter) -> list[ReadableSpan]:
    return [span for span in exported.get_finished_spans() if span.kind is SpanKind.SERVER]


def test_each_request_is_a_server_span_named_by_its_route(traced: TestClient, exported: InMemorySpanExporter) -> None:
    assert traced.post("/sessions", json={"id": "s1"}).status_code == 201
    assert traced.post("/sessions/s1/events", json={"events": [note("a"), note("b")]}).status_code == 201
    assert traced.get("/sessions/missing").status_code == 404

    create, append, missing = server_spans(exported)
    assert [create.name, append.name, missing.name] == [
        "POST /sessions",
        "POST /sessions/{id}/events",
        "GET /sessions/{id}",
    ]
    attributes = dict(append.attributes or {})
    assert attributes["http.request.method"] == "POST"
    assert attributes["http.route"] == "/sessions/{id}/events"
    assert attributes["http.response.status_code"] == 201
    assert attributes["url.path"] == "/sessions/s1/events"
    assert attributes["forklog.session.id"] == "s1"
    assert attributes["gen_ai.conversation.id"] == "s1"
    assert "forklog.session.id" not in dict(create.attributes or {})
    assert dict(missing.attributes or {})["http.response.status_code"] == 404
    syncs = [span for span in exported.get_finished_spans() if span.name.startswith("forklog.storage.")]
    children = [span for span in syncs if span.parent is not None and span.parent.span_id == append.context.span_id]
    assert len(children) == 1
    assert dict(children[0].attributes or {})["forklog.storage.events"] == 2
    assert children[0].context.trace_id == append.context.trace_id


@pytest.mark.files_only
def test_a_traceparent_is_continued_and_logged(
    traced: TestClient, exported: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="forklog.access"):
        assert traced.get("/sessions", headers={"traceparent": TRACEPARENT}).status_code == 200

    (span,) = server_spans(exported)
    assert format(span.context.trace_id, "032x") == TRACE_ID
    assert span.parent is not None and format(span.parent.span_id, "016x") == PARENT_ID
    line = json.loads([record for record in caplog.records if record.name == "forklog.access"][-1].getMessage())
    assert line["traceId"] == TRACE_ID


@pytest.mark.files_only
def test_without_an_exporter_no_span_is_made(client: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    assert provider_from_environment({}) is None
    assert provider_from_environment({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "x"}) is None
    assert provider_from_environment({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "console"}) is None
    assert provider_from_environment({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}) is not None
    assert client.app.state.service.backend.observer.durable_write("x", 1).__class__.__name__ == "nullcontext"  # type: ignore[attr-defined]
    with caplog.at_level(logging.INFO, logger="forklog.access"):
        client.get("/sessions", headers={"traceparent": TRACEPARENT})
    line = json.loads([record for record in caplog.records if record.name == "forklog.access"][-1].getMessage())
    assert line["traceId"] == TRACE_ID  # the caller's trace, for the log, though no span is made


class Stalled(SpanExporter):
    """A collector that never answers (until released)."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.release.wait(30)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.release.set()


@pytest.mark.files_only
def test_a_stalled_exporter_never_slows_a_request_and_drops_are_counted(tmp_path: Path) -> None:
    stalled = Stalled()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(stalled, max_queue_size=8, max_export_batch_size=2))
    app = create_app(Settings(data_dir=tmp_path / "data", fsync=False), tracer_provider=provider)
    with TestClient(app, base_url=LOCAL) as client:
        wait_ready(client)
        assert client.post("/sessions", json={"id": "s"}).status_code == 201
        started = time.perf_counter()
        for _ in range(40):
            assert client.post("/sessions/s/events", json={"events": [note("x")]}).status_code == 201
        elapsed = time.perf_counter() - started
        dropped = [
            line
            for line in client.get("/metrics").text.splitlines()
            if line.startswith("forklog_trace_spans_dropped_total")
        ]
        stalled.release.set()

    assert elapsed < 10
    assert float(dropped[0].split()[1]) >= 40  # 80 spans (request + sync) into a queue of 8 behind a stalled export


@pytest.mark.files_only
@pytest.mark.alone  # how many batches 40 staggered appends make depends on the CPU another worker would take
def test_a_batch_of_concurrent_appends_syncs_inside_one_of_its_requests(tmp_path: Path) -> None:
    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    # fsync on: while one batch syncs, the next requests queue behind it and form the next batch.
    app = create_app(Settings(data_dir=tmp_path / "data", fsync=True), tracer_provider=provider)

    async def main() -> None:
        async with serve(app) as client:
            assert (await client.post("/sessions", json={"id": "s"})).status_code == 201

            async def append(delay: float) -> int:
                await asyncio.sleep(delay)  # staggered: some arrive while a batch is being written
                return (await client.post("/sessions/s/events", json={"events": [note("x")]})).status_code

            statuses = await asyncio.gather(*(append(i * 0.001) for i in range(40)))
            assert set(statuses) == {201}

    asyncio.run(main())

    spans = {span.context.span_id: span for span in exported.get_finished_spans()}
    syncs = [span for span in spans.values() if span.name == "forklog.storage.sync"]
    assert syncs
    for sync in syncs:
        assert sync.parent is not None
        parent = spans[sync.parent.span_id]
        assert parent.name == "POST /sessions/{id}/events" or parent.name == "POST /sessions"
        assert parent.start_time is not None and parent.end_time is not None and sync.start_time is not None
        assert parent.start_time <= sync.start_time <= parent.end_time  # never under a request already answered
    parents = [sync.parent.span_id for sync in syncs if sync.parent is not None]
    assert len(parents) == len(set(parents)), "a request holds the sync of a later batch too"
    assert len(syncs) > 3  # the appends made several batches
