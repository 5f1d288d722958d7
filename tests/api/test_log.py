"""GET /sessions/{id}/log (spec 16): the session's DSH log as a file, raw JSONL or DSH's .jsonl.zstd on
``Accept: application/zstd``; a read like every other (scope, tenants, 404)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
import zstandard
from starlette.testclient import TestClient

from app.domain.access import Scope
from app.domain.dsh_frames import FRAME_TEXT_BOUND, walk_frames
from tests.api.builders import close_turn, note, open_turn, text_chunk, turn
from tests.api.helpers import append, assert_invalid_request, assert_problem, create, events_of
from tests.api.test_access import Keys, write_keys

ZSTD = {"Accept": "application/zstd"}


def records(body: bytes) -> list[dict[str, Any]]:
    assert body.endswith(b"\n")
    return [orjson.loads(line) for line in body.split(b"\n")[:-1]]


def every_frame(body: bytes) -> bytes:
    """The text of every frame, read by libzstd across frame boundaries (not forklog's own codec)."""
    return zstandard.ZstdDecompressor().stream_reader(body, read_across_frames=True).read()


def test_the_log_is_the_header_line_then_every_stored_line_whatever_the_last_event(client: TestClient) -> None:
    create(client, id="s", meta={"cwd": "/work"})
    append(client, "s", [*turn(1), *open_turn(2)])
    append(client, "s", [note("after")])  # a log-only event in an open turn: the log has it all

    response = client.get("/sessions/s/log")

    assert response.status_code == 200
    assert response.headers["content-type"] == "application/x-ndjson"
    header, *events = records(response.content)
    assert header | {"instance": None, "createdAt": None} == {
        "type": "session",
        "version": 0,
        "id": "s",
        "createdAt": None,
        "cwd": "/work",
        "delegationDepth": 0,
        "instance": None,
    }
    assert header["instance"] == client.get("/sessions/s").json()["instance"]
    assert events == events_of(client, "s")
    assert len(events) == 9 + 4 + 1


def test_accept_application_zstd_answers_the_same_lines_as_dsh_frames(client: TestClient) -> None:
    create(client, id="s")
    append(client, "s", turn(1))
    append(client, "s", turn(2))
    raw = client.get("/sessions/s/log").content

    response = client.get("/sessions/s/log", headers=ZSTD)

    assert response.status_code == 200
    assert response.headers["content-type"] == "application/zstd"
    assert response.content[:4] == b"\x28\xb5\x2f\xfd"
    assert every_frame(response.content) == raw
    walk = walk_frames(response.content)
    assert walk.torn_at is None
    assert walk.frames[0].text == raw.split(b"\n", 1)[0] + b"\n", "the first frame holds the header line alone"
    assert b"".join(frame.text for frame in walk.frames[1:]) == raw.split(b"\n", 1)[1]


def test_a_big_log_comes_in_bounded_frames_of_whole_lines(client: TestClient) -> None:
    create(client, id="big")
    append(client, "big", open_turn(1))
    filler = "x" * 2000
    for batch in range(4):
        append(client, "big", [text_chunk(1, 1, f"{batch}-{n}-{filler}") for n in range(300)])
    append(client, "big", close_turn(1))
    raw = client.get("/sessions/big/log").content
    assert len(raw) > 4 * FRAME_TEXT_BOUND

    walk = walk_frames(client.get("/sessions/big/log", headers=ZSTD).content)

    assert len(walk.frames) > 1 + 4
    assert all(len(frame.text) <= FRAME_TEXT_BOUND and frame.text.endswith(b"\n") for frame in walk.frames)
    assert walk.text == raw


@pytest.mark.parametrize(
    ("accept", "media_type"),
    [
        (None, "application/x-ndjson"),
        ("*/*", "application/x-ndjson"),
        ("application/json", "application/x-ndjson"),
        ("application/zstd", "application/zstd"),
        ("application/*;q=0.5, application/zstd", "application/zstd"),
        ("application/x-ndjson, application/zstd", "application/x-ndjson"),
        ("application/x-ndjson;q=0.4, application/zstd;q=0.9", "application/zstd"),
        ("application/zstd;q=0, */*", "application/x-ndjson"),
        ("application/zstd;q=bad", "application/x-ndjson"),
        ("text/plain, APPLICATION/ZSTD", "application/zstd"),
    ],
)
def test_the_encoding_follows_what_accept_prefers(client: TestClient, accept: str | None, media_type: str) -> None:
    create(client, id="s")
    append(client, "s", turn(1))
    headers = {"Accept": accept} if accept is not None else {}

    response = client.get("/sessions/s/log", headers=headers)

    assert response.status_code == 200
    assert response.headers["content-type"] == media_type
    assert "Accept" in response.headers["vary"]


def test_an_unknown_or_malformed_id_is_refused_like_every_read(client: TestClient) -> None:
    assert_problem(client.get("/sessions/nope/log"), 404, "SESSION_NOT_FOUND")
    assert_problem(client.get("/sessions/nope/log", headers=ZSTD), 404, "SESSION_NOT_FOUND")
    assert_invalid_request(client.get("/sessions/-bad/log"), "id")


@pytest.mark.files_only
def test_the_log_needs_read_and_shows_only_the_callers_tenant(make_client: Any, tmp_path: Any) -> None:
    keys: Keys = write_keys(
        tmp_path / "keys.jsonl",
        {
            "writer": ("acme", (Scope.READ, Scope.WRITE)),
            "appender": ("acme", (Scope.WRITE,)),
            "other": ("beta", (Scope.READ,)),
        },
    )
    client = make_client(keys_file=keys.path)
    assert client.post("/sessions", json={"id": "s"}, headers=keys.auth("writer")).status_code == 201

    assert client.get("/sessions/s/log", headers=keys.auth("writer")).status_code == 200
    assert_problem(client.get("/sessions/s/log", headers=keys.auth("appender")), 403, "FORBIDDEN")
    assert_problem(client.get("/sessions/s/log", headers=keys.auth("other")), 404, "SESSION_NOT_FOUND")
    assert_problem(client.get("/sessions/s/log", headers=keys.auth("none")), 401, "UNAUTHENTICATED")


@pytest.mark.files_only
def test_a_damaged_session_answers_session_corrupt(make_client: Any, data_dir: Path) -> None:
    (data_dir / "sessions").mkdir(parents=True)
    (data_dir / "sessions" / "bad.jsonl").write_bytes(
        b'{"type":"session","version":0,"id":"bad","createdAt":1,"delegationDepth":0}\nnot json\n'
    )
    client = make_client(compression="none")

    assert_problem(client.get("/sessions/bad/log"), 503, "SESSION_CORRUPT")
    assert_problem(client.get("/sessions/bad/log", headers=ZSTD), 503, "SESSION_CORRUPT")
