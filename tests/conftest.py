"""Fixtures shared by every test package."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DSH_LOGS = REPO.parent / "shared" / "fixtures" / "dsh-logs"


@pytest.fixture
def dsh_logs_dir() -> Path:
    """The real DSH logs of ../shared/fixtures/dsh-logs: skipped where that folder is absent, a failure on CI."""
    if not DSH_LOGS.is_dir():
        reason = f"../shared/fixtures/dsh-logs not found: {DSH_LOGS}"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return DSH_LOGS
