"""The storage seam's contract, written once and run against every backend (``[file]``, ``[memory]``, ...).

A backend stores what the service hands it, byte for byte, and nothing else: these tests drive the seam directly,
with batches checked by the domain as the service checks them, and look at what a later read gives back. In the
manner of eventsourcing's recorder test cases: every operation, every refusal, atomic batches, exact bytes, forks
that share nothing mutable, tenants that never meet, and (for durable backends) all of it again after a reopen.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import orjson
import pytest

from app.backends.base import Backend, IdempotencyRecord, SeedLog, SeedPrefix
from app.backends.errors import IdempotencyKeyTaken, StaleHead
from app.domain.clock import wall_clock_ms
from app.domain.errors import SessionAlreadyExists
from app.domain.ids import new_instance
from app.domain.listing import ListQuery, PageRequest
from app.domain.log import seed_log
from app.domain.session import DEFAULT_TENANT, Session, SessionHeader, SessionKey, head_of
from app.domain.staging import StagedEvents, replace_targets
from app.domain.staging_rules import stage
from tests.backends.conftest import BackendFactory
from tests.events import (
    assistant_message,
    step_end,
    step_start,
    tool_call,
    tool_result,
    turn_end,
    turn_start,
    user_message,
)

pytestmark = pytest.mark.anyio

NOW = 1_785_331_618_309


def key(session_id: str, tenant: str = DEFAULT_TENANT) -> SessionKey:
    return SessionKey(tenant, session_id)


def turn(number: int, text: str = "hello") -> list[dict[str, Any]]:
    call = f"call-{number}-{text}"
    return [
        turn_start(number),
        user_message(f"{text} {number}"),
        step_start(number, 1),
        tool_call(number, 1, call),
        tool_result(number, 1, call, "output"),
        assistant_message(number, 1, f"answer {number}"),
        step_end(number, 1),
        turn_end(number),
    ]


async def create(
    backend: Backend, session_id: str, events: Sequence[Any] = (), *, tenant: str = DEFAULT_TENANT, **lineage: Any
) -> bytes:
    """Create a session from ``events`` (checked as a seed); its stored lines."""
    log = seed_log(list(events), now=NOW)
    await backend.create(key(session_id, tenant), new_instance(), lineage, SeedLog(log))
    return log.lines()


async def staged(
    backend: Backend, session_id: str, events: Sequence[Any], tenant: str = DEFAULT_TENANT
) -> StagedEvents:
    """A batch checked against the session's tip, as the service checks it."""
    tip = await backend.tip(key(session_id, tenant))
    assert tip is not None
    return stage(tip.log, list(events), appended=True, now=NOW)


async def append(backend: Backend, session_id: str, events: Sequence[Any], tenant: str = DEFAULT_TENANT) -> bytes:
    batch = await staged(backend, session_id, events, tenant)
    await backend.append(key(session_id, tenant), batch)
    return batch.lines


async def everything(backend: Backend, session_id: str, tenant: str = DEFAULT_TENANT) -> bytes:
    return await backend.read(key(session_id, tenant), 0, 1 << 40)


async def snapshot_of(backend: Backend, session_id: str) -> Any:
    """All a client can see of a session: its header, head, events and history."""
    found = await backend.find(key(session_id))
    assert found is not None
    return found.header, found.head, await everything(backend, session_id), await backend.history(key(session_id), None)


# -- create and find -------------------------------------------------------------------------------------------------


async def test_an_empty_store_has_no_session(backend: Backend) -> None:
    assert (await backend.readiness()).sessions == 0
    assert await backend.find(key("nope")) is None
    assert await backend.page(DEFAULT_TENANT, PageRequest(10)) == []
    assert await backend.tip(key("nope")) is None


async def test_a_created_session_is_found_with_its_header_and_head(backend: Backend) -> None:
    lines = await create(backend, "s", turn(1), cwd="/work", origin="subagent", delegation_depth=2, agent_preset="p")
    found = await backend.find(key("s"))
    assert found is not None
    header, head = found.header, found.head
    assert (header.id, header.cwd, header.origin, header.delegation_depth, header.agent_preset) == (
        "s",
        "/work",
        "subagent",
        2,
        "p",
    )
    assert (header.parent_session, header.seed_length) == (None, None)
    assert (head.count, head.last_type, head.last_turn_end_seq, head.open_turn) == (8, "turn/end", 7, None)
    assert await everything(backend, "s") == lines
    assert (await backend.readiness()).sessions == 1


