"""What a tenant holds on the file backend (spec 14's quotas count it): its live sessions and their ``bytes``, the
length of each log as ``export`` writes it, which for a file forklog wrote is the file's length; a session kept
frozen after a clean restart is measured without being thawed."""

from __future__ import annotations

import asyncio
from pathlib import Path

from app.backends.base import Usage
from app.domain.session import DEFAULT_TENANT, SessionKey
from tests.backends.files import builders as b
from tests.backends.files.conftest import OpenStore


def test_usage_is_the_sessions_and_their_files_lengths(data_dir: Path, open_store: OpenStore) -> None:
    async def scenario() -> None:
        store = await open_store(data_dir)
        await store.create("big", b.turns(1, 3), {"cwd": "/w"})
        await store.append("big", b.open_turn(4))
        await store.create("small", b.turns(1, 1), None)
        files = sorted((data_dir / "sessions").iterdir())
        expected = Usage(2, sum(path.stat().st_size for path in files))
        assert store.backend.usage(DEFAULT_TENANT) == expected
        await store.close()

        again = await open_store(data_dir)
        assert again.get("small").frozen
        assert again.backend.usage(DEFAULT_TENANT) == expected
        assert again.get("small").frozen  # measured, not thawed
        assert again.backend.usage("other") == Usage(0, 0)
        key = SessionKey(DEFAULT_TENANT, "big")
        header = (data_dir / "sessions" / "big.jsonl").read_bytes().index(b"\n") + 1
        assert again.backend.log_bytes(key, len(b.turns(1, 3))) + header < expected.bytes
        whole = again.backend.log_bytes(key, 10**9)
        assert whole + header == (data_dir / "sessions" / "big.jsonl").stat().st_size

    asyncio.run(scenario())
