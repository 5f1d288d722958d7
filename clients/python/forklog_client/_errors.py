"""What a call raises: a problem the server answered, or no answer at all.

    ForklogError                      a problem+json answer (``status``, ``code``, ``detail``, ``problem``)
    ├── SessionNotFoundError          one subclass per code of the service's catalogue, named after it
    ├── …
    └── RateLimitedError
    ConnectionError                   the server could not be reached (or kept failing) after the retries

An answer whose ``code`` this library does not know raises :class:`ForklogError` itself, so a newer server's codes
still reach the caller with their whole body.
"""

from __future__ import annotations

import builtins
from typing import Any

__all__ = [
    "ConnectionError",
    "ForbiddenError",
    "ForklogError",
    "HeadersTooLargeError",
    "IdempotencyKeyInProgressError",
    "IdempotencyKeyReusedError",
    "InternalError",
    "InvalidBoundaryError",
    "InvalidEventError",
    "InvalidRequestError",
    "InvalidSeedError",
    "MethodNotAllowedError",
    "NotAtTurnBoundaryError",
    "NotFoundError",
    "NotReadyError",
    "PayloadTooLargeError",
    "QuotaExceededError",
    "RateLimitedError",
    "RequestTimeoutError",
    "SeqConflictError",
    "SessionAlreadyExistsError",
    "SessionCorruptError",
    "SessionNotFoundError",
    "SessionNotLiveError",
    "StorageUnavailableError",
    "UnauthenticatedError",
    "UnsupportedMediaTypeError",
    "error_for",
]


class ForklogError(Exception):
    """The server answered a problem (RFC 9457): ``code`` is stable, ``detail`` is for people, ``problem`` is the
    whole body with the facts the code carries (``currentSeq``, ``index``, ``errors``, …)."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        self.status = status
        self.problem = problem
        code = problem.get("code")
        detail = problem.get("detail")
        self.code: str = code if isinstance(code, str) else ""
        self.detail: str = detail if isinstance(detail, str) else ""
        super().__init__(f"{status} {self.code or 'error'}: {self.detail}" if self.detail else f"{status} {self.code}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(status={self.status}, code={self.code!r}, detail={self.detail!r})"


class ConnectionError(builtins.ConnectionError):  # the spec names it so: forklog_client.ConnectionError
    """The server could not be reached, or its answers were lost, as many times as the retries allowed: a change
    may or may not have taken effect; calling again with the same ``idempotency_key`` applies it at most once."""


class SessionNotFoundError(ForklogError):
    """404 SESSION_NOT_FOUND: the session id is not live."""


class SessionAlreadyExistsError(ForklogError):
    """409 SESSION_ALREADY_EXISTS: a create or fork names an id that is live."""


class SessionNotLiveError(ForklogError):
    """409 SESSION_NOT_LIVE: ``instance`` is not the live incarnation's."""


class NotAtTurnBoundaryError(ForklogError):
    """409 NOT_AT_TURN_BOUNDARY: a snapshot or fork while the last event is not ``turn/end``."""


class SeqConflictError(ForklogError):
    """409 SEQ_CONFLICT: ``expectedSeq`` differs from the log length (``problem["currentSeq"]``)."""


class InvalidBoundaryError(ForklogError):
    """422 INVALID_BOUNDARY: the fork point is out of range or not a ``turn/end``."""


class InvalidSeedError(ForklogError):
    """422 INVALID_SEED: a seed, or a create's ``meta``, breaks the rules."""


class InvalidEventError(ForklogError):
    """422 INVALID_EVENT: an appended event breaks the rules (``problem["index"]``, ``problem["reason"]``)."""


class InvalidRequestError(ForklogError):
    """422 INVALID_REQUEST: the body, a parameter or an id is malformed (``problem["errors"]``)."""


class UnauthenticatedError(ForklogError):
    """401 UNAUTHENTICATED: a key is needed and none or an unknown one was sent."""


class ForbiddenError(ForklogError):
    """403 FORBIDDEN: the key lacks the route's scope."""


