"""Every error forklog raises on purpose, and the one vocabulary of codes they carry.

    ForklogError                     base of every refusal: a stable ``code``, a ``detail`` for people, ``facts``
    ├── DomainError                  the domain's own refusals (this module)
    │   ├── SessionError             a session operation refused by the rules of spec 2 (ids, liveness, seeds)
    │   │   ├── SessionForkError     the RFC's: a snapshot or fork refused (boundary, source)
    │   │   └── SessionAlreadyExists a create or fork names a live id (found by the service or by a backend)
    │   ├── InvalidValue             a request value the rules refuse (INVALID_REQUEST, naming the field)
    │   │   └── InvalidId            an id that breaks the id rule
    │   └── EventRejected            one event breaks a rule; turned into INVALID_EVENT or INVALID_SEED
    ├── StorageError                 app.backends.errors (STORAGE_UNAVAILABLE, SESSION_CORRUPT)
    ├── ServiceError                 app.service.errors
    └── RequestProblem               app.api.wire.problems

The codes are the contract's (spec section 3, "Errors") plus two of forklog's own for spec 9's 408 and 431. No HTTP
status lives here: the API layer maps each code to its status, title and type in one table.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

__all__ = [
    "ConfigurationError",
    "DomainError",
    "ErrorCode",
    "EventRejected",
    "ForklogError",
    "InvalidId",
    "InvalidValue",
    "SessionAlreadyExists",
    "SessionError",
    "SessionForkError",
    "session_not_found",
]


class ErrorCode(StrEnum):
    SESSION_NOT_FOUND = "SESSION_NOT_FOUND"
    SESSION_ALREADY_EXISTS = "SESSION_ALREADY_EXISTS"
    SESSION_NOT_LIVE = "SESSION_NOT_LIVE"
    NOT_AT_TURN_BOUNDARY = "NOT_AT_TURN_BOUNDARY"
    NOT_IN_TURN = "NOT_IN_TURN"
    SEQ_CONFLICT = "SEQ_CONFLICT"
    INVALID_BOUNDARY = "INVALID_BOUNDARY"
    INVALID_SEED = "INVALID_SEED"
    INVALID_EVENT = "INVALID_EVENT"
    INVALID_REQUEST = "INVALID_REQUEST"
    UNAUTHENTICATED = "UNAUTHENTICATED"
    FORBIDDEN = "FORBIDDEN"
    IDEMPOTENCY_KEY_IN_PROGRESS = "IDEMPOTENCY_KEY_IN_PROGRESS"
    IDEMPOTENCY_KEY_REUSED = "IDEMPOTENCY_KEY_REUSED"
    NOT_FOUND = "NOT_FOUND"
    METHOD_NOT_ALLOWED = "METHOD_NOT_ALLOWED"
    REQUEST_TIMEOUT = "REQUEST_TIMEOUT"
    PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
    UNSUPPORTED_MEDIA_TYPE = "UNSUPPORTED_MEDIA_TYPE"
    HEADERS_TOO_LARGE = "HEADERS_TOO_LARGE"
    NOT_READY = "NOT_READY"
    STORAGE_UNAVAILABLE = "STORAGE_UNAVAILABLE"
    SESSION_CORRUPT = "SESSION_CORRUPT"
    INTERNAL = "INTERNAL"
    QUOTA_EXCEEDED = "QUOTA_EXCEEDED"
    RATE_LIMITED = "RATE_LIMITED"


class ForklogError(Exception):
    """A refusal: ``code`` says which, ``detail`` says what to do next, ``facts`` carry what a client needs.

    Facts are plain values named as the contract names them (``currentSeq``, ``index``, ``reason``; for
    INVALID_REQUEST ``field`` and ``reason``); the API decides how they look on the wire.
    """

    code: ErrorCode = ErrorCode.INTERNAL

    def __init__(self, detail: str, *, code: ErrorCode | None = None, **facts: Any) -> None:
        super().__init__(detail)
        if code is not None:
            self.code = code
        self.detail = detail
        self.facts = facts

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code.value!r}, {self.detail!r}, {self.facts!r})"


class ConfigurationError(Exception):
    """What the service cannot start with, or a keys file it cannot take: a setting, the keys file or one of its
    lines, a limit, a database URL, an exposure the settings would make. The command line prints it and exits (a
    reload keeps the keys in force); it never answers a request, which is why it is not a :class:`ForklogError`."""


class DomainError(ForklogError):
    """Base of the domain's refusals."""


class SessionError(DomainError):
    """A session operation refused by the rules (not found, already exists, not live, a bad seed or event...)."""

    def __init__(self, code: ErrorCode, detail: str, **facts: Any) -> None:
        super().__init__(detail, code=code, **facts)


class SessionForkError(SessionError):
    """The RFC's fork-helper error: a snapshot or fork refused, with the RFC's codes (NOT_AT_TURN_BOUNDARY,
    SESSION_NOT_FOUND, SESSION_NOT_LIVE) and forklog's INVALID_BOUNDARY and SEQ_CONFLICT."""


def session_not_found(session_id: str, error: type[SessionError] = SessionError) -> SessionError:
    """SESSION_NOT_FOUND, as ``error`` (a fork's refusals are :class:`SessionForkError`, the RFC's class)."""
    return error(ErrorCode.SESSION_NOT_FOUND, f'session "{session_id}" not found')


class SessionAlreadyExists(SessionError):
    """A create or fork names an id that is live: the one class of SESSION_ALREADY_EXISTS, whether the service saw
    the id taken or a backend found it taken by another process meanwhile."""

    code = ErrorCode.SESSION_ALREADY_EXISTS

    def __init__(self, session_id: str) -> None:
        super().__init__(
            ErrorCode.SESSION_ALREADY_EXISTS, f'session "{session_id}" already exists; pick another id or omit it'
        )


class InvalidValue(DomainError):
    """A value of the request that the rules refuse, named by ``field`` (a seq beyond the log, say)."""

    code = ErrorCode.INVALID_REQUEST

    def __init__(self, field: str, detail: str, reason: str | None = None) -> None:
        super().__init__(detail, field=field, reason=reason or detail)


class InvalidId(InvalidValue):
    """An id (the path's, ``sessionId``, ``?parent=``...) that breaks the id rule of spec 2.1."""

    def __init__(self, field: str, detail: str) -> None:
        super().__init__(field, detail, "not a valid session id")


class EventRejected(DomainError):
    """One event breaks a rule; the caller turns it into INVALID_EVENT or INVALID_SEED with the index."""

    code = ErrorCode.INVALID_EVENT

    def __init__(self, index: int, reason: str) -> None:
        super().__init__(f"event at index {index}: {reason}", index=index, reason=reason)
        self.index = index
        self.reason = reason