async def test_created_at_is_assigned_and_keeps_increasing(backend: Backend) -> None:
    stamps = []
    for name in ("a", "b", "c"):
        await create(backend, name)
        found = await backend.find(key(name))
        assert found is not None
        stamps.append(found.header.created_at)
    assert stamps == sorted(set(stamps))


async def created_at(backend: Backend, session_id: str, tenant: str) -> int:
    await create(backend, session_id, tenant=tenant)
    found = await backend.find(key(session_id, tenant))
    assert found is not None
    return found.header.created_at


async def test_created_at_follows_only_the_tenants_own_creates(make_backend: BackendFactory) -> None:
    # A stopped clock makes every createdAt 1 + the largest one of its clock: a clock shared by the tenants would let
    # tenant "a" count tenant "b"'s creates from the gap between two of its own.
    make_backend.clock = lambda: NOW
    backend = await make_backend.open()
    assert await created_at(backend, "a1", "a") == NOW
    assert [await created_at(backend, f"b{n}", "b") for n in range(5)] == [NOW + n for n in range(5)]
    assert await created_at(backend, "a2", "a") == NOW + 1
    if make_backend.durable:  # each tenant's clock survives a restart, and still only its own
        backend = await make_backend.reopen(backend)
    assert await created_at(backend, "a3", "a") == NOW + 2
    assert await created_at(backend, "b5", "b") == NOW + 5
    assert await created_at(backend, "c1", "c") == NOW


async def test_a_live_id_cannot_be_created_again(backend: Backend) -> None:
    lines = await create(backend, "s", turn(1))
    with pytest.raises(SessionAlreadyExists):
        await create(backend, "s", turn(1, "other"))
    assert await everything(backend, "s") == lines


async def test_each_incarnation_keeps_the_instance_it_was_given(backend: Backend) -> None:
    first, second = new_instance(), new_instance()
    await backend.create(key("s"), first, {}, SeedLog(seed_log([], now=NOW)))
    found = await backend.find(key("s"))
    assert found is not None and found.header.instance == first
    await backend.delete(key("s"))
    await backend.create(key("s"), second, {}, SeedLog(seed_log([], now=NOW)))
    found = await backend.find(key("s"))
    assert found is not None and found.header.instance == second


# -- reads -----------------------------------------------------------------------------------------------------------


async def test_events_read_back_as_the_exact_bytes_stored(backend: Backend) -> None:
    odd = {"type": "forklog-test/odd", "data": {"z": 1, "a": [1.5, -2, 9007199254740991], "é": "\u2028 ☃ \n"}}
    lines = await create(backend, "s", [odd, odd])
    assert lines.count(b"\n") == 2
    assert await everything(backend, "s") == lines
    assert orjson.loads(lines.splitlines()[0])["data"] == odd["data"]  # member order and values kept
    assert list(orjson.loads(lines.splitlines()[0])["data"]) == ["z", "a", "é"]
    assert await backend.read(key("s"), 1, 2) == lines.splitlines(keepends=True)[1]
    assert await backend.read(key("s"), 2, 10) == b""


async def test_is_turn_end_and_history_follow_the_log(backend: Backend) -> None:
    await create(backend, "s", [*turn(1), *turn(2)])
    assert [await backend.is_turn_end(key("s"), seq) for seq in (6, 7, 15)] == [False, True, True]
    whole = await backend.history(key("s"), None)
    early = await backend.history(key("s"), 7)
    assert early[0]["content"][0]["text"] == "hello 1"
    assert len(early) == 3 and len(whole) == 6
    assert whole[:3] == early


async def test_the_tip_is_the_log_an_append_is_checked_against(backend: Backend) -> None:
    await create(backend, "s", [*turn(1), turn_start(2)])
    tip = await backend.tip(key("s"), wanted=[4])
    assert tip is not None
    assert tip.session.head.count == 9 and tip.log.state.open_turn == 2
    assert tip.log.event(4)["type"] == "tool/result"


