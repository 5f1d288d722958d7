"""Hostile input against a real server process (``python -m app``, default limits, fsync on).

Each request is refused with the code the spec names for it, as an ``application/problem+json`` body, and the data
directory holds exactly what it held before (the same files, byte for byte). Paths go out as raw bytes over a
socket, so that no client library normalizes ``..`` or re-encodes ``%2F`` on the way.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fuzz.support import (
    ServerProcess,
    data_files,
    problem_code,
    seed_of_turns,
    turn_events,
)

MiB = 1024 * 1024
DEFAULT_LIMIT = 16 * MiB


# -- a raw HTTP/1.1 client -------------------------------------------------------------------------------------------


@dataclass
class RawAnswer:
    status: int
    headers: dict[str, str]
    body: bytes
    sent: int = 0
    notes: list[str] = field(default_factory=list)

    def json(self) -> Any:
        return json.loads(self.body)

    def as_httpx(self) -> httpx.Response:
        return httpx.Response(self.status, headers=self.headers, content=self.body)


def _parse_answer(data: bytes) -> RawAnswer:
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.decode("latin-1").strip().lower()] = value.decode("latin-1").strip()
    length = int(headers.get("content-length", len(rest)))
    return RawAnswer(status, headers, rest[:length])


def _answer_complete(data: bytes) -> bool:
    head, found, rest = data.partition(b"\r\n\r\n")
    if not found:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(rest) >= int(value)
    return False


def raw_request(
    port: int,
    method: str,
    target: bytes,
    *,
    body: bytes | Iterable[bytes] = b"",
    headers: dict[str, str] | None = None,
    length: int | None = None,
    timeout: float = 30.0,
    push_on: bool = False,
) -> RawAnswer:
    """Send one request exactly as given and read its answer while the body is still going out.

    ``body`` may be an iterable of chunks, streamed; the sender stops as soon as the answer has arrived, or, with
    ``push_on``, goes on until the whole body is out or the server has closed the connection (which tells whether
    the server kept reading a body it had refused). ``length`` declares a Content-Length other than the body's;
    ``length=-1`` sends the body chunked (``Transfer-Encoding: chunked``)."""
    chunks: Iterable[bytes] = [body] if isinstance(body, bytes) else body
    # Without Connection: close, as a keep-alive client (curl, httpx, browsers) sends it.
    all_headers = {"Host": "127.0.0.1", **(headers or {})}
    if length == -1:
        all_headers["Transfer-Encoding"] = "chunked"
    elif length is not None:
        all_headers["Content-Length"] = str(length)
    elif isinstance(body, bytes) and (body or method in ("POST", "PUT", "PATCH")):
        all_headers["Content-Length"] = str(len(body))
    head = f"{method} ".encode() + target + b" HTTP/1.1\r\n"
    head += b"".join(f"{name}: {value}\r\n".encode("latin-1") for name, value in all_headers.items()) + b"\r\n"

    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        received = bytearray()
        done = threading.Event()

        def read() -> None:
            try:
                while not _answer_complete(bytes(received)):
                    data = sock.recv(65536)
                    if not data:
                        break
                    received.extend(data)
            except OSError:
                pass
            finally:
                done.set()

        reader = threading.Thread(target=read, daemon=True)
        sock.sendall(head)
        reader.start()
        sent = 0
        notes: list[str] = []
        try:
            for chunk in chunks:
                if done.is_set() and not push_on:
                    break
                framed = b"%x\r\n%s\r\n" % (len(chunk), chunk) if length == -1 else chunk
                sock.sendall(framed)
                sent += len(chunk)
            if length == -1 and not done.is_set():
                sock.sendall(b"0\r\n\r\n")
        except OSError as exc:  # the server closed the connection on a body it refused
            notes.append(f"send stopped: {exc!r}")
        done.wait(timeout)
        reader.join(1)
    assert received, f"no answer (sent {sent} body bytes; {notes})"
    answer = _parse_answer(bytes(received))
    answer.sent = sent
    answer.notes = notes
    return answer


def expect_problem(answer: RawAnswer | httpx.Response, code: str, **facts: Any) -> dict[str, Any]:
    response = answer.as_httpx() if isinstance(answer, RawAnswer) else answer
    assert problem_code(response) == code, response.text[:500]
    body: dict[str, Any] = response.json()
    for name, value in facts.items():
        assert body.get(name) == value, (name, body)
    return body


# -- the server and its data -----------------------------------------------------------------------------------------


class Served:
    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.client = httpx.Client(base_url=server.base_url, timeout=60)

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def data_dir(self) -> Path:
        return self.server.data_dir

    def tree(self) -> dict[str, bytes]:
        """The data dir's session and temp files, and every file beside the data dir (nothing may escape it)."""
        files = data_files(self.data_dir)
        for path in sorted(self.data_dir.parent.iterdir()):
            if path.is_file() and not path.name.endswith(".log"):
                files[f"../{path.name}"] = path.read_bytes()
        return files

    def post(self, path: str, body: bytes, content_type: str | None = "application/json") -> httpx.Response:
        headers = {"content-type": content_type} if content_type is not None else {}
        return self.client.post(path, content=body, headers=headers)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("hostile")
    server = ServerProcess(root / "data").start()
    served = Served(server)
    try:
        for session_id, turns in (("s1", 1), ("open", 0)):
            answer = served.client.post("/sessions", json={"id": session_id, "seed": seed_of_turns(turns)})
            assert answer.status_code == 201, answer.text
        answer = served.client.post("/sessions/open/events", json={"events": turn_events(1)[:3]})
        assert answer.status_code == 201, answer.text
        yield served
    finally:
        served.client.close()
        server.stop()


