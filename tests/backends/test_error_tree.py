"""One exception per code (issue 20, httpx's ``_exceptions.py`` as the model): every code a class fixes is fixed by
one class (its subclasses inherit it), the storage layer's errors all answer 503, and a storage conflict (a race
lost on a shared store) is never an answer of its own."""

from __future__ import annotations

import re
from collections import defaultdict

import app.api.wire.problems
import app.backends.errors as storage
import app.service.errors
from app.api.wire.problems import PROBLEMS
from app.domain.errors import ErrorCode, ForklogError


def _every_subclass(base: type[ForklogError]) -> list[type[ForklogError]]:
    found: list[type[ForklogError]] = []
    pending = [base]
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return found


def test_each_code_is_fixed_by_one_class() -> None:
    assert app.api.wire.problems and app.service.errors  # every layer's errors are loaded
    fixing: dict[ErrorCode, list[str]] = defaultdict(list)
    for cls in _every_subclass(ForklogError):
        if "code" in vars(cls) and cls is not ForklogError:
            fixing[cls.code].append(cls.__qualname__)

    assert {code: names for code, names in fixing.items() if len(names) > 1} == {}
    assert fixing[ErrorCode.SESSION_ALREADY_EXISTS] == ["SessionAlreadyExists"]
    assert fixing[ErrorCode.IDEMPOTENCY_KEY_IN_PROGRESS] == ["IdempotencyKeyInProgress"]


def test_every_storage_error_answers_503() -> None:
    for cls in _every_subclass(storage.StorageError):
        assert PROBLEMS[cls.code].status == 503, cls


def test_a_lost_race_is_a_conflict_the_service_answers_not_a_code() -> None:
    for conflict in (storage.StaleHead, storage.IdempotencyKeyTaken):
        assert issubclass(conflict, storage.StorageConflict)
        assert not issubclass(conflict, ForklogError)


def test_the_module_docstring_draws_every_storage_class() -> None:
    drawing = storage.__doc__ or ""
    for name in storage.__all__:
        if name != "Access":
            assert re.search(rf"\b{name}\s{{2,}}", drawing), f"{name} is not drawn in the tree"
