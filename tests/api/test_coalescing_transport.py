"""What one step of the event loop writes to a connection leaves as one write (app.api.fast_path.http_server): an
answer's head and body reach the client together, nothing is lost or reordered, and a close or an end of writing sends
what is pending first."""

from __future__ import annotations

import asyncio

import pytest

from app.api.fast_path.http_server import COALESCED_BYTES, CoalescingTransport

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class RecordingTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.sent: list[bytes] = []
        self.events: list[str] = []
        self.closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        assert not self.closing, "written after close"
        self.sent.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.events.append("close")
        self.closing = True

    def write_eof(self) -> None:
        self.events.append("eof")

    def can_write_eof(self) -> bool:
        return True

    def abort(self) -> None:
        self.events.append("abort")
        self.closing = True


async def _one_step() -> None:
    await asyncio.sleep(0)


async def test_an_answers_head_and_body_leave_in_one_write() -> None:
    raw = RecordingTransport()
    transport = CoalescingTransport(raw, asyncio.get_running_loop())

    transport.write(b"HTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\n")
    transport.write(b"{}")
    assert raw.sent == []
    await _one_step()

    assert raw.sent == [b"HTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\n{}"]
    transport.write(b"next")
    await _one_step()
    assert raw.sent[-1] == b"next"


async def test_a_close_or_an_end_of_writing_sends_what_is_pending_first() -> None:
    raw = RecordingTransport()
    transport = CoalescingTransport(raw, asyncio.get_running_loop())

    transport.write(b"refused")
    transport.write_eof()
    assert (raw.sent, raw.events) == ([b"refused"], ["eof"])
    transport.write(b"last")
    transport.close()
    assert (raw.sent, raw.events) == ([b"refused", b"last"], ["eof", "close"])
    await _one_step()  # the flush scheduled for the step finds nothing more to send
    assert raw.sent == [b"refused", b"last"]


async def test_a_large_write_goes_out_at_once_after_what_is_pending() -> None:
    raw = RecordingTransport()
    transport = CoalescingTransport(raw, asyncio.get_running_loop())
    large = b"x" * COALESCED_BYTES

    transport.write(b"head")
    transport.write(large)

    assert raw.sent == [b"head", large]


async def test_small_writes_that_add_up_go_out_at_once() -> None:
    # A streaming answer written without a pause must reach the transport (whose buffer drives flow control) at once.
    raw = RecordingTransport()
    transport = CoalescingTransport(raw, asyncio.get_running_loop())
    chunk = b"y" * (COALESCED_BYTES // 4)

    for _ in range(9):
        transport.write(chunk)

    assert raw.sent == [chunk * 4, chunk * 4]
    await _one_step()
    assert b"".join(raw.sent) == chunk * 9


async def test_nothing_is_written_to_a_connection_already_closing() -> None:
    raw = RecordingTransport()
    transport = CoalescingTransport(raw, asyncio.get_running_loop())

    transport.write(b"answer")
    raw.closing = True  # the client went away
    await _one_step()

    assert raw.sent == []
    assert transport.is_closing()  # the rest is the transport's own
