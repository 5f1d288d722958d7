"""The one place where the database driver's errors become the storage layer's (httpx's
``map_httpcore_exceptions`` is the model).

Every statement a request runs is inside :func:`database_errors`. What it raises is decided by the driver's
exception classes, never by a hand-picked list of conditions, so no error of the driver reaches a client as a 500:

- a key of the idempotency table already kept (a unique violation of its primary key):
  :class:`~app.backends.errors.IdempotencyKeyTaken`, which the service answers from the kept record;
- a read, whatever went wrong: :class:`~app.backends.errors.ReadFailed` (nothing was changed);
- a change that never reached the database (no connection could be taken) or that the server refused with an error
  (the transaction was rolled back: a constraint, a read-only standby, a serialization failure or deadlock, a full
  disk): :class:`~app.backends.errors.ChangeRefused` (nothing was stored);
- a change whose connection was lost, timed out or was cut by the server's operator (a crash, a shutdown, a
  failover, a cancelled wait for the synchronous standby) after it was sent: the commit may have happened, so
  :class:`~app.backends.errors.OutcomeUnknown`.

Serialization failures and deadlocks are answered 503 (``ChangeRefused``), not retried here: forklog's changes run
at READ COMMITTED and take their row locks in one order, so neither is expected; if an engine raises one, the
client's retry (with its Idempotency-Key) is as good as ours and keeps the change's time bound.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import asyncpg

from app.backends.errors import Access, IdempotencyKeyTaken, OutcomeUnknown, StorageUnavailable

__all__ = ["DRIVER_ERRORS", "Attempt", "database_errors", "fails_for_good", "server_lost", "translate"]

logger = logging.getLogger("forklog.storage")

# Everything the driver raises: the server's errors and warnings, the client's own errors, and the socket's.
DRIVER_ERRORS: tuple[type[Exception], ...] = (
    asyncpg.PostgresError,
    asyncpg.exceptions.PostgresWarning,
    asyncpg.InterfaceError,
    asyncpg.InterfaceWarning,
    asyncpg.InternalClientError,
    OSError,
    TimeoutError,
)

# The client refused to send the statement (a value it cannot encode, a setting it does not support): nothing was sent.
NOT_SENT: tuple[type[Exception], ...] = (
    asyncpg.exceptions._base.DataError,
    asyncpg.exceptions.ClientConfigurationError,
    asyncpg.exceptions.UnsupportedClientFeatureError,
    asyncpg.exceptions.UnsupportedServerFeatureError,
)

# The connection is gone or its server is going away: what was in flight may or may not have committed.
CONNECTION_LOST: tuple[type[Exception], ...] = (
    asyncpg.PostgresConnectionError,  # including TransactionResolutionUnknownError and ConnectionDoesNotExistError
    asyncpg.OperatorInterventionError,  # a shutdown, a crash, a cancelled statement or synchronous-commit wait
    asyncpg.InterfaceError,  # the connection was closed under the statement
    asyncpg.InternalClientError,  # a protocol error: the connection cannot be trusted
    OSError,
    TimeoutError,
)

# The server is not (or no longer) a primary this process may write to: drop every connection to it.
NOT_A_PRIMARY: tuple[type[Exception], ...] = (
    asyncpg.ReadOnlySQLTransactionError,
    asyncpg.exceptions.TargetServerAttributeNotMatched,
    asyncpg.CannotConnectNowError,
)

REMEMBERED_KEY = "forklog_remembered_pkey"

# SQLSTATE classes of an error that the same statement meets again however long one waits: a data exception (22),
# an integrity violation (23), a statement the server cannot run or the role may not (42: syntax, undefined object,
# insufficient privilege), a feature the engine lacks (0A), and the server's internal errors (XX). An outage, a
# standby, a lock or a serialization failure is none of these.
FOR_GOOD_CLASSES = frozenset({"0A", "22", "23", "42", "XX"})


@dataclass(slots=True)
class Attempt:
    """Where a request stands with the database: ``sent`` once it holds a connection, from then on a lost
    connection leaves a change's outcome unknown."""

    sent: bool = False


def _reason(exc: BaseException) -> str:
    if isinstance(exc, asyncpg.PostgresError):
        message = exc.args[0] if exc.args else ""
        return f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, OSError) and exc.strerror:
        return f"{type(exc).__name__}: {exc.strerror}"
    return type(exc).__name__


def translate(exc: Exception, access: Access, *, sent: bool = True) -> Exception:
    """The storage layer's error for the driver's ``exc`` raised while a request did ``access``."""
    if isinstance(exc, asyncpg.UniqueViolationError) and getattr(exc, "constraint_name", None) == REMEMBERED_KEY:
        return IdempotencyKeyTaken("the Idempotency-Key was kept already")
    reason = f"the database: {_reason(exc)}"
    if access is Access.CHANGE and sent and isinstance(exc, CONNECTION_LOST) and not isinstance(exc, NOT_SENT):
        return OutcomeUnknown(reason)
    return access.refused(reason)


def fails_for_good(exc: BaseException) -> bool:
    """Whether ``exc`` is the server refusing a statement in a way no retry of it can mend (see FOR_GOOD_CLASSES)."""
    sqlstate = getattr(exc, "sqlstate", None) if isinstance(exc, asyncpg.PostgresError) else None
    return isinstance(sqlstate, str) and sqlstate[:2] in FOR_GOOD_CLASSES


def server_lost(exc: BaseException) -> bool:
    """Whether ``exc`` says the connection's server is gone or is not a primary (now a standby, or shutting down)."""
    return isinstance(exc, CONNECTION_LOST + NOT_A_PRIMARY) and not isinstance(exc, NOT_SENT)


@contextlib.contextmanager
def database_errors(access: Access, on_lost: Callable[[], None] | None = None) -> Iterator[Attempt]:
    """Translate the driver's errors raised inside into the storage layer's (see the module's docstring);
    ``on_lost`` is called first when the error says the server is gone or no longer a primary."""
    attempt = Attempt()
    try:
        yield attempt
    except DRIVER_ERRORS as exc:
        if on_lost is not None and server_lost(exc):
            on_lost()
        translated = translate(exc, access, sent=attempt.sent)
        if isinstance(translated, StorageUnavailable) and not server_lost(exc):
            # Not an outage: a statement the server or the driver refused may be a bug; keep its trace.
            logger.error("the database refused a %s: %s", access.value, translated.detail, exc_info=exc)
        raise translated from exc
