"""Stores with sessions in them, made through the seam, for the transfer tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.backends.base import Backend, SeedLog, SeedPrefix
from app.backends.files import FileBackend
from app.domain.clock import wall_clock_ms
from app.domain.dsh_frames import decode_log
from app.domain.ids import new_instance
from app.domain.log import seed_log
from app.domain.session import SessionKey
from tests.backends.files import builders as b

TENANTS = ("default", "acme")
NAMES = ("src", "kid", "empty")  # per tenant: a seeded session, a fork of it, an empty one


async def put(backend: Backend, key: SessionKey, events: list[Any], **lineage: Any) -> None:
    await backend.create(key, new_instance(), lineage, SeedLog(seed_log(events, now=1)))


async def fill(data_dir: Path, compression: str = "none") -> None:
    """The sessions ``NAMES`` of each tenant of ``TENANTS`` in a data directory (raw .jsonl files by default: the
    tests read their lines)."""
    backend = FileBackend(data_dir, clock=wall_clock_ms, sync=False, compression=compression)
    await backend.open()
    try:
        for tenant in TENANTS:
            source = SessionKey(tenant, "src")
            await put(backend, source, b.turns(1, 2), cwd="/work")
            found = await backend.find(source)
            assert found is not None
            seed = SeedPrefix(source, found.header.instance, len(b.full_turn(1)))
            lineage = {"parent_session": "src", "seed_length": seed.count}
            await backend.create(SessionKey(tenant, "kid"), new_instance(), lineage, seed)
            await put(backend, SessionKey(tenant, "empty"), [], origin="subagent", delegation_depth=2)
    finally:
        await backend.close()


def session_files(data_dir: Path) -> dict[str, bytes]:
    """Every session file of ``data_dir`` by its path there, and its bytes: a compressed one (``.jsonl.zstd``) by
    the path and the bytes its raw form would have (the encodings hold the same lines)."""
    return {
        str(path.relative_to(data_dir)).removesuffix(".zstd"): _raw(path)
        for path in sorted([*data_dir.rglob("*.jsonl"), *data_dir.rglob("*.jsonl.zstd")])
        if "sessions" in path.parts
    }


def _raw(path: Path) -> bytes:
    data = path.read_bytes()
    return decode_log(data) if path.name.endswith(".zstd") else data
