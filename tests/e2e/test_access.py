"""Access control with real processes (spec 9): safe-by-default starts, the keys command, keys in no log, a
browser's stream with ?access_token=, keys changed while the service runs."""

from __future__ import annotations

import asyncio
import stat
import time
from pathlib import Path

import httpx
import orjson
import pytest

from tests.api.builders import turn
from tests.e2e.conftest import StartServer
from tests.e2e.server import free_port, run_app
from tests.e2e.sse import open_stream

pytestmark = pytest.mark.e2e


def make_key(keys_file: Path, tenant: str, *scopes: str, key_id: str | None = None) -> str:
    args = ["keys", "new", "--tenant", tenant, "--keys-file", str(keys_file)]
    for scope in scopes:
        args += ["--scope", scope]
    if key_id is not None:
        args += ["--id", key_id]
    made = run_app(*args)
    assert made.returncode == 0, made.stderr
    lines = made.stdout.splitlines()
    assert len(lines) == 1, "the key is printed once, alone on stdout"
    return lines[0]


def test_a_public_address_without_keys_refuses_to_start(tmp_path: Path) -> None:
    data = tmp_path / "data"
    refused = run_app("--host", "0.0.0.0", "--port", str(free_port()), "--data-dir", str(data))
    assert refused.returncode != 0
    assert "keys new" in refused.stderr and "FORKLOG_ALLOW_UNAUTHENTICATED" in refused.stderr
    assert not data.exists(), "nothing was touched"


def test_the_override_serves_a_public_address_without_keys(
    start_server: StartServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FORKLOG_ALLOW_UNAUTHENTICATED", "true")
    server = start_server(None, "--host", "0.0.0.0")
    assert server.post("/sessions", {"id": "open"}).status_code == 201


def test_a_bad_keys_file_stops_the_start_naming_the_line(tmp_path: Path) -> None:
    keys = tmp_path / "keys.jsonl"
    make_key(keys, "acme", "read")
    keys.write_bytes(keys.read_bytes() + b'{"id": "broken"}\n')
    refused = run_app("--port", str(free_port()), "--data-dir", str(tmp_path / "data"), "--keys-file", str(keys))
    assert refused.returncode != 0
    assert "line 2" in refused.stderr and str(keys) in refused.stderr


def test_keys_new_prints_the_key_once_and_stores_only_its_hash(tmp_path: Path) -> None:
    keys = tmp_path / "keys.jsonl"
    secret = make_key(keys, "acme", "read", "write", key_id="ci-bot")
    assert len(secret) >= 43  # 256 bits, URL-safe base64
    assert stat.S_IMODE(keys.stat().st_mode) == 0o600
    text = keys.read_text()
    assert secret not in text
    line = orjson.loads(text)
    assert (line["id"], line["tenant"], sorted(line["scopes"])) == ("ci-bot", "acme", ["read", "write"])
    taken = run_app("keys", "new", "--tenant", "acme", "--scope", "read", "--id", "ci-bot", "--keys-file", str(keys))
    assert taken.returncode != 0 and "ci-bot" in taken.stderr and taken.stdout == ""
    bad_tenant = run_app("keys", "new", "--tenant", "a/b", "--scope", "read", "--keys-file", str(keys))
    assert bad_tenant.returncode != 0 and "--tenant" in bad_tenant.stderr
    assert keys.read_text() == text, "a refused key changes nothing"


def test_keys_new_without_a_file_prints_the_line_on_stderr(tmp_path: Path) -> None:
    made = run_app("keys", "new", "--tenant", "acme", "--scope", "admin", env={"FORKLOG_KEYS_FILE": ""})
    assert made.returncode == 0
    line = orjson.loads(made.stderr)
    assert line["scopes"] == ["admin"] and len(line["sha256"]) == 64
    assert made.stdout.strip() not in made.stderr


def test_keys_work_change_while_running_and_never_reach_the_log(start_server: StartServer, tmp_path: Path) -> None:
    keys = tmp_path / "keys.jsonl"
    writer = make_key(keys, "acme", "read", "write", key_id="writer")
    server = start_server(None, "--keys-file", str(keys), "--log-level", "info")
    auth = {"Authorization": f"Bearer {writer}"}
    assert httpx.post(f"{server.base}/sessions", json={"id": "demo"}, headers=auth).status_code == 201
    assert httpx.get(f"{server.base}/sessions").status_code == 401

    later = make_key(keys, "acme", "read", key_id="later")
    started = time.monotonic()
    while httpx.get(f"{server.base}/sessions", headers={"Authorization": f"Bearer {later}"}).status_code != 200:
        assert time.monotonic() - started < 5, "a key added to the file works within 5 s"
        time.sleep(0.1)

    async def tail_with_access_token() -> list[str]:
        async with httpx.AsyncClient(base_url=server.base, timeout=10) as client:
            path = f"/sessions/demo/events/stream?access_token={later}"
            async with open_stream(client, path) as stream:
                appended = await client.post("/sessions/demo/events", json={"events": turn(1)}, headers=auth)
                assert appended.status_code == 201
                return [frame.id or "" for frame in await stream.events(9)]

    assert asyncio.run(tail_with_access_token()) == [str(seq) for seq in range(9)]
    refused = httpx.get(f"{server.base}/sessions/demo/events/stream?access_token={later}x")
    assert refused.status_code == 401

    keys.write_text("".join(line + "\n" for line in keys.read_text().splitlines() if '"later"' not in line))
    started = time.monotonic()
    while httpx.get(f"{server.base}/sessions", headers={"Authorization": f"Bearer {later}"}).status_code != 401:
        assert time.monotonic() - started < 5, "a key removed from the file is refused within 5 s"
        time.sleep(0.1)
    server.stop()
    log = server.output()
    assert '"key":"writer"' in log, "the access log names the key by its id"
    for secret in (writer, later):
        assert secret not in log and secret[:16] not in log
    assert "access_token" not in log
