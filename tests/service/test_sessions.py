"""The service's operations (spec 2): create, list, delete, append, snapshot and fork, in the spec's check order."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from app.api.wire.resources import session_json
from app.backends.catalog import LiveSession
from app.backends.errors import StorageUnavailable
from app.backends.memory import MemoryBackend
from app.domain.dsh_records import header_record
from app.domain.errors import ErrorCode, SessionError
from app.domain.log import SessionLog
from app.domain.session import DEFAULT_TENANT, Session, SessionHeader, SessionKey
from app.service.sessions import SessionService
from tests.domain.builders import (
    T0,
    Clock,
    append,
    assistant_message,
    create,
    event,
    events_of,
    fork,
    history_of,
    make_store,
    numbered,
    replace,
    simple_turn,
    step_end,
    step_start,
    title,
    tool_call,
    tool_turn,
    turn_end,
    turn_start,
    turns,
    user_message,
)
from tests.service.harness import HeldAppends, StoreHarness, refused

UUID4_ID = re.compile(r"session-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


def ids(sessions: list[Session] | list[LiveSession]) -> list[str]:
    return [session.id for session in sessions]


def frozen(store: StoreHarness, session_id: str) -> tuple[Any, ...]:
    """Everything a client can observe of a session, to compare before and after."""
    session = store.get(session_id)
    return session.log.lines(), session.log.history(), session.view(), session.header


# -- create: ids ---------------------------------------------------------------------------------------------------


def test_generated_ids_are_session_uuid4() -> None:
    store = make_store()
    first, second = create(store), create(store)
    assert UUID4_ID.fullmatch(first.id), first.id
    assert UUID4_ID.fullmatch(second.id), second.id
    assert first.id != second.id
    child = fork(store, first.id)
    assert UUID4_ID.fullmatch(child.id), child.id


@pytest.mark.parametrize("session_id", ["a", "Z", "0", "s1", "a" + "b" * 127, "x.y_z-1", "9-._", "A.B"])
def test_valid_ids_are_accepted_as_given(session_id: str) -> None:
    store = make_store()
    assert create(store, session_id).id == session_id
    assert store.get(session_id).header.id == session_id


@pytest.mark.parametrize(
    "session_id",
    ["", "-a", ".a", "_a", "a" * 129, "a/b", "a b", "a%2Fb", "é", "a\n", "..", "a:b", "a\\b", "a~b"],
)
def test_invalid_ids_are_an_invalid_request_naming_the_id(session_id: str) -> None:
    store = make_store()
    error = refused(ErrorCode.INVALID_REQUEST, store.create, session_id)
    assert error.facts["field"] == "id"
    assert len(store) == 0


def test_a_live_id_cannot_be_created_again() -> None:
    store = make_store()
    create(store, "s", simple_turn(1))
    error = refused(ErrorCode.SESSION_ALREADY_EXISTS, store.create, "s")
    assert '"s"' in error.detail
    assert len(store.get("s").log) == 8


class HeldBackend(MemoryBackend):
    """A memory backend whose creates wait for ``release`` while ``holding``; the first ``refusals`` held ones fail."""

    def __init__(self, refusals: int) -> None:
        super().__init__(clock=Clock())
        self.holding = True
        self.release = asyncio.Event()
        self.refusals = refusals

    async def create(self, *args: Any, **kwargs: Any) -> Session:
        if self.holding:
            await self.release.wait()
            if self.refusals:
                self.refusals -= 1
                raise StorageUnavailable("the disk refused")
        return await super().create(*args, **kwargs)


@pytest.mark.parametrize("outcome", ["stored", "refused"])
def test_an_id_being_created_is_taken_until_the_create_is_stored_or_refused(outcome: str) -> None:
    async def run() -> None:
        backend = HeldBackend(refusals=1 if outcome == "refused" else 0)
        service = SessionService(backend, clock=Clock())
        await service.start()
        first = asyncio.ensure_future(service.create(DEFAULT_TENANT, "s", None, None))
        second = asyncio.ensure_future(service.create(DEFAULT_TENANT, "s", None, None))
        await asyncio.sleep(0.01)
        assert await backend.find(SessionKey(DEFAULT_TENANT, "s")) is None  # not live while it is written
        assert not second.done()  # the second create of the id waits for the first
        backend.release.set()
        if outcome == "refused":
            with pytest.raises(StorageUnavailable):
                await first
            assert (await second).id == "s"  # the refused create left the id free
        else:
            assert (await first).id == "s"
            with pytest.raises(SessionError) as taken:
                await second
            assert taken.value.code == ErrorCode.SESSION_ALREADY_EXISTS

    asyncio.run(run())


@pytest.mark.parametrize(
    ("meta", "seed"),
    [
        ({}, [turn_end(1)]),
        ({"cwd": "relative"}, None),
        ({"cwd": "relative"}, [turn_end(1)]),
    ],
)
def test_a_live_id_is_reported_before_a_bad_seed_or_meta(meta: dict[str, Any], seed: Any) -> None:
    store = make_store()
    create(store, "s")
    refused(ErrorCode.SESSION_ALREADY_EXISTS, store.create, "s", seed, meta)


# -- create: meta --------------------------------------------------------------------------------------------------


def test_meta_fields_are_kept_in_the_header() -> None:
    store = make_store()
    meta = {
        "cwd": "/work/project",
        "parentSession": "elsewhere",
        "seedLength": 2,
        "origin": "subagent",
        "delegationDepth": 3,
        "agentPreset": "reviewer",
        "createdAt": 5,
    }
    session = create(store, "s", [title(), title(), title()], meta)
    view = session_json(session.view())
    assert {key: view[key] for key in meta if key != "createdAt"} == {k: v for k, v in meta.items() if k != "createdAt"}
    assert view["createdAt"] == T0  # meta.createdAt is checked, otherwise ignored
    record = header_record(session.header)
    assert record["type"] == "session"
    assert record["version"] == 0
    assert record["instance"] == session.header.instance


def test_meta_null_means_absent() -> None:
    store = make_store()
    meta = dict.fromkeys(
        ("cwd", "parentSession", "seedLength", "origin", "delegationDepth", "agentPreset", "createdAt")
    )
    header = create(store, "s", [title()], meta).header
    assert (header.cwd, header.parent_session, header.seed_length, header.origin, header.agent_preset) == (None,) * 5
    assert header.delegation_depth == 0
    assert set(header_record(header)) == {"type", "version", "id", "createdAt", "delegationDepth", "instance"}


def test_integral_floats_in_meta_are_integers() -> None:
    header = create(make_store(), "s", [title()], {"seedLength": 1.0, "delegationDepth": 2.0}).header
    assert (header.seed_length, header.delegation_depth) == (1, 2)
    assert type(header.seed_length) is int
    assert type(header.delegation_depth) is int


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("cwd", "relative/path"),
        ("cwd", ""),
        ("cwd", 5),
        ("cwd", ["/a"]),
        ("parentSession", ""),
        ("parentSession", 5),
        ("parentSession", {"id": "x"}),
        ("seedLength", -1),
        ("seedLength", 4),
        ("seedLength", 1.5),
        ("seedLength", "1"),
        ("seedLength", True),
        ("origin", "main"),
        ("origin", ""),
        ("origin", True),
        ("delegationDepth", -1),
        ("delegationDepth", 0.5),
        ("delegationDepth", "0"),
        ("delegationDepth", False),
        ("delegationDepth", 2**53),
        ("agentPreset", 5),
        ("agentPreset", False),
        ("createdAt", -1),
        ("createdAt", 1.5),
        ("createdAt", "now"),
        ("createdAt", 2**53),
    ],
)
def test_a_bad_meta_value_is_an_invalid_seed(key: str, value: Any) -> None:
    store = make_store()
    error = refused(ErrorCode.INVALID_SEED, store.create, "s", [title(), title(), title()], {key: value})
    assert key in error.detail
    assert "s" not in store


@pytest.mark.parametrize(("seed_length", "count", "ok"), [(0, 0, True), (0, 3, True), (3, 3, True), (1, 0, False)])
def test_seed_length_ranges_from_zero_to_the_seed_length(seed_length: int, count: int, ok: bool) -> None:
    store = make_store()
    seed = [title() for _ in range(count)] if count else None
    if ok:
        assert create(store, "s", seed, {"seedLength": seed_length}).header.seed_length == seed_length
    else:
        refused(ErrorCode.INVALID_SEED, store.create, "s", seed, {"seedLength": seed_length})


def test_a_refused_seed_creates_nothing() -> None:
    store = make_store()
    refused(ErrorCode.INVALID_SEED, store.create, "s", [title(), turn_end(1)])
    assert "s" not in store
    assert store.page()[0] == []
    create(store, "s")  # the id is free


# -- create: createdAt and instance --------------------------------------------------------------------------------


def test_created_at_is_now_when_the_clock_is_ahead() -> None:
    clock = Clock(T0)
    store = make_store(clock)
    assert create(store).header.created_at == T0
    clock.now = T0 + 1000
    assert create(store).header.created_at == T0 + 1000


def test_created_at_strictly_increases_with_a_frozen_or_backward_clock() -> None:
    clock = Clock(T0)
    store = make_store(clock)
    stamps = [create(store).header.created_at for _ in range(3)]
    clock.now = T0 - 10_000
    stamps.append(create(store).header.created_at)
    stamps.append(fork(store, create(store).id).header.created_at)
    assert stamps == [T0, T0 + 1, T0 + 2, T0 + 3, T0 + 5]


def test_created_at_strictly_increases_for_creates_in_flight_at_once() -> None:
    # Clients create at once: every create is checked before any is durable; each still gets its own createdAt.
    store = make_store()
    create(store, "src")

    async def at_once() -> None:
        service = store.service
        await asyncio.gather(
            service.create(DEFAULT_TENANT, "a", None, None),
            service.create(DEFAULT_TENANT, "b", None, None),
            service.forks.fork(store.key("src"), child_id="c"),
        )

    store.run(at_once())
    stamps = [store.get(name).header.created_at for name in ("src", "a", "b", "c")]
    assert stamps == sorted(set(stamps)), stamps
    assert ids(store.page()[0]) == ["src", "a", "b", "c"]


def test_created_at_follows_the_largest_of_recovered_sessions() -> None:
    store = make_store(Clock(T0))
    store.adopt(SessionHeader(id="old", created_at=T0 + 50_000, instance="i"), SessionLog())
    assert create(store).header.created_at == T0 + 50_001


def test_an_instance_is_minted_per_create_and_again_after_delete_and_recreate() -> None:
    store = make_store()
    first = create(store, "s").header.instance
    other = create(store, "t").header.instance
    store.delete("s")
    again = create(store, "s").header.instance
    assert len({first, other, again}) == 3
    assert all(isinstance(instance, str) and instance for instance in (first, other, again))
    refused(ErrorCode.SESSION_NOT_LIVE, store.append, "s", [title()], instance=first)
    refused(ErrorCode.SESSION_NOT_LIVE, store.snapshot, "s", instance=first)
    refused(ErrorCode.SESSION_NOT_LIVE, store.fork, "s", instance=first)
    append(store, "s", [title()], instance=again)


def test_the_instance_does_not_change_with_appends() -> None:
    store = make_store()
    session = create(store, "s")
    instance = session.header.instance
    append(store, "s", simple_turn(1), instance=instance)
    append(store, "s", [title()], instance=instance)
    assert store.get("s").header.instance == instance


# -- list ----------------------------------------------------------------------------------------------------------


def test_list_is_in_creation_order_even_when_the_clock_goes_back() -> None:
    clock = Clock(T0)
    store = make_store(clock)
    for name, now in [("m", T0), ("b", T0 - 500), ("z", T0 + 10), ("a", T0 + 10)]:
        clock.now = now
        create(store, name)
    items, cursor = store.page()
    assert ids(items) == ["m", "b", "z", "a"]
    assert cursor is None
    keys = [(item.header.created_at, item.id) for item in items]
    assert keys == sorted(keys)


def test_list_pages_with_an_opaque_cursor() -> None:
    store = make_store()
    names = [f"s{i}" for i in range(7)]
    for name in names:
        create(store, name)
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        items, cursor = store.page(limit=3, cursor=cursor)
        seen += ids(items)
        pages += 1
        if cursor is None:
            break
        assert isinstance(cursor, str)
        assert len(items) == 3
    assert seen == names
    assert pages == 3


@pytest.mark.parametrize(("count", "limit"), [(4, 4), (4, 5), (0, 1), (1, 1)])
def test_the_last_page_has_no_cursor(count: int, limit: int) -> None:
    store = make_store()
    for i in range(count):
        create(store, f"s{i}")
    items, cursor = store.page(limit=limit)
    assert len(items) == count
    assert cursor is None


def test_a_cursor_stays_valid_when_its_session_is_deleted() -> None:
    store = make_store()
    for name in "abcde":
        create(store, name)
    items, cursor = store.page(limit=2)
    assert ids(items) == ["a", "b"]
    store.delete("b")
    store.delete("c")
    items, cursor = store.page(limit=2, cursor=cursor)
    assert ids(items) == ["d", "e"]
    assert cursor is None


def test_list_by_parent() -> None:
    store = make_store()
    create(store, "p1")
    create(store, "p2")
    fork(store, "p1", child_id="c1")
    fork(store, "p2", child_id="c2")
    create(store, "c3", None, {"parentSession": "p1"})
    fork(store, "p1", child_id="c4")
    fork(store, "c1", child_id="g1")
    assert ids(store.page(parent="p1")[0]) == ["c1", "c3", "c4"]
    assert ids(store.page(parent="c1")[0]) == ["g1"]
    assert store.page(parent="missing") == ([], None)
    first, cursor = store.page(parent="p1", limit=2)
    assert ids(first) == ["c1", "c3"]
    rest, cursor = store.page(parent="p1", limit=2, cursor=cursor)
    assert ids(rest) == ["c4"]
    assert cursor is None


@pytest.mark.parametrize("cursor", ["", "!!!", "not-a-cursor", "W10", "WzFd", "eyJhIjoxfQ", "WyJ4IiwxXQ", "é"])
def test_a_malformed_cursor_is_an_invalid_request(cursor: str) -> None:
    store = make_store()
    create(store, "a")
    error = refused(ErrorCode.INVALID_REQUEST, store.page, cursor=cursor)
    assert error.facts["field"] == "cursor"


# -- delete --------------------------------------------------------------------------------------------------------


def test_delete_removes_the_session_and_frees_its_id() -> None:
    store = make_store()
    create(store, "s", simple_turn(1))
    create(store, "other")
    store.delete("s")
    assert "s" not in store
    for call in (store.get, store.delete, store.snapshot, store.history, store.fork):
        refused(ErrorCode.SESSION_NOT_FOUND, call, "s")
    refused(ErrorCode.SESSION_NOT_FOUND, store.append, "s", [title()])
    assert ids(store.page()[0]) == ["other"]
    assert len(create(store, "s").log) == 0  # a new, empty session


def test_deleting_a_parent_leaves_its_children_whole() -> None:
    store = make_store()
    create(store, "p", simple_turn(1), {"cwd": "/w"})
    before = frozen(store, fork(store, "p", child_id="c").id)
    store.delete("p")
    assert frozen(store, "c") == before
    assert store.get("c").header.parent_session == "p"
    assert ids(store.page(parent="p")[0]) == ["c"]


def test_delete_of_a_missing_session_is_not_found() -> None:
    refused(ErrorCode.SESSION_NOT_FOUND, make_store().delete, "nope")


# -- append --------------------------------------------------------------------------------------------------------


def test_append_with_the_right_expected_seq_and_instance() -> None:
    store = make_store()
    instance = create(store, "s").header.instance
    stored = append(store, "s", [turn_start(1)], expected_seq=0, instance=instance)
    assert stored[0]["seq"] == 0
    stored = append(store, "s", [turn_end(1), title()], expected_seq=1, instance=instance)
    assert [item["seq"] for item in stored] == [1, 2]


@pytest.mark.parametrize("expected_seq", [0, 1, 3, -1, -3, 2**53])
def test_a_wrong_expected_seq_is_a_seq_conflict_with_the_current_seq(expected_seq: int) -> None:
    store = make_store()
    create(store, "s", [title(), title()])
    error = refused(ErrorCode.SEQ_CONFLICT, store.append, "s", [title()], expected_seq=expected_seq)
    assert error.facts["currentSeq"] == 2
    assert len(store.get("s").log) == 2


def test_append_check_order() -> None:
    store = make_store()
    create(store, "s", [title()])
    bad = [turn_end(1)]
    refused(ErrorCode.SESSION_NOT_FOUND, store.append, "nope", bad, expected_seq=5, instance="x")
    refused(ErrorCode.SESSION_NOT_LIVE, store.append, "s", bad, expected_seq=5, instance="x")
    refused(ErrorCode.SEQ_CONFLICT, store.append, "s", bad, expected_seq=5)
    refused(ErrorCode.SEQ_CONFLICT, store.append, "s", bad, expected_seq=-1)
    refused(ErrorCode.INVALID_EVENT, store.append, "s", bad, expected_seq=1)
    assert len(store.get("s").log) == 1


def test_an_append_in_flight_is_invisible_until_stored() -> None:
    async def run() -> None:
        backend = HeldAppends(Clock())
        service = SessionService(backend, clock=Clock())
        await service.start()
        key = SessionKey(DEFAULT_TENANT, "s")
        await service.create(DEFAULT_TENANT, "s", simple_turn(1), None)
        pending = asyncio.ensure_future(service.append(key, simple_turn(2)))
        await asyncio.sleep(0.01)
        assert (await service.reads.get(key)).head.count == 8
        assert (await service.forks.snapshot(key)).meta["seedLength"] == 8
        assert len((await service.reads.history(key, None))[0]) == 2
        backend.release.set()
        assert (await pending).session.head.count == 16
        assert (await service.reads.get(key)).head.count == 16

    asyncio.run(run())


def test_a_multi_event_append_is_atomic() -> None:
    store = make_store()
    create(store, "s", simple_turn(1))
    before = frozen(store, "s")
    batch = [*simple_turn(2)[:-1], turn_end(3)]
    error = refused(ErrorCode.INVALID_EVENT, store.append, "s", batch)
    assert error.facts["index"] == 7
    assert frozen(store, "s") == before
    assert store.get("s").view().head.forkable
    append(store, "s", simple_turn(2))
    assert store.get("s").view().head.count == 16


# -- the boundary rule ---------------------------------------------------------------------------------------------


def test_an_empty_log_is_forkable() -> None:
    # facts 9.1 #1: an empty source forks as an empty child with lineage (and, in forklog, no end-seed)
    store = make_store()
    create(store, "src", None, {"cwd": "/repo"})
    assert store.get("src").view().head.forkable
    snap = store.snapshot("src")
    assert snap.meta == {"parentSession": "src", "seedLength": 0, "cwd": "/repo"}
    assert len(snap.seed) == 0
    child = fork(store, "src", child_id="child")
    assert len(child.log) == 0
    assert (child.header.cwd, child.header.parent_session, child.header.seed_length) == ("/repo", "src", 0)
    assert append(store, "child", [turn_start(1)])[0]["seq"] == 0


@pytest.mark.parametrize(
    "reason",
    [
        {"kind": "completed"},
        {"kind": "aborted", "reason": {"kind": "user"}},
        {"kind": "aborted", "reason": {"kind": "disposed"}},
        {"kind": "blocked"},
        {"kind": "error", "error": {"message": "x", "code": "UNKNOWN"}},
        {"kind": "max-tokens"},
        {"kind": "interrupted"},
        {"kind": "handed-off-to-human"},
    ],
)
def test_a_log_ending_in_turn_end_with_any_reason_is_forkable(reason: dict[str, Any]) -> None:
    # facts 9.1 #5: every turn/end reason is a fork boundary alike, also as an explicit atSeq
    store = make_store()
    events = [*simple_turn(1)[:-1], event("turn/end", {"turn": 1, "reason": reason})]
    create(store, "src", events)
    assert store.get("src").view().head.forkable
    assert len(fork(store, "src").log) == 8
    assert len(fork(store, "src", at_seq=7).log) == 8


NOT_AT_BOUNDARY = [
    pytest.param([turn_start(1)], "turn/start", 1, None, id="turn-start"),
    pytest.param([turn_start(1), step_start(1, 1)], "step/start", 1, None, id="step-start"),
    pytest.param([turn_start(1), user_message()], "user/message", 1, None, id="user-message"),
    pytest.param(
        [turn_start(1), step_start(1, 1), assistant_message(1, 1)], "assistant/message", 1, None, id="assistant"
    ),
    pytest.param([turn_start(1), step_start(1, 1), tool_call(1, 1, "c")], "tool/call", 1, None, id="tool-call"),
    pytest.param([*simple_turn(1), turn_start(2)], "turn/start", 2, 7, id="second-turn-open"),
    pytest.param([*simple_turn(1), title()], "session/title", None, 7, id="log-only-after-turn-end"),
    pytest.param([*simple_turn(1), user_message()], "user/message", None, 7, id="user-message-after-turn-end"),
    pytest.param([*simple_turn(1), event("session/end-seed", {})], "session/end-seed", None, 7, id="end-seed"),
    pytest.param([title()], "session/title", None, None, id="no-turn-at-all"),
]


@pytest.mark.parametrize(("events", "last_type", "open_turn", "last_turn_end"), NOT_AT_BOUNDARY)
def test_not_at_turn_boundary_without_at_seq(
    events: list[Any], last_type: str, open_turn: int | None, last_turn_end: int | None
) -> None:
    # facts 9.1 #3 and #12 translated: forklog's head boundary must be a turn/end (the RFC rule), nothing is clipped
    store = make_store()
    create(store, "src", events)
    before = frozen(store, "src")
    assert not store.get("src").view().head.forkable
    for call in (store.snapshot, store.fork):
        error = refused(ErrorCode.NOT_AT_TURN_BOUNDARY, call, "src")
        assert error.facts == {"lastEventType": last_type, "openTurn": open_turn, "lastTurnEndSeq": last_turn_end}
    assert len(store) == 1
    assert frozen(store, "src") == before


def test_an_earlier_turn_end_can_be_forked_while_a_later_turn_is_open() -> None:
    # facts 9.1 #4: an explicit boundary at turn 1's turn/end works while turn 3 is open
    store = make_store()
    create(store, "src", [*simple_turn(1), *tool_turn(2), turn_start(3), step_start(3, 1), user_message("open")])
    child = fork(store, "src", at_seq=7)
    assert child.log.events() == events_of(store, "src")[:8]
    assert child.log.history() == history_of(store, "src", 7)
    assert len(child.log.history()) == 2  # turn 1's user and assistant messages only
    assert child.header.seed_length == 8
    # the child continues after turn 1: its next turn is 2, its next seq 8
    refused(ErrorCode.INVALID_EVENT, store.append, child.id, [turn_start(3)])
    assert append(store, child.id, [turn_start(2)])[0]["seq"] == 8


def test_a_log_only_event_after_turn_end_is_left_out_by_an_explicit_boundary() -> None:
    # facts 9.1 #3 translated: DSH keeps a trailing title in a default fork; forklog forks up to the turn/end
    store = make_store()
    create(store, "src", [*simple_turn(1), title()])
    child = fork(store, "src", at_seq=7)
    assert [item["type"] for item in child.log.events()][-1] == "turn/end"
    assert len(child.log) == 8


@pytest.mark.parametrize("at_seq", [-1, -100, 8, 9, 2**53])
def test_at_seq_out_of_range_is_an_invalid_boundary(at_seq: int) -> None:
    # facts 9.1 #7: no child is created in any case
    store = make_store()
    create(store, "src", simple_turn(1))
    for call in (store.snapshot, store.fork, store.history):
        error = refused(ErrorCode.INVALID_BOUNDARY, call, "src", at_seq=at_seq)
        assert "last seq: 7" in error.detail or at_seq < 0
    assert len(store) == 1


def test_at_seq_on_an_empty_log_is_an_invalid_boundary() -> None:
    store = make_store()
    create(store, "src")
    error = refused(ErrorCode.INVALID_BOUNDARY, store.fork, "src", at_seq=0, child_id="c")
    assert "none" in error.detail
    assert "c" not in store
    create(store, "c")  # nothing was reserved


@pytest.mark.parametrize("at_seq", range(7))
def test_at_seq_naming_an_event_that_is_not_turn_end_is_an_invalid_boundary(at_seq: int) -> None:
    store = make_store()
    create(store, "src", [*simple_turn(1), *simple_turn(2)])
    for call in (store.snapshot, store.fork, store.history):
        error = refused(ErrorCode.INVALID_BOUNDARY, call, "src", at_seq=at_seq)
        assert "turn/end" in error.detail
    refused(ErrorCode.INVALID_BOUNDARY, store.snapshot, "src", at_seq=at_seq + 8)


# -- the check order of snapshot and fork --------------------------------------------------------------------------


@pytest.fixture
def open_source() -> tuple[StoreHarness, str]:
    """A store with a live child id "taken" and a source "src" inside an open turn (not forkable), 9 events."""
    store = make_store()
    create(store, "taken")
    create(store, "src", [*simple_turn(1), turn_start(2)])
    return store, store.get("src").header.instance


def test_fork_check_order(open_source: tuple[StoreHarness, str]) -> None:
    store, instance = open_source
    every_bad = {"instance": "stale", "expected_seq": 3, "at_seq": 4}
    refused(ErrorCode.INVALID_REQUEST, store.fork, "nope", child_id="-bad", **every_bad)
    # facts 9.1 #13, #14: a live child id before the source and the boundary
    refused(ErrorCode.SESSION_ALREADY_EXISTS, store.fork, "nope", child_id="taken", **every_bad)
    refused(ErrorCode.SESSION_ALREADY_EXISTS, store.fork, "src", child_id="taken")
    refused(ErrorCode.SESSION_ALREADY_EXISTS, store.fork, "src", child_id="src")
    refused(ErrorCode.SESSION_NOT_FOUND, store.fork, "nope", child_id="new", **every_bad)
    refused(ErrorCode.SESSION_NOT_LIVE, store.fork, "src", child_id="new", **every_bad)
    error = refused(ErrorCode.SEQ_CONFLICT, store.fork, "src", child_id="new", expected_seq=3, at_seq=4)
    assert error.facts["currentSeq"] == 9
    refused(ErrorCode.SEQ_CONFLICT, store.fork, "src", expected_seq=-1, instance=instance)
    refused(ErrorCode.INVALID_BOUNDARY, store.fork, "src", at_seq=4, expected_seq=9, instance=instance)
    refused(ErrorCode.NOT_AT_TURN_BOUNDARY, store.fork, "src", expected_seq=9, instance=instance)
    assert ids(store.page()[0]) == ["taken", "src"]
    child = fork(store, "src", child_id="new", at_seq=7, expected_seq=9, instance=instance)
    assert child.header.seed_length == 8


def test_snapshot_check_order(open_source: tuple[StoreHarness, str]) -> None:
    store, instance = open_source
    refused(ErrorCode.SESSION_NOT_FOUND, store.snapshot, "nope", instance="stale", expected_seq=3, at_seq=4)
    refused(ErrorCode.SESSION_NOT_LIVE, store.snapshot, "src", instance="stale", expected_seq=3, at_seq=4)
    refused(ErrorCode.SEQ_CONFLICT, store.snapshot, "src", instance=instance, expected_seq=3, at_seq=4)
    refused(ErrorCode.SEQ_CONFLICT, store.snapshot, "src", expected_seq=-9)
    refused(ErrorCode.INVALID_BOUNDARY, store.snapshot, "src", instance=instance, expected_seq=9, at_seq=4)
    refused(ErrorCode.NOT_AT_TURN_BOUNDARY, store.snapshot, "src", instance=instance, expected_seq=9)
    assert store.snapshot("src", at_seq=7, instance=instance, expected_seq=9).meta["seedLength"] == 8


def test_a_corrupt_id_answers_session_corrupt_where_its_liveness_is_checked() -> None:
    store = make_store()
    create(store, "src", simple_turn(1))
    store.quarantine("bad", "seq gap at line 3")
    for call in (store.get, store.snapshot, store.fork, store.history, store.delete):
        error = refused(ErrorCode.SESSION_CORRUPT, call, "bad")
        assert error.facts["reason"] == "seq gap at line 3"
    refused(ErrorCode.SESSION_CORRUPT, store.append, "bad", [title()])
    refused(ErrorCode.SESSION_CORRUPT, store.create, "bad")
    refused(ErrorCode.SESSION_CORRUPT, store.fork, "src", child_id="bad")
    assert ids(store.page()[0]) == ["src"]


# -- what a snapshot and a fork produce ----------------------------------------------------------------------------


@pytest.fixture
def rich_source() -> StoreHarness:
    """A source with every header field set and a log of three completed turns with a compaction replace."""
    store = make_store()
    events = [
        *turns(2),
        user_message("summary", surface_op=replace(2, 5), sourceEventSeqs=[2, 5]),
        *simple_turn(3),
    ]
    meta = {
        "cwd": "/work",
        "parentSession": "grandparent",
        "seedLength": 3,
        "origin": "subagent",
        "delegationDepth": 2,
        "agentPreset": "planner",
    }
    create(store, "src", numbered(events, start_time=T0 - 1000), meta)
    return store


def test_snapshot_returns_the_source_view_an_exact_seed_and_the_meta(rich_source: StoreHarness) -> None:
    store = rich_source
    before = frozen(store, "src")
    snap = store.snapshot("src")
    assert snap.source == store.get("src").view()
    assert snap.seed.events() == events_of(store, "src")
    assert snap.seed.lines() == store.get("src").log.lines()  # same type, seq, time, data and extra keys
    assert snap.meta == {"parentSession": "src", "seedLength": len(store.get("src").log), "cwd": "/work"}
    assert frozen(store, "src") == before


def test_the_meta_has_no_cwd_when_the_source_has_none() -> None:
    store = make_store()
    create(store, "src", simple_turn(1))
    assert store.snapshot("src").meta == {"parentSession": "src", "seedLength": 8}
    child = fork(store, "src")
    assert child.header.cwd is None
    assert "cwd" not in header_record(child.header)


def test_the_child_header_inherits_only_lineage_and_cwd(rich_source: StoreHarness) -> None:
    store = rich_source
    source = store.get("src")
    child = fork(store, "src", child_id="kid")
    count = len(source.log)
    assert header_record(child.header) == {
        "type": "session",
        "version": 0,
        "id": "kid",
        "createdAt": source.header.created_at + 1,
        "cwd": "/work",
        "parentSession": "src",
        "seedLength": count,
        "delegationDepth": 0,
        "instance": child.header.instance,
    }
    assert child.header.instance != source.header.instance
    header, head = child.view().header, child.view().head
    assert (header.origin, header.agent_preset, header.delegation_depth) == (None, None, 0)
    assert (head.count, head.last_type, head.open_turn, head.forkable) == (count, "turn/end", None, True)


def test_the_child_log_is_the_seed_and_continues_at_seed_length(rich_source: StoreHarness) -> None:
    # facts 9.1 #2: the inherited events equal the source's; seedLength = source length; no end-seed is added
    store = rich_source
    child = fork(store, "src")
    assert child.log.events() == events_of(store, "src")
    assert child.log.history() == history_of(store, "src")
    count = len(child.log)
    stored = append(store, child.id, [turn_start(4), turn_end(4)])
    assert [item["seq"] for item in stored] == [count, count + 1]
    refused(ErrorCode.INVALID_EVENT, store.append, child.id, [turn_start(4)])


def test_the_child_appends_never_go_back_in_time_after_a_future_seed() -> None:
    clock = Clock(T0)
    store = make_store(clock)
    create(store, "src", numbered(simple_turn(1), start_time=T0 + 10_000_000))
    child = fork(store, "src")
    stored = append(store, child.id, [title()])
    assert stored[0]["time"] == T0 + 10_000_007


def test_source_and_child_never_change_each_other(rich_source: StoreHarness) -> None:
    store = rich_source
    snap = store.snapshot("src")
    child = fork(store, "src", child_id="kid")
    source_before, child_before = frozen(store, "src"), frozen(store, "kid")
    append(store, "kid", [*simple_turn(4), user_message("x", surface_op=replace(24, 27), sourceEventSeqs=[24, 27])])
    assert frozen(store, "src") == source_before
    child_after = frozen(store, "kid")
    append(store, "src", [*tool_turn(4), title()])
    assert frozen(store, "kid") == child_after
    assert child_after != child_before
    # the snapshot taken before is still the source as it was
    assert snap.seed.lines() == source_before[0]
    # mutating events read from one side changes nothing stored
    for item in child.log.events():
        item["data"] = "mutated"
    snap.seed.events()[0]["type"] = "mutated"
    assert frozen(store, "kid") == child_after
    assert snap.seed.lines() == source_before[0]


def test_a_snapshot_posted_to_create_equals_the_fork(rich_source: StoreHarness) -> None:
    store = rich_source
    for at_seq in (None, 7):
        snap = store.snapshot("src", at_seq=at_seq)
        via_create = create(store, None, snap.seed.events(), snap.meta)
        via_fork = fork(store, "src", at_seq=at_seq)
        assert via_create.log.lines() == via_fork.log.lines()
        assert via_create.log.history() == via_fork.log.history()
        a, b = session_json(via_create.view()), session_json(via_fork.view())
        for key in ("id", "instance", "createdAt", "updatedAt"):
            a.pop(key)
            b.pop(key)
        assert a == b
        # both continue alike
        nxt = [turn_start(2 if at_seq else 4), turn_end(2 if at_seq else 4)]
        assert append(store, via_create.id, nxt) == append(store, via_fork.id, nxt)


def test_fork_with_generated_or_given_child_ids() -> None:
    store = make_store()
    create(store, "src", simple_turn(1))
    given = fork(store, "src", child_id="given")
    assert given.id == "given"
    generated = fork(store, "src")
    assert UUID4_ID.fullmatch(generated.id)
    assert ids(store.page(parent="src")[0]) == ["given", generated.id]


@pytest.mark.parametrize("outcome", ["stored", "refused"])
def test_a_fork_in_flight_holds_its_child_id_until_it_is_stored_or_refused(outcome: str) -> None:
    async def run() -> None:
        backend = HeldBackend(refusals=1 if outcome == "refused" else 0)
        service = SessionService(backend, clock=Clock())
        await service.start()
        backend.holding = False
        await service.create(DEFAULT_TENANT, "src", simple_turn(1), None)
        backend.holding = True
        src = SessionKey(DEFAULT_TENANT, "src")
        fork = asyncio.ensure_future(service.forks.fork(src, child_id="kid"))
        rival_fork = asyncio.ensure_future(service.forks.fork(src, child_id="kid"))
        rival_create = asyncio.ensure_future(service.create(DEFAULT_TENANT, "kid", None, None))
        await asyncio.sleep(0.01)
        assert await backend.find(SessionKey(DEFAULT_TENANT, "kid")) is None
        assert not rival_fork.done() and not rival_create.done()
        backend.release.set()
        if outcome == "stored":
            assert (await fork).id == "kid"
            for rival in (rival_fork, rival_create):
                with pytest.raises(SessionError) as taken:
                    await rival
                assert taken.value.code == ErrorCode.SESSION_ALREADY_EXISTS
        else:
            with pytest.raises(StorageUnavailable):
                await fork
            assert (await rival_fork).id == "kid"  # the refused fork left the id free
            with pytest.raises(SessionError):
                await rival_create

    asyncio.run(run())


def test_a_fork_of_a_fork_keeps_only_its_own_parent() -> None:
    store = make_store()
    create(store, "a", simple_turn(1), {"cwd": "/x"})
    fork(store, "a", child_id="b")
    append(store, "b", simple_turn(2))
    c = fork(store, "b", child_id="c", at_seq=7)
    assert (c.header.parent_session, c.header.seed_length, c.header.cwd) == ("b", 8, "/x")
    assert c.log.events() == events_of(store, "a")


def test_a_bracket_inside_a_completed_turn_is_inherited_as_is() -> None:
    # facts 9.1 #6 translated: no end-seed marker follows the inherited bracket-open; the child is exactly the seed
    store = make_store()
    bracket = event("compaction/start", {"compactionId": "k1", "turn": 1})
    create(store, "src", [turn_start(1), bracket, turn_end(1)])
    child = fork(store, "src")
    assert [item["type"] for item in child.log.events()] == ["turn/start", "compaction/start", "turn/end"]


# -- history at a boundary -----------------------------------------------------------------------------------------


def test_history_at_each_turn_end_is_the_history_of_the_prefix(rich_source: StoreHarness) -> None:
    store = rich_source
    append(store, "src", simple_turn(4))
    events = events_of(store, "src")
    ends = [item["seq"] for item in events if item["type"] == "turn/end"]
    assert ends == [7, 20, 29, 37]
    for at_seq in ends:
        prefix = create(make_store(), "p", events[: at_seq + 1])
        messages, count = store.history("src", at_seq)
        assert messages == prefix.log.history()
        assert count == len(events)
    # turn 2's history is before the compaction replace (seq 21); at the head it is after it
    assert len(history_of(store, "src", 20)) == 7
    assert history_of(store, "src", 20)[0] == events[2]["data"]
    assert history_of(store, "src", 29)[0] == events[21]["data"]
    assert history_of(store, "src", 37)[0] == events[21]["data"]


def test_history_without_at_seq_is_the_whole_log() -> None:
    store = make_store()
    create(store, "src", [*simple_turn(1), turn_start(2), step_start(2, 1), user_message("open")])
    messages, count = store.history("src")
    assert count == 11
    assert len(messages) == 3
    refused(ErrorCode.INVALID_BOUNDARY, store.history, "src", 10)


def test_forks_at_every_turn_end_with_tool_turns() -> None:
    store = make_store()
    create(store, "src", [*turns(5), user_message("tail")])
    events = events_of(store, "src")
    for seq in (item["seq"] for item in events if item["type"] == "turn/end"):
        child = fork(store, "src", at_seq=seq)
        assert child.log.events() == events[: seq + 1]
        assert child.log.history() == history_of(store, "src", seq)
        assert child.log.history() == create(make_store(), "p", events[: seq + 1]).log.history()
        assert child.view().head.last_turn_end_seq == seq
        # the child's next turn number follows the boundary's turn
        turn = events[seq]["data"]["turn"]
        refused(ErrorCode.INVALID_EVENT, store.append, child.id, [turn_start(turn + 2)])
        append(store, child.id, [turn_start(turn + 1), step_start(turn + 1, 1), step_end(turn + 1, 1)])


def test_a_fork_of_a_missing_deleted_or_stale_source() -> None:
    # facts 9.1 #9-#11: an unknown id and a deleted one are not found; a stale incarnation is not live
    store = make_store()
    refused(ErrorCode.SESSION_NOT_FOUND, store.fork, "missing")
    stale = create(store, "src", simple_turn(1)).header.instance
    store.delete("src")
    refused(ErrorCode.SESSION_NOT_FOUND, store.fork, "src", instance=stale)
    create(store, "src", simple_turn(1))
    error = refused(ErrorCode.SESSION_NOT_LIVE, store.fork, "src", instance=stale, child_id="kid")
    assert "re-read" in error.detail
    assert "kid" not in store
    assert ids(store.page()[0]) == ["src"]