@pytest.fixture
def unchanged(served: Served) -> Iterator[None]:
    """The test's requests leave every file as it was (and the server up)."""
    before = served.tree()
    yield
    assert served.server.alive(), served.server.log_text()[-3000:]
    after = served.tree()
    assert sorted(after) == sorted(before)
    assert after == before


# -- ids -------------------------------------------------------------------------------------------------------------

SESSION_ROUTES = [
    ("GET", b"/sessions/{id}"),
    ("DELETE", b"/sessions/{id}"),
    ("GET", b"/sessions/{id}/events"),
    ("POST", b"/sessions/{id}/events"),
    ("GET", b"/sessions/{id}/history"),
    ("POST", b"/sessions/{id}/snapshot"),
    ("POST", b"/sessions/{id}/fork"),
]

BAD_PATH_IDS = {
    "dot-dot": b"..",
    "dot": b".",
    "dot-dot-encoded": b"%2e%2e",
    "traversal-encoded-slash": b"..%2F..%2Fforklog.lock",
    "encoded-slash": b"a%2Fb",
    "encoded-slash-lower": b"s1%2f",
    "encoded-backslash": b"..%5C..%5Cx",
    "nul": b"a%00b",
    "nul-only": b"%00",
    "unicode-encoded": b"%C3%A9t%C3%A9",
    "unicode-lookalike": b"s%D1%81",  # s + Cyrillic es
    "fullwidth-dot": b"%EF%BC%8E%EF%BC%8E",
    "129-chars": b"a" * 129,
    "4096-chars": b"b" * 4096,
    "leading-dash": b"-a",
    "leading-dot": b".hidden",
    "space": b"a%20b",
    "newline": b"a%0Ab",
    "lone-percent": b"%",
    "bad-escape": b"%zz",
    "invalid-utf8": b"%FF%FE",
    "jsonl-suffix": b"s1.jsonl%00",
}


@pytest.mark.usefixtures("unchanged")
@pytest.mark.parametrize("name", sorted(BAD_PATH_IDS))
def test_a_malformed_path_id_is_invalid_request_on_every_route(served: Served, name: str) -> None:
    for method, route in SESSION_ROUTES:
        target = route.replace(b"{id}", BAD_PATH_IDS[name])
        body = b'{"events": [{"type": "note/x", "data": 1}]}' if route.endswith(b"/events") else b"{}"
        answer = raw_request(served.port, method, target, body=body if method == "POST" else b"")
        body_json = expect_problem(answer, "INVALID_REQUEST")
        assert body_json["errors"][0]["field"] == "id", (target, body_json)