async def test_a_page_lists_a_tenant_in_creation_order_after_a_key(backend: Backend) -> None:
    for name in ("m", "b", "z", "a"):
        await create(backend, name)
    await create(backend, "kid", parent_session="m")
    listed = await backend.page(DEFAULT_TENANT, PageRequest(10))
    assert [session.id for session in listed] == ["m", "b", "z", "a", "kid"]
    keys = [(session.header.created_at, session.id) for session in listed]
    assert keys == sorted(keys)
    rest = await backend.page(DEFAULT_TENANT, PageRequest(2, after=keys[1]))
    assert [session.id for session in rest] == ["z", "a"]
    children = await backend.page(DEFAULT_TENANT, PageRequest(10, query=ListQuery(parent="m")))
    assert [session.id for session in children] == ["kid"]


# -- append ----------------------------------------------------------------------------------------------------------


async def test_an_append_is_stored_after_the_last_event(backend: Backend) -> None:
    seed = await create(backend, "s", turn(1))
    added = await append(backend, "s", turn(2))
    assert await everything(backend, "s") == seed + added
    found = await backend.find(key("s"))
    assert found is not None and found.head.count == 16
    assert b'"seq":8' in added.splitlines()[0]


async def test_an_append_staged_on_an_old_head_is_refused_and_stores_nothing(backend: Backend) -> None:
    await create(backend, "s", turn(1))
    early = await staged(backend, "s", turn(2))
    await append(backend, "s", turn(2, "first"))
    before = await everything(backend, "s")
    with pytest.raises(StaleHead):
        await backend.append(key("s"), early)
    assert await everything(backend, "s") == before


async def test_an_append_to_a_deleted_session_is_refused(backend: Backend) -> None:
    await create(backend, "s", turn(1))
    batch = await staged(backend, "s", turn(2))
    await backend.delete(key("s"))
    with pytest.raises(StaleHead):
        await backend.append(key("s"), batch)
    assert await backend.find(key("s")) is None


async def test_appends_to_many_sessions_at_once_are_each_stored_whole(backend: Backend) -> None:
    names = [f"s{number}" for number in range(12)]
    for name in names:
        await create(backend, name, turn(1))

    async def grow(name: str) -> bytes:
        added = b""
        for number in range(2, 6):
            added += await append(backend, name, turn(number, name))
        return added

    grown = await asyncio.gather(*(grow(name) for name in names))
    for name, added in zip(names, grown, strict=True):
        assert (await everything(backend, name)).endswith(added)
        found = await backend.find(key(name))
        assert found is not None and found.head.count == 40


# -- fork --------------------------------------------------------------------------------------------------------------


async def fork(backend: Backend, source: str, child: str, count: int) -> None:
    found = await backend.find(key(source))
    assert found is not None
    lineage = {"parent_session": source, "seed_length": count}
    await backend.create(key(child), new_instance(), lineage, SeedPrefix(key(source), found.header.instance, count))


async def seed_with(backend: Backend, source: str, count: int, events: Sequence[Any], *, now: int = NOW) -> SeedPrefix:
    """A fork's seed with ``events`` after it, staged on the seed's tip as the service stages them."""
    found = await backend.find(key(source))
    assert found is not None
    tip = await backend.seed_tip(key(source), found.header.instance, count, replace_targets(events))
    assert tip is not None
    batch = stage(tip, list(events), appended=True, now=now)
    return SeedPrefix(key(source), found.header.instance, count, then=batch)


async def test_a_seed_tip_is_the_state_a_fork_at_that_boundary_starts_from(backend: Backend) -> None:
    await create(backend, "src", [*turn(1, "first"), *turn(2, "second"), turn_start(3)])
    found = await backend.find(key("src"))
    assert found is not None
    await fork(backend, "src", "kid", 8)
    child = await backend.tip(key("kid"))
    assert child is not None

    seed = await backend.seed_tip(key("src"), found.header.instance, 8, [4])
    assert seed is not None
    assert (seed.state.count, seed.state.columns()) == (8, child.log.state.columns())
    assert list(seed.state.nodes) == list(child.log.state.nodes)
    assert seed.event(4) == orjson.loads((await everything(backend, "src")).splitlines()[4])
    empty = await backend.seed_tip(key("src"), found.header.instance, 0)
    assert empty is not None and (empty.state.count, list(empty.state.nodes)) == (0, [])


