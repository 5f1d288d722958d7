"""``python -m app keys new`` run many times at once (spec 10: two at once never write the same id twice), and a
tenant that differs from another only in letter case (spec 9)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.domain.access import parse_keys
from tests.e2e.server import REPO, run_app

pytestmark = pytest.mark.e2e

RUNS = 8

# `python -m app ARGS...` once argv[1]/go exists (each run says it is ready with argv[1]/ready-<pid>), with the time
# between reading the keys file and appending to it widened: every run is inside that window at once, so only a
# lock keeps a second line with the same id out.
AT_ONCE = """
import os, sys, time
import app.api.edge.keys_file as keys_file
from app.cli.main import main

parse = keys_file.parse_keys_file

def slow_parse(text):
    time.sleep(0.5)
    return parse(text)

keys_file.parse_keys_file = slow_parse
barrier = sys.argv[1]
open(os.path.join(barrier, f"ready-{os.getpid()}"), "w").close()
while not os.path.exists(os.path.join(barrier, "go")):
    time.sleep(0.001)
main(sys.argv[2:])
"""


def keys_new(keys: Path, key_id: str, *, barrier: Path | None = None) -> subprocess.Popen[str]:
    args = ["keys", "new", "--tenant", "acme", "--scope", "read", "--id", key_id, "--keys-file", str(keys)]
    command = [sys.executable, "-m", "app", *args]
    if barrier is not None:
        command = [sys.executable, "-c", AT_ONCE, str(barrier), *args]
    return subprocess.Popen(
        command,
        cwd=REPO,
        env=dict(os.environ),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def at_once(keys: Path, key_ids: list[str], barrier: Path | None) -> list[tuple[int, str, str]]:
    """Run ``keys new`` for each id at once (with ``barrier``: released together once all have started)."""
    if barrier is not None:
        barrier.mkdir()
    runs = [keys_new(keys, key_id, barrier=barrier) for key_id in key_ids]
    if barrier is not None:
        deadline = time.monotonic() + 60
        while len(list(barrier.glob("ready-*"))) < len(runs):
            assert time.monotonic() < deadline, "the runs did not start"
            time.sleep(0.01)
        (barrier / "go").touch()
    results = []
    for run in runs:
        out, err = run.communicate(timeout=60)
        results.append((run.returncode, out, err))
    return results


@pytest.mark.parametrize("widened", [False, True], ids=["as-is", "check-and-append-widened"])
def test_many_keys_new_at_once_with_one_id_write_it_once(tmp_path: Path, widened: bool) -> None:
    keys = tmp_path / "keys.jsonl"
    assert run_app("keys", "new", "--tenant", "acme", "--scope", "read", "--keys-file", str(keys)).returncode == 0
    results = at_once(keys, ["same"] * RUNS, tmp_path / "barrier" if widened else None)
    made = [out for code, out, _ in results if code == 0]
    refused = [err for code, _, err in results if code != 0]
    assert len(made) == 1, results
    assert len(refused) == RUNS - 1
    assert all("'same' exists" in err for err in refused), refused
    stored = parse_keys(keys.read_bytes())  # the file stays valid: a service reads it
    assert [key.id for key in stored][1:] == ["same"]
    assert stat.S_IMODE(keys.stat().st_mode) == 0o600


def test_keys_with_different_ids_made_at_once_are_all_kept(tmp_path: Path) -> None:
    keys = tmp_path / "keys.jsonl"
    results = at_once(keys, [f"bot-{number}" for number in range(4)], tmp_path / "barrier")
    assert [code for code, _, _ in results] == [0] * 4, results
    assert sorted(key.id for key in parse_keys(keys.read_bytes())) == [f"bot-{number}" for number in range(4)]
    assert stat.S_IMODE(keys.stat().st_mode) == 0o600


def test_keys_new_refuses_a_tenant_equal_to_another_but_for_letter_case(tmp_path: Path) -> None:
    keys = tmp_path / "keys.jsonl"
    assert run_app("keys", "new", "--tenant", "acme", "--scope", "read", "--keys-file", str(keys)).returncode == 0
    before = keys.read_bytes()
    shouted = run_app("keys", "new", "--tenant", "ACME", "--scope", "read", "--keys-file", str(keys))
    assert shouted.returncode != 0 and shouted.stdout == ""
    assert "'ACME'" in shouted.stderr and "'acme'" in shouted.stderr and "letter case" in shouted.stderr
    assert keys.read_bytes() == before


def test_a_share_key_is_made_with_the_share_scope(tmp_path: Path) -> None:
    keys = tmp_path / "keys.jsonl"
    made = run_app("keys", "new", "--tenant", "acme", "--scope", "share", "--id", "sharer", "--keys-file", str(keys))
    assert made.returncode == 0, made.stderr
    (key,) = parse_keys(keys.read_bytes())
    assert key.id == "sharer" and {scope.value for scope in key.scopes} == {"share"}
