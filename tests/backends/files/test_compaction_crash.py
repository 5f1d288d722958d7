"""A compaction killed at each step of its rewrite (spec 16): every acknowledged event is there exactly once, and the
session is not corrupt.

A child process appends a turn one event at a time to a compressed session; the append of its ``turn/end`` rewrites
the turn's small frames into one (app/backends/files/frames/compaction.py). The child counts the rewrite's calls to
the operating system and kills itself with SIGKILL just before call ``k``; the test runs it once for every ``k`` (and
once without a kill) and recovers the data directory each time.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from app.domain.dsh_frames import decode_log
from tests.backends.files import builders as b
from tests.backends.files.conftest import REPO, FileStore

CHILD = r"""
import asyncio, json, os, signal, sys

sys.path.insert(0, sys.argv[1])
from app.backends.files import backend as backend_module
from tests.backends.files import builders as b
from tests.backends.files.conftest import FileStore

DATA, KILL_AT = sys.argv[2], int(sys.argv[3])
calls = []


class KillingOps:
    # The rewrite's door to the system, counting each call and killing the process just before call KILL_AT.
    def __init__(self, ops):
        self._ops = ops

    def __getattr__(self, name):
        method = getattr(self._ops, name)

        def counted(*args, **kwargs):
            if len(calls) == KILL_AT:
                os.kill(os.getpid(), signal.SIGKILL)
            calls.append(name)
            return method(*args, **kwargs)

        return counted


real_rewrite = backend_module.rewrite


def rewrite(ops, *args, **kwargs):
    rewritten = real_rewrite(KillingOps(ops), *args, **kwargs)
    if len(calls) == KILL_AT:  # after the last step: the new file in place, its folder synced, nothing answered
        os.kill(os.getpid(), signal.SIGKILL)
    return rewritten


backend_module.rewrite = rewrite


def say(**record):
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


async def main():
    store = await FileStore(DATA, sync=True, compression="zstd").open()
    await store.create("s", b.full_turn(1), None)
    for event in b.full_turn(2):
        say(send=event["type"])
        await store.append("s", [event])
        say(ack=event["type"])
    say(calls=calls, frames=len(store.get("s").frames))
    await store.close()


asyncio.run(main())
"""


def run_child(data_dir: Path, kill_at: int) -> tuple[int, list[dict[str, Any]]]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(REPO), str(data_dir), str(kill_at)],
        capture_output=True,
        timeout=120,
        cwd=REPO,
    )
    return done.returncode, [json.loads(line) for line in done.stdout.splitlines()]


def recovered(data_dir: Path) -> tuple[list[str], list[Any], bytes, bytes]:
    """The session's event types, what the start found corrupt, its lines, and its file's text, after a start."""

    async def start() -> tuple[list[str], list[Any], bytes, bytes]:
        store = await FileStore(data_dir, compression="zstd").open()
        try:
            log = store.get("s").log
            text = decode_log((data_dir / "sessions" / "s.jsonl.zstd").read_bytes())
            return [event["type"] for event in log.events()], store.corrupt, log.lines(), text
        finally:
            await store.close()

    return asyncio.run(start())


def test_the_rewrite_without_a_kill_leaves_one_frame_and_counts_its_steps(tmp_path: Path) -> None:
    code, said = run_child(tmp_path / "data", -1)
    assert code == 0, said
    summary = said[-1]
    assert summary["frames"] == 1, "the seed's frame and the turn's were rewritten into one"
    assert {"rename", "fsync_dir", "fsync"} <= set(summary["calls"])


def _steps() -> list[str]:
    """The rewrite's calls to the system, in order, as a run without a kill makes them (at collection: one
    test a step)."""
    with tempfile.TemporaryDirectory() as folder:
        code, said = run_child(Path(folder) / "data", -1)
    assert code == 0, said
    calls: list[str] = said[-1]["calls"]
    return calls


STEPS = _steps()


@pytest.mark.parametrize(
    "kill_at", range(len(STEPS) + 1), ids=[*(f"{k}-before-{name}" for k, name in enumerate(STEPS)), "after-all"]
)
def test_a_kill_at_any_step_of_the_rewrite_loses_nothing_acknowledged(tmp_path: Path, kill_at: int) -> None:
    data_dir = tmp_path / "data"
    code, said = run_child(data_dir, kill_at)
    assert code == -signal.SIGKILL, said
    sent = [line["send"] for line in said if "send" in line]
    acknowledged = [line["ack"] for line in said if "ack" in line]
    assert sent[-1] == "turn/end" and acknowledged == sent[:-1], "killed in the turn/end's rewrite"
    types, corrupt, lines, text = recovered(data_dir)
    assert not corrupt
    # the turn/end was durable before the rewrite began: with every acknowledged event, each exactly once
    assert types[-len(sent) :] == sent and len(types) == len(b.full_turn(1)) + len(sent)
    assert text.split(b"\n", 1)[1] == lines
    assert not list((data_dir / "tmp").iterdir()), "a half-made rewrite is removed at the start"