async def test_a_seed_tip_of_a_gone_incarnation_is_none(backend: Backend) -> None:
    await create(backend, "src", turn(1))
    found = await backend.find(key("src"))
    assert found is not None
    await backend.delete(key("src"))
    assert await backend.seed_tip(key("src"), found.header.instance, 8) is None
    await create(backend, "src", turn(1, "new"))
    assert await backend.seed_tip(key("src"), found.header.instance, 8) is None


async def test_a_fork_stores_the_events_staged_after_its_seed_as_they_are(backend: Backend) -> None:
    await create(backend, "src", [*turn(1), *turn(2)])
    seed = await seed_with(backend, "src", 8, turn(2, "edited"), now=NOW + 7)
    assert seed.then is not None
    await backend.create(key("kid"), new_instance(), {"parent_session": "src", "seed_length": 8}, seed)
    source_lines = (await everything(backend, "src")).splitlines(keepends=True)
    assert await everything(backend, "kid") == b"".join(source_lines[:8]) + seed.then.lines
    found = await backend.find(key("kid"))
    assert found is not None and found.head == head_of(seed.then.state)


async def test_a_fork_staged_on_an_incarnation_replaced_since_is_refused(backend: Backend) -> None:
    await create(backend, "src", turn(1))
    seed = await seed_with(backend, "src", 8, turn(2))
    await backend.delete(key("src"))
    await create(backend, "src", turn(1, "new"))
    with pytest.raises(StaleHead):
        await backend.create(key("kid"), new_instance(), {}, seed)
    assert await backend.find(key("kid")) is None


async def test_a_fork_starts_with_the_source_prefix_and_its_lineage(backend: Backend) -> None:
    await create(backend, "src", [*turn(1), *turn(2), turn_start(3)])
    await fork(backend, "src", "kid", 8)
    found = await backend.find(key("kid"))
    assert found is not None
    assert (found.header.parent_session, found.header.seed_length, found.head.count) == ("src", 8, 8)
    source_lines = await everything(backend, "src")
    assert await everything(backend, "kid") == b"".join(source_lines.splitlines(keepends=True)[:8])
    assert await backend.history(key("kid"), None) == await backend.history(key("src"), 7)
    tip = await backend.tip(key("kid"))
    assert tip is not None and tip.log.state.next_turn == 2


async def test_a_fork_and_its_source_never_change_each_other(backend: Backend) -> None:
    await create(backend, "src", turn(1))
    await fork(backend, "src", "kid", 8)
    source_before, child_before = await snapshot_of(backend, "src"), await snapshot_of(backend, "kid")
    await append(backend, "kid", turn(2, "child"))
    assert await snapshot_of(backend, "src") == source_before
    child_after = await snapshot_of(backend, "kid")
    await append(backend, "src", turn(2, "source"))
    assert await snapshot_of(backend, "kid") == child_after != child_before
    assert (await everything(backend, "kid")).count(b"child") and not (await everything(backend, "src")).count(b"child")


async def test_a_fork_of_a_fork_and_of_an_empty_log(backend: Backend) -> None:
    await create(backend, "a", turn(1))
    await fork(backend, "a", "b", 8)
    await append(backend, "b", turn(2))
    await fork(backend, "b", "c", 16)
    await create(backend, "empty")
    await fork(backend, "empty", "none", 0)
    assert await everything(backend, "c") == await everything(backend, "b")
    found = await backend.find(key("none"))
    assert found is not None and found.head.count == 0


async def test_deleting_a_source_leaves_its_children_whole(backend: Backend) -> None:
    await create(backend, "src", [*turn(1), *turn(2)])
    await fork(backend, "src", "kid", 16)
    await fork(backend, "src", "early", 8)
    kid, early = await everything(backend, "kid"), await everything(backend, "early")
    await backend.delete(key("src"))
    assert await backend.find(key("src")) is None
    assert await everything(backend, "kid") == kid
    assert await everything(backend, "early") == early
    await append(backend, "early", turn(2, "again"))
    assert (await backend.find(key("early"))) is not None


