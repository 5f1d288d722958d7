"""An event may nest as deep as lossless JSON allows (1,000 levels), deeper than orjson writes: it is stored,
survives a restart, and its session serves."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.backends.files.builders import full_turn, log_only
from tests.backends.files.conftest import OpenStore


def nested(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = [value]
    return value


def test_a_deeply_nested_event_is_stored_and_recovered(data_dir: Path, open_store: OpenStore) -> None:
    deep = {**log_only("deep"), "data": nested(990)}

    async def scenario() -> None:
        store = await open_store(data_dir)
        await store.create("deep", None, None)
        await store.append("deep", [deep, *full_turn(1)])
        before = store.get("deep").log.lines()
        await store.close()

        again = await open_store(data_dir)
        assert again.corrupt == []
        recovered = again.get("deep").log
        assert recovered.lines() == before
        assert recovered.event(0)["data"] == nested(990)
        assert recovered.state.last_type == "turn/end"

    asyncio.run(scenario())