@pytest.mark.usefixtures("unchanged")
def test_an_id_of_128_characters_is_well_formed_and_129_is_not(served: Served) -> None:
    expect_problem(raw_request(served.port, "GET", b"/sessions/" + b"a" * 128), "SESSION_NOT_FOUND")
    expect_problem(raw_request(served.port, "GET", b"/sessions/" + b"a" * 129), "INVALID_REQUEST")


@pytest.mark.usefixtures("unchanged")
@pytest.mark.parametrize(
    "target",
    [b"/sessions/a/b", b"/sessions/../../etc/passwd", b"/sessions/s1/events/0", b"/sessions/s1/x", b"//sessions/s1"],
)
def test_a_raw_slash_makes_another_path_with_no_route(served: Served, target: bytes) -> None:
    for method in ("GET", "POST", "DELETE"):
        expect_problem(raw_request(served.port, method, target, body=b"{}" if method == "POST" else b""), "NOT_FOUND")


@pytest.mark.usefixtures("unchanged")
@pytest.mark.parametrize("target", [b"/sessions/\xc3\xa9t\xc3\xa9", b"/sessions/a\x00b", b"/sessions/a b"])
def test_raw_bytes_the_http_parser_refuses_never_reach_the_app(served: Served, target: bytes) -> None:
    # Not percent-encoded: this is not HTTP/1.1 at all, and uvicorn's parser answers 400 before the app sees it.
    answer = raw_request(served.port, "GET", target)
    assert 400 <= answer.status < 500, answer


@pytest.mark.usefixtures("unchanged")
@pytest.mark.parametrize(
    "value",
    [
        "..",
        "../x",
        "a/b",
        "a\\b",
        "a\x00b",
        "\x00",
        "été",
        "s\u0441",
        "a" * 129,
        "",
        " ",
        ".hidden",
        "-x",
        "a\nb",
        "s1/",
    ],
)
def test_a_malformed_id_in_a_body_or_query_is_invalid_request(served: Served, value: str) -> None:
    expect_problem(served.client.post("/sessions", json={"id": value}), "INVALID_REQUEST")
    expect_problem(served.client.post("/sessions/s1/fork", json={"sessionId": value}), "INVALID_REQUEST")
    expect_problem(served.client.get("/sessions", params={"parent": value}), "INVALID_REQUEST")


@pytest.mark.usefixtures("unchanged")
@pytest.mark.parametrize("value", [5, 1.5, True, [], {}, ["s2"], {"id": "s2"}])
def test_an_id_of_another_type_is_invalid_request(served: Served, value: Any) -> None:
    expect_problem(served.client.post("/sessions", json={"id": value}), "INVALID_REQUEST")
    expect_problem(served.client.post("/sessions/s1/fork", json={"sessionId": value}), "INVALID_REQUEST")


# -- lossless JSON ---------------------------------------------------------------------------------------------------

APPEND_BREAKS = {
    "overflow-second-event": b'{"events": [{"type": "note/x", "data": 1}, {"type": "note/y", "data": -1e999}]}',
    "overflow": b'{"events": [{"type": "note/x", "data": {"n": 1e400}}]}',
    "2^53": b'{"events": [{"type": "note/x", "data": 9007199254740992}]}',
    "-2^53": b'{"events": [{"type": "note/x", "data": [1, -9007199254740992]}]}',
    "2^53-as-float": b'{"events": [{"type": "note/x", "data": 9007199254740992.0}]}',
    "2^53-exponent": b'{"events": [{"type": "note/x", "data": 9.007199254740992e15}]}',
    "30-digits": b'{"events": [{"type": "note/x", "data": 123456789012345678901234567890}]}',
    "100k-digits": b'{"events": [{"type": "note/x", "data": 1' + b"0" * 100_000 + b"}]}",
    "100k-digit-float": b'{"events": [{"type": "note/x", "data": 1' + b"0" * 100_000 + b".5}]}",
    "minus-zero": b'{"events": [{"type": "note/x", "data": -0}]}',
    "minus-zero-float": b'{"events": [{"type": "note/x", "data": -0.0e7}]}',
    "duplicate-data-key": b'{"events": [{"type": "note/x", "data": {"a": 1, "a": 2}}]}',
    "duplicate-envelope-key": b'{"events": [{"type": "note/x", "type": "note/y", "data": 1}]}',
    "unpaired-surrogate": b'{"events": [{"type": "note/x", "data": "\\ud800"}]}',
    "unpaired-surrogate-key": b'{"events": [{"type": "note/x", "data": {"\\udfff": 1}}]}',
}


