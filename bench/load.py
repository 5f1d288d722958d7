"""Closed-loop HTTP load: N clients, each on its own connection and its own session, POSTing one fixed body.

``wrk`` is used when it is on PATH (one thread per connection, so that a Lua global can give each connection its own
session id); otherwise a Python asyncio generator does the same in a separate process, and the table says so. The
Python generator shares the machine's two cores with the server and measures somewhat lower throughput.

    python -m bench.load --port P --prefix bench-s --body body.json --clients 32 --seconds 5
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import orjson

from bench.util import HOST

WRK_SCRIPT = r"""
local counter = 0
function setup(thread)
  thread:set("id", counter)
  counter = counter + 1
end
function init(args)
  local f = io.open(args[2], "rb")
  local body = f:read("*a")
  f:close()
  local headers = {["Content-Type"] = "application/json"}
  if args[3] ~= nil and args[3] ~= "" then headers["Authorization"] = "Bearer " .. args[3] end
  req = wrk.format("POST", "/sessions/" .. args[1] .. id .. "/events", headers, body)
end
function request()
  return req
end
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '\nBENCH-RESULT {"requests":%d,"seconds":%f,"errors":%d,"p50_us":%d,"p99_us":%d}\n',
    summary.requests, summary.duration / 1e6, e.connect + e.read + e.write + e.status + e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
"""


@dataclass(frozen=True)
class LoadResult:
    requests: int
    seconds: float
    errors: int
    p50_ms: float
    p99_ms: float
    tool: str

    @property
    def rps(self) -> float:
        return self.requests / self.seconds


def have_wrk() -> bool:
    """wrk is used when it is on PATH, unless ``BENCH_LOADGEN=python`` asks for the Python generator."""
    return os.environ.get("BENCH_LOADGEN", "").lower() != "python" and shutil.which("wrk") is not None


def run_load(
    port: int, prefix: str, body: bytes, *, clients: int, seconds: float, key: str | None = None
) -> LoadResult:
    """Drive ``clients`` sessions ``<prefix>0`` .. ``<prefix>{clients-1}`` for ``seconds`` (with ``key`` as a
    bearer key in every request)."""
    with tempfile.TemporaryDirectory(prefix="forklog-load-") as folder:
        body_path = Path(folder) / "body.json"
        body_path.write_bytes(body)
        if have_wrk():
            script = Path(folder) / "append.lua"
            script.write_text(WRK_SCRIPT)
            argv = [
                "wrk",
                f"-t{clients}",
                f"-c{clients}",
                f"-d{max(1, round(seconds))}s",
                "--timeout",
                "30s",
                "-s",
                str(script),
                f"http://{HOST}:{port}/",
                "--",
                prefix,
                str(body_path),
                key or "",
            ]
            tool = "wrk"
        else:
            argv = [
                sys.executable,
                "-m",
                "bench.load",
                "--port",
                str(port),
                "--prefix",
                prefix,
                "--body",
                str(body_path),
                "--clients",
                str(clients),
                "--seconds",
                str(seconds),
                *(["--key", key] if key else []),
            ]
            tool = "python"
        out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    line = next((row for row in out.splitlines() if row.startswith("BENCH-RESULT ")), None)
    if line is None:
        raise RuntimeError(f"the load generator printed no result:\n{out}")
    raw = orjson.loads(line.split(" ", 1)[1])
    return LoadResult(
        requests=raw["requests"],
        seconds=raw["seconds"],
        errors=raw["errors"],
        p50_ms=raw["p50_us"] / 1000,
        p99_ms=raw["p99_us"] / 1000,
        tool=tool,
    )


# -- the Python fallback ------------------------------------------------------------------------------------------


async def _client(
    port: int, path: str, body: bytes, key: str | None, stop_at: float, latencies: list[int], errors: list[int]
) -> None:
    reader, writer = await asyncio.open_connection(HOST, port)
    authorization = f"Authorization: Bearer {key}\r\n" if key else ""
    request = (
        f"POST {path} HTTP/1.1\r\nHost: {HOST}:{port}\r\nContent-Type: application/json\r\n{authorization}"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    try:
        while time.perf_counter() < stop_at:
            started = time.perf_counter_ns()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for header in head.split(b"\r\n")[1:]:
                name, _, value = header.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if length:
                await reader.readexactly(length)
            latencies.append(time.perf_counter_ns() - started)
            if int(head[9:12]) >= 400:
                errors.append(1)
    finally:
        writer.close()


async def _drive(
    port: int, prefix: str, body: bytes, clients: int, seconds: float, key: str | None
) -> dict[str, float]:
    latencies: list[int] = []
    errors: list[int] = []
    started = time.perf_counter()
    stop_at = started + seconds
    await asyncio.gather(
        *(_client(port, f"/sessions/{prefix}{i}/events", body, key, stop_at, latencies, errors) for i in range(clients))
    )
    elapsed = time.perf_counter() - started
    latencies.sort()

    def pct(q: float) -> float:
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))] / 1000 if latencies else 0.0

    return {
        "requests": len(latencies),
        "seconds": elapsed,
        "errors": len(errors),
        "p50_us": int(pct(0.50)),
        "p99_us": int(pct(0.99)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench.load")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--body", type=Path, required=True)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--key", help="a bearer key sent with every request")
    args = parser.parse_args()
    work = _drive(args.port, args.prefix, args.body.read_bytes(), args.clients, args.seconds, args.key)
    try:
        import uvloop

        result = uvloop.run(work)
    except ImportError:
        result = asyncio.run(work)
    print("BENCH-RESULT " + orjson.dumps(result).decode())


if __name__ == "__main__":
    main()
