"""Appends against the framework: one-event and 100-event appends by 32 clients on distinct sessions, durable.

forklog runs with fsync on (its default) and ``--log-level warning``; the empty routes (bench/empty_app.py, the
raw-parse kind and the pydantic-validating kind) run under the same uvicorn options. Each client owns one session
that sits in an open step, so every append of an ``assistant/chunk`` is valid for as long as the run lasts. The
loads are interleaved run by run, forklog and the validating route back to back (each first every other run). Each
1-event run also measures the server's CPU time per request (user + system, all its threads, from /proc): steadier
than throughput on a shared machine.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from bench.load import LoadResult, have_wrk, run_load
from bench.report import Row
from bench.util import (
    Client,
    Server,
    cpu_seconds,
    env_float,
    env_int,
    log,
    median,
    running,
    start_empty_app,
    start_forklog,
)

PREFIX = "bench-append-"
CHUNK = {"type": "text-delta", "index": 0, "text": "streamed text of a model answer, forty ch"}


def chunk_event() -> dict[str, object]:
    return {"type": "assistant/chunk", "data": {"turn": 1, "step": 1, "chunk": CHUNK}}


def append_body(count: int) -> bytes:
    return orjson.dumps({"events": [chunk_event() for _ in range(count)]})


def _open_step_seed() -> list[dict[str, object]]:
    user = {"id": "u-1", "role": "user", "content": [{"type": "text", "text": "go"}], "source": {"kind": "user"}}
    return [
        {"type": "user/message", "data": user, "surfaceOp": "append"},
        {"type": "turn/start", "data": {"turn": 1}},
        {"type": "step/start", "data": {"turn": 1, "step": 1}},
    ]


def _summary(results: list[LoadResult], scale: int = 1) -> tuple[float, float, float, int]:
    return (
        median([r.rps * scale for r in results]),
        median([r.p50_ms for r in results]),
        median([r.p99_ms for r in results]),
        sum(r.errors for r in results),
    )


def _timed_load(server: Server, body: bytes, *, clients: int, seconds: float) -> tuple[LoadResult, float]:
    """A run of the load, and the server's CPU time per request it answered (µs)."""
    before = cpu_seconds(server.pid)
    result = run_load(server.port, PREFIX, body, clients=clients, seconds=seconds)
    return result, (cpu_seconds(server.pid) - before) / max(result.requests, 1) * 1e6


