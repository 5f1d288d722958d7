"""Crash tests: a child process changes sessions in a loop and is killed with SIGKILL at a random moment.

The child prints one line before each operation (``send``) and one after the store acknowledged it (``ack``), flushed
each time into a file the parent reads after the kill. The parent then recovers the directory in-process and checks
what the spec promises: no corruption, every acknowledged change present in order, every log a valid prefix of what
was sent (an unacknowledged batch is there whole or not at all, except that the log may end in its first lines: a
kill can cut a write short, and recovery drops only the torn last line), created sessions whole or absent, and forks
equal to their source's prefix. The next round's child starts on what the last one left.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.backends.catalog import LiveSession as Session
from tests.backends.files.conftest import REPO, FileStore

CHILD = r"""
import asyncio, hashlib, itertools, json, random, sys

sys.path.insert(0, sys.argv[1])
from app.domain.errors import SessionError
from tests.backends.files import builders as b
from tests.backends.files.conftest import FileStore

DATA, MODE, SEED, ROUND = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
rng = random.Random(SEED)
tags = itertools.count()
names = itertools.count()
MAX_EVENTS = 250  # a session this long is left alone (kept by later rounds' checks), so files stay small


def say(**record):
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def next_events(session):
    # a kill can leave the first lines of a batch (spec 4: only the torn last line is dropped): go on from any state
    state = session.log.state
    if state.open_turn is None:
        return b.open_turn(state.next_turn)
    if state.open_step is None:
        return [b.turn_end(state.open_turn)]
    return b.close_turn(state.open_turn)


async def append(store, session_id, events):
    tag = next(tags)
    say(ev="send", op="append", tag=tag, id=session_id, events=events)
    _, lines, _ = await store.append(session_id, events)
    say(ev="ack", op="append", tag=tag, id=session_id, lines=lines.decode())


async def create(store, session_id, seed):
    tag = next(tags)
    say(ev="send", op="create", tag=tag, id=session_id, seed=seed)
    view = await store.create(session_id, seed, {"cwd": "/work"})
    say(ev="ack", op="create", tag=tag, id=session_id, lines=store.get(session_id).log.lines().decode(),
        instance=view.header.instance)


async def fork(store, source_id, child_id):
    source = store.get(source_id)
    at = source.log.state.last_turn_end_seq
    digest = hashlib.sha256(source.log.lines(0, at + 1)).hexdigest()
    tag = next(tags)
    say(ev="send", op="fork", tag=tag, id=child_id, src=source_id, at=at, digest=digest)
    view = await store.fork(source_id, child_id=child_id, at_seq=at)
    say(ev="ack", op="fork", tag=tag, id=child_id, instance=view.header.instance)


async def delete(store, session_id):
    tag = next(tags)
    say(ev="send", op="delete", tag=tag, id=session_id)
    await store.delete(session_id)
    say(ev="ack", op="delete", tag=tag, id=session_id)


def live(store, prefix):
    return [s.id for s in store.page(limit=1000) if s.id.startswith(prefix) and len(s.log) < MAX_EVENTS]


def forkable_sources(store, prefix):
    return [s for s in live(store, prefix) if store.get(s).log.state.last_turn_end_seq is not None]


async def sequential(store):
    # one operation at a time: appends, creates, forks and deletes, chosen at random
    while True:
        roots, forks = live(store, "r"), live(store, "f")
        choice = rng.random()
        sources = forkable_sources(store, "r")
        if not roots or (choice < 0.1 and len(roots) < 4):
            await create(store, f"r{ROUND}-{next(names)}", b.turns(1, rng.randint(0, 2)))
        elif choice < 0.2 and sources:
            await fork(store, rng.choice(sources), f"f{ROUND}-{next(names)}")
        elif choice < 0.25 and forks:
            await delete(store, rng.choice(forks))
        else:
            target = rng.choice(roots + forks)
            await append(store, target, next_events(store.get(target)))


