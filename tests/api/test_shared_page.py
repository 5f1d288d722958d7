"""The shared page's route (spec 18): ``GET /ui/shared/{token}`` answers the read-only page with no key, a strict
policy and no referrer; one plain "not found" page, the same bytes, for every token that leads to no share; the
per-address share rate; and the token in no access log line, metric or trace."""

from __future__ import annotations

import json
import logging
import re
import time
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.testclient import TestClient

from app.api.app import create_app
from app.api.settings import Settings
from tests.api.builders import turn
from tests.api.conftest import LOCAL, ClientFactory
from tests.api.helpers import wait_ready

pytestmark = pytest.mark.files_only

STRICT_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
UNLIMITED = "100000:100000"


def demo(client: TestClient, session_id: str = "demo") -> None:
    assert client.post("/sessions", json={"id": session_id}).status_code == 201
    assert client.post(f"/sessions/{session_id}/events", json={"events": turn(1)}).status_code == 201


def share(client: TestClient, session_id: str = "demo", **body: Any) -> dict[str, Any]:
    answer = client.post(f"/sessions/{session_id}/shares", json=body)
    assert answer.status_code == 201, answer.text
    made: dict[str, Any] = answer.json()
    return made


def assert_page_headers(headers: Any) -> None:
    assert headers["content-type"].startswith("text/html")
    assert headers["referrer-policy"] == "no-referrer"
    assert headers["content-security-policy"] == STRICT_POLICY
    assert headers["cache-control"] == "no-store"
    assert headers["x-content-type-options"] == "nosniff"


def test_the_page_of_a_share_is_served_with_no_key_a_strict_policy_and_no_referrer(
    make_client: ClientFactory,
) -> None:
    client = make_client(share_rate=UNLIMITED)
    demo(client)
    frozen, live = share(client), share(client, upTo="live")
    assert frozen["url"].endswith(f"/ui/shared/{frozen['token']}")

    for made, mode in ((frozen, "frozen"), (live, "live")):
        page = client.get(f"/ui/shared/{made['token']}")
        assert page.status_code == 200
        assert_page_headers(page.headers)
        assert f'<meta name="forklog-share" content="{mode}">' in page.text
        assert '<meta name="referrer" content="no-referrer">' in page.text
        # Only this service's own module runs: no inline script, nothing from another host.
        scripts = re.findall(r"<script[^>]*>", page.text)
        assert scripts == ['<script type="module" src="/ui/js/shared_page.js">']
        assert "http" not in re.sub(r'content="width=device-width[^"]*"', "", page.text)


def test_every_token_that_leads_nowhere_gets_the_same_not_found_page(make_client: ClientFactory) -> None:
    client = make_client(share_rate=UNLIMITED)
    demo(client)
    demo(client, "doomed")
    revoked = share(client)
    assert client.delete(f"/sessions/demo/shares/{revoked['id']}").status_code == 204
    of_deleted = share(client, "doomed")["token"]
    assert client.delete("/sessions/doomed").status_code == 204
    expired = share(client, expiresIn="PT1S")["token"]
    time.sleep(1.1)

    answers = [
        client.get(f"/ui/shared/{token}")
        for token in (revoked["token"], of_deleted, expired, "B" * 43, "not%20a%20token", "x")
    ]
    assert {answer.status_code for answer in answers} == {404}
    assert len({answer.content for answer in answers}) == 1, "one body for every kind"
    for answer in answers:
        assert_page_headers(answer.headers)
    assert "Not found" in answers[0].text and "<script" not in answers[0].text


def test_the_page_counts_against_the_per_address_share_rate(make_client: ClientFactory) -> None:
    client = make_client(share_rate="1:2")
    demo(client)
    token = share(client)["token"]
    assert client.get(f"/ui/shared/{token}").status_code == 200
    assert client.get("/ui/shared/" + "C" * 43).status_code == 404
    refused = client.get(f"/ui/shared/{token}")
    assert refused.status_code == 429 and refused.json()["code"] == "RATE_LIMITED"
    assert token not in refused.text


def test_the_token_is_in_no_access_log_line_metric_or_trace_of_the_page(
    data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    app = create_app(Settings(data_dir=data_dir, fsync=False, share_rate=UNLIMITED), tracer_provider=provider)
    with TestClient(app, base_url=LOCAL) as client:
        wait_ready(client)
        demo(client)
        token = share(client)["token"]
        exported.clear()
        with caplog.at_level(logging.INFO):
            assert client.get(f"/ui/shared/{token}").status_code == 200
            assert client.get(f"/ui/shared/{token[:-1]}").status_code == 404
        metrics = client.get("/metrics").text
    access = [json.loads(record.getMessage()) for record in caplog.records if record.name == "forklog.access"]
    assert [line["path"] for line in access] == ["/ui/shared/…", "/ui/shared/…"]
    assert "/ui/shared/{token}" in metrics and token[:-1] not in metrics
    spans = exported.get_finished_spans()
    assert spans
    for span in spans:
        assert token[:-1] not in span.name
        assert not [value for value in (span.attributes or {}).values() if token[:-1] in str(value)]
    service = [record.getMessage() for record in caplog.records if record.name.startswith("forklog")]
    assert service and not [line for line in service if token[:-1] in line]
