"""The Python client (spec 15) against a real server, directly and through a proxy that loses connections.

Every change a call makes is counted on the server itself (past the proxy): a call that returned took effect
exactly once, whatever the proxy lost; a tail delivers every event once and in order and ends with its session.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from typing import Any
from urllib.parse import parse_qs

import pytest
import zstandard
from forklog_client import (
    CORE_EVENT_TYPES,
    ConnectionError,
    Event,
    Forklog,
    ForklogError,
    InvalidEventError,
    NotAtTurnBoundaryError,
    RateLimitedError,
    SeqConflictError,
    Session,
    SessionAlreadyExistsError,
    SessionNotFoundError,
    StorageUnavailableError,
)

from app.domain.event_shapes import CORE_TYPES
from tests.clients.proxy import Fault, FaultProxy
from tests.clients.turns import exists, note, session_ids, stored_events, turn
from tests.e2e.server import Server

pytestmark = pytest.mark.e2e

APPEND = r"^/sessions/[^/]+/events$"
STREAM = r"/events/stream$"


def client_of(base: str, **options: Any) -> Forklog:
    return Forklog(base, timeout=10.0, **options)


def test_the_readme_walk(server: Server) -> None:
    with client_of(server.base) as client:
        created = client.sessions.create(id="py-walk", meta={"cwd": "/work"})
        appended = client.sessions.append("py-walk", turn(1))
        child = client.sessions.fork("py-walk", session_id="py-walk-child")
        history = client.sessions.history("py-walk-child")
        client.sessions.append("py-walk", [{"type": "turn/start", "data": {"turn": 2}}])
        with pytest.raises(NotAtTurnBoundaryError) as refused:
            client.sessions.fork("py-walk")
        at_five = client.sessions.fork("py-walk", at_seq=5)
        lineage = client.sessions.lineage("py-walk-child")
        snapshot = client.sessions.snapshot("py-walk", at_seq=5)
        copy = client.sessions.create(id="py-walk-copy", seed=snapshot.seed, meta=snapshot.meta)

    assert (created.id, created.cwd, created.event_count, created.forkable) == ("py-walk", "/work", 0, True)
    assert [event.seq for event in appended.events] == [0, 1, 2, 3, 4, 5]
    assert appended.session.last_turn_end_seq == 5
    assert (child.parent_session, child.seed_length, child.event_count) == ("py-walk", 6, 6)
    assert [message.role for message in history.messages] == ["user", "assistant"]
    assert history.messages[1].content[0]["text"] == "Answer 1"
    assert history.event_count == 6
    error = refused.value
    assert (error.status, error.code) == (409, "NOT_AT_TURN_BOUNDARY")
    assert (error.problem["lastEventType"], error.problem["openTurn"], error.problem["lastTurnEndSeq"]) == (
        "turn/start",
        2,
        5,
    )
    assert "turn boundary" in error.detail
    assert at_five.seed_length == 6
    assert [ancestor.id for ancestor in lineage.ancestors] == ["py-walk"]
    assert lineage.missing_ancestor is None
    assert (snapshot.source.id, len(snapshot.seed), snapshot.meta["seedLength"]) == ("py-walk", 6, 6)
    assert (copy.parent_session, copy.event_count) == ("py-walk", 6)


def test_problems_raise_their_code_s_class_with_the_whole_body(server: Server) -> None:
    with client_of(server.base) as client:
        client.sessions.create(id="py-errors")
        with pytest.raises(SessionAlreadyExistsError):
            client.sessions.create(id="py-errors")
        with pytest.raises(SeqConflictError) as conflict:
            client.sessions.append("py-errors", [note(1)], expected_seq=3)
        with pytest.raises(InvalidEventError) as invalid:
            client.sessions.append("py-errors", [note(1), {"type": "turn/end", "data": {}}])
        with pytest.raises(SessionNotFoundError) as missing:
            client.sessions.get("py-no-such")

    assert conflict.value.problem["currentSeq"] == 0
    assert (invalid.value.status, invalid.value.problem["index"]) == (422, 1)
    assert (missing.value.status, missing.value.code, missing.value.problem["instance"]) == (
        404,
        "SESSION_NOT_FOUND",
        "/sessions/py-no-such",
    )
    assert isinstance(missing.value, ForklogError)


def test_models_keep_members_they_do_not_know() -> None:
    session = Session({"id": "s", "eventCount": 3, "someNewMember": {"a": 1}})

    assert session.event_count == 3
    assert session["someNewMember"] == {"a": 1}
    assert session.some_new_member == {"a": 1}  # type: ignore[attr-defined]  # known only at run time
    assert session.to_dict() == {"id": "s", "eventCount": 3, "someNewMember": {"a": 1}}
    assert session.title is None


def test_an_event_is_told_core_or_other_by_the_server_s_vocabulary() -> None:
    core = Event({"seq": 0, "time": 1, "type": "turn/start", "data": {"turn": 1}})
    other = Event({"seq": 1, "time": 2, "type": "session/title", "data": {"title": "t"}})

    assert {kind.type for kind in CORE_TYPES} == CORE_EVENT_TYPES
    assert (core.is_core, other.is_core) == (True, False)


# -- retries: each change exactly once ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["before_request", "after_answer"])
def test_a_lost_create_append_or_fork_is_applied_exactly_once(server: Server, proxy: FaultProxy, kind: str) -> None:
    prefix = f"py-once-{kind}"
    proxy.plan(
        Fault(kind, r"^/sessions$", "POST"),
        Fault(kind, APPEND, "POST"),
        Fault(kind, r"/fork$", "POST"),
    )
    with client_of(proxy.base) as client:
        created = client.sessions.create(id=prefix)
        appended = client.sessions.append(prefix, turn(1))
        child = client.sessions.fork(prefix, session_id=f"{prefix}-child")
        unnamed = client.sessions.create()  # the server names it: a retry must not make a second one

    assert proxy.faults_met() == [kind] * 3
    assert created.id == prefix and appended.session.event_count == 6 and child.seed_length == 6
    assert [event["seq"] for event in stored_events(server, prefix)] == [0, 1, 2, 3, 4, 5]
    assert sorted(session_ids(server, prefix)) == [prefix, f"{prefix}-child"]
    assert exists(server, unnamed.id)
    keys = [seen.idempotency_key for seen in proxy.log if seen.method == "POST"]
    assert keys[0] == keys[1] and keys[2] == keys[3] and keys[4] == keys[5]  # each retry sent its call's key
    assert len({keys[0], keys[2], keys[4], keys[6]}) == 4  # and each call had its own


def test_a_call_that_ran_out_of_retries_may_be_called_again_with_its_key(server: Server, proxy: FaultProxy) -> None:
    with client_of(server.base) as direct:
        direct.sessions.create(id="py-again")
    proxy.plan(Fault("after_answer", APPEND, "POST", times=3))

    with client_of(proxy.base, max_retries=2) as client:
        with pytest.raises(ConnectionError):
            client.sessions.append("py-again", [note(1)], idempotency_key="py-note-1")
        again = client.sessions.append("py-again", [note(1)], idempotency_key="py-note-1")

    assert [event.seq for event in again.events] == [0]
    assert len(stored_events(server, "py-again")) == 1


def test_a_delete_whose_answer_was_lost_returns_normally(server: Server, proxy: FaultProxy) -> None:
    with client_of(server.base) as direct:
        direct.sessions.create(id="py-delete")
    proxy.plan(Fault("after_answer", r"^/sessions/py-delete$", "DELETE"))

    with client_of(proxy.base) as client:
        client.sessions.delete("py-delete")
        with pytest.raises(SessionNotFoundError):
            client.sessions.delete("py-delete")  # no answer lost: a missing session is an error

    assert not exists(server, "py-delete")
    assert proxy.faults_met() == ["after_answer"]


def test_retry_after_is_waited_for_and_other_problems_are_not_retried(server: Server, proxy: FaultProxy) -> None:
    with client_of(server.base) as direct:
        direct.sessions.create(id="py-wait")
    limited = {"code": "RATE_LIMITED", "status": 429, "detail": "slow down", "retryAfterMs": 1000}
    proxy.plan(Fault("answer", APPEND, "POST", status=429, headers={"Retry-After": "1"}, problem=limited))

    with client_of(proxy.base) as client:
        started = time.monotonic()
        client.sessions.append("py-wait", [note(1)])
        waited = time.monotonic() - started
    proxy.plan(Fault("answer", APPEND, "POST", status=429, headers={"Retry-After": "1"}, problem=limited))
    with client_of(proxy.base, max_retries=0) as client, pytest.raises(RateLimitedError) as refused:
        client.sessions.append("py-wait", [note(2)])

    assert 1.0 <= waited < 10.0
    assert refused.value.problem["retryAfterMs"] == 1000
    assert [event["seq"] for event in stored_events(server, "py-wait")] == [0]


@pytest.mark.parametrize(
    ("status", "code"),
    [(503, "NOT_READY"), (408, "REQUEST_TIMEOUT"), (502, None), (409, "IDEMPOTENCY_KEY_IN_PROGRESS")],
)
def test_answers_that_ask_for_a_retry_are_retried_with_the_same_key(
    server: Server, proxy: FaultProxy, status: int, code: str | None
) -> None:
    session_id = f"py-retried-{status}"
    with client_of(server.base) as direct:
        direct.sessions.create(id=session_id)
    proxy.plan(Fault("answer", APPEND, "POST", status=status, problem={"code": code, "status": status}))

    with client_of(proxy.base) as client:
        appended = client.sessions.append(session_id, [note(1)])

    assert [event.seq for event in appended.events] == [0]
    assert len(stored_events(server, session_id)) == 1
    assert [seen.fault for seen in proxy.log] == ["answer", ""]
    assert proxy.log[0].idempotency_key == proxy.log[1].idempotency_key


def test_timeout_bounds_each_attempt_and_a_timed_out_attempt_is_retried(server: Server, proxy: FaultProxy) -> None:
    with client_of(server.base) as direct:
        direct.sessions.create(id="py-stalled")
    proxy.plan(Fault("stall", APPEND, "POST", seconds=5.0), Fault("stall", r"^/sessions/py-stalled$", "GET"))

    with Forklog(proxy.base, timeout=0.5) as client:
        started = time.monotonic()
        appended = client.sessions.append("py-stalled", [note(1)])
        session = client.sessions.get("py-stalled")
        took = time.monotonic() - started

    assert [event.seq for event in appended.events] == [0] and session.event_count == 1
    assert proxy.faults_met() == ["stall", "stall"]
    assert took < 4.0  # each stalled attempt gave up after its own 0.5 s, not after the proxy's 5 s


def test_another_4xx_is_not_retried(server: Server, proxy: FaultProxy) -> None:
    with client_of(server.base) as direct:
        direct.sessions.create(id="py-not-retried")
    proxy.plan(Fault("answer", APPEND, "POST", status=409, problem={"code": "SEQ_CONFLICT", "currentSeq": 0}))

    with client_of(proxy.base) as client, pytest.raises(SeqConflictError):
        client.sessions.append("py-not-retried", [note(1)])

    assert len(proxy.log) == 1
    assert stored_events(server, "py-not-retried") == []


def test_503_is_retried_and_raises_its_problem_when_it_lasts(server: Server, proxy: FaultProxy) -> None:
    with client_of(server.base) as direct:
        direct.sessions.create(id="py-503")
    proxy.plan(Fault("answer", r"^/sessions/py-503$", "GET", times=1))

    with client_of(proxy.base, max_retries=1) as client:
        assert client.sessions.get("py-503").id == "py-503"
        proxy.plan(Fault("answer", r"^/sessions/py-503$", "GET", times=2))
        with pytest.raises(StorageUnavailableError):
            client.sessions.get("py-503")

    assert proxy.faults_met() == ["answer"] * 3


# -- pages -------------------------------------------------------------------------------------------------------------


def test_list_and_events_follow_every_page_across_lost_answers(server: Server, proxy: FaultProxy) -> None:
    with client_of(server.base) as direct:
        direct.sessions.create(id="py-pages")
        direct.sessions.append("py-pages", turn(1) + turn(2))
        children = [direct.sessions.fork("py-pages", session_id=f"py-pages-{n}").id for n in range(7)]
    proxy.plan(
        Fault("after_answer", r"^/sessions$", "GET", skip=1),
        Fault("before_request", APPEND.replace("$", ""), "GET", skip=1),
    )

    with client_of(proxy.base) as client:
        listed = [session.id for session in client.sessions.list(parent="py-pages", page_size=3)]
        events = [event.seq for event in client.sessions.events("py-pages", page_size=5)]
        later = [event.seq for event in client.sessions.events("py-pages", from_seq=9, page_size=2)]

    assert listed == children
    assert events == list(range(12))
    assert later == [9, 10, 11]
    assert sorted(proxy.faults_met()) == ["after_answer", "before_request"]


def test_the_newer_list_and_fork_parameters_are_sent_by_their_wire_names(server: Server, proxy: FaultProxy) -> None:
    with client_of(server.base) as direct:
        direct.sessions.create(id="py-newer")
        direct.sessions.append("py-newer", turn(1))
    filters = {"order": "updated", "direction": "desc", "q": "hello", "cwd": "/w", "origin": "subagent"}
    edited = [{"type": "turn/start", "data": {"turn": 1}}]

    # A server before spec 12 may ignore or refuse them: what matters here is what it is sent.
    with client_of(proxy.base) as client:
        with contextlib.suppress(ForklogError):
            list(
                client.sessions.list(
                    order="updated", direction="desc", q="hello", cwd="/w", origin="subagent", agent_preset="p"
                )
            )
        with contextlib.suppress(ForklogError):
            client.sessions.fork("py-newer", at_turn=0, events=edited)
        with contextlib.suppress(ForklogError):
            client.sessions.fork("py-newer", at_message_id="a1")

    listed, at_turn, at_message = proxy.log[0], proxy.log[1], proxy.log[2]
    assert parse_qs(listed.query) == {
        **{name: [value] for name, value in filters.items()},
        "agentPreset": ["p"],
        "limit": ["100"],
    }
    assert json.loads(at_turn.body) == {"atTurn": 0, "events": edited}
    assert json.loads(at_message.body) == {"atMessageId": "a1"}


# -- the tail ----------------------------------------------------------------------------------------------------------


def append_slowly(base: str, session_id: str, count: int, pause: float = 0.05) -> threading.Thread:
    def run() -> None:
        with client_of(base) as writer:
            for n in range(count):
                writer.sessions.append(session_id, [note(n)])
                time.sleep(pause)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_a_tail_sees_every_event_once_in_order_across_drops_and_ends_with_its_session(
    server: Server, proxy: FaultProxy
) -> None:
    with client_of(server.base) as direct:
        direct.sessions.create(id="py-tail")
        direct.sessions.append("py-tail", [note(n) for n in range(5)])
    proxy.plan(
        Fault("mid_stream", STREAM, frames=3),
        Fault("end_stream", STREAM, frames=4),
        Fault("before_request", STREAM),
        Fault("mid_stream", STREAM, frames=0),
        Fault("mid_stream", STREAM, frames=6),
    )
    writer = append_slowly(server.base, "py-tail", 25)
    seqs: list[int] = []

    with client_of(proxy.base) as client:
        for event in client.sessions.tail("py-tail"):
            seqs.append(event.seq)
            if event.seq == 29:
                writer.join()
                with client_of(server.base) as direct:
                    direct.sessions.delete("py-tail")

    assert seqs == list(range(30))
    assert proxy.pending() == []
    resumed = [seen.last_event_id for seen in proxy.log if seen.path.endswith("/stream")]
    assert resumed[:3] == [None, "2", "6"]


def test_a_tail_from_a_seq_and_a_session_deleted_and_made_again_while_it_was_away(
    server: Server, proxy: FaultProxy
) -> None:
    direct = client_of(server.base)
    direct.sessions.create(id="py-again-tail")
    direct.sessions.append("py-again-tail", [note(n) for n in range(6)])

    def make_it_again() -> None:
        direct.sessions.delete("py-again-tail")
        direct.sessions.create(id="py-again-tail")
        direct.sessions.append("py-again-tail", [note(n) for n in range(10)])

    proxy.plan(Fault("mid_stream", STREAM, frames=3, hook=make_it_again))

    with client_of(proxy.base) as client:
        seqs = [event.seq for event in client.sessions.tail("py-again-tail", from_seq=2)]
        with pytest.raises(SessionNotFoundError):
            next(iter(client.sessions.tail("py-never-made")))
    direct.close()

    assert seqs == [2, 3, 4]  # the new incarnation's events are not followed


def test_a_tail_gives_up_after_failed_connects_in_a_row_but_a_frame_resets_the_count(
    server: Server, proxy: FaultProxy
) -> None:
    with client_of(server.base) as direct:
        direct.sessions.create(id="py-tail-count")
        direct.sessions.append("py-tail-count", [note(n) for n in range(4)])
    drop, one_frame = Fault("before_request", STREAM), Fault("mid_stream", STREAM, frames=1)
    proxy.plan(*[Fault(**vars(fault)) for _ in range(3) for fault in (drop, one_frame)])
    seqs: list[int] = []

    with client_of(proxy.base, max_retries=1) as client:
        for event in client.sessions.tail("py-tail-count"):
            seqs.append(event.seq)
            if event.seq == 3:
                break
        proxy.plan(Fault("before_request", STREAM, times=2))
        with pytest.raises(ConnectionError):
            for _ in client.sessions.tail("py-tail-count", from_seq=4):
                pass

    assert seqs == [0, 1, 2, 3]
    assert proxy.faults_met()[:6] == ["before_request", "mid_stream"] * 3


def test_random_drops_change_nothing_twice_and_miss_nothing(server: Server, proxy: FaultProxy) -> None:
    with client_of(server.base) as direct:
        direct.sessions.create(id="py-random")
    seqs: list[int] = []

    def follow() -> None:
        with client_of(proxy.base, max_retries=10) as tailer:
            seqs.extend(event.seq for event in tailer.sessions.tail("py-random"))

    follower = threading.Thread(target=follow)
    proxy.plan(probability=0.3, seed=26)
    follower.start()
    with client_of(proxy.base, max_retries=10) as client:
        for number in range(1, 5):
            client.sessions.append("py-random", turn(number))
            client.sessions.fork("py-random", session_id=f"py-random-{number}")
            client.sessions.append("py-random", [note(number)])
        deadline = time.monotonic() + 30
        while len(seqs) < 4 * 7 and time.monotonic() < deadline:  # a deletion takes the events a tail has not seen
            time.sleep(0.01)
        client.sessions.delete("py-random")
    follower.join(60)

    assert len(stored_events(server, "py-random-4")) == 4 * 7 - 1
    assert sorted(session_ids(server, "py-random")) == [f"py-random-{n}" for n in range(1, 5)]
    assert seqs == list(range(4 * 7))
    assert len(proxy.faults_met()) >= 5


def test_log_reads_the_session_as_a_dsh_file_raw_or_zstd(server: Server) -> None:
    with client_of(server.base) as client:
        client.sessions.create(id="py-log", meta={"cwd": "/work"})
        client.sessions.append("py-log", turn(1))

        raw = client.sessions.log("py-log")
        compressed = client.sessions.log("py-log", compression="zstd")

        header, *lines = raw.decode().splitlines()
        assert json.loads(header)["id"] == "py-log"
        assert [json.loads(line) for line in lines] == [event.to_dict() for event in client.sessions.events("py-log")]
        assert compressed[:4] == b"\x28\xb5\x2f\xfd"
        assert zstandard.ZstdDecompressor().stream_reader(compressed, read_across_frames=True).read() == raw
        with pytest.raises(SessionNotFoundError):
            client.sessions.log("py-nobody")
        with pytest.raises(ValueError, match="'none' or 'zstd'"):
            client.sessions.log("py-log", compression="gzip")
