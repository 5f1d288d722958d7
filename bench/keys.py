"""Access keys (spec 9): what checking a bearer key costs an append.

Two forklogs side by side, one with a keys file (every append sends ``Authorization: Bearer <key>``: a SHA-256 of
the key, a lookup, a constant-time compare, the tenant's folder) and one without (the loopback guard instead), each
driven by the appends section's 1-event durable load, runs interleaved. Target: >= 0.95x.
"""

from __future__ import annotations

from pathlib import Path

from app.domain.access import ApiKey, Scope, digest_of, key_line, new_secret
from bench.appends import PREFIX, _open_step_seed, append_body
from bench.load import run_load
from bench.report import Row
from bench.util import Client, env_float, env_int, log, median, running, start_forklog


def run(work: Path) -> list[Row]:
    clients = env_int("BENCH_CLIENTS", 32)
    seconds = env_float("BENCH_APPEND_SECONDS", 5.0)
    runs = env_int("BENCH_APPEND_RUNS", 3)
    secret = new_secret()
    keys_file = work / "keys.jsonl"
    keys_file.write_bytes(key_line(ApiKey("bench", "bench", frozenset({Scope.READ, Scope.WRITE}), digest_of(secret))))
    keyed = start_forklog(work / "keys-data", work / "logs" / "keys-forklog.log", extra=("--keys-file", str(keys_file)))
    open_ = start_forklog(work / "nokeys-data", work / "logs" / "nokeys-forklog.log")
    body = append_body(1)
    with running(keyed), running(open_):
        for server, key in ((keyed, secret), (open_, None)):
            server.wait_ready()
            client = Client(server.port, key=key)
            for i in range(clients):
                client.expect(201, "POST", "/sessions", {"id": f"{PREFIX}{i}", "seed": _open_step_seed()})
            client.close()
            run_load(server.port, PREFIX, body, clients=clients, seconds=1, key=key)
        with_key: list[float] = []
        without: list[float] = []
        for r in range(runs):
            with_key.append(run_load(keyed.port, PREFIX, body, clients=clients, seconds=seconds, key=secret).rps)
            without.append(run_load(open_.port, PREFIX, body, clients=clients, seconds=seconds).rps)
            log(f"keys run {r + 1}/{runs}: {with_key[-1]:,.0f} req/s with a key, {without[-1]:,.0f} without")
    mine, baseline = median(with_key), median(without)
    return [
        Row(
            "Keys",
            "1-event append with a bearer key vs without keys",
            f"{mine:,.0f} req/s",
            "no keys file",
            f"{baseline:,.0f} req/s",
            mine / baseline,
            ">= 0.95x",
            mine / baseline >= 0.95,
            f"{clients} clients on their own sessions, fsync on, runs interleaved",
        )
    ]
