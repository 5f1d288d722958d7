"""``make test`` runs its tests in two xdist workers: an ``alone`` test still runs with no other test beside it."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytest.importorskip("xdist")

# Each test of the inner run writes when it ran (monotonic: one clock for every process of the machine).
INNER_TESTS = """
import os, time
from pathlib import Path

import pytest


def ran(name: str) -> None:
    began = time.monotonic()
    time.sleep(0.3)
    Path(os.environ["RAN_DIR"], name).write_text(f"{began} {time.monotonic()}")


@pytest.mark.parametrize("n", range(4))
def test_before(n: int) -> None:
    ran(f"before-{n}")


@pytest.mark.alone
def test_timing() -> None:
    ran("alone")


@pytest.mark.parametrize("n", range(4))
def test_after(n: int) -> None:
    ran(f"after-{n}")
"""
# The inner run's conftest is the suite's own hooks (the marker and the locks).
INNER_CONFTEST = "from tests.conftest import pytest_configure, pytest_runtest_protocol  # noqa: F401\n"


Span = tuple[float, float]


def span_of(path: Path) -> Span:
    began, ended = path.read_text().split()
    return float(began), float(ended)


def overlap(first: Span, second: Span) -> bool:
    return first[0] < second[1] and second[0] < first[1]


def test_an_alone_test_runs_while_the_other_worker_waits(tmp_path: Path) -> None:
    suite, ran = tmp_path / "suite", tmp_path / "ran"
    suite.mkdir()
    ran.mkdir()
    (suite / "test_inner.py").write_text(INNER_TESTS)
    (suite / "conftest.py").write_text(INNER_CONFTEST)
    env = {**os.environ, "RAN_DIR": str(ran), "PYTHONPATH": str(REPO)}
    env.pop("PYTEST_XDIST_WORKER", None)  # this test may itself run in a worker: the inner run has workers of its own

    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "-p", "no:cacheprovider", "-q", str(suite),
         f"--basetemp={tmp_path / 'inner-tmp'}"],
        cwd=suite, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip

    assert done.returncode == 0, done.stdout + done.stderr
    spans = {path.name: span_of(path) for path in ran.iterdir()}
    assert len(spans) == 9, spans
    alone_span = spans.pop("alone")
    assert [name for name, span in spans.items() if overlap(span, alone_span)] == []
    # The other tests did run side by side: the workers were parallel, and only the alone test waited for them.
    assert any(overlap(first, second) for first, second in itertools.combinations(spans.values(), 2)), spans
