"""``make test`` runs its tests in xdist workers side by side: an ``alone`` test still runs with no other test beside
it."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from tests.support.inner_run import run_in_two_workers

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
Span = tuple[float, float]


def span_of(path: Path) -> Span:
    began, ended = path.read_text().split()
    return float(began), float(ended)


def overlap(first: Span, second: Span) -> bool:
    return first[0] < second[1] and second[0] < first[1]


def test_an_alone_test_runs_while_the_other_worker_waits(tmp_path: Path) -> None:
    ran = run_in_two_workers(tmp_path, INNER_TESTS, dist="load")  # the file's tests spread over both workers

    spans = {path.name: span_of(path) for path in ran.iterdir()}
    assert len(spans) == 9, spans
    alone_span = spans.pop("alone")
    assert [name for name, span in spans.items() if overlap(span, alone_span)] == []
    # The other tests did run side by side: the workers were parallel, and only the alone test waited for them.
    assert any(overlap(first, second) for first, second in itertools.combinations(spans.values(), 2)), spans
