"""kill -9 under load, restart on the same data directory, and nothing acknowledged is lost.

Each round starts the server on the one data directory, runs the load of ``load.py`` (owners resume their
sessions, closing a turn the last crash left open) and kills the server with SIGKILL at a random moment while
requests are in flight. After the restart: ``/readyz`` lists no corrupt session, every event whose append was
answered 2xx is there at its seq, in order and unchanged, every acknowledged create or fork is there and every
acknowledged delete is gone, every log re-validates, forks are prefixes of their sources, and the data directory
holds one file per live session (a torn tail may be cut, unacknowledged bytes may be lost, nothing else).

4 rounds by default (~15 s); ``FORKLOG_FUZZ_LONG=1`` runs 16.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

from tests.fuzz.load import Load, Record, verify
from tests.fuzz.support import ServerProcess, scaled

ROUNDS = scaled(4, 16)
SESSIONS = 12


async def _load_then_kill(server: ServerProcess, load: Load, delay: float) -> bool:
    task = asyncio.create_task(load.run())
    done, _ = await asyncio.wait({task}, timeout=delay)
    if not done:
        server.kill()
    return await task


def test_kill_9_under_load_loses_nothing_acknowledged(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    record = Record(owners=[f"crash-{index:02d}" for index in range(SESSIONS)])
    rng = random.Random(20261130)
    server = ServerProcess(data_dir)
    killed_mid_load = 0
    try:
        for round_number in range(ROUNDS):
            server.start()
            if round_number:
                # What the previous round acknowledged survived the kill and the recovery.
                verify(server.base_url, record, data_dir)
            acked_before = sum(len(events) for events in record.acked.values())
            load = Load(server.base_url, record, seed=100 + round_number, turns_per_owner=scaled(40, 80))
            delay = rng.uniform(0.3, 1.5)
            started = time.monotonic()
            finished = asyncio.run(_load_then_kill(server, load, delay))
            server.kill()
            killed_mid_load += not finished
            acked_now = sum(len(events) for events in record.acked.values())
            print(
                f"\nround {round_number}: killed after {time.monotonic() - started:.2f}s "
                f"({'mid-load' if not finished else 'after the load'}), "
                f"{acked_now - acked_before} events acknowledged this round, {acked_now} in all"
            )
            assert not record.unexpected, "\n".join(record.unexpected[:20])
            assert not [key for key in record.answers if key[1] >= 500], record.answers
        server.start()
        logs = verify(server.base_url, record, data_dir)
        # After the last restart the sessions still take appends: one more short load, then the same checks.
        finished = asyncio.run(Load(server.base_url, record, seed=999, turns_per_owner=2).run())
        assert finished and not record.unexpected, "\n".join(record.unexpected[:20])
        logs = verify(server.base_url, record, data_dir)
        assert killed_mid_load >= ROUNDS // 2, "the kills mostly missed the load; lengthen it"
        assert sum(len(log) for log in logs.values()) > 0
        print(f"{len(logs)} sessions, {sum(len(log) for log in logs.values())} events after {ROUNDS} kills")
    finally:
        server.stop()
