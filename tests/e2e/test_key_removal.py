"""A key removed from the keys file stops everywhere within 5 s (spec 9), with real processes: the streams opened
with it end and nothing stored after the removal reaches them, and its waiting long-polls answer 401."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import orjson
import pytest

from tests.api.builders import note, turn
from tests.e2e.conftest import StartServer
from tests.e2e.sse import Stream, open_stream
from tests.e2e.test_access import make_key

pytestmark = pytest.mark.e2e

SPEC_SECONDS = 5.0  # a removed key stops working everywhere within 5 s


def edit_line(keys: Path, key_id: str, change: Callable[[dict[str, object]], dict[str, object] | None]) -> None:
    """Rewrite the keys file with ``key_id``'s line changed (None: removed), in place, as an operator's editor would."""
    lines = []
    for raw in keys.read_bytes().splitlines():
        record = orjson.loads(raw)
        if record["id"] == key_id:
            record = change(record)
        if record is not None:
            lines.append(orjson.dumps(record) + b"\n")
    keys.write_bytes(b"".join(lines))


def removed(_: dict[str, object]) -> None:
    return None


def read_taken_away(record: dict[str, object]) -> dict[str, object]:
    return {**record, "scopes": ["write"]}


async def ids_until_the_end(stream: Stream, seconds: float) -> tuple[list[str], float]:
    """The ids of the event frames a stream still sends, and how long it took to end (fails if it does not end)."""
    started = time.monotonic()
    ids: list[str] = []
    while (frame := await stream.frame(timeout=seconds)) is not None:
        if frame.comment is None:
            ids.append(frame.id or frame.event or "")
    return ids, time.monotonic() - started


@pytest.mark.parametrize(
    ("change", "status", "code"),
    [(removed, 401, "UNAUTHENTICATED"), (read_taken_away, 403, "FORBIDDEN")],
    ids=["line removed", "read scope taken away"],
)
def test_a_removed_key_ends_its_streams_and_its_long_polls_are_refused(
    start_server: StartServer,
    tmp_path: Path,
    change: Callable[[dict[str, object]], dict[str, object] | None],
    status: int,
    code: str,
) -> None:
    keys = tmp_path / "keys.jsonl"
    writer = make_key(keys, "acme", "read", "write", key_id="writer")
    reader = make_key(keys, "acme", "read", "write", key_id="reader")
    server = start_server(None, "--keys-file", str(keys))
    by_writer = {"Authorization": f"Bearer {writer}"}
    by_reader = {"Authorization": f"Bearer {reader}"}
    for session in ("busy", "quiet"):
        created = httpx.post(f"{server.base}/sessions", json={"id": session, "seed": turn(1)}, headers=by_writer)
        assert created.status_code == 201, created.text
    length = len(turn(1))

    async def scenario() -> None:
        async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
            token = f"access_token={reader}"
            async with (
                open_stream(client, f"/sessions/busy/events/stream?{token}") as busy,
                open_stream(client, f"/sessions/quiet/events/stream?{token}") as quiet,
                open_stream(client, "/sessions/busy/events/stream", headers=by_writer) as kept,
            ):
                for stream in (busy, quiet, kept):
                    assert [frame.id for frame in await stream.events(length)] == [str(seq) for seq in range(length)]
                wait = {"from": length, "waitMs": 60000}
                polls = [
                    asyncio.ensure_future(client.get(f"/sessions/{session}/events", params=wait, headers=by_reader))
                    for session in ("busy", "quiet")
                ]
                await asyncio.sleep(0.5)
                assert not any(poll.done() for poll in polls), "the long-polls wait"

                edit_line(keys, "reader", change)
                changed_at = time.monotonic()
                late = {"events": [note("late")]}
                appended = await client.post("/sessions/busy/events", json=late, headers=by_writer)
                assert appended.status_code == 201, appended.text

                assert [frame.id for frame in await kept.events(1)] == [str(length)], "a key in force keeps its stream"
                for stream in (busy, quiet):
                    ids, _ = await ids_until_the_end(stream, SPEC_SECONDS)
                    assert ids == [], "nothing stored after the removal reaches a stream of the removed key"
                    assert time.monotonic() - changed_at < SPEC_SECONDS, "the stream ends within 5 s"
                for poll in polls:
                    answer = await asyncio.wait_for(poll, SPEC_SECONDS)
                    assert time.monotonic() - changed_at < SPEC_SECONDS, "the long-poll answers within 5 s"
                    assert answer.status_code == status, answer.text
                    assert answer.headers["content-type"] == "application/problem+json"
                    assert answer.json()["code"] == code
                    if status == 401:
                        assert answer.headers["www-authenticate"].startswith("Bearer")
                again = await client.get(f"/sessions/busy/events/stream?{token}")
                assert (again.status_code, again.json()["code"]) == (status, code), "a reconnect is refused alike"

    asyncio.run(scenario())
    log = server.output()
    assert reader not in log and writer not in log
