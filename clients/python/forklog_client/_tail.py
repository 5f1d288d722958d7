"""The live tail's state, shared by the sync and async clients: where it stands, and what each frame means.

A tail pins the session's ``instance`` at its first connect and then reconnects after any disconnect with
``Last-Event-ID`` (the last seq it delivered), so each event is delivered once and in order. It counts failed
connects in a row against ``max_retries``; a frame (an event, or the server's ping comment) resets the count.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from forklog_client._models import Event

__all__ = ["Frame", "FrameParser", "TailState"]


@dataclass(slots=True)
class Frame:
    """One server-sent event: ``event`` is ``None`` for an event frame (``id`` its seq, ``data`` its JSON)."""

    event: str | None = None
    id: str | None = None
    data: list[str] = field(default_factory=list)


class FrameParser:
    """Server-sent events from lines (the text/event-stream rules); an unfinished frame at the end is dropped."""

    def __init__(self) -> None:
        self._frame = Frame()
        self._started = False
        self.comments = 0

    def feed(self, line: str) -> Frame | None:
        if line == "":
            frame, started = self._frame, self._started
            self._frame, self._started = Frame(), False
            return frame if started else None
        if line.startswith(":"):
            self.comments += 1
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        self._started = True
        if name == "data":
            self._frame.data.append(value)
        elif name == "id":
            self._frame.id = value
        elif name == "event":
            self._frame.event = value
        return None


class TailState:
    """Where a tail stands: the next seq it owes, the pinned instance, and its failed connects in a row."""

    def __init__(self, session_id: str, from_seq: int, max_retries: int) -> None:
        self.session_id = session_id
        self.from_seq = from_seq
        self.next_seq = from_seq
        self.instance: str | None = None
        self.max_retries = max_retries
        self.failures = 0  # failed connects since the last frame
        self.quiet_attempts = 0  # connects of any outcome since the last frame: the backoff's exponent
        self.delivered_any = False

    def params(self) -> dict[str, str]:
        params = {"from": str(self.next_seq)}
        if self.instance is not None:
            params["instance"] = self.instance
        return params

    def headers(self) -> dict[str, str]:
        headers = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}
        if self.delivered_any:
            headers["Last-Event-ID"] = str(self.next_seq - 1)
        return headers

    def heard(self) -> None:
        """A frame or comment arrived: the server is reached, the count of failures starts again."""
        self.failures = 0
        self.quiet_attempts = 0

    def failed_connect(self) -> bool:
        """A connect failed; whether the tail may try again."""
        self.failures += 1
        return self.failures <= self.max_retries

    def event_of(self, frame: Frame) -> Event | None:
        """The frame's event if it is the next one owed (a repeat of one delivered is dropped)."""
        event = Event(json.loads("\n".join(frame.data)))
        seq = event.seq
        if not isinstance(seq, int) or seq < self.next_seq:
            return None
        self.next_seq = seq + 1
        self.delivered_any = True
        return event
