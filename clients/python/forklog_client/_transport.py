"""What the sync and async clients share around a request: headers, how an error answer is read, and the
decision to retry it."""

from __future__ import annotations

from typing import Any

import httpx

from forklog_client._retry import MAX_RETRY_AFTER, backoff, retry_after, retryable_answer

__all__ = [
    "USER_AGENT",
    "answer_wait",
    "client_headers",
    "gone_after_retry",
    "problem_of",
    "retry_wait",
    "stream_ended",
]

USER_AGENT = "forklog-client-python/0.1.0"


def client_headers(api_key: str | None) -> dict[str, str]:
    headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
    if api_key is not None:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def problem_of(response: httpx.Response) -> dict[str, Any]:
    """The answer's problem body; an answer that is not one (a proxy's page) becomes a problem without a code."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        return body
    return {"status": response.status_code, "detail": response.text[:500]}


def retry_wait(response: httpx.Response, problem: dict[str, Any], retry: int, max_retries: int) -> float | None:
    """How long to wait before retrying this answer, or ``None`` when it is final."""
    return None if retry >= max_retries else answer_wait(response, problem, retry)


def answer_wait(response: httpx.Response, problem: dict[str, Any], attempt: int) -> float | None:
    """How long an answer that may be retried asks to wait (else the backoff's); ``None`` for a final answer."""
    if not retryable_answer(response.status_code, problem):
        return None
    asked = retry_after(response, problem)
    if asked is None:
        return backoff(attempt)
    return asked if asked <= MAX_RETRY_AFTER else None


def gone_after_retry(
    response: httpx.Response, problem: dict[str, Any], retry: int, code: str = "SESSION_NOT_FOUND"
) -> bool:
    """A delete's retry answered 404 ``code``: an earlier attempt whose answer was lost deleted it."""
    return retry > 0 and response.status_code == 404 and problem.get("code") == code


def stream_ended(response: httpx.Response, problem: dict[str, Any]) -> bool:
    """A tail's reconnect refused because the session it follows is gone (deleted, or made anew)."""
    return response.status_code == 404 or (response.status_code == 409 and problem.get("code") == "SESSION_NOT_LIVE")
