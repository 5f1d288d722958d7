"""The live tail (spec 7): how soon an acknowledged event reaches its streams, and what open streams cost appends.

*Latency*: 1, 10 and 200 streams follow one session while a client appends one event at a time; for each event and
each stream, the time from the append's 201 arriving to that stream's frame arriving (p50 / p99 over all pairs).
Writer and streams are plain sockets in this process (a client library's parsing would be most of the figure); the
figure can be below zero when a stream reads its frame before the writer reads its answer.

*Throughput*: 1-event appends by 32 clients on their own sessions (as in the appends section), with no stream open,
then with 200 streams open on 32 other sessions (what open streams cost), then with 200 streams following the
sessions being appended to and reading every frame (what delivering ~6 frames per append costs), the streams in
another process. Target: >= 0.9x.

``python -m bench.stream readers PORT PREFIX SESSIONS STREAMS`` is the readers' process.
"""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import orjson

from bench.appends import PREFIX, _open_step_seed, append_body
from bench.load import LoadResult, run_load
from bench.report import Row
from bench.util import Client, env_float, env_int, log, median, running, start_forklog

HOST = "127.0.0.1"
FANOUTS = (1, 10, 200)
STREAMS_BESIDE_APPENDS = 200
IDLE_PREFIX = "bench-idle-"
FRAME_ID = re.compile(rb"(?:^|\n)id: (\d+)")


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def _open_stream(port: int, path: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A stream on a plain socket, its head read: a reader as cheap as a reader can be, so that the CPU goes to the
    server (httpx needs ~100 us per frame, which would be most of what the rows measure)."""
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: {HOST}\r\nAccept: text/event-stream\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"stream {path} refused: {head[:200]!r}")
    return reader, writer  # the writer is kept: dropping it would close the socket


async def _follow(reader: asyncio.StreamReader, arrivals: dict[int, float]) -> None:
    """Note when each event's frame arrives (frames end with a blank line; a read may end inside one)."""
    pending = b""
    while chunk := await reader.read(65536):
        now = time.perf_counter()
        pending += chunk
        complete, _, pending = pending.rpartition(b"\r\n\r\n")
        for match in FRAME_ID.finditer(complete):
            arrivals[int(match[1])] = now


async def _latency(port: int, streams: int, appends: int) -> list[float]:
    session = f"bench-tail-{streams}"
    async with httpx.AsyncClient(base_url=f"http://{HOST}:{port}", timeout=60) as client:
        await client.post("/sessions", json={"id": session, "seed": _open_step_seed()})
        path = f"/sessions/{session}/events/stream?from=3"
        readers = await asyncio.wait_for(asyncio.gather(*(_open_stream(port, path) for _ in range(streams))), 60)
        arrivals = [dict[int, float]() for _ in range(streams)]
        tasks = [
            asyncio.ensure_future(_follow(reader, seen)) for (reader, _), seen in zip(readers, arrivals, strict=True)
        ]
        await asyncio.sleep(0.2)
        acked: dict[int, float] = {}
        body = append_body(1)
        request = (
            f"POST /sessions/{session}/events HTTP/1.1\r\nHost: {HOST}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n\r\n"
        ).encode() + body
        reader, writer = await asyncio.open_connection(HOST, port)
        for _ in range(appends):
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(re.search(rb"(?i)content-length: (\d+)", head)[1])  # type: ignore[index]
            answer = await reader.readexactly(length)
            acked[orjson.loads(answer)["events"][0]["seq"]] = time.perf_counter()
            await asyncio.sleep(0.01)
        writer.close()
        deadline = time.perf_counter() + 30
        while any(len(seen) < appends for seen in arrivals) and time.perf_counter() < deadline:
            await asyncio.sleep(0.05)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return [(seen[seq] - at) * 1000 for seen in arrivals for seq, at in acked.items() if seq in seen]


async def _readers(port: int, prefix: str, sessions: int, streams: int) -> None:
    """Streams from the end of each session, discarding what they read; prints ``READY`` once every stream has its
    200, and the frames read when SIGTERM ends it."""
    async with httpx.AsyncClient(base_url=f"http://{HOST}:{port}") as client:
        ends = [(await client.get(f"/sessions/{prefix}{i}")).json()["eventCount"] for i in range(sessions)]
    paths = [f"/sessions/{prefix}{i % sessions}/events/stream?from={ends[i % sessions]}" for i in range(streams)]
    readers = await asyncio.wait_for(asyncio.gather(*(_open_stream(port, path) for path in paths)), 60)
    frames = 0

    async def discard(reader: asyncio.StreamReader) -> None:
        nonlocal frames
        while chunk := await reader.read(65536):
            frames += chunk.count(b"\nid: ") + chunk.startswith(b"id: ")

    tasks = [asyncio.ensure_future(discard(reader)) for reader, _ in readers]
    print("READY", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    print(frames, flush=True)
    for task in tasks:
        task.cancel()


def run(work: Path) -> list[Row]:
    clients = env_int("BENCH_CLIENTS", 32)
    seconds = env_float("BENCH_APPEND_SECONDS", 5.0)
    runs = env_int("BENCH_APPEND_RUNS", 3)
    appends = env_int("BENCH_TAIL_APPENDS", 100)
    server = start_forklog(work / "stream-data", work / "logs" / "stream-forklog.log")
    rows: list[Row] = []
    with running(server):
        server.wait_ready()
        for streams in FANOUTS:
            latencies = asyncio.run(_latency(server.port, streams, appends))
            p50, p99 = _percentile(latencies, 0.5), _percentile(latencies, 0.99)
            log(f"stream: {streams} streams: ack to frame p50 {p50:.2f} ms, p99 {p99:.2f} ms")
            rows.append(
                Row(
                    "Stream",
                    f"append ack to event on {streams} stream{'s' if streams > 1 else ''}: p50 / p99",
                    f"{p50:.2f} / {p99:.2f} ms",
                    note=f"{len(latencies):,} (event, stream) pairs, fsync on",
                )
            )
        client = Client(server.port)
        for i in range(clients):
            client.expect(201, "POST", "/sessions", {"id": f"{PREFIX}{i}", "seed": _open_step_seed()})
            client.expect(201, "POST", "/sessions", {"id": f"{IDLE_PREFIX}{i}", "seed": _open_step_seed()})
        client.close()
        one = append_body(1)
        run_load(server.port, PREFIX, one, clients=clients, seconds=1)
        alone: list[float] = []
        beside: dict[str, list[float]] = {IDLE_PREFIX: [], PREFIX: []}
        delivered: list[float] = []
        for r in range(runs):
            alone.append(run_load(server.port, PREFIX, one, clients=clients, seconds=seconds).rps)
            for followed in (IDLE_PREFIX, PREFIX):
                result, frames = _appends_beside_readers(server.port, followed, one, clients, seconds)
                beside[followed].append(result.rps)
                if followed == PREFIX:
                    delivered.append(frames / seconds)
            log(
                f"stream run {r + 1}/{runs}: appends {alone[-1]:,.0f} req/s alone, {beside[IDLE_PREFIX][-1]:,.0f} "
                f"with {STREAMS_BESIDE_APPENDS} streams on other sessions, {beside[PREFIX][-1]:,.0f} with them "
                f"following the appended sessions ({delivered[-1]:,.0f} frames/s read)"
            )
    without = median(alone)
    for followed, what, note in (
        (IDLE_PREFIX, "open on other sessions", "the cost of open streams; "),
        (PREFIX, "following the appended sessions", f"{median(delivered):,.0f} frames/s read by the streams; "),
    ):
        figure = median(beside[followed])
        rows.append(
            Row(
                "Stream",
                f"1-event appends, {STREAMS_BESIDE_APPENDS} streams {what}, vs none",
                f"{figure:,.0f} req/s",
                "no stream open",
                f"{without:,.0f} req/s",
                figure / without,
                ">= 0.9x",
                figure / without >= 0.9,
                f"{note}{clients} clients on their own sessions, fsync on",
            )
        )
    return rows


def _appends_beside_readers(
    port: int, followed: str, body: bytes, clients: int, seconds: float
) -> tuple[LoadResult, int]:
    """An append run while the readers' process holds its streams on the sessions named ``followed`` + i; the
    frames those streams read during it."""
    argv = [sys.executable, "-m", "bench.stream", "readers", str(port), followed, str(clients)]
    readers = subprocess.Popen([*argv, str(STREAMS_BESIDE_APPENDS)], stdout=subprocess.PIPE, text=True)
    try:
        assert readers.stdout is not None
        if readers.stdout.readline().strip() != "READY":
            raise RuntimeError("the readers' process did not open its streams")
        time.sleep(0.5)
        result = run_load(port, PREFIX, body, clients=clients, seconds=seconds)
        readers.terminate()
        frames = int(readers.stdout.readline() or 0)
    finally:
        readers.kill()
        readers.wait()
    return result, frames


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "readers":
        asyncio.run(_readers(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])))
    else:
        sys.exit("usage: python -m bench.stream readers PORT PREFIX SESSIONS STREAMS")