async def concurrent(store):
    # several appenders at once (one per session, plus some sharing one session), and a forker beside them
    async def worker(k):
        session_id = f"w{k}"
        while True:
            if len(store.get(session_id).log) >= MAX_EVENTS:
                session_id = f"w{k}-{ROUND}-{next(names)}"
                await create(store, session_id, b.turns(1, 1))
            await append(store, session_id, next_events(store.get(session_id)))

    async def noter(k):
        while True:
            notes = [b.log_only(f"{ROUND}/{k}/{next(names)}") for _ in range(rng.randint(1, 3))]
            await append(store, "shared", notes)

    async def forker():
        while True:
            sources = forkable_sources(store, "w")
            if sources:
                await fork(store, rng.choice(sources), f"f{ROUND}-{next(names)}")
            await asyncio.sleep(0.002)

    for session_id in ["w0", "w1", "w2", "w3", "w4", "w5", "shared"]:
        if session_id not in store:
            await create(store, session_id, b.turns(1, 1))
    await asyncio.gather(*[worker(k) for k in range(6)], *[noter(k) for k in range(3)], forker())


async def main():
    store = await FileStore(DATA).open()
    assert not store.corrupt, store.corrupt
    say(ev="ready")
    await (sequential(store) if MODE == "sequential" else concurrent(store))


