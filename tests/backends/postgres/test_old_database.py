"""A database an older forklog wrote (schema version 3 or 5, before spec 12): today's forklog migrates it and serves
its sessions with their title, preview, bytes and updatedAt, and reads, lists, searches, forks and appends them; a
database outage during that upgrade is waited out like any other (spec 6)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from pathlib import Path
from typing import Any

import asyncpg
import orjson
import pytest
from starlette.testclient import TestClient

from app.api.app import create_app
from app.api.settings import Settings
from app.backends.postgres import PostgresBackend, state_fill
from app.backends.postgres.chains import ChainCache
from app.backends.postgres.pool import Connection
from app.backends.postgres.schema import MIGRATIONS, SCHEMA_VERSION
from app.domain.clock import wall_clock_ms
from app.domain.session import DEFAULT_TENANT, SessionKey
from tests.api.helpers import append, assert_problem, create, fork, get_session, wait_ready
from tests.backends.postgres.layout import PACKED_VERSION, unpack_everything
from tests.events import question_and_answer
from tests.support.postgres import PostgresCluster

SIDEBAR = ("title", "preview", "bytes", "updatedAt", "eventCount", "lastTurnEndSeq", "stats", "usage", "ownUsage")


def title(text: str) -> dict[str, Any]:
    return {"type": "session/title", "data": {"title": text}}


def serve(url: str, data_dir: Path) -> TestClient:
    client = TestClient(
        create_app(Settings(data_dir=data_dir, fsync=False, database_url=url)), base_url="http://localhost"
    )
    client.__enter__()
    wait_ready(client)
    return client


# What each schema version added beyond the sidebar's members, undone to make a database of an older version.
ADDED_BY_VERSION = {
    4: "ALTER TABLE forklog_sessions DROP COLUMN updated_at",
    5: "DROP TABLE forklog_search",
    6: "DROP TABLE forklog_state_fill",
    7: "SELECT 1",  # search's rows emptied: nothing to undo (an older version's rows are refilled anyway)
    8: "ALTER TABLE forklog_sessions DROP COLUMN changed_at",
    # spec 17's figures (found by name: the lead renumbers migrations that land together)
    next(
        number for number, sql in enumerate(MIGRATIONS, 1) if "forklog_stats_fill" in sql
    ): "DROP TABLE forklog_stats_fill",
}
# Spec 17's migrations (the stats' fill list, archive's column), by their places, wherever the branches put them.
ADDED_BY_VERSION.update(
    {
        next(number for number, text in enumerate(MIGRATIONS, 1) if "forklog_stats_fill" in text): (
            "DROP TABLE forklog_stats_fill"
        ),
        next(number for number, text in enumerate(MIGRATIONS, 1) if "COLUMN IF NOT EXISTS archived" in text): (
            "ALTER TABLE forklog_sessions DROP COLUMN archived"
        ),
    }
)


async def as_version_left_it(url: str, version: int) -> None:
    """Rewrite the database as forklog's schema ``version`` (3 to 5, before spec 12) wrote it: the rules' state of 8
    columns and checkpoints of 3 (``encode_state`` and ``encode_checkpoint`` of that code: orjson of the list),
    without what the later versions added."""
    conn = await asyncpg.connect(url)
    try:
        async with conn.transaction():
            for log, state in await conn.fetch("SELECT log, state FROM forklog_sessions"):
                old = orjson.dumps(orjson.loads(state)[:8]).decode()
                await conn.execute("UPDATE forklog_sessions SET state = $2 WHERE log = $1", log, old)
            for log, seq, point in await conn.fetch("SELECT log, seq, checkpoint FROM forklog_turn_ends"):
                old = orjson.dumps(orjson.loads(point)[:3]).decode()
                await conn.execute(
                    "UPDATE forklog_turn_ends SET checkpoint = $3 WHERE log = $1 AND seq = $2", log, seq, old
                )
            for added in range(SCHEMA_VERSION, version, -1):
                if added == PACKED_VERSION:
                    await unpack_everything(conn)  # every event back in a row of its own
                else:
                    await conn.execute(ADDED_BY_VERSION[added])
            await conn.execute("UPDATE forklog_schema SET version = $1", version)
    finally:
        await conn.close()


def test_an_upgraded_server_serves_the_sessions_an_older_one_stored(forklog_db: str, tmp_path: Path) -> None:
    old = serve(forklog_db, tmp_path / "one")
    create(
        old, id="plain", seed=question_and_answer("Where is the   harbour?", "Down the hill", 1), meta={"cwd": "/port"}
    )
    create(
        old, id="titled", seed=[title("Boat trip"), *question_and_answer("rent a boat", "ok", 1), title("Sailing trip")]
    )
    append(old, "titled", question_and_answer("and a sail", "sure", 2))
    fork(old, "titled", sessionId="child", atTurn=1)  # a fork before the last title: its own title is the first
    create(old, id="empty")
    before = {item["id"]: item for item in old.get("/sessions", params={"limit": 100}).json()["items"]}
    old.__exit__(None, None, None)
    asyncio.run(as_version_left_it(forklog_db, 3))

    new = serve(forklog_db, tmp_path / "two")
    try:
        for session_id, was in before.items():
            now = get_session(new, session_id)
            assert {member: now[member] for member in SIDEBAR} == {member: was[member] for member in SIDEBAR}
        assert before["titled"]["title"] == "Sailing trip" and before["child"]["title"] == "Boat trip"
        assert before["plain"]["preview"] == "Where is the harbour?"
        listed = new.get("/sessions", params={"order": "updated"}).json()["items"]
        assert [item["id"] for item in listed] == ["empty", "child", "titled", "plain"]
        searched = new.get("/sessions", params={"q": "harbour dow"}).json()["items"]
        assert [item["id"] for item in searched] == ["plain"]
        assert [item["id"] for item in new.get("/sessions", params={"q": "boat"}).json()["items"]] == [
            "child",
            "titled",
        ]

        # An append counts from the filled bytes: it adds what the same turn adds to a session made today.
        third = question_and_answer("a map", "here", 3)  # the same events (message ids included) for both
        grown = append(new, "titled", third)["session"]
        twin = create(
            new,
            id="twin00",
            seed=[*question_and_answer("rent a boat", "ok", 1), *question_and_answer("and a sail", "sure", 2)],
        )
        twin_grown = append(new, "twin00", third)["session"]
        assert grown["bytes"] - before["titled"]["bytes"] == twin_grown["bytes"] - twin["bytes"] > 0
        assert grown["title"] == "Sailing trip" and grown["preview"] == "rent a boat"
        # A fork at an old turn/end takes the bytes its filled checkpoint holds; with events, their bytes too.
        again = fork(new, "titled", sessionId="again", atTurn=1)
        assert {member: again[member] for member in ("bytes", "title", "preview")} == {
            member: before["child"][member] for member in ("bytes", "title", "preview")
        }
        edit = question_and_answer("rent a kayak", "fine", 2)
        kayak = fork(new, "titled", sessionId="kayak", atTurn=1, events=edit)
        paddled = append(new, "again", edit)["session"]
        assert (kayak["bytes"], kayak["title"], kayak["preview"]) == (paddled["bytes"], "Boat trip", "rent a boat")
        assert [item["id"] for item in new.get("/sessions", params={"q": "kayak"}).json()["items"]] == [
            "again",
            "kayak",
        ]
    finally:
        new.__exit__(None, None, None)


def test_replicas_starting_together_on_an_older_database_share_the_fill(forklog_db: str, tmp_path: Path) -> None:
    old = serve(forklog_db, tmp_path / "one")
    for number in range(120):  # more than one batch of the fill
        create(
            old, id=f"s{number}", seed=[title(f"Trip {number}"), *question_and_answer(f"question {number}", "ok", 1)]
        )
    before = {item["id"]: item for item in old.get("/sessions", params={"limit": 1000}).json()["items"]}
    old.__exit__(None, None, None)
    asyncio.run(as_version_left_it(forklog_db, 3))

    async def start_two() -> list[dict[str, Any]]:
        replicas = [PostgresBackend(forklog_db, clock=wall_clock_ms) for _ in range(2)]
        await asyncio.gather(*(replica.open() for replica in replicas))
        try:
            found = []
            for number in range(120):
                for replica in replicas:
                    session = await replica.find(SessionKey(DEFAULT_TENANT, f"s{number}"))
                    assert session is not None
                    found.append({"id": session.id, "title": session.head.title})
            return found
        finally:
            for replica in replicas:
                await replica.close()

    for session in asyncio.run(start_two()):
        assert session["title"] == before[session["id"]]["title"] == f"Trip {session['id'][1:]}"


def test_a_database_outage_during_the_upgrade_fill_is_waited_out_and_the_fill_completes(
    forklog_db: str,
    pg_cluster: PostgresCluster,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    old = serve(forklog_db, tmp_path / "one")
    for number in range(7):
        create(old, id=f"s{number}", seed=[title(f"Trip {number}"), *question_and_answer(f"ask {number}", "ok", 1)])
    fork(old, "s0", sessionId="child", atTurn=1)
    before = {item["id"]: item for item in old.get("/sessions", params={"limit": 100}).json()["items"]}
    old.__exit__(None, None, None)
    asyncio.run(as_version_left_it(forklog_db, 5))

    # Batches of 2 logs; the database stops after the first batch committed, in the middle of the second.
    monkeypatch.setattr(state_fill, "FILL_LOGS", 2)
    fill_one = state_fill._fill
    started_fills: list[int] = []
    stopped = threading.Event()

    async def fill_stopping_the_database_once(conn: Connection, chains: ChainCache, log: int) -> None:
        started_fills.append(log)
        if len(started_fills) == 4 and not stopped.is_set():
            await asyncio.to_thread(pg_cluster.stop, "fast")
            stopped.set()
        await fill_one(conn, chains, log)

    monkeypatch.setattr(state_fill, "_fill", fill_stopping_the_database_once)
    caplog.set_level(logging.WARNING, logger="forklog.storage")
    settings = Settings(data_dir=tmp_path / "two", fsync=False, database_url=forklog_db)
    new = TestClient(create_app(settings), base_url="http://localhost")
    with new:
        assert stopped.wait(30), "the fill never reached its second batch"
        deadline = time.monotonic() + 10
        while "not reachable yet" not in caplog.text:  # the start waits for the database, as at any outage
            assert time.monotonic() < deadline, "the start did not wait for the database"
            time.sleep(0.05)
        assert_problem(new.get("/readyz"), 503, "NOT_READY")
        assert new.get("/healthz").status_code == 200

        pg_cluster.start()
        wait_ready(new)
        for session_id, was in before.items():
            now = get_session(new, session_id)
            assert {member: now[member] for member in SIDEBAR} == {member: was[member] for member in SIDEBAR}
        assert before["s6"]["title"] == "Trip 6" and before["s6"]["preview"] == "ask 6"
    committed, resumed = started_fills[:2], started_fills[4:]
    assert set(resumed) == set(started_fills) - set(committed)  # the batch committed before the outage stays done
