"""A crash after checkpoints: a child process appends under load while checkpoints are written in the background,
and is killed with SIGKILL. The start after it has every acknowledged event and checks only what came after each
session's last durable checkpoint (what the start reports, not how long it took)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.backends.files.conftest import REPO, FileStore

CHILD = r"""
import asyncio, json, sys

sys.path.insert(0, sys.argv[1])
from tests.backends.files import builders as b
from tests.backends.files.conftest import FileStore

SESSIONS = 6


def say(**record):
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


async def appender(store, session_id):
    while True:
        state = store.get(session_id).log.state
        events = b.full_turn(state.next_turn) if state.open_turn is None else [b.turn_end(state.open_turn)]
        _, lines, view = await store.append(session_id, events)
        say(ev="ack", id=session_id, count=view.head.count, lines=lines.decode())


async def marks(store):
    # checkpointed only moves once a round's records are synced: what it says is durable
    while True:
        await asyncio.sleep(0.03)
        say(ev="marks", marks={f"s{k}": store.get(f"s{k}").checkpointed for k in range(SESSIONS)})


async def main():
    store = await FileStore(sys.argv[2], checkpoint_interval=0.05).open()
    for k in range(SESSIONS):
        await store.create(f"s{k}", b.turns(1, 2), None)
    say(ev="ready")
    await asyncio.gather(*[appender(store, f"s{k}") for k in range(SESSIONS)], marks(store))


asyncio.run(main())
"""


def test_a_start_after_a_kill_under_load_has_every_acknowledged_event_and_checks_only_the_tail(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    out = tmp_path / "child.out"
    with open(out, "wb") as stdout, open(tmp_path / "child.err", "wb") as stderr:
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(REPO), str(data_dir)], stdout=stdout, stderr=stderr)
        try:
            deadline = time.monotonic() + 20
            while out.read_bytes().count(b'"marks"') < 15:
                assert child.poll() is None, (tmp_path / "child.err").read_text()
                assert time.monotonic() < deadline, "the child never got going"
                time.sleep(0.02)
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
    records = [json.loads(line) for line in out.read_bytes().rsplit(b"\n", 1)[0].split(b"\n") if line]
    acked: dict[str, list[dict[str, object]]] = {}
    for record in records:
        if record["ev"] == "ack":
            acked.setdefault(record["id"], []).append(record)
    last_marks = next(record["marks"] for record in reversed(records) if record["ev"] == "marks")
    assert sum(last_marks.values()) > 0, "no checkpoint was written before the kill"

    async def recover() -> None:
        store = await FileStore(data_dir).open()
        try:
            assert store.corrupt == []
            report = store.backend.recovery
            for session_id, acks in acked.items():
                log = store.get(session_id).log
                for ack in acks:  # every acknowledged batch is there, at its seqs, byte for byte
                    lines = str(ack["lines"]).encode()
                    count = int(str(ack["count"]))
                    assert log.lines().startswith(log.lines(0, count)) and len(log) >= count
                    assert log.lines(count - lines.count(b"\n"), count) == lines
                checked = report.checked.get(store.key(session_id), 0)
                assert checked <= len(log) - last_marks[session_id], session_id
            assert report.checked_events < report.events
        finally:
            await store.crash()

    asyncio.run(recover())
