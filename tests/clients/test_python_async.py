"""The asyncio client (``AsyncForklog``): the same promises as the blocking one, through the same proxy."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest
import zstandard
from forklog_client import (
    AsyncForklog,
    ConnectionError,
    NotAtTurnBoundaryError,
    SessionNotFoundError,
)

from tests.clients.proxy import Fault, FaultProxy
from tests.clients.turns import exists, note, session_ids, stored_events, turn
from tests.e2e.server import Server

pytestmark = pytest.mark.e2e

T = TypeVar("T")
APPEND = r"^/sessions/[^/]+/events$"
STREAM = r"/events/stream$"


def run(work: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(work, 60))


def client_of(base: str, **options: Any) -> AsyncForklog:
    return AsyncForklog(base, timeout=10.0, **options)


def test_the_walk_with_every_method_a_coroutine(server: Server) -> None:
    async def walk() -> tuple[Any, ...]:
        async with client_of(server.base) as client:
            await client.sessions.create(id="apy-walk", meta={"cwd": "/work"})
            appended = await client.sessions.append("apy-walk", turn(1))
            child = await client.sessions.fork("apy-walk", session_id="apy-walk-child")
            history = await client.sessions.history("apy-walk-child")
            await client.sessions.append("apy-walk", [{"type": "turn/start", "data": {"turn": 2}}])
            with pytest.raises(NotAtTurnBoundaryError) as refused:
                await client.sessions.fork("apy-walk")
            listed = [session.id async for session in client.sessions.list(parent="apy-walk", page_size=1)]
            events = [event.seq async for event in client.sessions.events("apy-walk", page_size=4)]
            lineage = await client.sessions.lineage("apy-walk-child")
            snapshot = await client.sessions.snapshot("apy-walk", at_seq=5)
            await client.sessions.delete("apy-walk-child")
            return appended, child, history, refused.value, listed, events, lineage, snapshot

    appended, child, history, refused, listed, events, lineage, snapshot = run(walk())

    assert appended.session.event_count == 6
    assert (child.parent_session, child.seed_length) == ("apy-walk", 6)
    assert [message.role for message in history.messages] == ["user", "assistant"]
    assert refused.problem["openTurn"] == 2
    assert listed == ["apy-walk-child"]
    assert events == list(range(7))
    assert lineage.ancestors[0].id == "apy-walk"
    assert len(snapshot.seed) == 6
    assert not exists(server, "apy-walk-child")


@pytest.mark.parametrize("kind", ["before_request", "after_answer"])
def test_a_lost_change_is_applied_exactly_once(server: Server, proxy: FaultProxy, kind: str) -> None:
    prefix = f"apy-once-{kind}"
    proxy.plan(
        Fault(kind, r"^/sessions$", "POST"),
        Fault(kind, APPEND, "POST", times=2),
        Fault(kind, r"/fork$", "POST"),
        Fault(kind, rf"^/sessions/{prefix}-child$", "DELETE"),
    )

    async def changes() -> None:
        async with client_of(proxy.base) as client:
            await client.sessions.create(id=prefix)
            await client.sessions.append(prefix, turn(1))
            await client.sessions.fork(prefix, session_id=f"{prefix}-child")
            await client.sessions.delete(f"{prefix}-child")

    run(changes())

    assert proxy.faults_met() == [kind] * 5
    assert [event["seq"] for event in stored_events(server, prefix)] == list(range(6))
    assert session_ids(server, prefix) == [prefix]


def test_a_tail_sees_every_event_once_across_drops_and_ends_with_its_session(server: Server, proxy: FaultProxy) -> None:
    proxy.plan(
        Fault("end_stream", STREAM, frames=2),
        Fault("mid_stream", STREAM, frames=5),
        Fault("before_request", STREAM, times=2),
        Fault("end_stream", STREAM, frames=0),
        Fault("mid_stream", STREAM, frames=7),
    )

    async def follow_while_writing() -> list[int]:
        async with client_of(server.base) as writer, client_of(proxy.base) as reader:
            await writer.sessions.create(id="apy-tail")

            seen_all = asyncio.Event()

            async def write() -> None:
                for number in range(1, 6):
                    await writer.sessions.append("apy-tail", turn(number))
                    await asyncio.sleep(0.05)
                await seen_all.wait()  # a session deleted while its tail is away takes its unseen events along
                await writer.sessions.delete("apy-tail")

            writing = asyncio.create_task(write())
            seqs: list[int] = []
            async with contextlib.aclosing(reader.sessions.tail("apy-tail")) as tail:
                async for event in tail:
                    seqs.append(event.seq)
                    if event.seq == 29:
                        seen_all.set()
            await writing
            return seqs

    assert run(follow_while_writing()) == list(range(30))
    assert proxy.pending() == []


def test_a_tail_raises_for_a_missing_session_and_after_failed_connects(server: Server, proxy: FaultProxy) -> None:
    async def tails() -> tuple[BaseException | None, BaseException | None]:
        async with client_of(proxy.base, max_retries=2) as client:
            missing = gave_up = None
            try:
                await anext(client.sessions.tail("apy-never-made"))
            except SessionNotFoundError as refused:
                missing = refused
            async with client_of(server.base) as direct:
                await direct.sessions.create(id="apy-unreachable")
            proxy.plan(Fault("before_request", STREAM, times=3))
            try:
                await anext(client.sessions.tail("apy-unreachable"))
            except ConnectionError as lost:
                gave_up = lost
            return missing, gave_up

    missing, gave_up = run(tails())

    assert isinstance(missing, SessionNotFoundError)
    assert isinstance(gave_up, ConnectionError)
    assert proxy.faults_met() == ["before_request"] * 3


def test_random_drops_change_nothing_twice_and_miss_nothing(server: Server, proxy: FaultProxy) -> None:
    async def walk() -> list[int]:
        async with client_of(server.base) as direct:
            await direct.sessions.create(id="apy-random")
        proxy.plan(probability=0.3, seed=15)
        async with client_of(proxy.base, max_retries=10) as client:
            seqs: list[int] = []

            async def follow() -> list[int]:
                async for event in client.sessions.tail("apy-random"):
                    seqs.append(event.seq)
                return seqs

            following = asyncio.create_task(follow())
            for number in range(1, 5):
                await client.sessions.append("apy-random", turn(number))
                await client.sessions.fork("apy-random", session_id=f"apy-random-{number}")
                await client.sessions.append("apy-random", [note(number)])
            while len(seqs) < 4 * 7 and not following.done():  # a deletion takes the events a tail has not seen
                await asyncio.sleep(0.01)
            await client.sessions.delete("apy-random")
            return await following

    seqs = run(walk())

    assert seqs == list(range(4 * 7))
    assert len(stored_events(server, "apy-random-4")) == 4 * 7 - 1
    assert session_ids(server, "apy-random") == [f"apy-random-{n}" for n in range(1, 5)]
    assert len(proxy.faults_met()) >= 5


def test_the_async_client_reads_the_log_raw_or_zstd(server: Server) -> None:
    async def read() -> tuple[bytes, bytes]:
        async with client_of(server.base) as client:
            await client.sessions.create(id="apy-log")
            await client.sessions.append("apy-log", turn(1))
            return await client.sessions.log("apy-log"), await client.sessions.log("apy-log", compression="zstd")

    raw, compressed = run(read())

    assert raw.count(b"\n") == 1 + len(turn(1))
    assert zstandard.ZstdDecompressor().stream_reader(compressed, read_across_frames=True).read() == raw
