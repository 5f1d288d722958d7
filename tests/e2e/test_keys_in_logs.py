"""No key in any log (spec 9), with a real process: a WebSocket handshake carrying ``?access_token=`` is not
accepted, and nothing the server prints (at its most verbose) holds the key, whatever the request."""

from __future__ import annotations

import base64
import os
import socket
from pathlib import Path

import httpx
import pytest

from app.domain.access import new_secret
from tests.api.builders import turn
from tests.e2e.conftest import StartServer
from tests.e2e.test_access import make_key

pytestmark = pytest.mark.e2e


def websocket_handshake(port: int, target: str) -> bytes:
    """Send a WebSocket upgrade request for ``target``; the answer's status line and headers."""
    nonce = base64.b64encode(os.urandom(16)).decode()
    request = (
        f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {nonce}\r\nSec-WebSocket-Version: 13\r\nOrigin: http://127.0.0.1:{port}\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(request.encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = conn.recv(4096)
            if not chunk:
                break
            head += chunk
    return head.partition(b"\r\n\r\n")[0]


def test_a_websocket_handshake_is_refused_and_no_key_reaches_the_log(start_server: StartServer, tmp_path: Path) -> None:
    keys = tmp_path / "keys.jsonl"
    key = make_key(keys, "acme", "read", "write", key_id="owner")
    planted = new_secret()  # a key that is in no file
    server = start_server(None, "--keys-file", str(keys), "--log-level", "debug")
    auth = {"Authorization": f"Bearer {key}"}
    assert httpx.post(f"{server.base}/sessions", json={"id": "demo", "seed": turn(1)}, headers=auth).status_code == 201

    for secret in (key, planted):
        for target in (
            f"/sessions/demo/events/stream?access_token={secret}",
            f"/sessions/missing/events/stream?access_token={secret}",
            f"/ws?access_token={secret}",
        ):
            head = websocket_handshake(server.port, target)
            assert head.startswith(b"HTTP/1.1 "), head
            assert not head.startswith(b"HTTP/1.1 101"), "the service accepts no WebSocket"
            assert b"upgrade: websocket" not in head.lower()

    # The same secrets in ordinary requests, answered and refused.
    assert httpx.get(f"{server.base}/sessions", headers={"Authorization": f"Bearer {planted}"}).status_code == 401
    assert httpx.get(f"{server.base}/sessions/demo/events?access_token={planted}").status_code == 401
    assert httpx.get(f"{server.base}/sessions/demo/events", headers=auth).status_code == 200
    with httpx.stream("GET", f"{server.base}/sessions/demo/events/stream?from=9&access_token={key}") as stream:
        assert stream.status_code == 200
    assert httpx.get(f"{server.base}/sessions/demo/events/stream?access_token={planted}").status_code == 401

    server.stop()
    log = server.output()
    assert "owner" in log, "the log names the key by its id"
    for secret in (key, planted):
        assert secret not in log and secret[:12] not in log
    assert "access_token" not in log
