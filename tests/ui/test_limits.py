"""The session browser under spec 14's limits: a quota's refusal and a rate limit's show their title and detail
like every other problem."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect

from app.domain.access import ApiKey, Scope, digest_of, key_line, new_secret
from app.domain.limits import RateLimit
from tests.ui.conftest import Connect, StartServer, Tabs
from tests.ui.test_browser import seed_agent_session

pytestmark = pytest.mark.e2e


def test_a_fork_beyond_the_quota_shows_the_problem(tabs: Tabs, connect: Connect, start_server: StartServer) -> None:
    server = start_server("--max-sessions", "1")
    seed_agent_session(connect(server), "origin")
    page = tabs.open(server.base, "#/s/origin")
    page.locator(".turn-end").first.get_by_role("button", name="Fork here").click()
    dialog = page.locator("#fork-dialog")
    dialog.get_by_role("button", name="Fork").click()
    expect(dialog.locator(".problem-title")).to_have_text("Quota exceeded")
    expect(dialog.locator(".problem-detail")).to_contain_text("1 live sessions of its 1")
    expect(dialog.locator(".problem-code")).to_have_text("429 · QUOTA_EXCEEDED")


def test_a_key_over_its_rate_shows_the_problem(
    tabs: Tabs, connect: Connect, start_server: StartServer, tmp_path: Path
) -> None:
    secret = new_secret()
    keys = tmp_path / "keys.jsonl"
    scopes = frozenset({Scope.READ, Scope.WRITE})
    keys.write_bytes(key_line(ApiKey("slow", "acme", scopes, digest_of(secret), RateLimit(0.01, 1))))
    server = start_server("--keys-file", str(keys))

    page = tabs.open(server.base, "#/s/anything")
    page.fill("#key-input", secret)
    page.locator("#key-dialog").get_by_role("button", name="Use key").click()
    expect(page.locator(".problem-title", has_text="Session not found")).to_be_visible()  # the one token
    page.goto(f"{server.base}/ui/#/s/other")
    refused = page.locator(".problem", has_text="Rate limited")
    expect(refused).to_be_visible()
    expect(refused.locator(".problem-detail")).to_contain_text("over its rate limit")
    expect(refused.locator(".problem-code")).to_have_text("429 · RATE_LIMITED")
