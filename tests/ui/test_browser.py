"""The session browser in a real headless chromium against a real ``python -m app`` (spec 11): the list, a session
as a conversation, its raw events, the live tail and its reconnect, fork, delete, problems, keyboard and phone."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.api.builders import turns
from tests.e2e.server import Server
from tests.events import user_message
from tests.ui.agent import agent_turn, close_agent_turn, open_agent_turn
from tests.ui.api import Api
from tests.ui.conftest import PHONE, Connect, StartServer, Tabs

pytestmark = pytest.mark.e2e

DASH = "\u2013"  # the page writes ranges with an en dash


def seed_agent_session(api: Api, session_id: str, *, open_third: bool = True) -> str:
    """Two whole turns (completed, then interrupted) and, unless told otherwise, a third left open at its tool
    call; the open call's id."""
    api.create(session_id, meta={"cwd": "/work/project"})
    events = agent_turn(1, "Which Python is installed?", "python3 --version", "Python 3.11.7", "Python 3.11.7 it is.")
    events += agent_turn(2, "List the files", "ls", "README.md\napp\ntests", "Three entries.", kind="interrupted")
    third, call_id = open_agent_turn(3, "Run the tests", "make test")
    api.append(session_id, events + (third if open_third else []))
    return call_id


def fact(page: Page, term: str) -> str:
    return page.locator(".fact", has=page.locator("dt", has_text=term)).locator("dd").inner_text()


def session_ids(page: Page) -> list[str]:
    return page.locator("table.sessions tbody th a").all_inner_texts()


def test_the_list_pages_newest_first_in_creation_order_and_by_parent(
    tabs: Tabs, connect: Connect, start_server: StartServer, screenshots: Path
) -> None:
    server = start_server()
    api = connect(server)
    seed_agent_session(api, "root", open_third=False)
    children = [api.client.post("/sessions/root/fork", json={"sessionId": f"child-{n:02d}"}) for n in range(30)]
    assert {child.status_code for child in children} == {201}
    api.create("busy")
    api.append("busy", open_agent_turn(1, "Still working", "sleep 1")[0])

    page = tabs.open(server.base)
    expect(page.locator("table.sessions tbody tr")).to_have_count(32)
    assert session_ids(page)[:3] == ["busy", "child-29", "child-28"], "newest first by default"
    busy = page.locator("tr[data-id='busy']")
    expect(busy.locator(".open-turn-cell")).to_have_text("turn 1")
    expect(busy.locator(".forkable-cell")).to_have_text("no")
    root = page.locator("tr[data-id='root']")
    expect(root.locator("td.number")).to_have_text("22")
    expect(root.locator(".forkable-cell")).to_have_text("yes")
    expect(page.locator("tr[data-id='child-00'] td").last).to_have_text("root")
    page.screenshot(path=screenshots / "list.png")

    # Creation order, 25 a page: the pages follow nextCursor, and come back.
    page.select_option("#list-order", "created")
    page.select_option("#list-limit", "25")
    page.get_by_role("button", name="Show").click()
    expect(page.locator("table.sessions tbody tr")).to_have_count(25)
    assert session_ids(page)[:2] == ["root", "child-00"]
    page.get_by_role("button", name="Next").click()
    expect(page.locator("table.sessions tbody tr")).to_have_count(7)
    assert session_ids(page)[-1] == "busy"
    expect(page.get_by_role("button", name="Next")).to_be_disabled()
    page.get_by_role("button", name="Previous").click()
    expect(page.locator("table.sessions tbody tr")).to_have_count(25)
    assert session_ids(page)[0] == "root"

    # Only one parent's children.
    page.select_option("#list-order", "newest")
    page.select_option("#list-limit", "50")
    page.fill("#list-parent", "root")
    page.get_by_role("button", name="Show").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Children of root")
    expect(page.locator("table.sessions tbody tr")).to_have_count(30)
    assert set(session_ids(page)) == {f"child-{n:02d}" for n in range(30)}

    page.get_by_role("link", name="child-07").first.click()
    expect(page.get_by_role("heading", level=1)).to_have_text("child-07")