asyncio.run(main())
"""


@dataclass
class Known:
    """A session as the parent last saw it after recovery."""

    lines: bytes
    instance: str


@dataclass
class Round:
    number: int
    seed: int
    records: list[dict[str, Any]]
    sends: dict[int, dict[str, Any]] = field(default_factory=dict)
    acks: dict[int, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for record in self.records:
            if record["ev"] == "send":
                self.sends[record["tag"]] = record
            elif record["ev"] == "ack":
                self.acks[record["tag"]] = record

    def where(self) -> str:
        return f"round {self.number} (child seed {self.seed})"


def split_lines(data: bytes) -> list[bytes]:
    return [line + b"\n" for line in data.split(b"\n")[:-1]]


def as_sent(event: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in event.items() if key not in ("seq", "time")}


def run_child(script: Path, data_dir: Path, mode: str, number: int, seed: int, out: Path, delay: float) -> Round:
    """Start the child, let it work ``delay`` seconds past its recovery, SIGKILL it; return what it printed."""
    with open(out, "wb") as stdout, open(out.with_suffix(".err"), "wb") as stderr:
        child = subprocess.Popen(
            [sys.executable, str(script), str(REPO), str(data_dir), mode, str(seed), str(number)],
            stdout=stdout,
            stderr=stderr,
            cwd=REPO,
        )
        try:
            deadline = time.monotonic() + 20
            while b'"ready"' not in out.read_bytes():
                assert child.poll() is None, f"the child exited early: {out.with_suffix('.err').read_text()}"
                assert time.monotonic() < deadline, "the child never got ready"
                time.sleep(0.005)
            time.sleep(delay)
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
    assert child.returncode == -signal.SIGKILL, out.with_suffix(".err").read_text()
    # only whole lines were printed; a line cut by the kill was never an acknowledgement
    complete = out.read_bytes().rsplit(b"\n", 1)[0]
    return Round(number, seed, [json.loads(line) for line in complete.split(b"\n") if line])


def recover(data_dir: Path) -> dict[str, Session]:
    async def reopen() -> dict[str, Session]:
        store = await FileStore(data_dir).open()
        try:
            assert store.corrupt == [], store.corrupt
            return {live.id: live for live in store.page(limit=100_000)}
        finally:
            await store.crash()

    return asyncio.run(reopen())


def check_appends(
    where: str,
    session: Session,
    position: int,
    acked: dict[int, list[bytes]],
    unacked: list[list[dict[str, Any]]],
) -> None:
    """From ``position`` on, the log is the acknowledged batches at their seqs and, around them, unacknowledged batches
    that are whole, except that the log may end in the first lines of one (a kill cut its write short, and recovery
    drops only the torn last line); every acknowledged batch is there."""
    lines = split_lines(session.log.lines())
    events = [as_sent(event) for event in session.log.events()]
    while position < len(events):
        if position in acked:
            batch = acked.pop(position)
            assert lines[position : position + len(batch)] == batch, f"{where}: acknowledged batch at {position}"
            position += len(batch)
            continue
        found = next(
            (sent for sent in unacked if events[position : position + len(sent)] == sent[: len(events) - position]),
            None,
        )
        assert found is not None, f"{where}: holds events nobody sent from seq {position}"
        unacked.remove(found)
        position += len(found)
    assert not acked, f"{where}: lost acknowledged appends at seqs {sorted(acked)}"


def check_round(known: dict[str, Known], done: Round, sessions: dict[str, Session]) -> dict[str, Known]:
    """Compare the recovered sessions with what the child sent and what the store acknowledged."""
    where = done.where()
    born: dict[str, dict[str, Any]] = {}
    deleted: dict[str, bool] = {}
    acked_appends: dict[str, dict[int, list[bytes]]] = defaultdict(dict)
    unacked_appends: dict[str, list[list[dict[str, Any]]]] = defaultdict(list)
    for tag, send in done.sends.items():
        ack = done.acks.get(tag)
        session_id = send["id"]
        if send["op"] in ("create", "fork"):
            born[session_id] = send
        elif send["op"] == "delete":
            deleted[session_id] = ack is not None
        elif ack is not None:
            lines = split_lines(ack["lines"].encode())
            acked_appends[session_id][json.loads(lines[0])["seq"]] = lines
        else:
            unacked_appends[session_id].append(send["events"])

    assert set(sessions) <= set(known) | set(born), (
        f"{where}: sessions nobody made: {set(sessions) - set(known) - set(born)}"
    )
    for session_id in set(known) | set(born):
        present = session_id in sessions
        if deleted.get(session_id):
            assert not present, f"{where}: {session_id} was deleted (acknowledged) but came back"
            continue
        unacked_birth = session_id in born and born[session_id]["tag"] not in done.acks
        if (session_id in deleted or unacked_birth) and not present:
            continue  # an unacknowledged delete, create or fork may or may not have happened
        assert present, f"{where}: {session_id} was acknowledged but is gone"
        session = sessions[session_id]
        lines = split_lines(session.log.lines())
        events = session.log.events()
        if session_id in known:
            before = known[session_id]
            assert session.log.lines().startswith(before.lines), f"{where}: {session_id} lost committed events"
            assert session.header.instance == before.instance
            position = len(split_lines(before.lines))
        else:
            birth = born[session_id]
            ack = done.acks.get(birth["tag"])
            if birth["op"] == "create":
                position = len(birth["seed"])
                assert [as_sent(event) for event in events[:position]] == birth["seed"], f"{where}: {session_id}"
                assert session.header.cwd == "/work"
            else:
                position = birth["at"] + 1
                digest = hashlib.sha256(b"".join(lines[:position])).hexdigest()
                assert digest == birth["digest"], f"{where}: fork {session_id} is not its source's prefix"
                assert (session.header.parent_session, session.header.seed_length) == (birth["src"], position)
                # (sources are never deleted by the child)
                assert sessions[birth["src"]].log.lines(0, position) == b"".join(lines[:position])
            if ack is not None:
                assert session.header.instance == ack["instance"], f"{where}: {session_id} changed instance"
                if birth["op"] == "create":
                    assert b"".join(lines[:position]) == ack["lines"].encode()
        check_appends(
            f"{where}: {session_id}",
            session,
            position,
            dict(acked_appends.get(session_id, {})),
            list(unacked_appends.get(session_id, [])),
        )
    return {session_id: Known(session.log.lines(), session.header.instance) for session_id, session in sessions.items()}


def crash_rounds(tmp_path: Path, mode: str, rounds: int) -> int:
    """Run ``rounds`` kill-and-recover rounds on one data directory; return how many changes were acknowledged."""
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    data_dir = tmp_path / "data"
    rng = random.Random(int(os.environ.get("FORKLOG_CRASH_SEED", random.randrange(2**32))))
    known: dict[str, Known] = {}
    acknowledged = 0
    for number in range(rounds):
        seed = rng.randrange(2**32)
        done = run_child(script, data_dir, mode, number, seed, tmp_path / f"round-{number}.out", rng.uniform(0.02, 0.3))
        known = check_round(known, done, recover(data_dir))
        acknowledged += len(done.acks)
        assert list((data_dir / "tmp").iterdir()) == [], "recovery sweeps half-made files"
    return acknowledged


def test_a_killed_sequential_writer_loses_nothing_it_acknowledged(tmp_path: Path) -> None:
    rounds = 9
    assert crash_rounds(tmp_path, "sequential", rounds) > rounds


def test_killed_concurrent_writers_lose_nothing_they_acknowledged(tmp_path: Path) -> None:
    rounds = 6
    assert crash_rounds(tmp_path, "concurrent", rounds) > rounds