async def test_a_fork_of_a_replaced_incarnation_is_refused(backend: Backend) -> None:
    await create(backend, "src", turn(1))
    found = await backend.find(key("src"))
    assert found is not None
    await backend.delete(key("src"))
    await create(backend, "src", turn(1, "new"))
    stale = SeedPrefix(key("src"), found.header.instance, 8)
    with pytest.raises(StaleHead):
        await backend.create(key("kid"), new_instance(), {}, stale)
    assert await backend.find(key("kid")) is None


async def test_a_snapshot_is_the_log_at_the_moment_it_was_taken(backend: Backend) -> None:
    await create(backend, "src", turn(1))
    found = await backend.find(key("src"))
    assert found is not None
    pieces = backend.chunks(key("src"), found.header.instance, 8)
    await append(backend, "src", turn(2))
    taken = b"".join([piece async for piece in pieces])
    assert taken == b"".join((await everything(backend, "src")).splitlines(keepends=True)[:8])


# -- delete ------------------------------------------------------------------------------------------------------------


async def test_delete_removes_the_session_and_frees_its_id(backend: Backend) -> None:
    await create(backend, "s", turn(1))
    await create(backend, "other")
    await backend.delete(key("s"))
    assert await backend.find(key("s")) is None
    assert [session.id for session in await backend.page(DEFAULT_TENANT, PageRequest(10))] == ["other"]
    await create(backend, "s")
    found = await backend.find(key("s"))
    assert found is not None and found.head.count == 0


# -- tenants -----------------------------------------------------------------------------------------------------------


async def test_tenants_with_equal_ids_never_meet(backend: Backend) -> None:
    a = await create(backend, "demo", turn(1, "a"), tenant="acme")
    b = await create(backend, "demo", turn(1, "b"), tenant="globex")
    assert await everything(backend, "demo", "acme") == a
    assert await everything(backend, "demo", "globex") == b
    assert await backend.find(key("demo")) is None
    listed = await backend.page("acme", PageRequest(10))
    assert [(session.key.tenant, session.id) for session in listed] == [("acme", "demo")]
    await backend.delete(key("demo", "acme"))
    assert await backend.find(key("demo", "acme")) is None
    assert await everything(backend, "demo", "globex") == b


async def test_readiness_of_a_tenant_counts_its_live_sessions_only(backend: Backend) -> None:
    for session_id in ("a1", "a2", "a3", "gone"):
        await create(backend, session_id, tenant="acme")
    await create(backend, "b1", tenant="globex")
    await backend.delete(key("gone", "acme"))
    assert [(await backend.readiness(tenant)).sessions for tenant in ("acme", "globex", "initech")] == [3, 1, 0]
    assert (await backend.readiness()).sessions == 4


# -- durability ------------------------------------------------------------------------------------------------------


async def test_a_reopened_store_holds_everything_it_stored(make_backend: BackendFactory) -> None:
    if not make_backend.durable:
        pytest.skip(f"the {make_backend.kind} backend keeps nothing across a reopen, by design")
    backend = await make_backend.open()
    await create(backend, "src", turn(1), cwd="/w")
    await append(backend, "src", [*turn(2), turn_start(3)])
    await fork(backend, "src", "kid", 16)
    await create(backend, "gone")
    await backend.delete(key("gone"))
    await create(backend, "demo", turn(1), tenant="acme")
    before = {name: await snapshot_of(backend, name) for name in ("src", "kid")}
    acme = await everything(backend, "demo", "acme")
    backend = await make_backend.reopen(backend)
    assert {name: await snapshot_of(backend, name) for name in ("src", "kid")} == before
    assert await everything(backend, "demo", "acme") == acme
    assert await backend.find(key("gone")) is None
    assert (await backend.readiness()).sessions == 3
    await append(backend, "src", [turn_end(3)])  # the open turn goes on after the reopen
    found = await backend.find(key("src"))
    assert found is not None and found.head.count == 18 and found.head.forkable


