"""Bytes at rest (spec 16): what a data directory holds for realistic streamed sessions, against their raw JSONL.

``BENCH_AT_REST_SESSIONS`` (default 4) sessions of ``BENCH_AT_REST_TURNS`` (default 8) turns of
:mod:`bench.streamed_sessions` are appended through the HTTP API of a server on a new data directory, once a batch a
model step and once a batch an event, in each encoding (``--compression zstd``, ``none``). Once the sessions are
written (their turns ended) the server is stopped and the bytes of its ``sessions/`` folder are counted, against the
raw JSONL of the same sessions (the ``none`` directory's files, which are exactly that). The bars: at most 0.12x
appending a step at a time, 0.15x appending an event at a time.

The PostgreSQL rows of the same workload reuse :func:`append_sessions`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench import streamed_sessions
from bench.report import Row
from bench.util import Client, env_int, human_bytes, log, running, start_forklog

Batches = Callable[[int, int], Iterator[list[dict[str, Any]]]]
WAYS: dict[str, Batches] = {
    "one append a step": streamed_sessions.steps,
    "one append an event": streamed_sessions.events,
}
BARS = {"one append a step": 0.12, "one append an event": 0.15}


def append_sessions(client: Client, batches: Batches, sessions: int, turns: int) -> int:
    """Create ``sessions`` sessions and append their turns as ``batches`` yields them; how many events."""
    events = 0
    for number in range(sessions):
        session_id = f"streamed-{number}"
        client.expect(201, "POST", "/sessions", {"id": session_id})
        for batch in batches(turns, number):
            client.expect(201, "POST", f"/sessions/{session_id}/events", {"events": batch})
            events += len(batch)
    return events


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def measure(work: Path, compression: str, way: str, sessions: int, turns: int) -> tuple[int, int]:
    """(events, bytes of the sessions folder) of the sessions appended ``way`` on a new ``compression`` directory."""
    data = work / f"at-rest-{compression}-{way.replace(' ', '-')}"
    server = start_forklog(data, work / "logs" / "at-rest.log", extra=("--compression", compression))
    with running(server):
        server.wait_ready()
        client = Client(server.port)
        try:
            events = append_sessions(client, WAYS[way], sessions, turns)
        finally:
            client.close()
    return events, folder_bytes(data / "sessions")


def run(work: Path) -> list[Row]:
    sessions = env_int("BENCH_AT_REST_SESSIONS", 4)
    turns = env_int("BENCH_AT_REST_TURNS", 8)
    rows = []
    for way in WAYS:
        events, raw = measure(work, "none", way, sessions, turns)
        _, compressed = measure(work, "zstd", way, sessions, turns)
        ratio = compressed / raw
        log(f"bytes at rest, {way}: {human_bytes(compressed)} zstd, {human_bytes(raw)} raw ({ratio:.3f}x)")
        rows.append(
            Row(
                "Bytes at rest",
                f"files, zstd, {way} ({sessions} streamed sessions, {events:,} events, turns ended)",
                f"{compressed / events:.1f} B/event",
                "raw JSONL (files, none)",
                f"{raw / events:.1f} B/event",
                ratio,
                f"<= {BARS[way]}x",
                ratio <= BARS[way],
                f"{human_bytes(compressed)} against {human_bytes(raw)}",
            )
        )
    return rows
