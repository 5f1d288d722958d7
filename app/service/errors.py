"""The service layer's errors.

ServiceError         (a ForklogError) the service cannot take the request now
└── NotReady         the store is still recovering (or connecting): every session route answers NOT_READY

TransferFailed       (not a ForklogError: never an answer) an import, export or copy cannot go on (a command's
                     message, :mod:`app.service.transfer`)
"""

from __future__ import annotations

from app.domain.errors import ErrorCode, EventRejected, ForklogError, SessionError

__all__ = [
    "IdempotencyKeyInProgress",
    "IdempotencyKeyReused",
    "NotReady",
    "ServiceError",
    "TransferFailed",
    "invalid_event",
]


class ServiceError(ForklogError):
    """Base of the service layer's errors."""


class NotReady(ServiceError):
    """The store has not finished opening (recovery, or the first connection); retry in a moment."""

    code = ErrorCode.NOT_READY

    def __init__(self, detail: str = "the store is still recovering its sessions; retry in a moment") -> None:
        super().__init__(detail)


class IdempotencyKeyInProgress(ServiceError):
    """A request with this Idempotency-Key is running now; retry once it has answered."""

    code = ErrorCode.IDEMPOTENCY_KEY_IN_PROGRESS

    def __init__(self) -> None:
        super().__init__("the first request with this Idempotency-Key is still running; retry in a moment")


class IdempotencyKeyReused(ServiceError):
    """The Idempotency-Key was used for another request (method, path or body)."""

    code = ErrorCode.IDEMPOTENCY_KEY_REUSED

    def __init__(self) -> None:
        super().__init__("this Idempotency-Key came with another method, path or body; use a new key for a new request")


class TransferFailed(Exception):
    """An import, export or copy cannot go on; the message says why (and, for a copy, whether anything was
    written). A command prints it: no HTTP request ever meets it."""


def invalid_event(rejected: EventRejected) -> SessionError:
    """The INVALID_EVENT refusal of an append's or a fork's event that staging rejected."""
    return SessionError(
        ErrorCode.INVALID_EVENT,
        f"event at index {rejected.index} is invalid: {rejected.reason}",
        index=rejected.index,
        reason=rejected.reason,
    )
