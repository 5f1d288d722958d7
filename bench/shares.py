"""Share links (spec 18): how fast a share is read with no key, beside the same reads of the session itself.

One forklog (fsync on, per-address share rate lifted), one session of 20 whole turns (tool calls and results
included), and a share of it frozen at its last turn/end redacting tools and reasoning. Each measure is the
requests a second that a few keep-alive connections get for a few seconds, runs interleaved with the baseline:
``GET /shared/{token}`` beside ``GET /sessions/{id}``, and ``GET /shared/{token}/events`` (every event, redacted
on the way out) beside ``GET /sessions/{id}/events``. Informative rows (no target).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import orjson

from bench.report import Row
from bench.util import Client, env_float, env_int, log, median, running, start_forklog
from tests.api.builders import turns

SESSION = "bench-share"


def _rate(port: int, path: str, *, clients: int, seconds: float) -> float:
    """Requests a second ``clients`` keep-alive connections get on ``GET path`` for ``seconds``."""
    counts = [0] * clients
    stop = time.perf_counter() + seconds

    def drive(slot: int) -> None:
        client = Client(port)
        try:
            while time.perf_counter() < stop:
                client.expect(200, "GET", path)
                counts[slot] += 1
        finally:
            client.close()

    threads = [threading.Thread(target=drive, args=(slot,)) for slot in range(clients)]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(counts) / (time.perf_counter() - began)


def run(work: Path) -> list[Row]:
    clients = env_int("BENCH_SHARE_CLIENTS", 4)
    seconds = env_float("BENCH_SHARE_SECONDS", 3.0)
    runs = env_int("BENCH_SHARE_RUNS", 3)
    server = start_forklog(
        work / "shares-data", work / "logs" / "shares-forklog.log", extra=("--share-rate", "1e9:1000000000")
    )
    with running(server):
        server.wait_ready()
        client = Client(server.port)
        client.expect(201, "POST", "/sessions", {"id": SESSION, "seed": []})
        events = turns(20)
        client.expect(201, "POST", f"/sessions/{SESSION}/events", {"events": events})
        made = orjson.loads(
            client.expect(201, "POST", f"/sessions/{SESSION}/shares", {"redact": ["tools", "reasoning"]})
        )
        client.close()
        token = made["token"]
        pairs = {
            "one session": (f"/shared/{token}", f"/sessions/{SESSION}"),
            f"its {len(events)} events (tools redacted)": (f"/shared/{token}/events", f"/sessions/{SESSION}/events"),
        }
        rows: list[Row] = []
        for measure, (shared, own) in pairs.items():
            _rate(server.port, shared, clients=clients, seconds=0.5)  # warm-up
            mine: list[float] = []
            baseline: list[float] = []
            for r in range(runs):
                mine.append(_rate(server.port, shared, clients=clients, seconds=seconds))
                baseline.append(_rate(server.port, own, clients=clients, seconds=seconds))
                log(f"shares {measure} run {r + 1}/{runs}: {mine[-1]:,.0f} req/s shared, {baseline[-1]:,.0f} own")
            ours, theirs = median(mine), median(baseline)
            rows.append(
                Row(
                    "Shares",
                    f"GET /shared/{{token}}: {measure}",
                    f"{ours:,.0f} req/s",
                    "the session's own read, with no share",
                    f"{theirs:,.0f} req/s",
                    ours / theirs,
                    "",
                    None,
                    f"{clients} keep-alive connections from one Python process on the same machine, runs interleaved",
                )
            )
    return rows