class IdempotencyKeyInProgressError(ForklogError):
    """409 IDEMPOTENCY_KEY_IN_PROGRESS: the first request with this key is still running (retried)."""


class IdempotencyKeyReusedError(ForklogError):
    """422 IDEMPOTENCY_KEY_REUSED: this key came with another method, path or body."""


class NotFoundError(ForklogError):
    """404 NOT_FOUND: no such route."""


class MethodNotAllowedError(ForklogError):
    """405 METHOD_NOT_ALLOWED: the route exists, not with this method."""


class RequestTimeoutError(ForklogError):
    """408 REQUEST_TIMEOUT: the request was sent too slowly (retried)."""


class PayloadTooLargeError(ForklogError):
    """413 PAYLOAD_TOO_LARGE: the body is over the server's limit."""


class UnsupportedMediaTypeError(ForklogError):
    """415 UNSUPPORTED_MEDIA_TYPE: a body that is not declared JSON."""


class HeadersTooLargeError(ForklogError):
    """431 HEADERS_TOO_LARGE: the request's headers are over the server's limit."""


class NotReadyError(ForklogError):
    """503 NOT_READY: the store is still recovering (retried)."""


class StorageUnavailableError(ForklogError):
    """503 STORAGE_UNAVAILABLE: the storage refused a write; nothing was acknowledged (retried)."""


class SessionCorruptError(ForklogError):
    """503 SESSION_CORRUPT: the session's log is damaged and kept out of service."""


class InternalError(ForklogError):
    """500 INTERNAL: a bug in the server."""


class QuotaExceededError(ForklogError):
    """429 QUOTA_EXCEEDED: the tenant's sessions or bytes are at their limit (``quota``, ``limit``, ``used``)."""


class RateLimitedError(ForklogError):
    """429 RATE_LIMITED: the key's requests are over its rate (retried after ``Retry-After``)."""


class NotInTurnError(ForklogError):
    """409 NOT_IN_TURN: an interrupt of a session with no open turn (``lastTurnEndSeq``)."""


_BY_CODE: dict[str, type[ForklogError]] = {
    "SESSION_NOT_FOUND": SessionNotFoundError,
    "SESSION_ALREADY_EXISTS": SessionAlreadyExistsError,
    "SESSION_NOT_LIVE": SessionNotLiveError,
    "NOT_AT_TURN_BOUNDARY": NotAtTurnBoundaryError,
    "SEQ_CONFLICT": SeqConflictError,
    "INVALID_BOUNDARY": InvalidBoundaryError,
    "INVALID_SEED": InvalidSeedError,
    "INVALID_EVENT": InvalidEventError,
    "INVALID_REQUEST": InvalidRequestError,
    "UNAUTHENTICATED": UnauthenticatedError,
    "FORBIDDEN": ForbiddenError,
    "IDEMPOTENCY_KEY_IN_PROGRESS": IdempotencyKeyInProgressError,
    "IDEMPOTENCY_KEY_REUSED": IdempotencyKeyReusedError,
    "NOT_FOUND": NotFoundError,
    "METHOD_NOT_ALLOWED": MethodNotAllowedError,
    "REQUEST_TIMEOUT": RequestTimeoutError,
    "PAYLOAD_TOO_LARGE": PayloadTooLargeError,
    "UNSUPPORTED_MEDIA_TYPE": UnsupportedMediaTypeError,
    "HEADERS_TOO_LARGE": HeadersTooLargeError,
    "NOT_READY": NotReadyError,
    "STORAGE_UNAVAILABLE": StorageUnavailableError,
    "SESSION_CORRUPT": SessionCorruptError,
    "INTERNAL": InternalError,
    "QUOTA_EXCEEDED": QuotaExceededError,
    "RATE_LIMITED": RateLimitedError,
    "NOT_IN_TURN": NotInTurnError,
}


def error_for(status: int, problem: dict[str, Any]) -> ForklogError:
    """The exception of an error answer: its code's class, or :class:`ForklogError` for a code not known here."""
    code = problem.get("code")
    cls = _BY_CODE.get(code, ForklogError) if isinstance(code, str) else ForklogError
    return cls(status, problem)
