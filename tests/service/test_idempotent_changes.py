"""A create, append or fork runs once through the idempotency gate (spec 8): with a key, the answer the request gets
is the one kept with the change, made once; without one, it is made once and nothing is kept."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import orjson
import pytest

from app.backends.memory import MemoryBackend
from app.domain.clock import wall_clock_ms
from app.domain.session import DEFAULT_TENANT, Session, SessionKey
from app.service.idempotency import Answer, IdempotentRequest, Operation
from app.service.sessions import Appended, SessionService
from tests.api.builders import note

SOURCE = SessionKey(DEFAULT_TENANT, "source")


class CountedAnswers:
    """The answers of the changes, each made with a number that says how many were made before it."""

    def __init__(self) -> None:
        self.made = 0

    def created(self, session: Session) -> Answer:
        self.made += 1
        return Answer(201, f"/sessions/{session.id}", orjson.dumps({"id": session.id, "made": self.made}))

    def appended(self, appended: Appended) -> Answer:
        self.made += 1
        return Answer(201, None, orjson.dumps({"events": len(appended.events), "made": self.made}))


def run(scenario: Callable[[SessionService, CountedAnswers, MemoryBackend], Awaitable[None]]) -> None:
    async def main() -> None:
        answers = CountedAnswers()
        backend = MemoryBackend(clock=wall_clock_ms)
        service = SessionService(backend, answers=answers)
        await service.start()
        try:
            await service.create(DEFAULT_TENANT, SOURCE.id, [note("first")], None)
            await scenario(service, answers, backend)
        finally:
            await service.stop()

    asyncio.run(main())


def create(service: SessionService) -> Operation:
    return lambda change: service.create(DEFAULT_TENANT, "made", None, None, change=change)


def append(service: SessionService) -> Operation:
    return lambda change: service.append(SOURCE, [note("second")], change=change)


def fork(service: SessionService) -> Operation:
    return lambda change: service.forks.fork(SOURCE, child_id="made", at_turn=0, change=change)


OPERATIONS = [pytest.param(create, id="create"), pytest.param(append, id="append"), pytest.param(fork, id="fork")]


@pytest.mark.parametrize("operation", OPERATIONS)
def test_a_keyed_change_answers_with_the_answer_kept_with_it_made_once(
    operation: Callable[[SessionService], Operation],
) -> None:
    async def scenario(service: SessionService, answers: CountedAnswers, backend: MemoryBackend) -> None:
        request = IdempotentRequest(DEFAULT_TENANT, "key-1", "digest")
        answer, replayed = await service.idempotently(request, operation(service))
        kept = await backend.recall(DEFAULT_TENANT, "key-1")
        assert kept is not None and not replayed
        assert answers.made == 1
        assert answer == Answer(kept.status, kept.location, kept.body)

        again, replayed = await service.idempotently(request, operation(service))
        assert replayed and again == answer
        assert answers.made == 1  # a replay runs nothing and makes no answer

    run(scenario)


@pytest.mark.parametrize("operation", OPERATIONS)
def test_a_change_without_a_key_makes_its_answer_once_and_keeps_none(
    operation: Callable[[SessionService], Operation],
) -> None:
    async def scenario(service: SessionService, answers: CountedAnswers, backend: MemoryBackend) -> None:
        answer, replayed = await service.idempotently(None, operation(service))
        assert not replayed and answer.status == 201
        assert orjson.loads(answer.body)["made"] == 1 and answers.made == 1
        assert list(backend.remembered) == []

    run(scenario)
