"""The session browser and the turn lifecycle (spec 17): a session's stats and token usage, kept current while
events arrive live; "Interrupt turn" on an open turn; "Archive"/"Unarchive", and a list that hides archived
sessions unless "Show archived" is on."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import Page, expect

from tests.e2e.server import Server
from tests.events import agent_turn as streamed_turn
from tests.ui.agent import agent_turn, open_agent_turn
from tests.ui.conftest import Connect, StartServer, Tabs

pytestmark = pytest.mark.e2e


def stat(page: Page, term: str) -> str:
    return page.locator(".stats .fact", has=page.locator("dt", has_text=term)).locator("dd").inner_text()


def usage_of(page: Page, caption: str) -> dict[str, str]:
    table = page.locator("table.usage", has=page.locator("caption", has_text=caption))
    rows = table.locator("tr")
    return {row.locator("th").inner_text(): row.locator("td").inner_text() for row in rows.all()}


def test_stats_and_usage_are_shown_and_follow_live_events(
    tabs: Tabs, connect: Connect, shared_server: Server, screenshots: Path
) -> None:
    api = connect(shared_server)
    api.create("figures")
    api.append("figures", streamed_turn(1))
    api.create("figures-kid", seed=[], meta={"parentSession": "figures", "seedLength": 0})

    page = tabs.open(shared_server.base, "#/s/figures")
    expect(page.locator(".stats h2")).to_have_text("Stats")
    assert (stat(page, "Turns"), stat(page, "Steps")) == ("1", "3")
    # agent_turn(1)'s two usage chunks: input 100 + 200, output 7 + 7, cache read 3 + 3, reasoning 2 + 2.
    assert usage_of(page, "whole log") == {"Input": "300", "Output": "14", "Cache read": "6", "Reasoning": "4"}
    expect(page.locator(".live-state")).to_have_attribute("data-state", "live")
    page.screenshot(path=screenshots / "stats.png", full_page=True)

    api.append("figures", streamed_turn(2))  # live: the figures follow once the events pause

    expect(page.locator(".stats .fact", has=page.locator("dt", has_text="Turns")).locator("dd")).to_have_text("2")
    expect(page.locator("table.usage").first.locator("tr").first.locator("td")).to_have_text("600")
    page.goto(f"{shared_server.base}/ui/#/s/figures-kid")
    expect(page.locator(".no-usage")).to_have_text("No token usage reported yet.")


def test_interrupt_turn_closes_the_open_turn(tabs: Tabs, connect: Connect, shared_server: Server) -> None:
    api = connect(shared_server)
    api.create("abandoned")
    first = agent_turn(1, "Which Python?", "python3 --version", "Python 3.11.7", "3.11.7")
    second, _ = open_agent_turn(2, "Run the tests", "make test")  # its tool call never answered
    api.append("abandoned", first + second)
    count = len(first) + len(second)

    page = tabs.open(shared_server.base, "#/s/abandoned")
    button = page.get_by_role("button", name="Interrupt turn")
    expect(button).to_be_visible()
    expect(page.locator(".live-state")).to_have_attribute("data-state", "live")
    button.click()

    expect(page.locator("#notice")).to_contain_text("Interrupted turn 2 of abandoned: 3 events closed it.")
    expect(page.locator(".turn-end .reason")).to_have_text(["completed", "interrupted"])  # the live tail's
    expect(button).to_be_hidden()
    stored = api.client.get("/sessions/abandoned/events", params={"from": count}).json()["events"]
    assert [event["type"] for event in stored] == ["tool/result", "step/end", "turn/end"]
    sent = [r for r in tabs.requests if r.method == "POST" and urlsplit(r.url).path.endswith("/interrupt")]
    body = json.loads(sent[0].post_data or "{}")
    assert body["expectedSeq"] == count and body["instance"]  # only the log the page showed is interrupted


def test_a_refused_interrupt_shows_its_problem(tabs: Tabs, connect: Connect, shared_server: Server) -> None:
    api = connect(shared_server)
    api.create("moved")
    events, _ = open_agent_turn(1, "Run it", "make")
    api.append("moved", events)
    # No live tail in this tab: the page keeps showing the log as it first read it.
    quiet = "window.EventSource = class { constructor() {} addEventListener() {} close() {} };"
    page = tabs.open(shared_server.base, "#/s/moved", init_script=quiet)
    expect(page.get_by_role("button", name="Interrupt turn")).to_be_visible()
    assert api.client.post("/sessions/moved/interrupt", json={}).status_code == 201  # another client, first

    page.get_by_role("button", name="Interrupt turn").click()

    expect(page.locator(".action-problem")).to_contain_text("expectedSeq does not match the log length")
    stored = api.client.get("/sessions/moved/events").json()["events"]
    assert [event["type"] for event in stored].count("turn/end") == 1  # closed once, by the other client


def test_archive_hides_a_session_from_the_list_until_show_archived(
    tabs: Tabs, connect: Connect, start_server: StartServer, screenshots: Path
) -> None:
    server = start_server()
    api = connect(server)
    for name in ("kept", "shelved"):
        api.create(name)
        api.append(name, agent_turn(1, f"About {name}", "ls", "ok", "Done."))

    page = tabs.open(server.base, "#/s/shelved")
    page.get_by_role("button", name="Archive", exact=True).click()
    expect(page.locator(".title-row .archived-badge")).to_be_visible()
    expect(page.get_by_role("button", name="Unarchive")).to_be_visible()
    assert api.session("shelved").json()["archived"] is True

    page.goto(f"{server.base}/ui/#/")
    expect(page.locator("table.sessions tbody tr")).to_have_count(1)
    expect(page.locator("table.sessions tbody th a")).to_have_text(["kept"])
    page.get_by_label("Show archived").check()  # a toggle: the list follows it at once
    expect(page.locator("table.sessions tbody tr")).to_have_count(2)
    expect(page.locator("tr[data-id='shelved'] .archived-badge")).to_have_text("Archived")
    expect(page.locator("tr[data-id='kept'] .archived-badge")).to_have_count(0)
    assert parse_qs(urlsplit(page.url).fragment.split("?", 1)[1])["archived"] == ["any"]
    page.screenshot(path=screenshots / "archived-list.png")
    lists = [urlsplit(r.url) for r in tabs.requests if urlsplit(r.url).path == "/sessions" and r.method == "GET"]
    assert "archived" not in parse_qs(lists[0].query) and parse_qs(lists[-1].query)["archived"] == ["any"]

    page.locator("tr[data-id='shelved'] th a").click()
    page.get_by_role("button", name="Unarchive").click()
    expect(page.get_by_role("button", name="Archive", exact=True)).to_be_visible()
    expect(page.locator(".title-row .archived-badge")).to_be_hidden()
    page.goto(f"{server.base}/ui/#/")
    expect(page.locator("table.sessions tbody tr")).to_have_count(2)
