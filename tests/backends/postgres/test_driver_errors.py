"""Every exception class the driver exports is translated into the storage layer's errors, in one place
(:mod:`app.backends.postgres.errors`): never a 500, and a read never says that nothing was stored."""

from __future__ import annotations

import inspect

import asyncpg
import asyncpg.exceptions
import asyncpg.exceptions._base
import pytest

from app.backends.errors import (
    Access,
    ChangeRefused,
    IdempotencyKeyTaken,
    OutcomeUnknown,
    ReadFailed,
    StorageError,
    StorageUnavailable,
)
from app.backends.postgres.errors import database_errors
from app.domain.errors import ErrorCode


def _driver_classes() -> list[type[BaseException]]:
    """Every exception class of ``asyncpg.exceptions`` (the public names and the base module's, where the client's
    own DataError hides behind the server's of the same name), plus what its sockets raise."""
    found: dict[str, type[BaseException]] = {}
    for module in (asyncpg, asyncpg.exceptions, asyncpg.exceptions._base):
        for value in vars(module).values():
            if inspect.isclass(value) and issubclass(value, Exception):
                found[f"{value.__module__}.{value.__qualname__}"] = value
    for socket_error in (OSError, ConnectionResetError, ConnectionRefusedError, BrokenPipeError, TimeoutError):
        found[socket_error.__name__] = socket_error
    return [found[name] for name in sorted(found)]


DRIVER_CLASSES = _driver_classes()


def _instance(cls: type[BaseException]) -> BaseException:
    if issubclass(cls, OSError):
        return cls(104, "Connection reset by peer")
    return cls("injected by the test")


def _raised(exc: BaseException, access: Access, *, sent: bool = True) -> BaseException:
    with pytest.raises(BaseException) as caught, database_errors(access) as attempt:
        attempt.sent = sent
        raise exc
    return caught.value


def test_the_walk_covers_the_driver() -> None:
    names = {cls.__name__ for cls in DRIVER_CLASSES}
    assert len(DRIVER_CLASSES) > 250  # asyncpg 0.32 exports about 275 classes
    for expected in ("SerializationError", "DeadlockDetectedError", "ConnectionDoesNotExistError", "InterfaceError"):
        assert expected in names
    assert {"TransactionResolutionUnknownError", "ReadOnlySQLTransactionError", "InternalClientError"} <= names


@pytest.mark.parametrize("cls", DRIVER_CLASSES, ids=lambda cls: f"{cls.__module__}.{cls.__qualname__}")
def test_every_driver_error_of_a_read_is_a_read_failure(cls: type[BaseException]) -> None:
    raised = _raised(_instance(cls), Access.READ)

    assert isinstance(raised, ReadFailed), repr(raised)
    assert raised.code is ErrorCode.STORAGE_UNAVAILABLE
    assert "nothing was changed" in raised.detail
    assert "nothing was stored" not in raised.detail


@pytest.mark.parametrize("cls", DRIVER_CLASSES, ids=lambda cls: f"{cls.__module__}.{cls.__qualname__}")
@pytest.mark.parametrize("sent", [True, False], ids=["on-the-connection", "no-connection-taken"])
def test_every_driver_error_of_a_change_is_a_503(cls: type[BaseException], sent: bool) -> None:
    raised = _raised(_instance(cls), Access.CHANGE, sent=sent)

    assert isinstance(raised, StorageUnavailable), repr(raised)
    assert isinstance(raised, StorageError) and raised.code is ErrorCode.STORAGE_UNAVAILABLE
    if not sent:  # nothing reached the database: nothing can have been stored
        assert isinstance(raised, ChangeRefused), repr(raised)


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        pytest.param(asyncpg.SerializationError("could not serialize access"), ChangeRefused, id="serialization"),
        pytest.param(asyncpg.DeadlockDetectedError("deadlock detected"), ChangeRefused, id="deadlock"),
        pytest.param(asyncpg.ReadOnlySQLTransactionError("read-only transaction"), ChangeRefused, id="standby"),
        pytest.param(asyncpg.UniqueViolationError("duplicate key"), ChangeRefused, id="another-unique-key"),
        pytest.param(asyncpg.DiskFullError("could not extend file"), ChangeRefused, id="disk-full"),
        pytest.param(asyncpg.exceptions._base.DataError("invalid input for $1"), ChangeRefused, id="client-data"),
        pytest.param(asyncpg.ConnectionDoesNotExistError("closed mid-operation"), OutcomeUnknown, id="lost"),
        pytest.param(asyncpg.TransactionResolutionUnknownError("unknown"), OutcomeUnknown, id="resolution-unknown"),
        pytest.param(asyncpg.AdminShutdownError("terminating connection"), OutcomeUnknown, id="admin-shutdown"),
        pytest.param(
            asyncpg.QueryCanceledError("canceling wait for synchronous replication"),
            OutcomeUnknown,
            id="cancelled-sync-wait",
        ),
        pytest.param(asyncpg.InterfaceError("connection is closed"), OutcomeUnknown, id="closed"),
        pytest.param(ConnectionResetError(104, "Connection reset by peer"), OutcomeUnknown, id="reset"),
        pytest.param(TimeoutError(), OutcomeUnknown, id="timeout"),
    ],
)
def test_a_change_says_whether_it_may_have_been_stored(exc: BaseException, expected: type[BaseException]) -> None:
    raised = _raised(exc, Access.CHANGE)

    assert type(raised) is expected
    assert isinstance(raised, StorageUnavailable)
    if expected is ChangeRefused:
        assert "nothing was stored" in raised.detail
    else:
        assert "nothing was stored" not in raised.detail
        assert "Idempotency-Key" in raised.detail


def test_a_kept_idempotency_key_is_a_conflict_the_service_answers() -> None:
    violation = asyncpg.UniqueViolationError("duplicate key value violates unique constraint")
    violation.constraint_name = "forklog_remembered_pkey"

    raised = _raised(violation, Access.CHANGE)

    assert isinstance(raised, IdempotencyKeyTaken)


def test_the_storage_layers_own_errors_pass_through() -> None:
    refused = ChangeRefused("the disk is full")

    assert _raised(refused, Access.READ) is refused