@pytest.mark.usefixtures("unchanged")
@pytest.mark.parametrize("name", sorted(APPEND_BREAKS))
def test_a_lossless_break_inside_an_appended_event_is_invalid_event_with_its_index(served: Served, name: str) -> None:
    body = APPEND_BREAKS[name]
    expected_index = 1 if name == "overflow-second-event" else 0
    expect_problem(served.post("/sessions/s1/events", body), "INVALID_EVENT", index=expected_index)
    # The same break inside a seed event: INVALID_SEED, same index.
    seed_body = body.replace(b'{"events":', b'{"id": "hostile-seed", "seed":', 1)
    expect_problem(served.post("/sessions", seed_body), "INVALID_SEED", index=expected_index)


REQUEST_BREAKS = {
    "expectedSeq-nan": (b"/sessions/s1/events", b'{"events": [{"type": "note/x", "data": 1}], "expectedSeq": NaN}'),
    "expectedSeq-2^53": (
        b"/sessions/s1/events",
        b'{"events": [{"type": "note/x", "data": 1}], "expectedSeq": 9007199254740993}',
    ),
    "expectedSeq-overflow": (
        b"/sessions/s1/events",
        b'{"events": [{"type": "note/x", "data": 1}], "expectedSeq": 1e999}',
    ),
    "duplicate-top-level": (
        b"/sessions/s1/events",
        b'{"events": [{"type": "note/x", "data": 1}], "events": [{"type": "note/y", "data": 2}]}',
    ),
    "duplicate-in-meta": (b"/sessions", b'{"id": "hostile-meta", "meta": {"cwd": "/a", "cwd": "/b"}}'),
    "meta-huge-integer": (b"/sessions", b'{"id": "hostile-meta", "meta": {"delegationDepth": 1e300}}'),
    "atSeq-overflow": (b"/sessions/s1/fork", b'{"atSeq": 1e400}'),
    "atSeq-nan": (b"/sessions/s1/snapshot", b'{"atSeq": NaN}'),
    "atSeq-minus-zero": (b"/sessions/s1/snapshot", b'{"atSeq": -0}'),
    "sessionId-surrogate": (b"/sessions/s1/fork", b'{"sessionId": "\\ud800"}'),
    "instance-surrogate": (
        b"/sessions/s1/events",
        b'{"events": [{"type": "note/x", "data": 1}], "instance": "\\udc00"}',
    ),
    "root-minus-zero": (b"/sessions/s1/events", b"-0"),
    "root-nan": (b"/sessions", b"NaN"),
    # NaN and Infinity are no JSON values: the body does not parse, wherever they stand.
    "event-nan": (b"/sessions/s1/events", b'{"events": [{"type": "note/x", "data": NaN}]}'),
    "event-infinity": (
        b"/sessions/s1/events",
        b'{"events": [{"type": "note/x", "data": 1}, {"type": "y", "data": -Infinity}]}',
    ),
    "seed-nan": (b"/sessions", b'{"id": "hostile-seed", "seed": [{"type": "note/x", "data": NaN}]}'),
}


@pytest.mark.usefixtures("unchanged")
@pytest.mark.parametrize("name", sorted(REQUEST_BREAKS))
def test_a_lossless_break_outside_the_events_is_invalid_request(served: Served, name: str) -> None:
    path, body = REQUEST_BREAKS[name]
    expect_problem(served.post(path.decode(), body), "INVALID_REQUEST")


def _nested(depth: int, opener: bytes = b"[", closer: bytes = b"]") -> bytes:
    return opener * depth + closer * depth


