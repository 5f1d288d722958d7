"""The session browser's sidebar (spec 12): titles or previews with their last activity, newest first by
order=updated one page at a time, a search with its snippet marked, and "Edit and fork" on a user message."""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import expect

from tests.ui.agent import agent_turn
from tests.ui.conftest import Connect, StartServer, Tabs

pytestmark = pytest.mark.e2e


def _title(text: str) -> dict[str, object]:
    return {"type": "session/title", "data": {"title": text, "messageSeqs": [1], "source": "model"}}


def test_the_list_shows_titles_and_pages_newest_first_by_last_activity(
    tabs: Tabs, connect: Connect, start_server: StartServer, screenshots: Path
) -> None:
    server = start_server()
    api = connect(server)
    for number in range(60):
        api.create(f"old-{number:02d}")
    api.create("named")
    api.append(
        "named",
        [
            *agent_turn(1, "How do I deploy to production?", "make deploy", "ok", "Run make deploy."),
            _title("Deploying forklog"),
        ],
    )
    api.create("asked")
    api.append("asked", agent_turn(1, "Why   is the\nbuild slow?", "make", "ok", "The cache is cold."))
    time.sleep(0.05)
    api.append("named", agent_turn(2, "And roll back?", "make rollback", "ok", "Run make rollback."))

    page = tabs.open(server.base, "#/?order=newest&limit=25")
    expect(page.locator("table.sessions tbody tr")).to_have_count(25)
    ids = page.locator("table.sessions tbody th a").all_inner_texts()
    assert ids[:3] == ["named", "asked", "old-59"], "the most recently active first"
    named = page.locator("tr[data-id='named']")
    expect(named.locator(".session-name")).to_have_text("Deploying forklog")
    expect(page.locator("tr[data-id='asked'] .session-name")).to_have_text("Why is the build slow?")
    expect(named.locator(".updated-cell")).not_to_have_text("")
    page.screenshot(path=screenshots / "sidebar-list.png")

    # One request per page, by order=updated with its cursor: the list never reads every page.
    lists = [urlsplit(r.url) for r in tabs.requests if urlsplit(r.url).path == "/sessions" and r.method == "GET"]
    assert len(lists) == 1 and parse_qs(lists[0].query)["order"] == ["updated"]
    page.get_by_role("button", name="Next").click()
    expect(page.locator("table.sessions tbody tr")).to_have_count(25)
    lists = [urlsplit(r.url) for r in tabs.requests if urlsplit(r.url).path == "/sessions" and r.method == "GET"]
    assert len(lists) == 2 and "cursor" in parse_qs(lists[1].query)


def test_a_search_shows_the_snippet_with_the_word_marked(
    tabs: Tabs, connect: Connect, start_server: StartServer, screenshots: Path
) -> None:
    server = start_server()
    api = connect(server)
    api.create("deploy")
    api.append("deploy", agent_turn(1, "Please deploy <b>the</b> service", "make deploy", "done", "Deployed."))
    api.create("other")
    api.append("other", agent_turn(1, "Tell me a joke", "echo", "ok", "No."))

    page = tabs.open(server.base)
    page.fill("#list-q", "deplo")
    page.get_by_role("button", name="Show").click()
    expect(page.locator("table.sessions tbody tr")).to_have_count(1)
    row = page.locator("tr[data-id='deploy']")
    expect(row.locator(".snippet mark")).to_have_text("deploy")
    expect(row.locator(".snippet")).to_contain_text("<b>the</b>")  # the text as text, never as HTML
    expect(row.locator(".snippet b")).to_have_count(0)
    page.screenshot(path=screenshots / "search.png")

    page.fill("#list-q", "nothing matches this")
    page.get_by_role("button", name="Show").click()
    expect(page.locator(".empty")).to_have_text("No session matches.")


def test_edit_and_fork_opens_the_child_with_the_edited_message(
    tabs: Tabs, connect: Connect, start_server: StartServer, screenshots: Path
) -> None:
    server = start_server()
    api = connect(server)
    api.create("talk")
    api.append(
        "talk",
        agent_turn(1, "Which Python?", "python3 --version", "3.11", "3.11 it is.")
        + agent_turn(2, "List the files", "ls", "README.md", "One file."),
    )

    page = tabs.open(server.base, "#/s/talk")
    users = page.locator(".message-user")
    expect(users).to_have_count(2)
    expect(users.nth(1).get_by_role("button", name="Edit and fork")).to_be_visible()
    users.nth(1).get_by_role("button", name="Edit and fork").click()
    expect(page.locator("#edit-text")).to_have_value("List the files")
    page.fill("#edit-text", "List the hidden files too")
    page.screenshot(path=screenshots / "edit.png")
    page.get_by_role("button", name="Fork with this message").click()

    heading = page.get_by_role("heading", level=1)
    expect(heading).not_to_have_text("talk")
    child_id = heading.inner_text()
    expect(page.locator(".message-user").last).to_contain_text("List the hidden files too")
    child = api.session(child_id).json()
    assert (child["parentSession"], child["seedLength"], child["openTurn"]) == ("talk", 11, 2)
    assert api.session("talk").json()["eventCount"] == 22  # the original stays
