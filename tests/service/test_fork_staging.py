"""A fork's events (spec 12) are staged by the service on the seam's seed tip: the backend is handed a checked
batch to store as it is, and a refused event never reaches it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.backends.base import Seed, SeedPrefix
from app.backends.memory import MemoryBackend
from app.domain.clock import wall_clock_ms
from app.domain.errors import ErrorCode, SessionError
from app.domain.session import Session, SessionKey
from app.domain.staging import StagedEvents
from app.service.sessions import SessionService
from tests.backends.test_contract import turn
from tests.events import turn_start

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class SeedsSeen(MemoryBackend):
    """A memory store that keeps every seed it is asked to create a session from."""

    def __init__(self) -> None:
        super().__init__(clock=wall_clock_ms)
        self.seeds: list[Seed] = []

    async def create(self, key: SessionKey, instance: str, lineage: Any, seed: Seed, remember: Any = None) -> Session:
        self.seeds.append(seed)
        return await super().create(key, instance, lineage, seed, remember)


@pytest.fixture
async def served() -> AsyncIterator[tuple[SessionService, SeedsSeen]]:
    """The service over a store holding ``src``: two whole turns."""
    backend = SeedsSeen()
    service = SessionService(backend, clock=wall_clock_ms)
    await service.start()
    try:
        await service.create("default", "src", [*turn(1), *turn(2)], None)
        backend.seeds.clear()
        yield service, backend
    finally:
        await service.stop()


async def test_the_store_is_handed_the_forks_events_staged_and_stores_them_as_they_are(
    served: tuple[SessionService, SeedsSeen],
) -> None:
    service, backend = served
    child = await service.forks.fork(SessionKey("default", "src"), child_id="kid", at_turn=1, events=turn(2, "edit"))

    (seed,) = backend.seeds
    assert isinstance(seed, SeedPrefix) and isinstance(seed.then, StagedEvents)
    assert (seed.count, seed.then.base_count, len(seed.then.events)) == (8, 8, 8)
    assert await backend.read(child.key, 8, 16) == seed.then.lines
    assert child.head.count == 16


async def test_a_fork_with_a_refused_event_never_reaches_the_store(served: tuple[SessionService, SeedsSeen]) -> None:
    service, backend = served
    with pytest.raises(SessionError) as refused:
        await service.forks.fork(SessionKey("default", "src"), child_id="kid", at_turn=1, events=[turn_start(3)])
    assert (refused.value.code, refused.value.facts.get("index")) == (ErrorCode.INVALID_EVENT, 0)
    assert backend.seeds == []
    assert await backend.find(SessionKey("default", "kid")) is None