@pytest.mark.usefixtures("unchanged")
@pytest.mark.parametrize(
    "nested",
    [
        _nested(998),  # 3 levels of envelope + 998 = 1001
        _nested(1000),
        _nested(5000),
        _nested(200_000),
        b'{"a":' * 3000 + b"1" + b"}" * 3000,
        b"[" * 100_000,  # deep and truncated
    ],
    ids=["1001-levels", "1003-levels", "5003-levels", "200k-levels", "objects-3003-levels", "100k-open-brackets"],
)
def test_nesting_deeper_than_1000_levels_is_invalid_request(served: Served, nested: bytes) -> None:
    event = b'{"type": "note/x", "data": ' + nested + b"}"
    expect_problem(served.post("/sessions/s1/events", b'{"events": [' + event + b"]}"), "INVALID_REQUEST")
    expect_problem(served.post("/sessions", b'{"id": "deep", "seed": [' + event + b"]}"), "INVALID_REQUEST")
    expect_problem(served.post("/sessions/s1/fork", b'{"atSeq": ' + nested + b"}"), "INVALID_REQUEST")


def test_brackets_inside_strings_do_not_count_as_nesting(served: Served) -> None:
    created = served.client.post("/sessions", json={"id": "brackets"})
    assert created.status_code == 201, created.text
    # Quotes and backslashes escaped inside the string must not end it early for the depth scan.
    text = "[" * 5000 + '{"[[[[\\' + "]" * 5
    event = json.dumps({"type": "note/y", "data": text}).encode()
    answer = served.post("/sessions/brackets/events", b'{"events": [' + event + b"]}")
    assert answer.status_code == 201, answer.text[:500]
    stored = served.client.get("/sessions/brackets/events").json()["events"]
    assert stored[0]["data"] == text


def _deep_user_message(depth: int) -> dict[str, Any]:
    """A user/message event whose one content block holds a list nested ``depth`` levels."""
    block: Any = 0
    for _ in range(depth):
        block = [block]
    return {
        "type": "user/message",
        "surfaceOp": "append",
        "data": {
            "id": "deep",
            "role": "user",
            "content": [{"type": "text", "text": "x", "deep": block}],
            "source": {"kind": "user"},
        },
    }


def test_a_stored_event_nested_250_levels_has_its_history_served(served: Served) -> None:
    # Found by this suite: the history answer nests two levels deeper than the stored event, beyond what orjson
    # serializes (254), and GET /history answered 500 INTERNAL for a log it had accepted.
    created = served.client.post("/sessions", json={"id": "deep-history"})
    assert created.status_code == 201, created.text
    answer = served.client.post("/sessions/deep-history/events", json={"events": [_deep_user_message(250)]})
    assert answer.status_code == 201, answer.text[:300]
    history = served.client.get("/sessions/deep-history/history")
    assert history.status_code == 200, history.text[:300]
    assert history.json()["messages"][0]["content"][0]["deep"] == _deep_user_message(250)["data"]["content"][0]["deep"]


@pytest.mark.parametrize("total_depth", [300, 1000])
def test_an_event_nested_up_to_1000_levels_is_accepted(served: Served, total_depth: int) -> None:
    session_id = f"deep-{total_depth}"
    created = served.client.post("/sessions", json={"id": session_id})
    assert created.status_code == 201, created.text
    # The body {"events": [{"data": ...}]} takes 3 levels.
    event = b'{"type": "note/x", "data": ' + _nested(total_depth - 3) + b"}"
    answer = served.post(f"/sessions/{session_id}/events", b'{"events": [' + event + b"]}")
    assert answer.status_code == 201, answer.text[:300]


# -- syntax, media types, envelopes ----------------------------------------------------------------------------------

