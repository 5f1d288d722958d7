"""When a call is tried again, and how long it waits first (spec 15, "Retries").

Retried: a connection error or timeout, ``408``, ``429``, ``502``, ``503``, ``504`` and ``409
IDEMPOTENCY_KEY_IN_PROGRESS``; never another ``4xx``, never ``500``. The wait doubles from 0.5 s up to 8 s with 25 %
of jitter, or is the answer's ``Retry-After`` when it sends one (up to :data:`MAX_RETRY_AFTER`).
"""

from __future__ import annotations

import email.utils
import random
import time
from typing import Any

import httpx

__all__ = ["MAX_RETRY_AFTER", "backoff", "retry_after", "retryable_answer"]

FIRST_WAIT = 0.5
LAST_WAIT = 8.0
JITTER = 0.25
MAX_RETRY_AFTER = 60.0
"""A ``Retry-After`` longer than this is not waited for: the call raises its problem at once."""

_RETRIED_STATUSES = frozenset({408, 429, 502, 503, 504})


def retryable_answer(status: int, problem: dict[str, Any]) -> bool:
    if status in _RETRIED_STATUSES:
        return True
    return status == 409 and problem.get("code") == "IDEMPOTENCY_KEY_IN_PROGRESS"


def backoff(retry: int) -> float:
    """The wait before retry number ``retry`` (0 for the first): 0.5 s, 1 s, 2 s, … up to 8 s, each up to a quarter
    longer at random (at 8 s, up to a quarter shorter) so that clients that failed together come back apart."""
    base = min(LAST_WAIT, FIRST_WAIT * 2.0**retry)
    if base * (1.0 + JITTER) <= LAST_WAIT:
        return base * (1.0 + JITTER * random.random())
    return LAST_WAIT * (1.0 - JITTER * random.random())


def retry_after(response: httpx.Response, problem: dict[str, Any]) -> float | None:
    """The wait an answer asks for: ``Retry-After`` in seconds or as a date, else a ``retryAfterMs`` fact."""
    header = response.headers.get("retry-after")
    if header is not None:
        header = header.strip()
        if header.isdigit():
            return float(header)
        try:
            when = email.utils.parsedate_to_datetime(header)
        except (TypeError, ValueError):
            when = None
        if when is not None:
            return max(0.0, when.timestamp() - time.time())
    fact = problem.get("retryAfterMs")
    if isinstance(fact, int | float) and not isinstance(fact, bool) and fact >= 0:
        return fact / 1000.0
    return None