async def test_a_restored_session_keeps_its_header_and_later_creates_follow_it(backend: Backend) -> None:
    log = seed_log(turn(1), now=NOW)
    header = SessionHeader(id="old", created_at=NOW + 10_000_000, instance="0123456789abcdef", cwd="/w")
    restored = await backend.restore(key("old", "acme"), header, log)
    assert (restored.header, restored.head.count) == (header, 8)
    assert await everything(backend, "old", "acme") == log.lines()
    with pytest.raises(SessionAlreadyExists):
        await backend.restore(key("old", "acme"), header, log)
    await create(backend, "new", tenant="acme")
    found = await backend.find(key("new", "acme"))
    assert found is not None and found.header.created_at > header.created_at
    assert await backend.tenants() == ["acme"]


# -- archive (spec 17) -----------------------------------------------------------------------------------------------


async def test_an_archived_session_keeps_its_log_and_is_listed_only_when_asked(backend: Backend) -> None:
    lines = await create(backend, "old", turn(1))
    await create(backend, "new")
    found = await backend.find(key("old"))
    assert found is not None and not found.header.archived

    archived = await backend.set_archived(key("old"), found.header.instance, True)

    assert archived is not None and archived.header == replace(found.header, archived=True)
    assert archived.head == found.head and await everything(backend, "old") == lines
    only = PageRequest(10, query=ListQuery(archived=True))
    hidden = PageRequest(10, query=ListQuery(archived=False))
    assert [session.id for session in await backend.page(DEFAULT_TENANT, only)] == ["old"]
    assert [session.id for session in await backend.page(DEFAULT_TENANT, hidden)] == ["new"]
    assert [session.id for session in await backend.page(DEFAULT_TENANT, PageRequest(10))] == ["old", "new"]
    await append(backend, "old", turn(2))  # appended to as any other, and still archived
    again = await backend.find(key("old"))
    assert again is not None and again.header.archived and again.head.count == 16


async def test_an_archive_of_another_incarnation_or_length_changes_nothing(backend: Backend) -> None:
    await create(backend, "s", turn(1))
    found = await backend.find(key("s"))
    assert found is not None

    assert await backend.set_archived(key("s"), "another", True) is None
    assert await backend.set_archived(key("s"), found.header.instance, True, expected_count=7) is None
    assert await backend.set_archived(key("nobody"), found.header.instance, True) is None
    unchanged = await backend.find(key("s"))
    assert unchanged is not None and not unchanged.header.archived
    done = await backend.set_archived(key("s"), found.header.instance, True, expected_count=8)
    assert done is not None and done.header.archived


async def test_a_fork_of_an_archived_session_and_a_new_incarnation_are_not_archived(backend: Backend) -> None:
    await create(backend, "src", turn(1))
    found = await backend.find(key("src"))
    assert found is not None
    await backend.set_archived(key("src"), found.header.instance, True)

    await fork(backend, "src", "kid", 8)
    await backend.delete(key("src"))
    await create(backend, "src")

    for name in ("kid", "src"):
        session = await backend.find(key(name))
        assert session is not None and not session.header.archived, name


async def test_archived_is_kept_across_a_reopen_and_by_a_restore(make_backend: BackendFactory) -> None:
    backend = await make_backend.open()
    log = seed_log(turn(1), now=NOW)
    header = SessionHeader(id="old", created_at=NOW, instance="0123456789abcdef", archived=True)
    restored = await backend.restore(key("old", "acme"), header, log)
    await create(backend, "plain")
    found = await backend.find(key("plain"))
    assert found is not None
    await backend.set_archived(key("plain"), found.header.instance, True)
    await backend.set_archived(key("plain"), found.header.instance, False)
    assert restored.header == header
    if not make_backend.durable:
        return
    backend = await make_backend.reopen(backend)
    kept = await backend.find(key("old", "acme"))
    plain = await backend.find(key("plain"))
    assert kept is not None and kept.header == header
    assert plain is not None and not plain.header.archived


# -- idempotency records (spec 8) ------------------------------------------------------------------------------------


def record(
    idempotency_key: str, session: Session, first_seq: int, *, tenant: str = DEFAULT_TENANT
) -> IdempotencyRecord:
    return IdempotencyRecord(
        tenant=tenant,
        key=idempotency_key,
        fingerprint="f" * 64,
        status=201,
        location=f"/sessions/{session.id}",
        body=b'{"answer":1}',
        created_at=wall_clock_ms(),
        session=session.id,
        instance=session.header.instance,
        first_seq=first_seq,
        end_seq=session.head.count,
    )


