"""The service layer's errors.

ServiceError         (a ForklogError) the service cannot take the request now
└── NotReady         the store is still recovering (or connecting): every session route answers NOT_READY
"""

from __future__ import annotations

from app.domain.errors import ErrorCode, ForklogError

__all__ = ["NotReady", "ServiceError"]


class ServiceError(ForklogError):
    """Base of the service layer's errors."""


class NotReady(ServiceError):
    """The store has not finished opening (recovery, or the first connection); retry in a moment."""

    code = ErrorCode.NOT_READY

    def __init__(self, detail: str = "the store is still recovering its sessions; retry in a moment") -> None:
        super().__init__(detail)
