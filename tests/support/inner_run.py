"""A small pytest run in two xdist workers, with the suite's own hooks, for the tests of those hooks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

# The inner run's conftest is the suite's own hooks (markers, node ids, the locks of alone tests).
HOOKS = "from tests.conftest import pytest_collection_modifyitems, pytest_configure, pytest_runtest_protocol\n"


def run_in_two_workers(tmp_path: Path, tests: str, dist: str = "loadfile") -> Path:
    """Runs ``tests`` (a test module's text) in two workers, file by file as ``make test`` does unless ``dist`` says
    otherwise; the folder its tests may write into (``RAN_DIR``) is returned once the run has passed."""
    suite, ran = tmp_path / "suite", tmp_path / "ran"
    suite.mkdir()
    ran.mkdir()
    (suite / "test_inner.py").write_text(tests)
    (suite / "conftest.py").write_text(HOOKS)
    env = {**os.environ, "RAN_DIR": str(ran), "PYTHONPATH": str(REPO)}
    env.pop("PYTEST_XDIST_WORKER", None)  # this test may itself run in a worker: the inner run has workers of its own

    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", dist, "-p", "no:cacheprovider", "-q", str(suite),
         f"--basetemp={tmp_path / 'inner-tmp'}"],
        cwd=suite, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip

    assert done.returncode == 0, done.stdout + done.stderr
    return ran
