"""Search through the service (spec 12): the index narrows, the exact rule decides, tenants never meet, and what
changed a moment ago is found as it is now."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from app.backends.base import Backend
from app.backends.files import FileBackend
from app.backends.memory import MemoryBackend
from app.backends.postgres import PostgresBackend
from app.domain.clock import wall_clock_ms
from app.domain.listing import ListQuery, PageRequest
from app.domain.session import SessionKey
from app.service.sessions import SessionService
from tests.events import (
    question_and_answer,
)

pytestmark = pytest.mark.anyio

BY_UPDATE = ListQuery(order="updated", descending=True)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=["memory", "postgres"])
async def service(request: pytest.FixtureRequest) -> AsyncIterator[SessionService]:
    """A service whose searches use FTS5 in memory, or PostgreSQL's full-text search."""
    backend: Backend = MemoryBackend(clock=wall_clock_ms)
    if request.param == "postgres":
        backend = PostgresBackend(request.getfixturevalue("forklog_db"), clock=wall_clock_ms)
    running = SessionService(backend)
    await running.start()
    try:
        yield running
    finally:
        await running.stop()


def title(text: str) -> dict[str, Any]:
    return {"type": "session/title", "data": {"title": text}}


async def caught_up(service: SessionService) -> None:
    for _ in range(400):
        if service.searcher.caught_up:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the index never caught up")


async def found(service: SessionService, q: str, tenant: str = "default") -> list[str]:
    page, _ = await service.reads.page(tenant, PageRequest(100, query=BY_UPDATE), q=q)
    return [session.id for session, _ in page]


async def test_the_index_and_the_exact_rule_agree_before_and_after_indexing(service: SessionService) -> None:
    await service.create(
        "default", "a", [title("Rocket launch"), *question_and_answer("fuel levels?", "nominal")], None
    )
    await service.create("default", "b", question_and_answer("rocket science", "is hard"), None)
    before = [await found(service, q) for q in ("rocket", "rocket launch", "launc", "fuel nominal", "nomina fuel")]
    await caught_up(service)
    after = [await found(service, q) for q in ("rocket", "rocket launch", "launc", "fuel nominal", "nomina fuel")]
    assert before == after == [["b", "a"], ["a"], ["a"], ["a"], []]


async def test_a_renamed_session_no_longer_matches_its_old_title(service: SessionService) -> None:
    await service.create("default", "s", [title("Old name")], None)
    await caught_up(service)
    assert await found(service, "old") == ["s"]
    await service.append(SessionKey("default", "s"), [title("New name")])
    assert await found(service, "old") == []  # at once, before the index knows
    await caught_up(service)
    assert await found(service, "old") == []  # the index still holds the old words: the rule decides
    assert await found(service, "new name") == ["s"]


async def test_a_deleted_session_is_never_found(service: SessionService) -> None:
    await service.create("default", "gone", question_and_answer("ephemeral", "yes"), None)
    await caught_up(service)
    await service.delete(SessionKey("default", "gone"))
    assert await found(service, "ephemeral") == []
    await caught_up(service)
    assert await found(service, "ephemeral") == []


async def test_tenants_never_see_each_others_sessions(service: SessionService) -> None:
    await service.create("acme", "s", question_and_answer("shared secret", "ok"), None)
    await service.create("other", "s", question_and_answer("shared words", "ok"), None)
    await caught_up(service)
    assert await found(service, "secret", "acme") == ["s"]
    assert await found(service, "secret", "other") == []
    assert await found(service, "shared", "other") == ["s"]
    assert await found(service, "shared", "default") == []


async def test_a_match_names_the_first_message_holding_the_first_word(service: SessionService) -> None:
    await service.create(
        "default",
        "s",
        [title("Kettle"), *question_and_answer("boil the kettle", "the kettle is boiling")],
        {"cwd": "/tea"},
    )
    await caught_up(service)
    page, _ = await service.reads.page("default", PageRequest(5, query=BY_UPDATE), q="kettle boil")
    ((_, match),) = page
    assert match is not None and (match.seq, match.snippet) == (2, "boil the kettle")
    page, _ = await service.reads.page("default", PageRequest(5, query=BY_UPDATE), q="tea")
    ((_, match),) = page
    assert match is not None and (match.seq, match.snippet) == (None, "/tea")


async def test_the_file_index_survives_a_restart_and_a_lost_file(tmp_path: Path) -> None:
    index = tmp_path / "search" / "search.sqlite3"
    first = SessionService(FileBackend(tmp_path, clock=wall_clock_ms, sync=False), search_index=index)
    await first.start()
    await first.create("default", "kept", question_and_answer("durable words", "ok"), None)
    await caught_up(first)
    await first.stop()
    assert index.exists()

    second = SessionService(FileBackend(tmp_path, clock=wall_clock_ms, sync=False), search_index=index)
    await second.start()
    await caught_up(second)
    assert await found(second, "durable") == ["kept"]
    await second.stop()

    for suffix in ("", "-wal", "-shm"):
        Path(f"{index}{suffix}").unlink(missing_ok=True)
    third = SessionService(FileBackend(tmp_path, clock=wall_clock_ms, sync=False), search_index=index)
    await third.start()
    assert await found(third, "durable") == ["kept"]  # searched directly until the index is rebuilt
    await caught_up(third)
    assert await found(third, "durable") == ["kept"]
    await third.stop()


async def test_indexing_a_long_log_leaves_the_event_loop_to_other_requests(service: SessionService) -> None:
    turns = [
        event for number in range(1, 5001) for event in question_and_answer(f"question {number}", "answer", number)
    ]
    ticks: list[float] = []

    async def other_request() -> None:
        while True:
            ticks.append(time.perf_counter())
            await asyncio.sleep(0)

    await service.create("default", "long", turns, None)  # 30,000 events: many reads of the log to index
    ticking = asyncio.create_task(other_request())
    try:
        began = time.perf_counter()
        await caught_up(service)
        took = time.perf_counter() - began
    finally:
        ticking.cancel()
    longest = max(later - earlier for earlier, later in itertools.pairwise(ticks))
    # Each read of the log gives the loop back: no request waits for the whole log to be indexed.
    assert longest < took / 4, (longest, took)
    assert await found(service, "question 4999") == ["long"]


async def test_a_session_indexed_while_the_index_is_asked_is_still_found(
    service: SessionService, monkeypatch: pytest.MonkeyPatch
) -> None:
    await caught_up(service)
    await service.create("default", "s", question_and_answer("racing words", "ok"), None)
    engine = service.searcher._index
    ask = engine.candidates

    async def asked_on_a_snapshot_taken_before_the_round(tenant: str, words: tuple[str, ...]) -> set[str]:
        snapshot = await ask(tenant, words)  # "s" is not indexed yet
        await caught_up(service)  # meanwhile the round indexes it and takes it off the unsure sessions
        return snapshot

    monkeypatch.setattr(engine, "candidates", asked_on_a_snapshot_taken_before_the_round)
    assert await found(service, "racing") == ["s"]
