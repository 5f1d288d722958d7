"""Read replicas through HTTP (spec 6): one forklog process writes through the primary, another reads from a hot
standby that applies each commit 300 ms late (FORKLOG_READ_DATABASE_URL). A client that appends through the first
and at once reads, lists, searches, long-polls and tails through the second never misses its own write; the reads
really run on the standby (its metrics say so); a standby lagging past FORKLOG_READ_LAG_MAX, or stopped, moves the
reads to the primary with no error."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import StartServer
from tests.e2e.server import Server
from tests.e2e.sse import Stream
from tests.support.postgres import find_server_bindir
from tests.support.replication import DelayedStandby

pytestmark = pytest.mark.e2e

APPLY_DELAY = 0.3  # seconds: the standby's recovery_min_apply_delay


@pytest.fixture(scope="module")
def replica() -> Iterator[DelayedStandby]:
    if find_server_bindir() is None:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl, pg_basebackup)")
    pair = DelayedStandby(delay=f"{int(APPLY_DELAY * 1000)}ms")
    try:
        yield pair.start()
    finally:
        pair.close()


def writer_and_reader(replica: DelayedStandby, start_server: StartServer, lag_max: str) -> tuple[Server, Server]:
    writer = start_server(None, "--database-url", replica.primary_url())
    reader = start_server(
        None,
        "--database-url",
        replica.primary_url(),
        "--read-database-url",
        replica.standby_url(),
        "--read-lag-max",
        lag_max,
    )
    return writer, reader


def message(turn: int, text: str) -> list[dict[str, Any]]:
    return [
        {"type": "turn/start", "data": {"turn": turn}},
        {
            "type": "user/message",
            "surfaceOp": "append",
            "data": {
                "id": f"u{turn}",
                "role": "user",
                "content": [{"type": "text", "text": text}],
                "source": {"kind": "user"},
            },
        },
        {"type": "turn/end", "data": {"turn": turn, "reason": {"kind": "completed"}}},
    ]


def served_by(server: Server) -> dict[str, float]:
    found: dict[str, float] = {"standby": 0.0, "primary": 0.0}
    for family in text_string_to_metric_families(server.get("/metrics").text):
        for sample in family.samples:
            if sample.name == "forklog_standby_reads_total":
                found[sample.labels["server"]] = sample.value
    return found


def append(server: Server, session: str, events: list[dict[str, Any]]) -> int:
    answer = server.post(f"/sessions/{session}/events", {"events": events})
    assert answer.status_code == 201, answer.text
    seq: int = answer.json()["events"][-1]["seq"]
    return seq


def test_a_client_never_misses_its_own_write_reading_through_a_delayed_standby(
    replica: DelayedStandby, start_server: StartServer
) -> None:
    writer, reader = writer_and_reader(replica, start_server, "5")
    before = served_by(reader)

    for number in range(3):
        session = f"mine-{number}"
        word = f"zebra{number}word"
        assert writer.post("/sessions", {"id": session}).status_code == 201
        assert reader.get(f"/sessions/{session}").status_code == 200
        last = append(writer, session, message(1, f"please deploy {word}"))
        got = reader.get(f"/sessions/{session}")
        assert got.status_code == 200 and got.json()["eventCount"] == last + 1, got.text
        events = reader.get(f"/sessions/{session}/events").json()["events"]
        assert [event["seq"] for event in events] == list(range(last + 1))
        history = reader.get(f"/sessions/{session}/history").json()
        assert history["messages"], history
        listed = reader.get("/sessions", order="updated", limit=1).json()["items"]
        assert [item["id"] for item in listed] == [session]
        found = reader.get("/sessions", q=word).json()["items"]
        assert [item["id"] for item in found] == [session], found
        lineage = reader.get(f"/sessions/{session}/lineage")
        assert lineage.status_code == 200, lineage.text

    after = served_by(reader)
    assert after["standby"] > before["standby"] + 3 * 6, after  # every read above ran on the standby
    assert after["primary"] == before["primary"], after


def test_a_share_made_or_revoked_through_one_process_is_read_so_at_once_through_the_standby(
    replica: DelayedStandby, start_server: StartServer
) -> None:
    writer, reader = writer_and_reader(replica, start_server, "5")
    assert writer.post("/sessions", {"id": "shared"}).status_code == 201
    last = append(writer, "shared", message(1, "look at this"))
    made = writer.post("/sessions/shared/shares", {"upTo": "head"})
    assert made.status_code == 201, made.text
    token, share_id = made.json()["token"], made.json()["id"]
    before = served_by(reader)

    shown = reader.get(f"/shared/{token}")
    assert shown.status_code == 200 and shown.json()["eventCount"] == last + 1, shown.text
    events = reader.get(f"/shared/{token}/events").json()["events"]
    assert [event["seq"] for event in events] == list(range(last + 1))
    assert reader.get(f"/shared/{token}/history").json()["messages"]
    assert served_by(reader)["standby"] >= before["standby"] + 3

    assert httpx.delete(f"{writer.base}/sessions/shared/shares/{share_id}", timeout=10.0).status_code == 204
    gone = reader.get(f"/shared/{token}")
    assert gone.status_code == 404 and gone.json()["code"] == "SHARE_NOT_FOUND", gone.text


def test_long_polls_and_tails_on_the_reader_get_the_writers_appends(
    replica: DelayedStandby, start_server: StartServer
) -> None:
    writer, reader = writer_and_reader(replica, start_server, "5")
    assert writer.post("/sessions", {"id": "tailed"}).status_code == 201
    first = append(writer, "tailed", message(1, "one"))

    # A long-poll waiting on the reader when the writer appends.
    answers: list[httpx.Response] = []
    poll = threading.Thread(
        target=lambda: answers.append(reader.get("/sessions/tailed/events", **{"from": first + 1, "waitMs": 8000}))
    )
    poll.start()
    time.sleep(0.5)
    second = append(writer, "tailed", message(2, "two"))
    poll.join(timeout=10)
    (answer,) = answers
    assert [event["seq"] for event in answer.json()["events"]] == list(range(first + 1, second + 1)), answer.text

    async def tail() -> list[int]:
        async with (
            httpx.AsyncClient(timeout=10.0) as client,
            client.stream("GET", f"{reader.base}/sessions/tailed/events/stream") as response,
        ):
            assert response.status_code == 200
            stream = Stream(response)
            seqs = [int(frame.id or -1) for frame in await stream.events(second + 1)]
            third = await asyncio.to_thread(append, writer, "tailed", message(3, "three"))
            seqs += [int(frame.id or -1) for frame in await stream.events(third - second, timeout=5.0)]
            return seqs

    seqs = asyncio.run(tail())
    assert seqs == list(range(len(seqs))) and len(seqs) == second + 1 + 3
    assert served_by(reader)["primary"] == 0


def test_a_standby_lagging_past_the_lag_allowed_answers_from_the_primary_in_about_that_time(
    replica: DelayedStandby, start_server: StartServer
) -> None:
    writer, reader = writer_and_reader(replica, start_server, "PT0.1S")
    assert writer.post("/sessions", {"id": "hurried"}).status_code == 201
    timings = []
    for turn in range(1, 6):
        last = append(writer, "hurried", message(turn, "quick"))
        began = time.monotonic()
        got = reader.get("/sessions/hurried")
        timings.append(time.monotonic() - began)
        assert got.status_code == 200 and got.json()["eventCount"] == last + 1
    assert all(seconds >= 0.1 for seconds in timings), timings  # the standby was waited for first
    assert sorted(timings)[len(timings) // 2] < APPLY_DELAY, timings  # and passed over: not waited out
    assert served_by(reader)["primary"] >= 5


def test_a_stopped_standby_moves_the_reads_to_the_primary_with_no_error(
    replica: DelayedStandby, start_server: StartServer
) -> None:
    writer, reader = writer_and_reader(replica, start_server, "1")
    assert writer.post("/sessions", {"id": "steady"}).status_code == 201
    assert reader.get("/sessions/steady").status_code == 200
    replica.standby.stop("immediate")
    try:
        for turn in range(1, 11):
            last = append(writer, "steady", message(turn, "on"))
            got = reader.get("/sessions/steady/events")
            assert got.status_code == 200, got.text
            assert got.json()["eventCount"] == last + 1
        assert served_by(reader)["primary"] >= 10
        warnings = [line for line in reader.output().splitlines() if "cannot serve reads" in line]
        assert len(warnings) == 1, warnings  # logged once, not once a read
    finally:
        replica.standby.start()
    deadline = time.monotonic() + 30
    standby_reads = served_by(reader)["standby"]
    while served_by(reader)["standby"] == standby_reads:
        assert time.monotonic() < deadline, "the standby never served reads again"
        assert reader.get("/sessions/steady").status_code == 200
        time.sleep(0.25)
