"""The domain's one error family.

    SessionError                 every refusal of the store, with a stable ``code``
    └── (codes)                  SESSION_NOT_FOUND, SESSION_ALREADY_EXISTS, SESSION_NOT_LIVE,
                                 NOT_AT_TURN_BOUNDARY, INVALID_BOUNDARY, SEQ_CONFLICT,
                                 INVALID_SEED, INVALID_EVENT, INVALID_REQUEST, SESSION_CORRUPT

No HTTP status lives here: the API layer maps each code to a status in one table.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class ErrorCode(StrEnum):
    SESSION_NOT_FOUND = "SESSION_NOT_FOUND"
    SESSION_ALREADY_EXISTS = "SESSION_ALREADY_EXISTS"
    SESSION_NOT_LIVE = "SESSION_NOT_LIVE"
    NOT_AT_TURN_BOUNDARY = "NOT_AT_TURN_BOUNDARY"
    INVALID_BOUNDARY = "INVALID_BOUNDARY"
    SEQ_CONFLICT = "SEQ_CONFLICT"
    INVALID_SEED = "INVALID_SEED"
    INVALID_EVENT = "INVALID_EVENT"
    INVALID_REQUEST = "INVALID_REQUEST"
    SESSION_CORRUPT = "SESSION_CORRUPT"


class SessionError(Exception):
    """A refusal of the store: ``code`` says which, ``detail`` says what to do, ``facts`` carry the numbers."""

    def __init__(self, code: ErrorCode, detail: str, **facts: Any) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.facts = facts

    def __repr__(self) -> str:
        return f"SessionError({self.code.value!r}, {self.detail!r}, {self.facts!r})"


class EventRejected(Exception):
    """One event breaks a rule; the caller turns it into INVALID_EVENT or INVALID_SEED with the index."""

    def __init__(self, index: int, reason: str) -> None:
        super().__init__(f"event at index {index}: {reason}")
        self.index = index
        self.reason = reason