async def test_a_record_is_kept_with_the_change_it_made(make_backend: BackendFactory) -> None:
    backend = await make_backend.open()
    log = seed_log(turn(1), now=NOW)
    await backend.create(key("s"), new_instance(), {}, SeedLog(log), remember=lambda made: record("k1", made, 0))
    kept = await backend.recall(DEFAULT_TENANT, "k1")
    assert kept is not None and (kept.session, kept.end_seq, kept.body) == ("s", 8, b'{"answer":1}')
    batch = await staged(backend, "s", turn(2))
    after = await backend.find(key("s"))
    assert after is not None
    grown = Session(after.key, after.header, head_of(batch.state), after.changed_at)
    await backend.append(key("s"), batch, remember=[record("k2", grown, 8)])
    kept = await backend.recall(DEFAULT_TENANT, "k2")
    assert kept is not None and (kept.first_seq, kept.end_seq) == (8, 16)
    assert await backend.recall("other-tenant", "k2") is None
    if make_backend.durable:
        backend = await make_backend.reopen(backend)
        assert (await backend.recall(DEFAULT_TENANT, "k1")) is not None
        assert (await backend.recall(DEFAULT_TENANT, "k2")) is not None


async def test_a_kept_key_refuses_a_second_change_which_then_makes_nothing(backend: Backend) -> None:
    await create(backend, "s", turn(1))
    found = await backend.find(key("s"))
    assert found is not None
    await backend.create(
        key("t"), new_instance(), {}, SeedLog(seed_log([], now=NOW)), remember=lambda m: record("k", m, 0)
    )
    with pytest.raises(IdempotencyKeyTaken):
        await backend.create(
            key("u"), new_instance(), {}, SeedLog(seed_log([], now=NOW)), remember=lambda m: record("k", m, 0)
        )
    assert await backend.find(key("u")) is None
    batch = await staged(backend, "s", turn(2))
    with pytest.raises(IdempotencyKeyTaken):
        await backend.append(key("s"), batch, remember=[record("k", found, 8)])
    assert (await everything(backend, "s")).count(b"\n") == 8


async def test_forgotten_records_are_gone_and_their_changes_stay(backend: Backend) -> None:
    await backend.create(
        key("s"), new_instance(), {}, SeedLog(seed_log(turn(1), now=NOW)), remember=lambda m: record("k", m, 0)
    )
    await backend.forget(wall_clock_ms() + 1)
    assert await backend.recall(DEFAULT_TENANT, "k") is None
    assert (await everything(backend, "s")).count(b"\n") == 8


async def test_a_record_outlives_the_deletion_of_its_session_until_it_is_forgotten(
    make_backend: BackendFactory,
) -> None:
    backend = await make_backend.open()
    made_at = wall_clock_ms()
    await backend.create(
        key("s"), new_instance(), {}, SeedLog(seed_log(turn(1), now=NOW)), remember=lambda m: record("made", m, 0)
    )
    batch = await staged(backend, "s", turn(2))
    found = await backend.find(key("s"))
    assert found is not None
    grown = Session(found.key, found.header, head_of(batch.state), found.changed_at)
    await backend.append(key("s"), batch, remember=[replace(record("grew", grown, 8), created_at=made_at - 10_000)])
    await backend.delete(key("s"))
    await create(backend, "s")  # another incarnation under the id: the records are still those of the first
    if make_backend.durable:
        backend = await make_backend.reopen(backend)
    made, grew = await backend.recall(DEFAULT_TENANT, "made"), await backend.recall(DEFAULT_TENANT, "grew")
    assert made is not None and (made.session, made.end_seq) == ("s", 8)
    assert grew is not None and (grew.first_seq, grew.end_seq) == (8, 16)
    await backend.forget(made_at - 5_000)  # the append's record is past its keeping time, the create's is not
    if make_backend.durable:
        backend = await make_backend.reopen(backend)
    assert await backend.recall(DEFAULT_TENANT, "grew") is None
    assert await backend.recall(DEFAULT_TENANT, "made") is not None
    await backend.forget(wall_clock_ms() + 1)
    if make_backend.durable:
        backend = await make_backend.reopen(backend)
    assert await backend.recall(DEFAULT_TENANT, "made") is None
