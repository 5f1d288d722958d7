"""A small HTTP/1.1 proxy that loses connections at chosen moments, for the client libraries' tests.

It forwards each request of a client connection to the server over a connection of its own, and applies the first
planned :class:`Fault` that matches the request (method and a regular expression searched in the path):

- ``before_request``: the client's connection is closed before the request reaches the server;
- ``after_answer``: the server answers (a change is made), the client's connection is closed before it reads it;
- ``mid_stream``: a response's body is cut after ``frames`` server-sent event frames (and half of the next one, if it
  has come), without the end of the chunked body: the client sees a broken stream;
- ``end_stream``: a response's body ends cleanly after ``frames`` frames (the chunked body's last chunk is sent);
- ``answer``: the proxy itself answers ``status`` with a problem body and ``headers`` (a ``503``, a ``429`` with
  ``Retry-After``, …), without forwarding;
- ``stall``: the request is held, never forwarded nor answered, for ``seconds``; then the connection is closed.

``random`` applies one of the fitting faults to each request with a probability, from a seeded generator. A client
written in another language plans faults through the proxy itself: ``POST /__proxy/plan`` with
``{"faults": [{...Fault's fields}], "random": {"probability": p, "seed": s} | null}``, ``GET /__proxy/log``.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["Fault", "FaultProxy"]

KINDS = ("before_request", "after_answer", "mid_stream", "end_stream", "answer", "stall")
STREAM = re.compile(r"/events/stream$")


@dataclass
class Fault:
    kind: str
    path: str = ""
    method: str | None = None
    frames: int = 1
    times: int = 1
    skip: int = 0
    status: int = 503
    headers: dict[str, str] = field(default_factory=dict)
    problem: dict[str, Any] | None = None
    seconds: float = 5.0
    hook: Callable[[], None] | None = None  # Python tests only: runs when the fault strikes, before the drop

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown fault {self.kind!r}")

    def matches(self, method: str, path: str) -> bool:
        return (self.method is None or self.method == method) and re.search(self.path, path) is not None


@dataclass
class Seen:
    """A request that went through the proxy, and the fault it met (``""`` for none)."""

    method: str
    path: str
    idempotency_key: str | None
    last_event_id: str | None
    fault: str
    query: str = ""
    body: str = ""


class _Dropped(Exception):
    """The connection to the client is to be closed now."""


class FaultProxy:
    """The proxy on a free loopback port, served by an event loop in a thread of its own."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self.log: list[Seen] = []
        self._faults: list[Fault] = []
        self._random: random.Random | None = None
        self._probability = 0.0
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        # asyncio holds tasks weakly: a connection's task waiting on a quiet socket must not be collected midway.
        self._serving: set[asyncio.Task[None]] = set()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FaultProxy:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            # Connections accepted just before the close start their task just after it: repeat until none is left.
            while serving := [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]:
                for task in serving:
                    task.cancel()
                await asyncio.gather(*serving, return_exceptions=True)
                await asyncio.sleep(0)

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def plan(self, *faults: Fault, probability: float = 0.0, seed: int = 0) -> None:
        """Replace the planned faults (and the random ones' probability)."""
        with self._lock:
            self._faults = list(faults)
            self._probability = probability
            self._random = random.Random(seed) if probability else None

    def pending(self) -> list[Fault]:
        with self._lock:
            return [fault for fault in self._faults if fault.times > 0]

    def faults_met(self) -> list[str]:
        return [seen.fault for seen in self.log if seen.fault]

    # -- the proxy -----------------------------------------------------------------------------------------------------

    async def _listen(self) -> asyncio.Server:
        return await asyncio.start_server(self._serve, "127.0.0.1", 0)

    def _fault_for(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.times > 0 and fault.matches(method, path):
                    if fault.skip > 0:
                        fault.skip -= 1
                        return None
                    fault.times -= 1
                    return fault
            if self._random is not None and self._random.random() < self._probability:
                if STREAM.search(path):
                    kind = self._random.choice(("before_request", "mid_stream", "end_stream"))
                else:
                    kind = self._random.choice(("before_request", "after_answer"))
                return Fault(kind, frames=self._random.randint(0, 3))
        return None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        task = asyncio.current_task()
        if task is not None:
            self._serving.add(task)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                headers = _headers(head)
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                method, target = head.split(b" ", 2)[:2]
                path = target.decode().split("?", 1)[0]
                if path.startswith("/__proxy/"):
                    self._control(method.decode(), path, body, writer)
                    await writer.drain()
                    continue
                fault = self._fault_for(method.decode(), path)
                self.log.append(
                    Seen(
                        method.decode(),
                        path,
                        headers.get("idempotency-key"),
                        headers.get("last-event-id"),
                        fault.kind if fault else "",
                        target.decode().partition("?")[2],
                        body.decode(errors="replace"),
                    )
                )
                if fault is not None and fault.kind == "before_request":
                    _strike(fault)
                    return
                if fault is not None and fault.kind == "stall":
                    await asyncio.sleep(fault.seconds)
                    return
                if fault is not None and fault.kind == "answer":
                    writer.write(_answer(fault, path))
                    await writer.drain()
                    continue
                if upstream is None:
                    upstream = await asyncio.open_connection("127.0.0.1", self.upstream_port)
                upstream[1].write(head + body)
                await upstream[1].drain()
                keep = await self._relay(upstream[0], writer, fault, streaming=bool(STREAM.search(path)))
                if not keep:
                    return
        except (_Dropped, ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()
            if upstream is not None:
                upstream[1].close()
            if task is not None:
                self._serving.discard(task)

    async def _relay(
        self, upstream: asyncio.StreamReader, client: asyncio.StreamWriter, fault: Fault | None, *, streaming: bool
    ) -> bool:
        """One response from the server to the client, with the fault; whether the connection may be reused."""
        head = await upstream.readuntil(b"\r\n\r\n")
        headers = _headers(head)
        status = int(head.split(b" ", 2)[1])
        kind = fault.kind if fault is not None else ""
        if kind == "after_answer":
            if not streaming:
                await _read_body(upstream, headers, status)
            _strike(fault)
            raise _Dropped
        if kind == "end_stream":
            head = head[:-2] + b"Connection: close\r\n\r\n"
        client.write(head)
        await client.drain()
        if headers.get("transfer-encoding", "").lower() == "chunked":
            if kind in ("mid_stream", "end_stream") and status == 200:
                assert fault is not None
                await self._cut(upstream, client, fault)
                return False
            while True:
                data = await _read_chunk(upstream)
                client.write(_chunk(data))
                await client.drain()
                if not data:
                    break
        else:
            client.write(await _read_body(upstream, headers, status))
            await client.drain()
        return headers.get("connection", "").lower() != "close"

    async def _cut(self, upstream: asyncio.StreamReader, client: asyncio.StreamWriter, fault: Fault) -> None:
        pending = b""
        sent_frames = 0
        while True:
            while sent_frames < fault.frames and (end := _frame_end(pending)) is not None:
                frame, pending = pending[:end], pending[end:]
                client.write(_chunk(frame))
                if b"\ndata:" in b"\n" + frame.replace(b"\r\n", b"\n"):
                    sent_frames += 1
            await client.drain()
            if sent_frames >= fault.frames:
                _strike(fault)
                if fault.kind == "end_stream":
                    client.write(_chunk(b""))
                elif pending:
                    half = (_frame_end(pending) or len(pending)) // 2 or 1
                    client.write(_chunk(pending[:half])[:-2])  # half of the next frame, then nothing
                await client.drain()
                return
            data = await _read_chunk(upstream)
            if not data:  # the server ended it first
                client.write((_chunk(pending) if pending else b"") + _chunk(b""))
                await client.drain()
                return
            pending += data

    def _control(self, method: str, path: str, body: bytes, writer: asyncio.StreamWriter) -> None:
        if path == "/__proxy/plan" and method == "POST":
            plan = json.loads(body)
            chosen = plan.get("random") or {}
            self.plan(
                *(Fault(**fault) for fault in plan.get("faults", [])),
                probability=float(chosen.get("probability", 0.0)),
                seed=int(chosen.get("seed", 0)),
            )
            answer: Any = {"planned": len(plan.get("faults", []))}
        elif path == "/__proxy/log":
            answer = [asdict(seen) for seen in self.log]
        else:
            answer = {"error": "unknown control path"}
        payload = json.dumps(answer).encode()
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
            % (len(payload), payload)
        )


def _strike(fault: Fault | None) -> None:
    if fault is not None and fault.hook is not None:
        fault.hook()


def _headers(head: bytes) -> dict[str, str]:
    headers: dict[str, str] = {}
    for line in head.decode("latin-1").split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if name:
            headers[name.strip().lower()] = value.strip()
    return headers


def _frame_end(data: bytes) -> int | None:
    ends = [found + len(mark) for mark in (b"\r\n\r\n", b"\n\n") if (found := data.find(mark)) >= 0]
    return min(ends) if ends else None


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


async def _read_chunk(reader: asyncio.StreamReader) -> bytes:
    size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
    data = await reader.readexactly(size + 2)
    if size == 0:
        while data != b"\r\n":  # trailers, up to the blank line
            data = await reader.readuntil(b"\r\n")
    return data[:-2]


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str], status: int) -> bytes:
    if headers.get("transfer-encoding", "").lower() == "chunked":
        parts = []
        while data := await _read_chunk(reader):
            parts.append(data)
        return _chunk(b"".join(parts)) + _chunk(b"") if parts else _chunk(b"")
    if status in (204, 304) or 100 <= status < 200:
        return b""
    return await reader.readexactly(int(headers.get("content-length", "0")))


def _answer(fault: Fault, path: str) -> bytes:
    problem = fault.problem or {"code": "STORAGE_UNAVAILABLE", "status": fault.status, "detail": "planned by the proxy"}
    problem = {"type": "about:blank", "title": "planned", "instance": path, **problem}
    payload = json.dumps(problem).encode()
    extra = "".join(f"{name}: {value}\r\n" for name, value in fault.headers.items())
    return (
        f"HTTP/1.1 {fault.status} Planned\r\ncontent-type: application/problem+json\r\n"
        f"content-length: {len(payload)}\r\n{extra}\r\n"
    ).encode() + payload
