"""/docs (Swagger UI) and /redoc with no way out: every script and style comes from forklog (/docs/assets/)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from playwright.sync_api import expect

from tests.e2e.server import Server
from tests.ui.conftest import Tabs

pytestmark = pytest.mark.e2e


def test_the_api_docs_render_offline(tabs: Tabs, shared_server: Server, screenshots: Path) -> None:
    docs = tabs.open(shared_server.base, "", path="/docs", offline=True)
    expect(docs.locator(".swagger-ui .info .title")).to_contain_text("forklog")
    expect(docs.locator(".opblock-summary-path", has_text="/sessions/{id}/fork").first).to_be_visible()
    docs.screenshot(path=screenshots / "docs.png")

    redoc = tabs.open(shared_server.base, "", path="/redoc", offline=True)
    expect(redoc.locator("h1").first).to_contain_text("forklog")
    fork_summary = httpx.get(f"{shared_server.base}/openapi.json").json()["paths"]["/sessions/{id}/fork"]["post"][
        "summary"
    ]
    expect(redoc.get_by_role("heading", name=fork_summary).first).to_be_attached()
    assert {request.url.rsplit("/", 1)[-1] for request in tabs.requests if "/docs/assets/" in request.url} >= {
        "swagger-ui-bundle.js",
        "swagger-ui.css",
        "redoc.standalone.js",
    }
