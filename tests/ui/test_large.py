"""A session of 100,000 events opens without freezing the tab: the page reads the log in pages, renders a window
of the conversation, and never blocks its main thread for long."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.ui.agent import AGENT_TURN_LENGTH, agent_turns
from tests.ui.conftest import Connect, StartServer, Tabs

pytestmark = pytest.mark.e2e

DASH = "\u2013"  # the page writes ranges with an en dash

EVENTS = 100_000
LONGEST_TASK_MS = 1_500  # a tab blocked longer than this feels frozen
WATCH_LONG_TASKS = """
window.longTasks = [];
new PerformanceObserver((list) => {
  for (const entry of list.getEntries()) window.longTasks.push(entry.duration);
}).observe({ type: "longtask", buffered: true });
"""


@pytest.mark.alone  # the page's longest task is its CPU time: another worker's load would stretch it
def test_a_100k_event_session_opens_without_freezing(tabs: Tabs, connect: Connect, start_server: StartServer) -> None:
    server = start_server()
    api = connect(server)
    api.create("huge")
    turns = -(-EVENTS // AGENT_TURN_LENGTH)
    api.append("huge", agent_turns(turns))
    count = turns * AGENT_TURN_LENGTH

    page = tabs.open(server.base, "#/s/huge", init_script=WATCH_LONG_TASKS)
    expect(page.locator(".live-state")).to_have_attribute("data-state", "live", timeout=60_000)
    expect(page.locator(".message-user").last).to_contain_text(f"question {turns}")
    rendered = page.locator(".conversation > li").count()
    assert rendered <= 150, "only a window of the conversation is in the page"
    expect(page.locator(".window-summary")).to_contain_text(f"of {turns * 5:,}")
    page.get_by_role("button", name="Show 150 earlier").click()
    expect(page.locator(".conversation > li")).to_have_count(300)

    page.get_by_role("link", name="Events", exact=True).click()
    expect(page.locator(".events-caption")).to_have_text(f"Events #{count - 100}{DASH}#{count - 1} of {count:,}")
    longest = max(page.evaluate("window.longTasks"), default=0)
    assert longest < LONGEST_TASK_MS, f"the main thread was blocked for {longest:.0f} ms"
