"""Sharing in the session browser (spec 18; issue 41 items 2 and 6): "Share…" with the spec's choices, the link shown
once with a copy button, the session's shares with "Revoke"; and the shared page, ``/ui/shared/{token}``: read-only,
every text as text, no referrer, a strict policy, one "not found" for every dead token, and no token in the log."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.e2e.server import Server
from tests.e2e.test_access import make_key
from tests.events import question_and_answer
from tests.ui.agent import agent_turn
from tests.ui.api import Api
from tests.ui.conftest import PHONE, Connect, StartServer, Tabs

pytestmark = pytest.mark.e2e

# Text a page would run or link if it rendered messages as HTML or markdown.
HOSTILE_QUESTION = '<script>window.pwned = "script"</script> see [the docs](https://evil.example/phish) **now**'
HOSTILE_ANSWER = '<img src="x" onerror="window.pwned = \'img\'"> and <a href="https://evil.example/">a link</a>'
POLICY = re.compile(r"default-src 'none'; script-src 'self';")


def make_share(api: Api, session_id: str, **body: Any) -> dict[str, Any]:
    answer = api.client.post(f"/sessions/{session_id}/shares", json=body)
    assert answer.status_code == 201, answer.text
    made: dict[str, Any] = answer.json()
    return made


def seed_shared_session(api: Api, session_id: str) -> None:
    api.create(session_id, meta={"cwd": "/home/someone/secret-project"})
    events = agent_turn(1, "Where does the service read its key?", "cat .env", "API_KEY=sk-live-123", "From .env.")
    events += agent_turn(2, HOSTILE_QUESTION, "ls", "README.md", HOSTILE_ANSWER)
    api.append(session_id, events)


def open_share_dialog(page: Page) -> Any:
    page.get_by_role("button", name="Share…").click()
    dialog = page.locator("#share-dialog")
    expect(dialog).to_be_visible()
    return dialog


def test_share_makes_a_link_shown_once_copies_it_and_revokes_it(
    tabs: Tabs, connect: Connect, start_server: StartServer, screenshots: Path
) -> None:
    server = start_server()
    api = connect(server)
    seed_shared_session(api, "talk")

    page = tabs.open(server.base, "#/s/talk")
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server.base)
    dialog = open_share_dialog(page)
    expect(dialog.locator(".share-list")).to_have_text("No shares.")
    expect(dialog.get_by_label("the last turn/end now")).to_be_checked()
    expect(dialog.get_by_text("(seq 21)")).to_be_visible()

    # Up to the end of turn 1 (seq 10), for 7 days, without reasoning and tool content.
    dialog.locator("#share-turn").select_option("10")
    expect(dialog.locator("input[value='turn']")).to_be_checked()
    dialog.locator("#share-expires").select_option("P7D")
    dialog.get_by_label("Reasoning").check()
    dialog.get_by_label("Tool calls and results").check()
    dialog.get_by_role("button", name="Make the link").click()
    link = dialog.locator("#share-link")
    expect(link).to_have_value(re.compile(rf"^{re.escape(server.base)}/ui/shared/[A-Za-z0-9_-]{{22,}}$"))
    url = link.input_value()
    expect(dialog.locator(".share-list li.share")).to_have_count(1)
    expect(dialog.locator(".share-list")).to_contain_text("up to seq 10")
    expect(dialog.locator(".share-list")).to_contain_text("hides reasoning, tools")
    dialog.get_by_role("button", name="Copy").click()
    expect(dialog.locator(".copy-state")).to_have_text("Copied.")
    assert page.evaluate("() => navigator.clipboard.readText()") == url
    page.screenshot(path=screenshots / "share-dialog.png")

    [listed] = api.client.get("/sessions/talk/shares").json()["items"]
    assert listed["upTo"] == 10 and sorted(listed["redact"]) == ["reasoning", "tools"]
    token = url.rsplit("/", 1)[1]
    assert token not in str(listed), "the list never holds the token"
    assert httpx.get(f"{server.base}/shared/{token}").status_code == 200

    # The link is shown once: closed and opened again, the dialog has the list and no link.
    dialog.get_by_role("button", name="Close").click()
    expect(dialog).to_be_hidden()
    dialog = open_share_dialog(page)
    expect(dialog.locator(".share-made")).to_be_hidden()
    expect(dialog.locator("#share-link")).to_have_value("")
    assert token not in page.content()

    # A live share as well.
    dialog.get_by_label("live: everything, as the session grows").check()
    dialog.get_by_role("button", name="Make the link").click()
    expect(dialog.locator(".share-list li.share")).to_have_count(2)
    expect(dialog.locator(".share-list")).to_contain_text("up to live (follows the session)")

    dialog.get_by_role("button", name=f"Revoke {listed['id']}").click()
    expect(dialog.locator(".share-list li.share")).to_have_count(1)
    assert httpx.get(f"{server.base}/shared/{token}").status_code == 404
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()


def test_share_is_offered_only_to_a_key_that_may_share(
    tabs: Tabs, connect: Connect, start_server: StartServer, tmp_path: Path
) -> None:
    keys = tmp_path / "keys.jsonl"
    writer = make_key(keys, "acme", "read", "write", key_id="writer")
    sharer = make_key(keys, "acme", "read", "share", key_id="sharer")
    server = start_server("--keys-file", str(keys))
    connect(server, writer).create("guarded")

    for key, offered in ((writer, False), (sharer, True)):
        page = tabs.open(server.base, "#/s/guarded", init_script=f"sessionStorage.setItem('forklog.key', {key!r})")
        with page.expect_response(lambda response: response.url.endswith("/sessions/guarded/shares")) as answered:
            expect(page.get_by_role("heading", level=1)).to_have_text("guarded")
        assert answered.value.status == (200 if offered else 403)
        expect(page.locator(".lineage-tree")).to_be_visible()
        share = page.get_by_role("button", name="Share…", include_hidden=True)
        expect(share).to_have_attribute("data-offered", "true" if offered else "false")
        if offered:
            expect(share).to_be_visible()
        else:
            expect(share).to_be_hidden()

    # A refusal stays in the dialog, with its title and detail: no turn has ended, so "the last turn/end" is none.
    dialog = open_share_dialog(page)
    expect(dialog.get_by_text("(no turn has ended yet)")).to_be_visible()
    dialog.get_by_role("button", name="Make the link").click()
    expect(dialog.locator(".dialog-problem .problem-code")).to_have_text("409 · NOT_AT_TURN_BOUNDARY")
    expect(dialog.locator(".share-made")).to_be_hidden()
    expect(dialog.locator(".share-list")).to_have_text("No shares.")


def shared_page(tabs: Tabs, server: Server, token: str, **options: Any) -> Page:
    return tabs.open(server.base, "", path=f"/ui/shared/{token}", **options)


def test_the_shared_page_shows_the_conversation_as_text_read_only_and_keeps_the_token_out_of_the_log(
    tabs: Tabs, connect: Connect, start_server: StartServer, screenshots: Path
) -> None:
    server = start_server()
    api = connect(server)
    seed_shared_session(api, "talk")
    token = make_share(api, "talk", upTo="head", redact=["tools", "cwd"])["token"]

    answer = httpx.get(f"{server.base}/ui/shared/{token}")
    assert answer.status_code == 200
    assert answer.headers["referrer-policy"] == "no-referrer"
    assert POLICY.match(answer.headers["content-security-policy"])
    assert "'unsafe-inline'" not in answer.headers["content-security-policy"]
    assert "<script>" not in answer.text and 'type="module" src="/ui/js/shared_page.js"' in answer.text

    page = shared_page(tabs, server, token)
    expect(page.get_by_role("heading", level=1)).to_have_text("Where does the service read its key?")
    expect(page.locator(".turn-end .reason")).to_have_text(["completed", "completed"])
    expect(page.locator(".message-user .text")).to_have_text(["Where does the service read its key?", HOSTILE_QUESTION])
    expect(page.locator(".message-assistant > .text")).to_have_text(["From .env.", HOSTILE_ANSWER])
    main = page.locator("main")
    assert main.locator("script, img, a[href^='http']").count() == 0, "markup and markdown stay text"
    assert page.evaluate("() => window.pwned") is None
    # Read-only: no fork, no edit, no delete, no link into the owner's browser.
    for name in ("Fork here", "Edit and fork", "Share…", "Delete…"):
        expect(page.get_by_role("button", name=name)).to_have_count(0)
    assert main.locator("a").count() == 0
    # Redacted as shared: the tool output and the cwd never reach the page.
    expect(page.locator(".tool-arguments").first).to_have_text("[redacted]")
    assert "sk-live-123" not in page.content() and "secret-project" not in page.content()
    page.screenshot(path=screenshots / "shared.png", full_page=True)

    # No request the page made sent a Referer (the token is in the page's URL), nor a key.
    made = [request for request in tabs.requests if request.url.startswith(server.base)]
    assert {request.url.split("?")[0] for request in made} >= {
        f"{server.base}/ui/shared/{token}",
        f"{server.base}/shared/{token}",
        f"{server.base}/shared/{token}/history",
        f"{server.base}/shared/{token}/events",
    }
    for request in made:
        sent = request.all_headers()
        assert not sent.get("referer"), f"{request.url} sent a Referer"
        assert "authorization" not in sent, request.url

    phone = shared_page(tabs, server, token, viewport=PHONE)
    expect(phone.locator(".message-user").first).to_be_visible()
    phone.screenshot(path=screenshots / "phone-shared.png")

    server.stop()
    log = server.output()
    assert '"path":"/ui/shared/…"' in log and '"path":"/shared/…/history"' in log
    assert token not in log and token[:12] not in log


def test_every_dead_token_shows_the_same_plain_not_found_page(
    tabs: Tabs, connect: Connect, start_server: StartServer
) -> None:
    server = start_server()
    api = connect(server)
    api.create("gone")
    api.append("gone", question_and_answer("Hello", "Hi.", 1))
    api.create("kept")
    api.append("kept", question_and_answer("Hello", "Hi.", 1))
    revoked = make_share(api, "kept")
    assert api.client.delete(f"/sessions/kept/shares/{revoked['id']}").status_code == 204
    deleted = make_share(api, "gone")["token"]
    assert api.client.delete("/sessions/gone").status_code == 204
    expired = make_share(api, "kept", expiresIn="PT1S")["token"]

    time.sleep(1.2)  # the last one lasted one second

    bodies = set()
    for token in (revoked["token"], deleted, expired, "A" * 43, "not a token!"):
        answer = httpx.get(f"{server.base}/ui/shared/{quote(token)}")
        assert answer.status_code == 404
        assert answer.headers["referrer-policy"] == "no-referrer"
        assert answer.headers["content-type"].startswith("text/html")
        bodies.add(answer.text)
    assert len(bodies) == 1, "one page for every kind of dead token"

    page = shared_page(tabs, server, revoked["token"])
    expect(page.get_by_role("heading", level=1)).to_have_text("Not found")
    expect(page.locator(".share-missing")).to_have_text("This link leads to no shared conversation.")


def test_a_live_share_follows_the_session_and_ends_when_revoked(
    tabs: Tabs, connect: Connect, start_server: StartServer
) -> None:
    server = start_server()
    api = connect(server)
    api.create("growing")
    api.append("growing", question_and_answer("First question", "First answer.", 1))
    made = make_share(api, "growing", upTo="live")

    page = shared_page(tabs, server, made["token"])
    expect(page.locator(".live-state")).to_have_attribute("data-state", "live")
    api.append("growing", question_and_answer("Second question", "Second answer.", 2))
    expect(page.locator(".message-user .text")).to_have_text(["First question", "Second question"])
    expect(page.locator(".turn-end .reason")).to_have_text(["completed", "completed"])

    assert api.client.delete(f"/sessions/growing/shares/{made['id']}").status_code == 204
    expect(page.get_by_role("heading", level=1)).to_have_text("Not found")
