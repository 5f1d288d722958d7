"""The storage seam's contract for spec 12, on every backend: what a sidebar shows of a session (title, preview,
bytes, last activity) kept as the log grows and across a reopen, and a fork whose own events come in the same
atomic step as its seed."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app.backends.base import Backend
from app.backends.files import FileBackend
from app.domain.clock import wall_clock_ms
from app.domain.dsh_records import encode_header
from app.domain.errors import EventRejected
from app.domain.ids import new_instance
from app.domain.listing import ListQuery, OrderKey, PageRequest
from app.domain.session import LogHead, Session
from app.domain.staging_rules import stage
from tests.backends.conftest import BackendFactory
from tests.backends.test_contract import NOW, append, create, everything, fork, key, seed_with, turn
from tests.events import turn_end, turn_start, user_message

pytestmark = pytest.mark.anyio


def title(text: Any) -> dict[str, Any]:
    return {"type": "session/title", "data": {"title": text, "messageSeqs": [1], "source": "model"}}


async def found(backend: Backend, session_id: str) -> Session:
    session = await backend.find(key(session_id))
    assert session is not None
    return session


def summary(head: LogHead) -> tuple[str | None, str | None, int]:
    return head.title, head.preview, head.body_bytes


# -- title, preview, bytes ---------------------------------------------------------------------------------------


async def test_title_preview_and_bytes_follow_the_log(backend: Backend) -> None:
    lines = await create(backend, "s", [title("Old"), *turn(1, "  first\n\tquestion  ")])
    assert summary((await found(backend, "s")).head) == ("Old", "first question 1", len(lines))

    appended = await append(backend, "s", [*turn(2, "second"), title("New name")])

    session = await found(backend, "s")
    assert summary(session.head) == ("New name", "first question 1", len(lines) + len(appended))
    assert session.head.body_bytes == len(await everything(backend, "s"))
    tip = await backend.tip(key("s"))
    assert tip is not None and summary(tip.session.head) == summary(session.head)


async def test_a_title_that_is_not_a_string_titles_nothing_and_a_log_without_messages_has_no_preview(
    backend: Backend,
) -> None:
    await create(backend, "s", [title("Named"), title(None)])
    assert summary((await found(backend, "s")).head)[:2] == (None, None)


async def test_the_preview_is_cut_after_200_characters(backend: Backend) -> None:
    text = "é" * 150 + " " + "😀" * 100
    await create(backend, "s", [turn_start(1), user_message(text), turn_end(1)])
    preview = (await found(backend, "s")).head.preview
    assert preview == text[:200] and len(preview) == 200


async def test_the_updated_time_is_the_last_events_or_the_creation(backend: Backend) -> None:
    await create(backend, "empty")
    empty = await found(backend, "empty")
    assert empty.updated_at == empty.header.created_at
    await create(backend, "old", turn(1))  # its events' times (NOW) are older than its creation
    old = await found(backend, "old")
    assert old.updated_at == old.header.created_at
    await append(backend, "old", turn(2))
    assert (await found(backend, "old")).updated_at == max(old.header.created_at, NOW)


async def test_a_fork_shows_what_its_seed_holds(backend: Backend) -> None:
    await create(backend, "src", [*turn(1, "first"), title("One"), *turn(2, "second"), title("Two"), *turn(3)])
    source = await found(backend, "src")
    await fork(backend, "src", "all", source.head.count)
    await fork(backend, "src", "early", 8)
    await create(backend, "plain", turn(1))
    await fork(backend, "plain", "none", 0)

    lines = (await everything(backend, "src")).splitlines(keepends=True)
    assert summary((await found(backend, "all")).head) == ("Two", "first 1", len(b"".join(lines)))
    assert summary((await found(backend, "early")).head) == (None, "first 1", len(b"".join(lines[:8])))
    assert summary((await found(backend, "none")).head) == (None, None, 0)
    await fork(backend, "src", "middle", 17)
    assert summary((await found(backend, "middle")).head) == ("One", "first 1", len(b"".join(lines[:17])))


async def test_a_title_in_a_message_text_is_no_title(backend: Backend) -> None:
    await create(backend, "src", [*turn(1, '"session/title"'), *turn(2)])
    await append(backend, "src", [title("Later")])
    await fork(backend, "src", "kid", 16)
    assert (await found(backend, "kid")).head.title is None


async def test_a_reopened_store_keeps_what_the_sidebar_shows(make_backend: BackendFactory) -> None:
    if not make_backend.durable:
        pytest.skip(f"the {make_backend.kind} backend keeps nothing across a reopen, by design")
    backend = await make_backend.open()
    await create(backend, "s", [title("Kept"), *turn(1, "remember me")])
    await append(backend, "s", [*turn(2), title("Kept too")])
    await fork(backend, "s", "kid", 9)
    before = {name: (await found(backend, name)).head for name in ("s", "kid")}
    backend = await make_backend.reopen(backend)
    assert {name: (await found(backend, name)).head for name in ("s", "kid")} == before
    assert summary(before["s"]) == ("Kept too", "remember me 1", len(await everything(backend, "s")))


async def test_a_start_after_a_crash_rebuilds_what_the_sidebar_shows(make_backend: BackendFactory) -> None:
    if not make_backend.files:
        pytest.skip("a crash without the last checkpoints is the file backend's")
    backend = await make_backend.open()
    assert isinstance(backend, FileBackend)
    await create(backend, "s", [title("First"), *turn(1, "hello")])
    await backend.checkpoint()
    await append(backend, "s", [*turn(2), title("After the checkpoint")])
    before = (await found(backend, "s")).head
    await backend.close(checkpoint=False)
    make_backend.opened.remove(backend)
    backend = await make_backend.open()
    assert (await found(backend, "s")).head == before
    assert before.title == "After the checkpoint"


async def test_export_writes_as_many_bytes_as_the_session_says(backend: Backend) -> None:
    await create(backend, "s", [title("x"), *turn(1)], cwd="/w")
    session = await found(backend, "s")
    exported = encode_header(session.header) + await everything(backend, "s")
    assert len(encode_header(session.header)) + session.head.body_bytes == len(exported)


# -- a fork with its own events ------------------------------------------------------------------------------------


async def fork_with(backend: Backend, source: str, child: str, count: int, events: list[Any]) -> None:
    lineage = {"parent_session": source, "seed_length": count}
    await backend.create(
        key(child), new_instance(), lineage, await seed_with(backend, source, count, events, now=NOW + 5)
    )


async def test_a_fork_with_events_holds_its_seed_and_then_them(backend: Backend) -> None:
    await create(backend, "src", [*turn(1, "first"), *turn(2, "second")])
    await fork_with(backend, "src", "edit", 8, turn(2, "edited"))

    child = await found(backend, "edit")
    source_lines = (await everything(backend, "src")).splitlines(keepends=True)
    child_lines = (await everything(backend, "edit")).splitlines(keepends=True)
    assert child_lines[:8] == source_lines[:8]
    assert len(child_lines) == child.head.count == 16 and child.header.seed_length == 8
    assert b"edited 2" in child_lines[9] and b'"seq":9' in child_lines[9] and b'"time":' in child_lines[9]
    assert child.head.body_bytes == len(b"".join(child_lines))
    assert (child.head.last_type, child.head.forkable, child.head.preview) == ("turn/end", True, "first 1")
    assert await backend.history(key("edit"), 7) == await backend.history(key("src"), 7)
    await append(backend, "edit", turn(3))  # the child goes on from its events
    assert (await found(backend, "edit")).head.count == 24


async def test_a_fork_with_events_from_the_empty_seed(backend: Backend) -> None:
    await create(backend, "src", turn(1, "old"))
    await fork_with(backend, "src", "fresh", 0, turn(1, "new"))
    child = await found(backend, "fresh")
    assert (child.head.count, child.head.preview) == (8, "new 1")


async def test_a_fork_with_a_bad_event_makes_nothing(backend: Backend) -> None:
    await create(backend, "src", turn(1))
    with pytest.raises(EventRejected) as refused:
        await fork_with(backend, "src", "bad", 8, [turn_start(2), turn_start(3)])
    assert refused.value.index == 1
    assert await backend.find(key("bad")) is None
    assert [session.id for session in await backend.page("default", PageRequest(10))] == ["src"]
    await fork_with(backend, "src", "bad", 8, turn(2))  # the id is free
    assert (await found(backend, "bad")).head.count == 16


async def test_a_reopened_store_holds_a_fork_with_events(make_backend: BackendFactory) -> None:
    if not make_backend.durable:
        pytest.skip(f"the {make_backend.kind} backend keeps nothing across a reopen, by design")
    backend = await make_backend.open()
    await create(backend, "src", turn(1))
    await fork_with(backend, "src", "kid", 8, turn(2, "mine"))
    before = await everything(backend, "kid"), (await found(backend, "kid")).head
    backend = await make_backend.reopen(backend)
    assert (await everything(backend, "kid"), (await found(backend, "kid")).head) == before


# -- lists by last activity, filtered ------------------------------------------------------------------------------


async def ids(backend: Backend, query: ListQuery, after: OrderKey | None = None, limit: int = 100) -> list[str]:
    return [s.id for s in await backend.page("default", PageRequest(limit, after=after, query=query))]


BY_UPDATE = ListQuery(order="updated", descending=True)


async def test_a_list_by_last_activity_follows_the_appends(backend: Backend) -> None:
    for name in ("a", "b", "c"):
        await create(backend, name)
    assert await ids(backend, BY_UPDATE) == ["c", "b", "a"]
    assert await ids(backend, ListQuery(order="updated")) == ["a", "b", "c"]

    stale = await append_now(backend, "a", [note_event()])
    assert stale  # "a" was appended to last: it comes first now
    assert await ids(backend, BY_UPDATE) == ["a", "c", "b"]
    await backend.delete(key("c"))
    assert await ids(backend, BY_UPDATE) == ["a", "b"]


async def test_a_list_after_many_appends_and_a_delete_puts_each_session_at_its_last_append(backend: Backend) -> None:
    for name in ("a", "b", "c", "d"):
        await create(backend, name)
    assert await ids(backend, BY_UPDATE) == ["d", "c", "b", "a"]
    for name in ("b", "d", "b", "a", "c"):  # several sessions grow between two lists, "b" twice
        await append_now(backend, name, [note_event()])
    await backend.delete(key("d"))  # grew, then went: never listed again
    assert await ids(backend, BY_UPDATE) == ["c", "a", "b"]
    assert await ids(backend, ListQuery(order="updated")) == ["b", "a", "c"]
    a = await found(backend, "a")
    await append_now(backend, "b", [note_event()])
    assert await ids(backend, BY_UPDATE, BY_UPDATE.key_of(a)) == []  # after "a": "b" moved ahead of it
    assert await ids(backend, ListQuery(order="updated"), ListQuery(order="updated").key_of(a)) == ["c", "b"]


async def test_pages_by_last_activity_continue_after_a_key_in_either_direction(backend: Backend) -> None:
    for name in ("a", "b", "c", "d"):
        await create(backend, name)
    sessions = {name: await found(backend, name) for name in ("a", "b", "c", "d")}
    assert await ids(backend, BY_UPDATE, BY_UPDATE.key_of(sessions["c"])) == ["b", "a"]
    assert await ids(backend, ListQuery(order="updated"), (sessions["b"].updated_at, "b"), limit=1) == ["c"]
    newest_first = ListQuery(descending=True)
    assert await ids(backend, newest_first) == ["d", "c", "b", "a"]
    assert await ids(backend, newest_first, newest_first.key_of(sessions["c"])) == ["b", "a"]


async def test_a_list_keeps_only_the_sessions_its_filters_name(backend: Backend) -> None:
    await create(backend, "plain")
    await create(backend, "here", cwd="/here")
    await create(backend, "sub", cwd="/here", origin="subagent", agent_preset="coder")
    await create(backend, "coder", agent_preset="coder")
    assert await ids(backend, ListQuery(cwd="/here")) == ["here", "sub"]
    assert await ids(backend, ListQuery(origin="subagent", order="updated")) == ["sub"]
    assert await ids(backend, ListQuery(agent_preset="coder", descending=True)) == ["coder", "sub"]
    assert await ids(backend, ListQuery(cwd="/here", agent_preset="coder")) == ["sub"]
    assert await ids(backend, ListQuery(cwd="/nowhere")) == []


async def test_a_reopened_store_lists_by_last_activity(make_backend: BackendFactory) -> None:
    if not make_backend.durable:
        pytest.skip(f"the {make_backend.kind} backend keeps nothing across a reopen, by design")
    backend = await make_backend.open()
    for name in ("a", "b", "c"):
        await create(backend, name, turn(1))
    await append_now(backend, "a", turn(2))
    before = await ids(backend, BY_UPDATE)
    backend = await make_backend.reopen(backend)
    assert await ids(backend, BY_UPDATE) == before == ["a", "c", "b"]
    await append_now(backend, "b", turn(2))
    assert await ids(backend, BY_UPDATE) == ["b", "a", "c"]


def note_event() -> dict[str, Any]:
    return {"type": "forklog-test/note", "data": {"text": "later"}}


async def append_now(backend: Backend, session_id: str, events: list[Any]) -> bytes:
    """An append at the present time (the suite's ``append`` stamps events with a time long past)."""
    await asyncio.sleep(0.02)  # later than every createdAt given so far (creates in one millisecond run ahead)
    tip = await backend.tip(key(session_id))
    assert tip is not None
    batch = stage(tip.log, events, appended=True, now=wall_clock_ms())
    await backend.append(key(session_id), batch)
    return batch.lines
