"""A start on files no checkpoint covers (copied in, restored without their index, written by another program):
every event is checked once, and that check is made durable before the service is ready, so that a crash at any
moment after readiness restarts without checking the store again."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson

from app.domain.log import seed_log
from tests.backends.files import builders as b
from tests.backends.files.conftest import OpenStore, observe

T0 = 1_785_000_000_000


def write_dsh_log(data_dir: Path, session_id: str, events: list[dict[str, Any]], *, created_at: int = T0) -> bytes:
    """A DSH log written straight into ``sessions/`` (a DSH header: no instance), as another program leaves it."""
    header = {"type": "session", "version": 0, "id": session_id, "createdAt": created_at, "cwd": "/w"}
    lines = seed_log(events, now=created_at).lines()
    folder = data_dir / "sessions"
    folder.mkdir(parents=True, exist_ok=True)
    data = orjson.dumps(header) + b"\n" + lines
    (folder / f"{session_id}.jsonl").write_bytes(data)
    return data


def uncovered_store(data_dir: Path, sessions: int, turns: int) -> list[str]:
    names = [f"copied-{number}" for number in range(sessions)]
    for number, name in enumerate(names):
        write_dsh_log(data_dir, name, b.turns(1, turns), created_at=T0 + number)
    return names


def test_a_crash_right_after_a_cold_start_checks_only_what_came_after(data_dir: Path, open_store: OpenStore) -> None:
    names = uncovered_store(data_dir, sessions=6, turns=40)
    total = 6 * len(b.turns(1, 40))

    async def scenario() -> None:
        store = await open_store(data_dir)  # no background rounds: only what the start itself wrote
        assert store.backend.recovery.checked_events == total  # nothing covered these files: all checked
        for name in names:
            await store.append(name, [b.log_only("after the cold start")])
        expected = {name: observe(store, name) for name in names}
        await store.crash()  # kill -9 right after readiness: no round ran since

        again = await open_store(data_dir)
        report = again.backend.recovery
        assert report.checked == {again.key(name): 1 for name in names}  # the appended event, not the whole logs
        assert report.events == total + len(names)
        assert {name: observe(again, name) for name in names} == expected

    asyncio.run(scenario())
