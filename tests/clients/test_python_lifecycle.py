"""The Python client's spec 17 calls (blocking and asyncio): ``update`` (archive), ``interrupt``, the ``archived``
listing filter and the Session's new members, against a real server and through the proxy that loses answers."""

from __future__ import annotations

import asyncio

import pytest
from forklog_client import (
    AsyncForklog,
    Forklog,
    ForklogError,
    NotInTurnError,
    SeqConflictError,
    SessionStats,
)

from tests.clients.proxy import Fault, FaultProxy
from tests.clients.turns import stored_events, turn
from tests.e2e.server import Server

pytestmark = pytest.mark.e2e

INTERRUPT = r"/interrupt$"


def test_update_archives_and_list_hides_it_unless_asked(server: Server, proxy: FaultProxy) -> None:
    proxy.plan(Fault("after_answer", r"^/sessions/py-arch-b$", "PATCH"))  # the archive's answer is lost once
    with Forklog(proxy.base, timeout=10.0) as client:
        for name in ("py-arch-a", "py-arch-b"):
            client.sessions.create(id=name, meta={"cwd": "/py-archive"})

        archived = client.sessions.update("py-arch-b", archived=True)
        hidden = [session.id for session in client.sessions.list(cwd="/py-archive")]
        only = [session.id for session in client.sessions.list(cwd="/py-archive", archived=True)]
        both = [session.id for session in client.sessions.list(cwd="/py-archive", archived="any", page_size=1)]
        with pytest.raises(SeqConflictError) as stale:
            client.sessions.update("py-arch-a", archived=True, expected_seq=4)
        back = client.sessions.update("py-arch-b", archived=False, instance=archived.instance)
        shown = [session.id for session in client.sessions.list(cwd="/py-archive")]

    assert proxy.faults_met() == ["after_answer"]  # lost, retried: the same flag set again
    assert archived.archived is True and back.archived is False
    assert (hidden, only, both, shown) == (["py-arch-a"], ["py-arch-b"], ["py-arch-a", "py-arch-b"], both)
    assert stale.value.problem["currentSeq"] == 0
    sent = [seen.query for seen in proxy.log if seen.method == "GET"]
    assert "archived=true" in sent[1] and "archived=any" in sent[2] and "archived" not in sent[0]


def test_interrupt_closes_the_open_turn_once_whatever_is_lost(server: Server, proxy: FaultProxy) -> None:
    proxy.plan(Fault("after_answer", INTERRUPT, "POST"))
    with Forklog(proxy.base, timeout=10.0) as client:
        client.sessions.create(id="py-interrupt")
        client.sessions.append("py-interrupt", [*turn(1), *turn(2)[:3]])  # turn 2 open, inside step 1

        closed = client.sessions.interrupt("py-interrupt", expected_seq=9)
        with pytest.raises(NotInTurnError) as refused:
            client.sessions.interrupt("py-interrupt")

    assert proxy.faults_met() == ["after_answer"]
    assert [event.type for event in closed.events] == ["step/end", "turn/end"]
    assert closed.events[-1].data["reason"] == {"kind": "interrupted"}
    assert [event["seq"] for event in stored_events(server, "py-interrupt")] == list(range(11))  # once
    keys = [seen.idempotency_key for seen in proxy.log if seen.path.endswith("/interrupt")]
    assert keys[0] is not None and keys[0] == keys[1]  # the retry sent the call's key
    session = closed.session
    assert session.open_turn is None and isinstance(session.stats, SessionStats)
    assert session.stats.turns == 2 and session.stats.steps == 2
    assert (session.usage, session.own_usage) == ({}, {})
    assert isinstance(refused.value, ForklogError) and refused.value.problem["lastTurnEndSeq"] == 10


def test_the_asyncio_client_archives_and_interrupts_alike(server: Server) -> None:
    async def walk() -> tuple[bool, list[str], list[str], str]:
        async with AsyncForklog(server.base, timeout=10.0) as client:
            await client.sessions.create(id="apy-life", meta={"cwd": "/apy-life"})
            await client.sessions.append("apy-life", turn(1)[:3])
            archived = await client.sessions.update("apy-life", archived=True)
            hidden = [session.id async for session in client.sessions.list(cwd="/apy-life")]
            shown = [session.id async for session in client.sessions.list(cwd="/apy-life", archived=True)]
            closed = await client.sessions.interrupt("apy-life")
            return bool(archived.archived), hidden, shown, closed.events[-1].type

    assert asyncio.run(asyncio.wait_for(walk(), 60)) == (True, [], ["apy-life"], "turn/end")


def test_a_session_from_an_older_server_has_none_for_the_new_members() -> None:
    from forklog_client import Session

    older = Session({"id": "s", "eventCount": 0})

    assert (older.archived, older.stats, older.usage, older.own_usage) == (None, None, None, None)
    stats = Session({"stats": {"turns": 1, "llmMs": 12.5, "ttftSteps": 1}}).stats
    assert stats is not None and (stats.turns, stats.llm_ms, stats.ttft_steps) == (1, 12.5, 1)
