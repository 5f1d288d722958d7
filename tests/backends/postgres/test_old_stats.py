"""A database a forklog before spec 17 wrote (session states without the figures, turn/end checkpoints without them):
today's forklog fills them from the stored events at start, in batches, and serves every session's stats, usage and
ownUsage as if it had kept them, its forks at old turn/ends and its interrupts included."""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
import orjson
import pytest

from app.backends.postgres import stats_fill
from app.backends.postgres.schema import MIGRATIONS
from tests.api.helpers import append, create, events_of, fork, get_session
from tests.backends.postgres.test_old_database import serve
from tests.events import agent_step, agent_turn, turn_start, user_message

FIGURES = ("stats", "usage", "ownUsage", "eventCount", "openTurn")
STATS_VERSION = next(number for number, sql in enumerate(MIGRATIONS, 1) if "forklog_stats_fill" in sql)


async def as_before_stats(url: str) -> None:
    """Rewrite the database as the schema before the stats migration wrote it: states of 13 columns, checkpoints of
    4 (no figures), no fill table."""
    conn = await asyncpg.connect(url)
    try:
        async with conn.transaction():
            for log, state in await conn.fetch("SELECT log, state FROM forklog_sessions"):
                old = orjson.dumps(orjson.loads(state)[:13]).decode()
                await conn.execute("UPDATE forklog_sessions SET state = $2 WHERE log = $1", log, old)
            for log, seq, point in await conn.fetch("SELECT log, seq, checkpoint FROM forklog_turn_ends"):
                old = orjson.dumps(orjson.loads(point)[:4]).decode()
                await conn.execute(
                    "UPDATE forklog_turn_ends SET checkpoint = $3 WHERE log = $1 AND seq = $2", log, seq, old
                )
            await conn.execute("DROP TABLE forklog_stats_fill")
            await conn.execute("UPDATE forklog_schema SET version = $1", STATS_VERSION - 1)
    finally:
        await conn.close()


def test_an_upgraded_server_fills_the_figures_an_older_one_did_not_keep(
    forklog_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = serve(forklog_db, tmp_path / "one")
    for number in range(5):  # more than one batch of the fill (2 logs a batch below)
        create(old, id=f"s{number}", seed=[], meta={"cwd": "/w"})
        append(old, f"s{number}", [*agent_turn(1, steps=2), *agent_turn(2, steps=number % 3 + 1)])
    fork(old, "s1", sessionId="early", atTurn=1)
    fork(old, "s1", sessionId="child", atTurn=1)
    append(old, "child", agent_turn(2, steps=1))
    append(old, "s4", [turn_start(3), user_message("more"), *agent_step(3, 1, calls=2, answered=1)])
    ids = [f"s{number}" for number in range(5)] + ["early", "child"]
    before = {session_id: get_session(old, session_id) for session_id in ids}
    old.__exit__(None, None, None)
    asyncio.run(as_before_stats(forklog_db))

    monkeypatch.setattr(stats_fill, "FILL_LOGS", 2)
    new = serve(forklog_db, tmp_path / "two")
    try:
        for session_id, was in before.items():
            now = get_session(new, session_id)
            assert {member: now[member] for member in FIGURES} == {member: was[member] for member in FIGURES}
        assert before["child"]["ownUsage"] != before["child"]["usage"]
        # A fork at an old turn/end takes its filled checkpoint's figures; appends go on from the filled state.
        again = fork(new, "s1", sessionId="again", atTurn=1)
        assert {member: again[member] for member in FIGURES} == {member: before["early"][member] for member in FIGURES}
        grown = append(new, "again", agent_turn(2, steps=1))["session"]
        child = before["child"]
        assert (grown["usage"], grown["ownUsage"]) == (child["usage"], child["ownUsage"])
        assert (grown["stats"]["turns"], grown["stats"]["steps"]) == (child["stats"]["turns"], child["stats"]["steps"])
        # The open turn's unanswered calls were filled too: the interrupt answers the one left.
        closed = new.post("/sessions/s4/interrupt").json()["events"]
        assert [event["type"] for event in closed] == ["tool/result", "step/end", "turn/end"]
        assert closed[0]["data"]["error"]["code"] == "TOOL_OUTCOME_UNKNOWN"
        assert len(events_of(new, "s4")) == before["s4"]["eventCount"] + 3
    finally:
        new.__exit__(None, None, None)
