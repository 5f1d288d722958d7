"""Rate limits and quotas (spec 14): what they cost an append.

Two forklogs side by side with keys files, each driven by the appends section's 1-event durable load, runs
interleaved. In one the key has a rate limit (high enough never to refuse: every request still takes a token) and
its tenant a line with ``maxSessions``, ``maxBytes`` and ``retention`` (every append is checked against the bytes
quota and the retention sweep runs); in the other the same key has no limits. Target: >= 0.95x.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from app.domain.access import ApiKey, Scope, digest_of, key_line, new_secret
from app.domain.limits import RateLimit
from bench.appends import PREFIX, _open_step_seed, append_body
from bench.load import run_load
from bench.report import Row
from bench.util import Client, env_float, env_int, log, median, running, start_forklog

LIMITS = {"tenant": "bench", "maxSessions": 100_000, "maxBytes": 1 << 40, "retention": "P30D"}


def _keys(path: Path, secret: str, *, limited: bool) -> None:
    scopes = frozenset({Scope.READ, Scope.WRITE})
    rate = RateLimit(1_000_000.0, 1_000_000) if limited else None
    line = key_line(ApiKey("bench", "bench", scopes, digest_of(secret), rate))
    path.write_bytes(line + (orjson.dumps(LIMITS) + b"\n" if limited else b""))


def run(work: Path) -> list[Row]:
    clients = env_int("BENCH_CLIENTS", 32)
    seconds = env_float("BENCH_APPEND_SECONDS", 5.0)
    runs = env_int("BENCH_APPEND_RUNS", 3)
    secret = new_secret()
    limited_keys, plain_keys = work / "limited-keys.jsonl", work / "plain-keys.jsonl"
    _keys(limited_keys, secret, limited=True)
    _keys(plain_keys, secret, limited=False)
    limited = start_forklog(
        work / "limited-data", work / "logs" / "limited-forklog.log", extra=("--keys-file", str(limited_keys))
    )
    plain = start_forklog(
        work / "plain-data", work / "logs" / "plain-forklog.log", extra=("--keys-file", str(plain_keys))
    )
    body = append_body(1)
    with running(limited), running(plain):
        for server in (limited, plain):
            server.wait_ready()
            client = Client(server.port, key=secret)
            for i in range(clients):
                client.expect(201, "POST", "/sessions", {"id": f"{PREFIX}{i}", "seed": _open_step_seed()})
            client.close()
            run_load(server.port, PREFIX, body, clients=clients, seconds=1, key=secret)
        with_limits: list[float] = []
        without: list[float] = []
        for r in range(runs):
            with_limits.append(run_load(limited.port, PREFIX, body, clients=clients, seconds=seconds, key=secret).rps)
            without.append(run_load(plain.port, PREFIX, body, clients=clients, seconds=seconds, key=secret).rps)
            log(f"limits run {r + 1}/{runs}: {with_limits[-1]:,.0f} req/s with limits, {without[-1]:,.0f} without")
    mine, baseline = median(with_limits), median(without)
    return [
        Row(
            "Limits",
            "1-event append with a rate limit and quotas vs without",
            f"{mine:,.0f} req/s",
            "same key, no limits",
            f"{baseline:,.0f} req/s",
            mine / baseline,
            ">= 0.95x",
            mine / baseline >= 0.95,
            f"{clients} clients on their own sessions, fsync on, runs interleaved",
        )
    ]
