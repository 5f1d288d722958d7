"""The retry policy's numbers (spec 15): which answers are retried, and how long the waits are."""

from __future__ import annotations

import httpx
import pytest
from forklog_client import _retry
from forklog_client._retry import backoff, retry_after, retryable_answer


def test_the_backoff_doubles_from_half_a_second_to_eight_with_jitter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_retry, "FIRST_WAIT", 0.5)  # undo the suite's quick backoff
    waits = [[backoff(retry) for _ in range(200)] for retry in range(7)]

    for retry, drawn in enumerate(waits[:4]):
        assert 0.5 * 2**retry <= min(drawn) and max(drawn) <= 0.5 * 2**retry * 1.25
    for drawn in waits[4:]:
        assert min(drawn) >= 6.0 and max(drawn) <= 8.0
    assert all(len(set(drawn)) > 100 for drawn in waits)  # jitter: clients that failed together come back apart


@pytest.mark.parametrize(
    ("status", "code", "retried"),
    [
        (408, "REQUEST_TIMEOUT", True),
        (429, "RATE_LIMITED", True),
        (429, "QUOTA_EXCEEDED", True),
        (503, "NOT_READY", True),
        (409, "IDEMPOTENCY_KEY_IN_PROGRESS", True),
        (409, "SEQ_CONFLICT", False),
        (404, "SESSION_NOT_FOUND", False),
        (422, "INVALID_EVENT", False),
        (500, "INTERNAL", False),
    ],
)
def test_what_is_retried(status: int, code: str, retried: bool) -> None:
    assert retryable_answer(status, {"code": code}) is retried


def test_retry_after_in_seconds_as_a_date_or_as_the_problem_s_fact() -> None:
    def answer(**headers: str) -> httpx.Response:
        return httpx.Response(429, headers=headers)

    assert retry_after(answer(**{"Retry-After": "3"}), {}) == 3.0
    assert retry_after(answer(**{"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}), {}) == 0.0
    assert retry_after(answer(), {"retryAfterMs": 1500}) == 1.5
    assert retry_after(answer(), {}) is None