MALFORMED = {
    "truncated-object": b'{"events": [{"type": "note/x", "data": 1}',
    "truncated-string": b'{"events": [{"type": "note/x", "data": "abc',
    "truncated-number": b'{"events": [{"type": "note/x", "data": 1.',
    "open-brace": b"{",
    "trailing-garbage": b'{"events": [{"type": "note/x", "data": 1}]} x',
    "two-documents": b'{"events": []}{"events": []}',
    "trailing-comma": b'{"events": [{"type": "note/x", "data": 1},]}',
    "single-quotes": b"{'events': []}",
    "comment": b'{"events": [] /* c */}',
    "bare-word": b"events",
    "invalid-utf8": b'{"events": [{"type": "note/x", "data": "\xff\xfe"}]}',
    "overlong-utf8": b'{"events": [{"type": "note/x", "data": "\xc0\xaf"}]}',
    "utf16": '{"events": []}'.encode("utf-16"),
    "bom": b'\xef\xbb\xbf{"events": [{"type": "note/x", "data": 1}]}',
    "raw-control-char": b'{"events": [{"type": "note/x", "data": "a\x01b"}]}',
    "nul-byte": b'{"events": [{"type": "note/x", "data": 1}]}\x00',
    "array-root": b'[{"type": "note/x", "data": 1}]',
    "string-root": b'"events"',
    "null-root": b"null",
    "number-root": b"1",
    "empty": b"",
    "whitespace-only": b"   \n",
    "events-not-array": b'{"events": {"type": "note/x", "data": 1}}',
    "events-empty": b'{"events": []}',
    "events-null": b'{"events": null}',
    "1001-events": json.dumps({"events": [{"type": "note/x", "data": 1}] * 1001}).encode(),
    "unknown-member": b'{"events": [{"type": "note/x", "data": 1}], "extra": 1}',
    "expectedSeq-string": b'{"events": [{"type": "note/x", "data": 1}], "expectedSeq": "13"}',
    "expectedSeq-fraction": b'{"events": [{"type": "note/x", "data": 1}], "expectedSeq": 12.5}',
    "expectedSeq-bool": b'{"events": [{"type": "note/x", "data": 1}], "expectedSeq": true}',
    "instance-number": b'{"events": [{"type": "note/x", "data": 1}], "instance": 7}',
}


@pytest.mark.usefixtures("unchanged")
@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_a_malformed_append_body_is_invalid_request(served: Served, name: str) -> None:
    expect_problem(served.post("/sessions/s1/events", MALFORMED[name]), "INVALID_REQUEST")


@pytest.mark.usefixtures("unchanged")
@pytest.mark.parametrize(
    "body",
    [
        b'{"id": "x1"',
        b'{"id": "x1", "seed": {}}',
        b'{"id": "x1", "meta": []}',
        b'{"id": "x1", "meta": {"color": "red"}}',
        b'{"id": "x1", "extra": true}',
        b"[]",
        b'{"id": "x1"} {}',
    ],
)
def test_a_malformed_create_body_is_invalid_request(served: Served, body: bytes) -> None:
    expect_problem(served.post("/sessions", body), "INVALID_REQUEST")


ENVELOPES = {
    "extra-key": {"type": "note/x", "data": 1, "extra": True},
    "seq": {"type": "note/x", "data": 1, "seq": 13},
    "time": {"type": "note/x", "data": 1, "time": 1},
    "no-data": {"type": "note/x"},
    "no-type": {"data": 1},
    "empty-type": {"type": "", "data": 1},
    "type-257": {"type": "t" * 257, "data": 1},
    "type-number": {"type": 5, "data": 1},
    "storage-tag": {"type": "text-chunks", "data": 1},
    "session-tag": {"type": "session", "data": 1},
    "ignorable-false": {"type": "note/x", "data": 1, "ignorable": False},
    "ignorable-string": {"type": "note/x", "data": 1, "ignorable": "true"},
    "surfaceOp-on-log-event": {"type": "note/x", "data": 1, "surfaceOp": "append"},
    "sourceEventSeqs-on-log-event": {"type": "note/x", "data": 1, "sourceEventSeqs": [0]},
    "legacy-header-delta": {"type": "request/header-delta", "data": {}},
    "event-not-object": ["note/x", 1],
    "event-null": None,
    "turn-start-twice": {"type": "turn/start", "data": {"turn": 1}},
    "user-message-without-surfaceOp": {
        "type": "user/message",
        "data": {"id": "u", "role": "user", "content": [], "source": {"kind": "user"}},
    },
}


