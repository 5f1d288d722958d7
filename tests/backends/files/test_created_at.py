"""A create takes max(now, 1 + the largest createdAt of any session in the data directory), corrupt ones included."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from tests.backends.files.conftest import OpenStore

FAR_FUTURE = 4_000_000_000_000  # year 2096: later than any clock this test runs under


def test_a_create_sorts_after_a_corrupt_session_from_the_future(data_dir: Path, open_store: OpenStore) -> None:
    sessions = data_dir / "sessions"
    sessions.mkdir(parents=True)
    header = {"type": "session", "version": 0, "id": "damaged", "createdAt": FAR_FUTURE, "delegationDepth": 0}
    (sessions / "damaged.jsonl").write_text(json.dumps(header) + "\nnot json\n")

    async def scenario() -> None:
        store = await open_store(data_dir)
        assert [item.id for item in store.corrupt] == ["damaged"]
        created = await store.create("fresh", None, None)
        assert created.header.created_at == FAR_FUTURE + 1

    asyncio.run(scenario())
