"""The faster __init__ of the frozen values an append makes: the same parameters, values and refusals as the
dataclass's own, still frozen; and classes it cannot stand in for are refused when decorated."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest

from app.backends.base import Tip
from app.domain.fast_init import fast_init
from app.domain.session import LogHead, Session, SessionHeader, SessionKey
from app.domain.stats import NO_STATS
from app.service.appends import Appended
from app.service.idempotency import Answer

DECORATED = [LogHead, Session, Tip, Appended, Answer]


def _twin(cls: type[Any]) -> type[Any]:
    """The same dataclass with the dataclass's own __init__."""
    fields = [(f.name, f.type, dataclasses.field(default=f.default)) for f in dataclasses.fields(cls)]
    return dataclasses.make_dataclass(f"{cls.__name__}Twin", fields, frozen=True, slots=True)


@pytest.mark.parametrize("cls", DECORATED, ids=lambda cls: cls.__name__)
def test_the_parameters_and_defaults_are_the_dataclass_own(cls: type[Any]) -> None:
    assert "__dataclass_builtins_object__" not in cls.__init__.__code__.co_names  # not object.__setattr__ a field
    ours = inspect.signature(cls.__init__).parameters
    theirs = inspect.signature(_twin(cls).__init__).parameters
    assert list(ours) == list(theirs)
    assert [p.default for p in ours.values()] == [p.default for p in theirs.values()]


def _header() -> SessionHeader:
    return SessionHeader(id="s", instance="i", created_at=1, cwd=None)


def test_a_head_made_by_position_or_by_name_holds_what_was_given() -> None:
    by_position = LogHead(3, 1000, "turn/end", 2, None, 120, "a title", "a preview")
    by_name = LogHead(
        count=3,
        last_time=1000,
        last_type="turn/end",
        last_turn_end_seq=2,
        body_bytes=120,
        title="a title",
        preview="a preview",
    )
    assert by_position == by_name
    assert dataclasses.astuple(by_position) == (3, 1000, "turn/end", 2, None, 120, "a title", "a preview", NO_STATS)
    assert hash(by_position) == hash(by_name)
    assert dataclasses.astuple(LogHead()) == dataclasses.astuple(_twin(LogHead)())


def test_a_session_keeps_its_parts_and_stays_frozen() -> None:
    session = Session(SessionKey("t", "s"), _header(), LogHead(1), 1_700_000_000_000)
    assert session.key == SessionKey("t", "s") and session.head.count == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        session.head = LogHead(2)  # type: ignore[misc]
    assert dataclasses.replace(session, head=LogHead(2)).head.count == 2
    assert Tip(session, log=None).may_be_stale is False  # type: ignore[arg-type]


def test_wrong_arguments_are_refused_as_the_dataclass_refuses_them() -> None:
    with pytest.raises(TypeError):
        Answer(201, None)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Answer(201, None, b"{}", b"more")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Answer(201, None, body=b"{}", colour="red")  # type: ignore[call-arg]


def test_classes_whose_init_does_more_are_refused() -> None:
    @dataclasses.dataclass(slots=True)
    class Mutable:
        value: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class Checked:
        value: int

        def __post_init__(self) -> None:
            raise ValueError

    @dataclasses.dataclass(frozen=True, slots=True)
    class Factory:
        values: list[int] = dataclasses.field(default_factory=list)

    @dataclasses.dataclass(frozen=True)
    class Unslotted:
        value: int

    for cls in (Mutable, Checked, Factory, Unslotted):
        with pytest.raises(TypeError):
            fast_init(cls)