@pytest.mark.usefixtures("unchanged")
@pytest.mark.parametrize("name", sorted(ENVELOPES))
def test_a_bad_envelope_is_refused_with_its_index(served: Served, name: str) -> None:
    good = {"type": "note/ok", "data": None}
    bad = ENVELOPES[name]
    body = expect_problem(
        served.client.post("/sessions/s1/events", json={"events": [good, good, bad]}), "INVALID_EVENT", index=2
    )
    assert body["reason"], body
    if name in ("seq", "time"):  # a seed may carry seq and time; the rest is as bad in a seed
        return
    if name == "turn-start-twice":
        bad = {"type": "turn/end", "data": {"turn": 1, "reason": {"kind": "completed"}}}
    expect_problem(
        served.client.post("/sessions", json={"id": "hostile-seed", "seed": [good, good, bad]}), "INVALID_SEED", index=2
    )


@pytest.mark.usefixtures("unchanged")
@pytest.mark.parametrize(
    "content_type",
    [
        "text/plain",
        "text/json",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/jsonx",
        "application/json-patch",
        "application/xml",
        "json",
        "*/*",
    ],
)
def test_a_body_not_declared_json_is_415_before_anything_else(served: Served, content_type: str) -> None:
    body = b'{"events": [{"type": "note/x", "data": 1}]}'
    expect_problem(served.post("/sessions/s1/events", body, content_type), "UNSUPPORTED_MEDIA_TYPE")
    expect_problem(served.post("/sessions", b'{"id": "ct"}', content_type), "UNSUPPORTED_MEDIA_TYPE")
    # 415 comes before 404 of the session, and before 413 (a declared length over the limit).
    expect_problem(served.post("/sessions/nope/events", body, content_type), "UNSUPPORTED_MEDIA_TYPE")
    answer = raw_request(
        served.port,
        "POST",
        b"/sessions/s1/events",
        headers={"Content-Type": content_type},
        body=b"{",
        length=DEFAULT_LIMIT + 1,
    )
    expect_problem(answer, "UNSUPPORTED_MEDIA_TYPE")


@pytest.mark.usefixtures("unchanged")
def test_json_media_types_with_parameters_and_suffixes_are_json(served: Served) -> None:
    for content_type in ("APPLICATION/JSON; charset=utf-8", "application/problem+json", "application/vnd.x+json"):
        expect_problem(served.post("/sessions/s1/events", b"{", content_type), "INVALID_REQUEST")
    expect_problem(served.post("/sessions/s1/events", b"{", None), "INVALID_REQUEST")


# -- big bodies ------------------------------------------------------------------------------------------------------


def _repeat(chunk: bytes, total: int) -> Iterator[bytes]:
    sent = 0
    while sent < total:
        piece = chunk[: total - sent]
        sent += len(piece)
        yield piece


def _rss_growth(served: Served, action: Any) -> tuple[Any, int]:
    before = served.server.rss_bytes()
    result = action()
    time.sleep(0.2)
    return result, served.server.rss_bytes() - before


@pytest.mark.usefixtures("unchanged")
def test_a_100_mb_body_with_its_length_declared_is_413_before_it_is_read(served: Served) -> None:
    total = 100 * MiB

    def send() -> RawAnswer:
        return raw_request(
            served.port,
            "POST",
            b"/sessions/s1/events",
            headers={"Content-Type": "application/json"},
            body=_repeat(b"[" * MiB, total),
            length=total,
            push_on=True,
        )

    answer, growth = _rss_growth(served, send)
    expect_problem(answer, "PAYLOAD_TOO_LARGE")
    # The answer comes before the body, and the server does not read on (it closes the connection): the client
    # cannot push the 100 MB through, only what the kernel's socket buffers take.
    assert answer.sent < total // 2, (answer.sent, answer.notes)
    assert growth < 8 * MiB, growth


@pytest.mark.usefixtures("unchanged")
def test_a_100_mb_chunked_body_is_413_once_past_the_limit(served: Served) -> None:
    total = 100 * MiB

    def send() -> RawAnswer:
        return raw_request(
            served.port,
            "POST",
            b"/sessions",
            headers={"Content-Type": "application/json"},
            body=_repeat(b" " * MiB, total),
            length=-1,
            push_on=True,
        )

    answer, growth = _rss_growth(served, send)
    expect_problem(answer, "PAYLOAD_TOO_LARGE")
    assert answer.sent < total // 2, (answer.sent, answer.notes)
    # At most the limit is held while reading (plus the allocator's slack), never the whole body.
    assert growth < 3 * DEFAULT_LIMIT, growth


