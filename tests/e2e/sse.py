"""A small server-sent-events reader for the tests: real sockets (httpx streaming), and a deadline on every read."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import httpx


@dataclass
class Frame:
    """One event of the stream, or a comment (``comment`` set, nothing else)."""

    id: str | None = None
    event: str | None = None
    data: list[str] = field(default_factory=list)
    comment: str | None = None

    @property
    def text(self) -> str:
        return "\n".join(self.data)


class Stream:
    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._lines = response.aiter_lines()

    async def frame(self, timeout: float = 10.0) -> Frame | None:
        """The next frame (None at the end of the stream); fails the test if none arrives within ``timeout``."""
        frame = Frame()
        async with asyncio.timeout(timeout):
            async for line in self._lines:
                if line == "":
                    if frame.data or frame.event or frame.id is not None:
                        return frame
                    continue
                if line.startswith(":"):
                    return Frame(comment=line[1:].strip())
                name, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if name == "data":
                    frame.data.append(value)
                elif name == "id":
                    frame.id = value
                elif name == "event":
                    frame.event = value
            return None

    async def events(self, count: int, timeout: float = 10.0) -> list[Frame]:
        """The next ``count`` event frames (comments skipped)."""
        frames: list[Frame] = []
        while len(frames) < count:
            frame = await self.frame(timeout)
            assert frame is not None, f"the stream ended after {len(frames)} of {count} events"
            if frame.comment is None:
                frames.append(frame)
        return frames


@asynccontextmanager
async def open_stream(
    client: httpx.AsyncClient, path: str, *, headers: dict[str, str] | None = None, timeout: float = 10.0
) -> AsyncIterator[Stream]:
    """``GET path`` as a stream that must start (200 text/event-stream) within ``timeout``."""
    request = client.build_request("GET", path, headers=headers)
    response = await asyncio.wait_for(client.send(request, stream=True), timeout)
    try:
        assert response.status_code == 200, (await response.aread()).decode()
        yield Stream(response)
    finally:
        await response.aclose()