def test_a_session_reads_as_a_conversation_of_turns(
    tabs: Tabs, connect: Connect, shared_server: Server, screenshots: Path
) -> None:
    seed_agent_session(connect(shared_server), "talk")
    page = tabs.open(shared_server.base, "#/s/talk")
    expect(page.get_by_role("heading", level=1)).to_have_text("talk")
    expect(page.locator(".turn-start h3")).to_have_text(["Turn 1", "Turn 2", "Turn 3"])
    ends = page.locator(".turn-end")
    expect(ends.locator(".reason")).to_have_text(["completed", "interrupted"])
    expect(page.locator(".message-user").first).to_contain_text("Which Python is installed?")
    expect(page.locator(".message-assistant")).to_have_count(5)

    # Reasoning is folded until asked for.
    reasoning = page.locator("details.reasoning").first
    expect(reasoning.locator(".text")).to_be_hidden()
    reasoning.locator("summary").click()
    expect(reasoning.locator(".text")).to_contain_text("python3 --version")

    # Each tool call carries its result; a result is not shown a second time on its own.
    calls = page.locator(".tool-call")
    expect(calls.locator(".tool-name")).to_have_text(["bash", "bash", "bash"])
    expect(calls.nth(0).locator(".tool-arguments")).to_contain_text('"command": "python3 --version"')
    expect(calls.nth(0).locator(".tool-result")).to_contain_text("Python 3.11.7")
    expect(calls.nth(1).locator(".tool-result")).to_contain_text("README.md")
    expect(calls.nth(2).locator(".tool-result")).to_contain_text("No result yet.")
    expect(page.locator(".message-tool")).to_have_count(0)
    expect(page.locator(".open-turn")).to_have_text("Turn 3 is open: waiting for its turn/end.")

    assert (fact(page, "Events"), fact(page, "Open turn"), fact(page, "Forkable")) == ("27", "turn 3", "no")
    expect(page.locator(".live-state")).to_have_attribute("data-state", "live")
    page.screenshot(path=screenshots / "session.png", full_page=True)


def test_raw_events_come_a_page_at_a_time(
    tabs: Tabs, connect: Connect, shared_server: Server, screenshots: Path
) -> None:
    api = connect(shared_server)
    api.create("log")
    api.append("log", turns(28))  # 252 events
    page = tabs.open(shared_server.base, "#/s/log")
    expect(page.locator(".turn-end")).to_have_count(28)
    assert not [request for request in tabs.requests if "limit=100" in request.url], "the raw log waits to be asked"

    page.get_by_role("link", name="Events", exact=True).click()
    expect(page.locator(".events-caption")).to_have_text(f"Events #152{DASH}#251 of 252")
    expect(page.locator(".event-row")).to_have_count(100)
    page.get_by_role("link", name="First").click()
    expect(page.locator(".events-caption")).to_have_text(f"Events #0{DASH}#99 of 252")
    page.get_by_role("link", name="Next").click()
    expect(page.locator(".events-caption")).to_have_text(f"Events #100{DASH}#199 of 252")
    page.fill("#events-from", "17")
    page.get_by_role("button", name="Go").click()
    first = page.locator(".event-row").first
    expect(first.locator(".seq")).to_have_text("#17")
    expect(first.locator(".type")).to_have_text("turn/end")
    first.locator("summary").click()
    expect(first.locator(".event-json")).to_contain_text('"kind": "completed"')
    expect(first.get_by_role("button", name="Fork here")).to_be_visible()
    page.screenshot(path=screenshots / "events.png")


def test_events_from_another_client_arrive_live_and_a_reconnect_resumes(
    tabs: Tabs, connect: Connect, start_server: StartServer
) -> None:
    server = start_server()
    api = connect(server)
    api.create("live")
    opened, call_id = open_agent_turn(1, "Run the tests", "make test")
    api.append("live", opened)
    page = tabs.open(server.base, "#/s/live")
    badge = page.locator(".live-state")
    expect(badge).to_have_attribute("data-state", "live")
    expect(badge).to_have_text("Live")
    expect(page.locator(".tool-result")).to_have_text("No result yet.")

    api.append("live", close_agent_turn(1, call_id, "4 passed", "All four tests pass."))
    expect(page.locator(".tool-result")).to_contain_text("4 passed")
    expect(page.locator(".turn-end .reason")).to_have_text(["completed"])
    expect(page.locator(".message-assistant").last).to_contain_text("All four tests pass.")
    expect(page.locator(".open-turn")).to_be_hidden()
    expect(page.locator(".fact", has_text="Forkable").locator("dd")).to_have_text("yes")

    # The service goes away and comes back on the same port: the browser reconnects by itself, and resumes
    # after the last event it saw (Last-Event-ID), so nothing is shown twice.
    server.stop()
    expect(badge).to_have_attribute("data-state", "reconnecting")
    server.restart()
    expect(badge).to_have_attribute("data-state", "live")
    api.append("live", agent_turn(2, "And now?", "make lint", "clean", "Lint is clean."))
    expect(page.locator(".turn-end .reason")).to_have_text(["completed", "completed"])
    expect(page.locator(".fact", has_text="Events").locator("dd")).to_have_text("22")
    shown = page.locator(".conversation [data-seq]").evaluate_all("items => items.map(item => item.dataset.seq)")
    assert len(shown) == len(set(shown)), "no event is shown twice"
    streams = [request for request in tabs.requests if "/events/stream" in request.url]
    assert streams[-1].all_headers().get("last-event-id") == "10", "the reconnect resumed after seq 10"