def _million_event_seed() -> bytes:
    event = b'{"type":"note/x","data":null}'
    return b'{"id":"million","seed":[' + b",".join([event] * 1_000_000) + b"]}"


@pytest.mark.usefixtures("unchanged")
def test_a_seed_of_a_million_events_exceeds_the_default_limit(served: Served) -> None:
    body = _million_event_seed()
    assert len(body) > DEFAULT_LIMIT

    def send() -> RawAnswer:
        return raw_request(
            served.port,
            "POST",
            b"/sessions",
            headers={"Content-Type": "application/json"},
            body=(body[start : start + MiB] for start in range(0, len(body), MiB)),
            length=len(body),
            push_on=True,
        )

    answer, growth = _rss_growth(served, send)
    expect_problem(answer, "PAYLOAD_TOO_LARGE")
    assert answer.sent < len(body), (answer.sent, answer.notes)
    assert growth < 8 * MiB, growth
    expect_problem(served.client.get("/sessions/million"), "SESSION_NOT_FOUND")


def _small_event_seed(turns: int) -> list[dict[str, Any]]:
    """``turns`` whole turns of 10 small events each: turn/start, 8 log-only notes, turn/end."""
    seed: list[dict[str, Any]] = []
    for turn in range(1, turns + 1):
        seed.append({"type": "turn/start", "data": {"turn": turn}})
        seed.extend({"type": "note/x", "data": index} for index in range(8))
        seed.append({"type": "turn/end", "data": {"turn": turn, "reason": {"kind": "completed"}}})
    return seed


def test_a_seed_of_100k_events_under_a_raised_limit_is_accepted_or_refused_cleanly(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    root = tmp_path_factory.mktemp("big-seed")
    body = json.dumps({"id": "big", "seed": _small_event_seed(10_000)}, separators=(",", ":")).encode()
    server = ServerProcess(root / "data", args=("--max-body-bytes", str(64 * MiB))).start()
    try:
        with httpx.Client(base_url=server.base_url, timeout=120) as client:
            before = data_files(server.data_dir)
            rss_before = server.rss_bytes()
            probe = _HealthProbe(server.base_url)
            started = time.monotonic()
            with probe:
                answer = client.post("/sessions", content=body, headers={"content-type": "application/json"})
            elapsed = time.monotonic() - started
            rss_after = server.rss_bytes()
            after = data_files(server.data_dir)
            print(
                f"100k-event seed ({len(body) / MiB:.1f} MiB): {answer.status_code} in {elapsed:.2f}s; "
                f"RSS {rss_before / MiB:.0f} -> {rss_after / MiB:.0f} MiB; /healthz slowest {probe.slowest:.2f}s"
            )
            if answer.status_code != 201:
                problem_code(answer)
                assert answer.status_code < 500, answer.text[:500]
                assert after == before
                return
            assert set(after) - set(before) == {"sessions/big.jsonl.zstd"}, sorted(after)  # (a new directory's)
            session = answer.json()
            assert (session["eventCount"], session["forkable"], session["lastTurnEndSeq"]) == (100_000, True, 99_999)
            tail = client.get("/sessions/big/events", params={"from": 99_990}).json()
            assert [event["seq"] for event in tail["events"]] == list(range(99_990, 100_000))
            fork = client.post("/sessions/big/fork", json={"sessionId": "big-child", "atSeq": 49_999})
            assert fork.status_code == 201, fork.text
            assert fork.json()["eventCount"] == 50_000
            # What a parsed body costs in Python objects, transiently, is many times its bytes; it must be bounded
            # by the body (which the limit bounds), not grow with anything else.
            assert rss_after - rss_before < 16 * len(body) + 32 * MiB, (rss_before, rss_after)
    finally:
        server.stop()


class _HealthProbe:
    """Polls /healthz from a thread while a long request runs; ``slowest`` is the longest wait for an answer."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.slowest = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(base_url=self.base_url, timeout=120) as client:
            while not self._stop.is_set():
                started = time.monotonic()
                client.get("/healthz")
                self.slowest = max(self.slowest, time.monotonic() - started)
                self._stop.wait(0.05)

    def __enter__(self) -> _HealthProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(130)
