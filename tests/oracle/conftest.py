"""DSH's own session store, run in Node, as an oracle for seed verdicts (../shared/tools/dsh-oracle)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# ../shared beside the repo; FORKLOG_SHARED_DIR names it elsewhere (a worktree of the repo lies one folder deeper).
SHARED = Path(os.environ.get("FORKLOG_SHARED_DIR") or Path(__file__).resolve().parents[2].parent / "shared")
ORACLE_SOURCE = SHARED / "tools" / "dsh-oracle"
FIXTURES = SHARED / "fixtures" / "dsh-logs"


def _missing(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: the DSH oracle is required)")
    pytest.skip(reason)


class Oracle:
    """One long-lived Node process answering one JSON line per request."""

    def __init__(self, script: Path) -> None:
        self._process = subprocess.Popen(
            ["node", str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write(json.dumps(request) + "\n")
        self._process.stdin.flush()
        answer: dict[str, Any] = json.loads(self._process.stdout.readline())
        return answer

    def seed(self, events: list[Any]) -> dict[str, Any]:
        return self.ask({"op": "seed", "seed": events})

    def closers(self, events: list[Any]) -> list[dict[str, Any]]:
        """DSH's ``interruptedTurnClosers`` for a log of stored events."""
        answer = self.ask({"op": "closers", "events": events})
        assert answer["ok"], answer
        closers: list[dict[str, Any]] = answer["events"]
        return closers

    def stats(self, events: list[Any]) -> dict[str, Any]:
        """DSH's ``sessionStats`` fold of a log of stored events."""
        answer = self.ask({"op": "stats", "events": events})
        assert answer["ok"], answer
        stats: dict[str, Any] = answer["stats"]
        return stats

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        self._process.wait(timeout=10)
        if self._process.stdout is not None:
            self._process.stdout.close()


@pytest.fixture(scope="session")
def dsh_oracle(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Oracle]:
    if not ORACLE_SOURCE.is_dir() or not FIXTURES.is_dir():
        _missing(f"{ORACLE_SOURCE} or {FIXTURES} not found: the DSH oracle needs ../shared beside the repo")
    # Node and the npm registry are the machine's, not the project's: without them the oracle is skipped, even on
    # CI (the fixture logs' verdicts, which need neither, still run there).
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are needed to run the DSH oracle")
    folder = tmp_path_factory.mktemp("dsh-oracle") / "dsh-oracle"
    shutil.copytree(ORACLE_SOURCE, folder)
    for path in [folder, *folder.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)
    installed = subprocess.run(
        ["npm", "install", "--legacy-peer-deps", "--no-audit", "--no-fund"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if installed.returncode != 0:
        pytest.skip(f"npm could not install the DSH oracle: {installed.stderr[-500:]}")
    oracle = Oracle(folder / "oracle.mjs")
    yield oracle
    oracle.close()
