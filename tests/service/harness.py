"""The service over an in-memory backend, driven synchronously: each call runs to its end on a private loop.

The domain and service tests use it as "the store": every call goes through the real operations (the spec's check
order, the boundary rule, grouping), and what was stored is read back from the backend's memory.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson
import pytest

from app.api.wire.resources import decode_cursor, encode_cursor
from app.backends.catalog import LiveSession
from app.backends.memory import MemoryBackend
from app.domain.errors import ErrorCode, ForklogError
from app.domain.listing import ListQuery, PageRequest
from app.domain.log import SessionLog
from app.domain.session import DEFAULT_TENANT, Session, SessionHeader, SessionKey
from app.service.sessions import SessionService

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class TakenSeed:
    """A snapshot's seed read whole: its JSONL lines, and fresh event values each time they are asked for."""

    data: bytes

    def lines(self) -> bytes:
        return self.data

    def events(self) -> list[dict[str, Any]]:
        return [orjson.loads(line) for line in self.data.splitlines()]

    def __len__(self) -> int:
        return self.data.count(b"\n")


@dataclass(frozen=True, slots=True)
class TakenSnapshot:
    """A snapshot's answer with its seed read whole."""

    source: Session
    seed: TakenSeed
    meta: dict[str, Any]


class StoreHarness:
    def __init__(self, clock: Callable[[], int], tenant: str = DEFAULT_TENANT) -> None:
        self.tenant = tenant
        self.backend = MemoryBackend(clock=clock)
        self.service = SessionService(self.backend, clock=clock)
        self._loop = asyncio.new_event_loop()
        weakref.finalize(self, self._loop.close)
        self.run(self.service.start())
        # No background task may outlive a call: the harness's loop only runs while it is called.
        self.run(self.service.idempotency.stop_sweeping())
        self.run(self.service.retention.stop())
        self.run(self.service.searcher.stop())  # searches read sessions directly, never a stale index
        self.service.changes.stop_rechecks()
        self.run(asyncio.sleep(0))  # the cancelled task ends

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        return self._loop.run_until_complete(work)

    def key(self, session_id: str) -> SessionKey:
        return SessionKey(self.tenant, session_id)

    # -- what is stored --------------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.backend.catalog)

    def __contains__(self, session_id: str) -> bool:
        return self.backend.catalog.get(self.key(session_id)) is not None

    def get(self, session_id: str) -> LiveSession:
        """The live session as stored (SESSION_NOT_FOUND, as the service says, when it is not live)."""
        self.run(self.service.reads.get(self.key(session_id)))
        live = self.backend.catalog.get(self.key(session_id))
        assert live is not None
        return live

    def quarantine(self, session_id: str, reason: str) -> None:
        """Keep an id out of service as a recovery does with a damaged file."""
        self.backend.catalog.quarantine(self.key(session_id), reason)

    def adopt(self, header: SessionHeader, log: SessionLog) -> None:
        """Put a session in the store as a recovery would."""
        self.backend.catalog.add(LiveSession(self.key(header.id), header, log, changed_at=self.backend.catalog.now()))

    # -- operations ------------------------------------------------------------------------------------------------

    def create(
        self,
        session_id: str | None = None,
        seed: Sequence[Any] | None = None,
        meta: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> LiveSession:
        created = self.run(self.service.create(self.tenant, session_id, seed, meta, **kwargs))
        return self.get(created.id)

    def append(self, session_id: str, events: Sequence[Any], **kwargs: Any) -> list[dict[str, Any]]:
        return self.run(self.service.append(self.key(session_id), events, **kwargs)).events

    def fork(self, session_id: str, **kwargs: Any) -> LiveSession:
        child = self.run(self.service.forks.fork(self.key(session_id), **kwargs))
        return self.get(child.id)

    def snapshot(self, session_id: str, **kwargs: Any) -> TakenSnapshot:
        async def take() -> TakenSnapshot:
            snapshot = await self.service.forks.snapshot(self.key(session_id), **kwargs)
            lines = b"".join([chunk async for chunk in snapshot.seed])
            return TakenSnapshot(snapshot.source, TakenSeed(lines), snapshot.meta)

        return self.run(take())

    def history(self, session_id: str, at_seq: int | None = None) -> tuple[list[Any], int]:
        return self.run(self.service.reads.history(self.key(session_id), at_seq))

    def delete(self, session_id: str) -> None:
        self.run(self.service.delete(self.key(session_id)))

    def page(
        self, *, parent: str | None = None, limit: int = 100, cursor: str | None = None
    ) -> tuple[list[Session], str | None]:
        """A page of the list and its opaque cursor, as ``GET /sessions`` gives them."""
        after = decode_cursor(cursor)[0] if cursor is not None else None
        found, last = self.run(
            self.service.reads.page(self.tenant, PageRequest(limit, after=after, query=ListQuery(parent=parent)))
        )
        return [session for session, _ in found], encode_cursor(last) if last is not None else None


def refused(code: ErrorCode, call: Callable[..., Any], *args: Any, **kwargs: Any) -> ForklogError:
    """Run ``call`` and return the refusal it raised, which must carry ``code``."""
    with pytest.raises(ForklogError) as caught:
        call(*args, **kwargs)
    assert caught.value.code == code, repr(caught.value)
    return caught.value


class HeldAppends(MemoryBackend):
    """A memory backend whose appends wait for ``release`` before they are stored."""

    def __init__(self, clock: Callable[[], int]) -> None:
        super().__init__(clock=clock)
        self.release = asyncio.Event()

    async def append(self, *args: Any, **kwargs: Any) -> None:
        await self.release.wait()
        await super().append(*args, **kwargs)
