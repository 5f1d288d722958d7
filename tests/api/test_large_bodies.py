"""A large seed is parsed and checked off the event loop: other requests are answered meanwhile."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import orjson
import pytest

from app.api.app import create_app
from app.api.settings import Settings


def seed_of(count: int) -> list[dict[str, object]]:
    return [
        {"type": "note/x", "data": {"n": n, "text": "some words to make the event a realistic size"}}
        for n in range(count)
    ]


@pytest.mark.alone  # compares two timings of its own: another worker's load would skew them
def test_health_answers_while_a_large_seed_is_created(tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=tmp_path / "data", fsync=False, max_body_bytes=64 * 1024 * 1024))
    body = orjson.dumps({"id": "big", "seed": seed_of(60_000)})

    async def scenario() -> None:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
                while (await client.get("/readyz")).status_code != 200:
                    await asyncio.sleep(0.01)
                started = time.perf_counter()
                done: dict[str, float] = {}

                async def create() -> None:
                    answer = await client.post("/sessions", content=body)
                    assert answer.status_code == 201, answer.text[:300]
                    done["create"] = time.perf_counter() - started

                async def health() -> None:
                    await asyncio.sleep(0.05)  # the create is parsing or checking by now
                    answer = await client.get("/healthz")
                    assert answer.status_code == 200
                    done["health"] = time.perf_counter() - started

                await asyncio.gather(create(), health())
                # Had the parse and the seed's checks run on the event loop, /healthz would have waited for both,
                # nearly all of the create (~0.95 of it). In a thread they share the GIL with the loop, and orjson
                # holds it for the whole parse, so /healthz waits for the parse alone (~0.5 of the create here, up
                # to 0.6 on a loaded machine): compare, with room on both sides.
                assert done["health"] < done["create"] * 0.75, done
                session = (await client.get("/sessions/big")).json()
                assert session["eventCount"] == 60_000

    asyncio.run(scenario())