def test_a_live_compaction_replaces_the_messages_it_summarizes(
    tabs: Tabs, connect: Connect, shared_server: Server
) -> None:
    api = connect(shared_server)
    seed_agent_session(api, "compacted", open_third=False)
    page = tabs.open(shared_server.base, "#/s/compacted")
    expect(page.locator(".live-state")).to_have_attribute("data-state", "live")
    expect(page.locator(".message")).to_have_count(6)

    # Turn 2's messages (seqs 12, 14, 16, 19) become one summary, as a replace surfaceOp does (spec 1.3).
    summary = user_message(
        "Summary: the files are README.md, app and tests.",
        surface_op={"op": "replace", "start": 12, "end": 19},
        sources=[12, 14, 16, 19],
    )
    api.append("compacted", [summary])
    expect(page.locator(".message")).to_have_count(4)  # turn 1 (its result inside its call) and the summary
    expect(page.locator(".message").last).to_contain_text("Summary: the files are")
    expect(page.locator(".message-user", has_text="List the files")).to_have_count(0)
    expect(page.locator(".turn-end .reason")).to_have_text(["completed", "interrupted"])


def test_fork_here_at_a_turn_opens_the_child(
    tabs: Tabs, connect: Connect, shared_server: Server, screenshots: Path
) -> None:
    api = connect(shared_server)
    seed_agent_session(api, "source")
    page = tabs.open(shared_server.base, "#/s/source")
    page.locator(".turn-end").first.get_by_role("button", name="Fork here").click()
    dialog = page.locator("#fork-dialog")
    expect(dialog).to_be_visible()
    expect(dialog.locator("#fork-where")).to_have_text("the end of turn 1 (seq 10)")
    page.fill("#fork-child-id", "source-at-1")
    page.screenshot(path=screenshots / "fork.png")
    dialog.get_by_role("button", name="Fork").click()

    expect(page).to_have_url(re.compile(r"#/s/source-at-1$"))
    expect(page.get_by_role("heading", level=1)).to_have_text("source-at-1")
    expect(page.locator(".parent-link")).to_have_text("source")
    expect(page.locator(".turn-end .reason")).to_have_text(["completed"])
    assert fact(page, "Events") == "11"
    child = api.session("source-at-1").json()
    assert (child["parentSession"], child["seedLength"]) == ("source", 11)

    # The header's button forks at the last turn/end (turn 3 is open); forklog picks the child's id.
    page.locator(".parent-link").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("source")
    expect(page.locator(".children")).to_contain_text("source-at-1")
    page.get_by_role("button", name="Fork…").click()
    expect(dialog.locator("#fork-where")).to_contain_text("seq 21")
    dialog.get_by_role("button", name="Fork").click()
    expect(page).to_have_url(re.compile(r"#/s/session-[0-9a-f-]+$"))
    expect(page.locator(".turn-end .reason")).to_have_text(["completed", "interrupted"])
    expect(page.locator(".ancestry")).to_contain_text("source")