def run(work: Path) -> list[Row]:
    clients = env_int("BENCH_CLIENTS", 32)
    seconds = env_float("BENCH_APPEND_SECONDS", 5.0)
    runs = env_int("BENCH_APPEND_RUNS", 3)
    batch = 100
    tool = "wrk" if have_wrk() else "python (wrk not found, or BENCH_LOADGEN=python)"
    log(f"appends: {clients} clients, {runs} runs of {seconds:.0f} s each, load by {tool}")
    forklog = start_forklog(work / "appends-data", work / "logs" / "appends-forklog.log")
    unsynced = start_forklog(work / "appends-nosync", work / "logs" / "appends-nosync.log", fsync=False)
    empty = start_empty_app(work / "logs" / "appends-empty.log")
    validated = start_empty_app(work / "logs" / "appends-validated.log", validate=True)
    with running(forklog), running(unsynced), running(empty), running(validated):
        one, hundred = append_body(1), append_body(batch)
        for server in (forklog, unsynced, empty, validated):
            server.wait_ready()
            if server is not empty and server is not validated:
                client = Client(server.port)
                for i in range(clients):
                    client.expect(201, "POST", "/sessions", {"id": f"{PREFIX}{i}", "seed": _open_step_seed()})
                client.close()
            # Warm up (imports, caches, the first allocations) before anything is counted.
            run_load(server.port, PREFIX, one, clients=clients, seconds=1)
        mine: list[LoadResult] = []
        floor: list[LoadResult] = []
        checked: list[LoadResult] = []
        nosync: list[LoadResult] = []
        batches: list[LoadResult] = []
        floor_batches: list[LoadResult] = []
        cpu: dict[str, list[float]] = {"mine": [], "floor": [], "checked": [], "nosync": []}
        for r in range(runs):
            # forklog and the validating route run back to back, each first every other run: the machine's drift
            # between the two of a pair is as short as it can be, and neither is always the one after the batches.
            pair = [("mine", forklog, mine), ("checked", validated, checked)]
            for name, server, results in (
                *(pair if r % 2 == 0 else pair[::-1]),
                ("floor", empty, floor),
                ("nosync", unsynced, nosync),
            ):
                result, cpu_us = _timed_load(server, one, clients=clients, seconds=seconds)
                results.append(result)
                cpu[name].append(cpu_us)
            batches.append(run_load(forklog.port, PREFIX, hundred, clients=clients, seconds=seconds))
            floor_batches.append(run_load(empty.port, PREFIX, hundred, clients=clients, seconds=seconds))
            log(
                f"appends run {r + 1}/{runs}: 1 event {mine[-1].rps:,.0f} req/s {cpu['mine'][-1]:.0f} µs CPU "
                f"(validated empty route {checked[-1].rps:,.0f} req/s {cpu['checked'][-1]:.0f} µs, raw empty route "
                f"{floor[-1].rps:,.0f} req/s {cpu['floor'][-1]:.0f} µs, no fsync {nosync[-1].rps:,.0f} req/s "
                f"{cpu['nosync'][-1]:.0f} µs); 100 events {batches[-1].rps * batch:,.0f} events/s "
                f"(empty route {floor_batches[-1].rps * batch:,.0f})"
            )
    rps, p50, p99, errors = _summary(mine)
    floor_rps, floor_p50, floor_p99, floor_errors = _summary(floor)
    checked_rps, checked_p50, checked_p99, checked_errors = _summary(checked)
    ev, b50, b99, b_errors = _summary(batches, batch)
    floor_ev, fb50, fb99, fb_errors = _summary(floor_batches, batch)
    ns_rps, ns50, ns99, ns_errors = _summary(nosync)
    if errors or floor_errors or checked_errors or ns_errors or b_errors or fb_errors:
        log(
            f"appends: error answers: {errors} / {floor_errors} / {checked_errors} / {ns_errors} / {b_errors} / "
            f"{fb_errors} (see logs)"
        )
    note = f"{clients} clients, fsync on"
    cpu_mine, cpu_checked = median(cpu["mine"]), median(cpu["checked"])
    pairs = sorted(a.rps / b.rps for a, b in zip(mine, checked, strict=True))
    return [
        Row(
            "Appends",
            "1-event append vs validating route",
            f"{rps:,.0f} req/s",
            "FastAPI route validating the body (pydantic)",
            f"{checked_rps:,.0f} req/s",
            rps / checked_rps,
            ">= 0.9x",
            rps / checked_rps >= 0.9,
            f"{note}; run by run {pairs[0]:.2f}x-{pairs[-1]:.2f}x (median {median(pairs):.2f}x); server CPU "
            f"{cpu_mine:.0f} vs {cpu_checked:.0f} µs a request; that route's p50 {checked_p50:.2f} ms / p99 "
            f"{checked_p99:.2f} ms",
        ),
        Row(
            "Appends",
            "1-event append: throughput",
            f"{rps:,.0f} req/s",
            "empty FastAPI route",
            f"{floor_rps:,.0f} req/s",
            rps / floor_rps,
            ">= 0.8x",
            rps / floor_rps >= 0.8,
            note,
        ),
        Row(
            "Appends",
            "1-event append: p50 latency",
            f"{p50:.2f} ms",
            "empty route",
            f"{floor_p50:.2f} ms",
            p50 / floor_p50,
        ),
        Row(
            "Appends",
            "1-event append: p99 latency",
            f"{p99:.2f} ms",
            "empty route",
            f"{floor_p99:.2f} ms",
            p99 / floor_p99,
        ),
        Row(
            "Appends",
            "1-event append, fsync off (CPU ceiling)",
            f"{ns_rps:,.0f} req/s",
            "empty FastAPI route",
            f"{floor_rps:,.0f} req/s",
            ns_rps / floor_rps,
            note=(
                f"informative: --no-fsync; p50 {ns50:.2f} ms / p99 {ns99:.2f} ms; server CPU "
                f"{median(cpu['nosync']):.0f} µs a request (raw empty route {median(cpu['floor']):.0f} µs)"
            ),
        ),
        Row(
            "Appends",
            f"{batch}-event batches: events/s",
            f"{ev:,.0f} ev/s",
            "fixed target",
            "50,000 ev/s",
            ev / 50_000,
            ">= 50,000 ev/s",
            ev >= 50_000,
            note,
        ),
        Row(
            "Appends",
            f"{batch}-event batches vs empty route",
            f"{ev:,.0f} ev/s",
            "empty route, same body",
            f"{floor_ev:,.0f} ev/s",
            ev / floor_ev,
            note=f"p50 {b50:.1f} ms / p99 {b99:.1f} ms (empty route {fb50:.1f} / {fb99:.1f} ms)",
        ),
    ]
