"""FORKLOG_INTERRUPT_AFTER (spec 17): a turn without an event for that long is interrupted by the service itself
within 10 s, as POST /sessions/{id}/interrupt would close it; a turn that goes on is left alone; on PostgreSQL two
replicas close an idle turn once."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.api.builders import as_seed, note, open_turn, turn
from tests.api.conftest import ClientFactory
from tests.api.helpers import append, create, events_of, get_session

AFTER_S = 2.0
WITHIN_S = 10.0
# 2100-01-01 in epoch ms: a seed's events may carry any time (spec 1.4); idleness counts by the server's clock.
YEAR_2100_MS = 4_102_444_800_000


def interrupted_turns(events: list[dict[str, Any]]) -> int:
    return sum(
        1 for event in events if event["type"] == "turn/end" and event["data"]["reason"]["kind"] == "interrupted"
    )


def wait_closed(client: TestClient, session_id: str, since: float, keep_busy: str | None = None) -> float:
    """Seconds from ``since`` until the session's turn is closed (fails after the setting and 10 s); ``keep_busy``
    names a session appended to meanwhile."""
    while get_session(client, session_id)["openTurn"] is not None:
        assert time.monotonic() - since < AFTER_S + WITHIN_S, f"the idle turn of {session_id} was not interrupted"
        if keep_busy is not None:
            append(client, keep_busy, [note("still here")])
        time.sleep(0.25)
    return time.monotonic() - since


def test_an_idle_turn_is_interrupted_and_a_busy_one_kept(make_client: ClientFactory) -> None:
    client = make_client(interrupt_after="PT2S")
    create(client, id="idle")
    log = append(client, "idle", [*turn(1), *open_turn(2)])["events"]
    since = time.monotonic()
    create(client, id="busy")
    append(client, "busy", open_turn(1))
    create(client, id="done", seed=as_seed(turn(1)))
    # A seed timed in 2100 that ends inside a turn: idle by the server's clock all the same.
    future = as_seed(open_turn(1))
    for event in future:
        event["time"] = YEAR_2100_MS
    create(client, id="future", seed=future)

    waited = wait_closed(client, "idle", since, keep_busy="busy")

    assert waited >= AFTER_S - 0.1  # not before it was idle that long
    events = events_of(client, "idle")
    assert events[: len(log)] == log
    assert [event["type"] for event in events[len(log) :]] == ["step/end", "turn/end"]
    assert events[-1]["data"] == {"turn": 2, "reason": {"kind": "interrupted"}}
    assert get_session(client, "busy")["openTurn"] == 1
    assert get_session(client, "done")["eventCount"] == len(turn(1))
    wait_closed(client, "future", since)


def test_without_the_setting_an_idle_turn_stays_open(make_client: ClientFactory) -> None:
    client = make_client()
    create(client, id="idle")
    append(client, "idle", open_turn(1))
    assert client.app.state.service.idle_turns is None  # type: ignore[attr-defined]
    time.sleep(1.5)
    assert get_session(client, "idle")["openTurn"] == 1


def test_a_bad_duration_stops_the_start(make_client: ClientFactory) -> None:
    with pytest.raises(ValueError, match="interrupt_after"):
        make_client(interrupt_after="two seconds")


def test_two_replicas_close_an_idle_turn_once(
    make_client: ClientFactory, store: str, caplog: pytest.LogCaptureFixture
) -> None:
    if store != "postgres":
        pytest.skip("replicas share a PostgreSQL database")
    caplog.set_level(logging.DEBUG, logger="forklog")
    one = make_client(interrupt_after="PT2S")
    two = make_client(interrupt_after="PT2S")
    for number in range(6):
        create(one, id=f"s{number}")
        append(one, f"s{number}", [*turn(1), *open_turn(2)])
    since = time.monotonic()

    # Both replicas sweep on their own, and once more at the same instant (the race the expectedSeq settles).
    services = [client.app.state.service for client in (one, two)]  # type: ignore[attr-defined]
    start = threading.Barrier(2)
    closed: list[int] = []

    def sweep(client: TestClient, service: Any) -> None:
        start.wait()
        closed.append(client.portal.call(service.idle_turns.sweep))  # type: ignore[union-attr]

    time.sleep(AFTER_S + 0.1)
    threads = [threading.Thread(target=sweep, args=pair) for pair in zip((one, two), services, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for number in range(6):
        wait_closed(two, f"s{number}", since)

    for number in range(6):
        events = events_of(two, f"s{number}")
        assert interrupted_turns(events) == 1
        assert len(events) == len(turn(1)) + len(open_turn(2)) + 2
    assert sum(service.idle_turns.interrupted_total for service in services) == 6
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING]
