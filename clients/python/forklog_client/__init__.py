"""forklog's Python client: ``Forklog`` (blocking) and ``AsyncForklog`` (asyncio), on httpx.

    from forklog_client import Forklog

    with Forklog("http://127.0.0.1:8000") as client:
        session = client.sessions.create(id="demo")
        client.sessions.append("demo", [{"type": "turn/start", "data": {"turn": 1}}])

Every create, append and fork carries an ``Idempotency-Key`` reused by its retries, so a call that returns took
effect exactly once; ``list`` and ``events`` follow every page; ``tail`` follows the session live across
disconnects. Errors are :class:`ForklogError` subclasses named after their problem code.
"""

from forklog_client._async import AsyncForklog, AsyncSessions
from forklog_client._calls import EventInput
from forklog_client._errors import (
    ConnectionError,
    ForbiddenError,
    ForklogError,
    HeadersTooLargeError,
    IdempotencyKeyInProgressError,
    IdempotencyKeyReusedError,
    InternalError,
    InvalidBoundaryError,
    InvalidEventError,
    InvalidRequestError,
    InvalidSeedError,
    MethodNotAllowedError,
    NotAtTurnBoundaryError,
    NotFoundError,
    NotInTurnError,
    NotReadyError,
    PayloadTooLargeError,
    QuotaExceededError,
    RateLimitedError,
    RequestTimeoutError,
    SeqConflictError,
    SessionAlreadyExistsError,
    SessionCorruptError,
    SessionNotFoundError,
    SessionNotLiveError,
    StorageUnavailableError,
    UnauthenticatedError,
    UnsupportedMediaTypeError,
)
from forklog_client._models import (
    CORE_EVENT_TYPES,
    Appended,
    Event,
    History,
    Lineage,
    Message,
    Model,
    Session,
    SessionStats,
    Snapshot,
)
from forklog_client._sync import Forklog, Sessions

__version__ = "0.1.0"

__all__ = [
    "CORE_EVENT_TYPES",
    "Appended",
    "AsyncForklog",
    "AsyncSessions",
    "ConnectionError",
    "Event",
    "EventInput",
    "ForbiddenError",
    "Forklog",
    "ForklogError",
    "HeadersTooLargeError",
    "History",
    "IdempotencyKeyInProgressError",
    "IdempotencyKeyReusedError",
    "InternalError",
    "InvalidBoundaryError",
    "InvalidEventError",
    "InvalidRequestError",
    "InvalidSeedError",
    "Lineage",
    "Message",
    "MethodNotAllowedError",
    "Model",
    "NotAtTurnBoundaryError",
    "NotFoundError",
    "NotInTurnError",
    "NotReadyError",
    "PayloadTooLargeError",
    "QuotaExceededError",
    "RateLimitedError",
    "RequestTimeoutError",
    "SeqConflictError",
    "Session",
    "SessionAlreadyExistsError",
    "SessionCorruptError",
    "SessionNotFoundError",
    "SessionNotLiveError",
    "SessionStats",
    "Sessions",
    "Snapshot",
    "StorageUnavailableError",
    "UnauthenticatedError",
    "UnsupportedMediaTypeError",
    "__version__",
]