def test_a_delete_asks_first(tabs: Tabs, connect: Connect, shared_server: Server) -> None:
    api = connect(shared_server)
    seed_agent_session(api, "doomed", open_third=False)
    assert api.client.post("/sessions/doomed/fork", json={"sessionId": "doomed-child"}).status_code == 201
    page = tabs.open(shared_server.base, "#/s/doomed")
    expect(page.locator(".children")).to_contain_text("doomed-child")
    page.get_by_role("button", name="Delete…").click()
    dialog = page.locator("#delete-dialog")
    expect(dialog).to_contain_text("Delete doomed?")
    expect(dialog).to_contain_text("Its child keeps its own log.")
    dialog.get_by_role("button", name="Cancel").click()
    expect(dialog).to_be_hidden()
    assert api.session("doomed").status_code == 200, "a cancelled delete deletes nothing"

    page.get_by_role("button", name="Delete…").click()
    dialog.get_by_role("button", name="Delete").click()
    expect(page).to_have_url(re.compile(r"#/$"))
    expect(page.locator("#notice")).to_contain_text("Deleted session doomed.")
    assert api.session("doomed").status_code == 404
    assert api.session("doomed-child").status_code == 200


def test_every_problem_shows_its_title_and_detail(
    tabs: Tabs, connect: Connect, shared_server: Server, screenshots: Path
) -> None:
    api = connect(shared_server)
    page = tabs.open(shared_server.base, "#/s/no-such-session")
    expect(page.locator(".problem-title")).to_have_text("Session not found")
    expect(page.locator(".problem-detail")).to_contain_text("no-such-session")
    expect(page.locator(".problem-code")).to_have_text("404 · SESSION_NOT_FOUND")

    api.create("taken")
    seed_agent_session(api, "origin")
    page.goto(f"{shared_server.base}/ui/#/s/origin")
    page.locator(".turn-end").first.get_by_role("button", name="Fork here").click()
    dialog = page.locator("#fork-dialog")
    page.fill("#fork-child-id", "taken")
    dialog.get_by_role("button", name="Fork").click()
    expect(dialog.locator(".problem-title")).to_have_text("Session already exists")
    expect(dialog.locator(".problem-detail")).to_contain_text("taken")
    page.fill("#fork-child-id", "not an id!")
    dialog.get_by_role("button", name="Fork").click()
    expect(dialog.locator(".problem-title")).to_have_text("Invalid request")
    expect(dialog.locator(".problem-errors")).to_contain_text("sessionId")
    page.screenshot(path=screenshots / "problem.png")
    expect(dialog).to_be_visible()  # the dialog stays for a correction
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    expect(page).to_have_url(re.compile(r"#/s/origin$"))


def test_every_action_is_reachable_by_keyboard(tabs: Tabs, connect: Connect, shared_server: Server) -> None:
    seed_agent_session(connect(shared_server), "keys-only")
    page = tabs.open(shared_server.base, "#/s/keys-only")
    expect(page.locator(".live-state")).to_have_attribute("data-state", "live")
    # The page puts focus on its heading (a screen reader starts there); Tab goes on from it, Shift+Tab back.
    expect(page.get_by_role("heading", level=1)).to_be_focused()
    forward = []
    for _ in range(60):
        page.keyboard.press("Tab")
        forward.append(page.evaluate("document.activeElement.textContent.trim()"))
    for label in ("Fork…", "Delete…", "Conversation", "Events", "Fork here"):
        assert label in forward, f"Tab reaches {label!r}"
    page.get_by_role("heading", level=1).focus()
    backward = []
    for _ in range(6):
        page.keyboard.press("Shift+Tab")
        backward.append(page.evaluate("document.activeElement.textContent.trim()"))
    assert {"Sessions", "API docs", "Skip to the content"} <= set(backward)

    page.locator(".turn-end button").first.focus()
    page.keyboard.press("Enter")
    expect(page.locator("#fork-dialog")).to_be_visible()
    expect(page.locator("#fork-child-id")).to_be_focused()
    page.keyboard.press("Escape")
    expect(page.locator("#fork-dialog")).to_be_hidden()


def test_a_phone_sized_window_fits_the_page(
    tabs: Tabs, connect: Connect, shared_server: Server, screenshots: Path
) -> None:
    seed_agent_session(connect(shared_server), "pocket")
    page = tabs.open(shared_server.base, "#/s/pocket", viewport=PHONE)
    expect(page.locator(".turn-end")).to_have_count(2)
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], "nothing runs off the side of a phone's screen"
    page.screenshot(path=screenshots / "phone-session.png", full_page=True)
    page.goto(f"{shared_server.base}/ui/#/")
    expect(page.locator("table.sessions tbody tr").first).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    page.screenshot(path=screenshots / "phone-list.png")
