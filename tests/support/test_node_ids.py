"""``make test`` schedules a file's tests by node id: each operation of a ``schema.parametrize()`` test still runs."""

from __future__ import annotations

from pathlib import Path

from tests.support.inner_run import run_in_two_workers

# Three operations, each test writing its operation's name (a file per operation).
INNER_TESTS = """
import os
from pathlib import Path

import schemathesis
from hypothesis import settings

OK = {"responses": {"200": {"description": "ok"}}}
schema = schemathesis.openapi.from_dict(
    {
        "openapi": "3.0.3",
        "info": {"title": "three operations", "version": "1"},
        "paths": {"/a": {"get": OK}, "/b": {"get": OK}, "/c": {"delete": OK}},
    }
)


@schema.parametrize()
@settings(max_examples=1)
def test_each_operation(case) -> None:
    Path(os.environ["RAN_DIR"], case.operation.label.replace(" /", "-")).touch()
"""


def test_every_operation_of_a_schemathesis_test_runs_in_the_workers(tmp_path: Path) -> None:
    ran = run_in_two_workers(tmp_path, INNER_TESTS)

    assert sorted(path.name for path in ran.iterdir()) == ["DELETE-c", "GET-a", "GET-b"]
