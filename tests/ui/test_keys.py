"""The session browser with a keys file (spec 9, 11): it asks for a key once, keeps it for the tab only (never in a
cookie, never in a URL but the stream's), and shows every refusal's title and detail."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.e2e.test_access import make_key
from tests.ui.agent import close_agent_turn, open_agent_turn
from tests.ui.conftest import Connect, StartServer, Tabs

pytestmark = pytest.mark.e2e


def test_the_page_asks_for_a_key_once_and_keeps_it_for_the_tab(
    tabs: Tabs, connect: Connect, start_server: StartServer, tmp_path: Path, screenshots: Path
) -> None:
    keys = tmp_path / "keys.jsonl"
    key = make_key(keys, "acme", "read", "write", key_id="browser")
    reader = make_key(keys, "acme", "read", key_id="reader")
    server = start_server("--keys-file", str(keys))
    api = connect(server, key)
    api.create("guarded")
    opened, call_id = open_agent_turn(1, "Deploy it", "make deploy")
    api.append("guarded", opened)

    page = tabs.open(server.base)
    dialog = page.locator("#key-dialog")
    expect(dialog).to_be_visible()
    expect(dialog.locator(".problem-title")).to_have_text("Unauthenticated")
    expect(dialog.locator(".problem-detail")).to_contain_text("this route needs a key")
    expect(page.locator("#key-input")).to_be_focused()
    page.screenshot(path=screenshots / "key.png")

    page.fill("#key-input", "not-a-key")
    dialog.get_by_role("button", name="Use key").click()
    expect(dialog.locator(".problem-detail")).to_contain_text("not one this service knows")
    page.fill("#key-input", key)
    dialog.get_by_role("button", name="Use key").click()
    expect(dialog).to_be_hidden()
    expect(page.locator("tr[data-id='guarded']")).to_be_visible()
    expect(page.locator("#key-state")).to_be_visible()

    # Kept in this tab's sessionStorage: no cookie, and no URL but the stream's carries it.
    assert page.evaluate("sessionStorage.getItem('forklog.key')") == key
    assert page.context.cookies() == []
    page.get_by_role("link", name="guarded").click()
    expect(page.locator(".live-state")).to_have_attribute("data-state", "live")
    api.append("guarded", close_agent_turn(1, call_id, "deployed", "Deployed."))
    expect(page.locator(".turn-end .reason")).to_have_text(["completed"])
    carrying = {request.url.split("?")[0] for request in tabs.requests if key in request.url}
    assert carrying == {f"{server.base}/sessions/guarded/events/stream"}
    assert key not in page.url

    # A reload keeps the tab's key; another tab asks again.
    page.reload()
    expect(page.locator(".turn-end .reason")).to_have_text(["completed"])
    expect(dialog).to_be_hidden()
    other = tabs.new_page(page.context, f"{server.base}/ui/#/")
    expect(other.locator("#key-dialog")).to_be_visible()

    # A key without the write scope: reading works, a delete shows the refusal.
    other.fill("#key-input", reader)
    other.locator("#key-dialog").get_by_role("button", name="Use key").click()
    other.get_by_role("link", name="guarded").click()
    other.get_by_role("button", name="Delete…").click()
    other.locator("#delete-dialog").get_by_role("button", name="Delete").click()
    expect(other.locator("#delete-dialog .problem-title")).to_have_text("Forbidden")
    expect(other.locator("#delete-dialog .problem-detail")).to_contain_text("lacks the 'write' scope")
    assert api.session("guarded").status_code == 200

    # Forgetting the key asks again at the next request: here at once, as the live stream reopens without one.
    page.get_by_role("button", name="Forget key").click()
    assert page.evaluate("sessionStorage.getItem('forklog.key')") is None
    expect(dialog).to_be_visible()
    dialog.get_by_role("button", name="Cancel").click()
    expect(page.locator(".live-state")).to_have_attribute("data-state", "stopped")
    expect(page.locator(".live-problem .problem-title")).to_have_text("Unauthenticated")
