"""The asyncio client: ``AsyncForklog(base_url)`` and its ``sessions``, the blocking one's twin (every method a
coroutine, every iterator an async one)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

import httpx

from forklog_client import _calls
from forklog_client._calls import Call, EventInput
from forklog_client._errors import ConnectionError, error_for
from forklog_client._models import Appended, Event, History, Lineage, Session, Snapshot
from forklog_client._retry import backoff
from forklog_client._tail import FrameParser, TailState
from forklog_client._transport import (
    answer_wait,
    client_headers,
    gone_after_retry,
    problem_of,
    retry_wait,
    stream_ended,
)

__all__ = ["AsyncForklog", "AsyncSessions"]

T = TypeVar("T")


class AsyncForklog:
    """A forklog service at ``base_url``: ``client.sessions.create(...)`` and the rest.

    ``api_key`` is sent as ``Authorization: Bearer``; ``timeout`` (seconds) bounds each attempt; ``max_retries`` is
    how many times a call is tried again after a lost connection, a timeout or an answer that asks for it.
    Use it as a context manager, or call :meth:`close`.
    """

    def __init__(self, base_url: str, api_key: str | None = None, timeout: float = 30.0, max_retries: int = 2) -> None:
        self.base_url = base_url.rstrip("/")
        self.max_retries = max_retries
        self._http = httpx.AsyncClient(base_url=self.base_url, headers=client_headers(api_key), timeout=timeout)
        self.sessions = AsyncSessions(self)

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncForklog:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        await self.close()

    async def _send(self, call: Call[T]) -> T:
        retry = 0
        while True:
            try:
                response = await self._http.request(
                    call.method, call.path, params=call.params, content=call.content, headers=call.headers()
                )
            except httpx.TransportError as lost:
                if retry >= self.max_retries:
                    raise ConnectionError(f"{call.method} {call.path}: {lost!r}, after {retry} retries") from lost
                await asyncio.sleep(backoff(retry))
                retry += 1
                continue
            if response.is_success:
                return call.answer(response.content)
            problem = problem_of(response)
            if call.gone_is_done and gone_after_retry(response, problem, retry):
                return call.read(None)
            wait = retry_wait(response, problem, retry, self.max_retries)
            if wait is None:
                raise error_for(response.status_code, problem)
            await asyncio.sleep(wait)
            retry += 1


class AsyncSessions:
    """The session operations (spec 15); every call retries as :class:`AsyncForklog` says."""

    def __init__(self, client: AsyncForklog) -> None:
        self._client = client

    async def create(
        self,
        id: str | None = None,
        seed: Sequence[EventInput] | None = None,
        meta: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> Session:
        return await self._client._send(_calls.create(id, seed, meta, idempotency_key))

    async def get(self, id: str) -> Session:
        return await self._client._send(_calls.get(id))

    async def delete(self, id: str) -> None:
        await self._client._send(_calls.delete(id))

    async def list(
        self,
        parent: str | None = None,
        order: str | None = None,
        direction: str | None = None,
        q: str | None = None,
        cwd: str | None = None,
        origin: str | None = None,
        agent_preset: str | None = None,
        page_size: int = 100,
        archived: bool | str | None = None,
    ) -> AsyncGenerator[Session, None]:
        """Every matching session, page after page (each page one request, asked for as the iteration needs it)."""
        filters = _calls.list_filters(parent, order, direction, q, cwd, origin, agent_preset, archived)
        cursor: str | None = None
        while True:
            page = await self._client._send(_calls.sessions_page(filters, page_size, cursor))
            for session in page.items:
                yield session
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def append(
        self,
        id: str,
        events: Sequence[EventInput],
        expected_seq: int | None = None,
        instance: str | None = None,
        idempotency_key: str | None = None,
    ) -> Appended:
        return await self._client._send(_calls.append(id, events, expected_seq, instance, idempotency_key))

    async def update(
        self, id: str, archived: bool, expected_seq: int | None = None, instance: str | None = None
    ) -> Session:
        """Archive (``archived=True``) or unarchive the session: hidden from :meth:`list` and searches unless they
        ask for ``archived=True`` or ``"any"``; its log is unchanged. ``expected_seq`` and ``instance`` make it
        conditional, as for an append."""
        return await self._client._send(_calls.update(id, archived, expected_seq, instance))

    async def interrupt(
        self,
        id: str,
        expected_seq: int | None = None,
        instance: str | None = None,
        idempotency_key: str | None = None,
    ) -> Appended:
        """Close the session's open turn as DSH closes an abandoned one (error results for unanswered tool calls,
        the open step's end, ``turn/end`` with reason ``interrupted``): appended as one batch, answered as an
        append. :class:`NotInTurnError` when no turn is open."""
        return await self._client._send(_calls.interrupt(id, expected_seq, instance, idempotency_key))

    async def events(self, id: str, from_seq: int = 0, page_size: int = 1000) -> AsyncGenerator[Event, None]:
        """The stored events from ``from_seq`` to the end of the log as it is when each page is read."""
        position = from_seq
        while True:
            page = await self._client._send(_calls.events_page(id, position, page_size))
            for event in page.events:
                yield event
            if page.last:
                return
            position = page.next_seq

    async def tail(self, id: str, from_seq: int = 0) -> AsyncGenerator[Event, None]:
        """Every event from ``from_seq`` on, live, each once and in order, across disconnects, until the session is
        deleted. Raises :class:`SessionNotFoundError` when the session does not exist at the first connect."""
        client = self._client
        state = TailState(id, from_seq, client.max_retries)
        state.instance = (await self.get(id)).instance
        path = _calls.session_path(id, "events", "stream")
        while True:
            wait: float | None = None
            connected = False
            try:
                async with client._http.stream("GET", path, params=state.params(), headers=state.headers()) as response:
                    if response.status_code == 200:
                        connected = True
                        parser = FrameParser()
                        async for line in response.aiter_lines():
                            comments = parser.comments
                            frame = parser.feed(line)
                            if frame is None:
                                if parser.comments != comments:
                                    state.heard()
                                continue
                            state.heard()
                            if frame.event == "deleted":
                                return
                            if frame.event is None and frame.data:
                                event = state.event_of(frame)
                                if event is not None:
                                    yield event
                    else:
                        await response.aread()
                        problem = problem_of(response)
                        if stream_ended(response, problem):
                            return
                        wait = answer_wait(response, problem, state.quiet_attempts)
                        if wait is None or not state.failed_connect():
                            raise error_for(response.status_code, problem)
            except httpx.TransportError as lost:
                if not connected and not state.failed_connect():
                    raise ConnectionError(f"GET {path}: {lost!r}, after {client.max_retries} retries") from lost
            await asyncio.sleep(wait if wait is not None else backoff(state.quiet_attempts))
            state.quiet_attempts += 1

    async def history(self, id: str, at_seq: int | None = None) -> History:
        return await self._client._send(_calls.history(id, at_seq))

    async def log(self, id: str, compression: str = "none") -> bytes:
        """The session's DSH log as a file, as ``forklog export`` writes it: raw JSONL (``compression="none"``),
        or DSH's ``.jsonl.zstd`` (``"zstd"``)."""
        return await self._client._send(_calls.log(id, compression))

    async def snapshot(
        self, id: str, instance: str | None = None, at_seq: int | None = None, expected_seq: int | None = None
    ) -> Snapshot:
        return await self._client._send(_calls.snapshot(id, instance, at_seq, expected_seq))

    async def fork(
        self,
        id: str,
        session_id: str | None = None,
        instance: str | None = None,
        at_seq: int | None = None,
        at_turn: int | None = None,
        at_message_id: str | None = None,
        expected_seq: int | None = None,
        events: Sequence[EventInput] | None = None,
        idempotency_key: str | None = None,
    ) -> Session:
        call = _calls.fork(
            id,
            child_id=session_id,
            instance=instance,
            at_seq=at_seq,
            at_turn=at_turn,
            at_message_id=at_message_id,
            expected_seq=expected_seq,
            events=events,
            idempotency_key=idempotency_key,
        )
        return await self._client._send(call)

    async def lineage(self, id: str) -> Lineage:
        return await self._client._send(_calls.lineage(id))
