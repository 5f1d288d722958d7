"""A bounded loopback load against the real server process (fsync on), then a full check of what it stored.

20 sessions, each driven by an owner that appends whole turns in one to three appends, while chaos workers
snapshot, fork, read, delete fork children and race identical appends on the same session (see ``load.py``).
A few hundred operations by default, ~10-20 s; ``FORKLOG_FUZZ_LONG=1`` runs about four times as many.

Afterwards: every log re-read through the API validates (re-seeded into a fresh SessionStore: accepted), seqs are
contiguous, every fork child equals its source's prefix at a ``turn/end``, every acknowledged event is there, no
answer was a 5xx or outside what the operation may answer, and the server's resident memory after the load is
below 2 x its pre-load value + 4 x the bytes stored (the logs are held in memory once, as their JSONL bytes,
plus per-event indexes; 2x covers the allocator keeping freed pages).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from tests.fuzz.load import Load, Record, verify
from tests.fuzz.support import ServerProcess, scaled

SESSIONS = 20
TURNS_PER_OWNER = scaled(15, 60)


def test_load_then_every_log_is_whole_and_valid(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data").start()
    try:
        rss_before = server.rss_bytes()
        record = Record(owners=[f"load-{index:02d}" for index in range(SESSIONS)])
        load = Load(server.base_url, record, seed=1, turns_per_owner=TURNS_PER_OWNER, max_seconds=scaled(45, 180))
        started = time.monotonic()
        finished = asyncio.run(load.run())
        elapsed = time.monotonic() - started
        assert finished, f"the server went away under load:\n{server.log_text()[-3000:]}"
        assert server.alive(), server.log_text()[-3000:]
        rss_after = server.rss_bytes()

        assert not record.unexpected, "\n".join(record.unexpected[:20])
        assert not [key for key in record.answers if key[1] >= 500], record.answers
        logs = verify(server.base_url, record, server.data_dir)

        stored = sum(path.stat().st_size for path in (server.data_dir / "sessions").iterdir())
        events = sum(len(log) for log in logs.values())
        print(
            f"\nload: {record.operations()} operations in {elapsed:.1f}s, {len(logs)} sessions, {events} events, "
            f"{stored / 1024:.0f} KiB on disk, {len(record.children)} forks, {len(record.deleted)} deletes, "
            f"{record.races} races (winners: {dict(record.race_winners)}); "
            f"RSS {rss_before / 2**20:.1f} -> {rss_after / 2**20:.1f} MiB"
        )
        assert record.operations() >= 300, record.answers
        assert record.children and record.snapshots and record.races, record.answers
        assert rss_after < 2 * rss_before + 4 * stored, (rss_before, rss_after, stored)
    finally:
        server.stop()
