"""Access control (spec 9) through the app: keys, scopes, tenants, the open routes, hostile credentials, CORS."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from app.api.edge.keys_file import KeysFileError
from app.domain.access import ApiKey, Scope, digest_of, key_line, new_secret
from tests.api.builders import close_turn, note, open_turn, turn
from tests.api.conftest import AppFactory, ClientFactory
from tests.api.helpers import assert_problem

ACME, BETA = "acme", "beta"


@dataclass(frozen=True)
class Keys:
    path: Path
    secrets: dict[str, str]  # caller name -> key

    def auth(self, caller: str) -> dict[str, str]:
        if caller == "none":
            return {}
        if caller == "unknown":
            return {"Authorization": "Bearer " + new_secret()}
        return {"Authorization": f"Bearer {self.secrets[caller]}"}


# caller -> (tenant, scopes)
CALLERS: dict[str, tuple[str, tuple[Scope, ...]]] = {
    "read": (ACME, (Scope.READ,)),
    "write": (ACME, (Scope.WRITE,)),
    "readwrite": (ACME, (Scope.READ, Scope.WRITE)),
    "admin": (ACME, (Scope.ADMIN,)),
    "share": (ACME, (Scope.SHARE,)),
    "other": (BETA, (Scope.READ, Scope.WRITE)),
    "default": ("default", (Scope.READ, Scope.WRITE)),
}


def write_keys(path: Path, callers: dict[str, tuple[str, tuple[Scope, ...]]] = CALLERS) -> Keys:
    secrets: dict[str, str] = {}
    lines = []
    for name, (tenant, scopes) in callers.items():
        secrets[name] = new_secret()
        lines.append(key_line(ApiKey(name, tenant, frozenset(scopes), digest_of(secrets[name]))))
    path.write_bytes(b"".join(lines))
    return Keys(path, secrets)


@pytest.fixture
def keys(tmp_path: Path) -> Keys:
    return write_keys(tmp_path / "keys.jsonl")


@pytest.fixture
def keyed(make_client: ClientFactory, keys: Keys) -> Callable[[], TestClient]:
    """A ready client of a fresh app with the keys file (readiness needs no key)."""
    return lambda: make_client(keys_file=keys.path)


def fill(client: TestClient, keys: Keys) -> None:
    """acme has "demo": one finished turn (its turn/end at seq 8), then an open one."""
    auth = keys.auth("readwrite")
    assert client.post("/sessions", json={"id": "demo"}, headers=auth).status_code == 201
    events = [*turn(1), *open_turn(2)]
    assert client.post("/sessions/demo/events", json={"events": events}, headers=auth).status_code == 201


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    scope: Scope
    ok: int  # the status a caller of acme with the scope gets
    body: Any = None

    def send(self, client: TestClient, headers: dict[str, str]) -> Any:
        return client.request(self.method, self.path, json=self.body, headers=headers)


CALLS = {
    "create_session": Call("POST", "/sessions", Scope.WRITE, 201, {"id": "fresh"}),
    "list_sessions": Call("GET", "/sessions", Scope.READ, 200),
    "get_session": Call("GET", "/sessions/demo", Scope.READ, 200),
    "update_session": Call("PATCH", "/sessions/demo", Scope.WRITE, 200, {"archived": True}),
    "delete_session": Call("DELETE", "/sessions/demo", Scope.WRITE, 204),
    "append_events": Call("POST", "/sessions/demo/events", Scope.WRITE, 201, {"events": close_turn(2)}),
    "read_events": Call("GET", "/sessions/demo/events", Scope.READ, 200),
    # A stream that started would never end here: a wrong instance is refused after the keys, before the stream.
    "stream_events": Call("GET", "/sessions/demo/events/stream?instance=0", Scope.READ, 409),
    "read_history": Call("GET", "/sessions/demo/history", Scope.READ, 200),
    "read_log": Call("GET", "/sessions/demo/log", Scope.READ, 200),
    "read_lineage": Call("GET", "/sessions/demo/lineage", Scope.READ, 200),
    "snapshot_session": Call("POST", "/sessions/demo/snapshot", Scope.READ, 200, {"atSeq": 8}),
    "fork_session": Call("POST", "/sessions/demo/fork", Scope.WRITE, 201, {"atSeq": 8, "sessionId": "kid"}),
    "interrupt_turn": Call("POST", "/sessions/demo/interrupt", Scope.WRITE, 201, {}),  # spec 17: its open turn
    "metrics": Call("GET", "/metrics", Scope.ADMIN, 200),  # spec 13: counts over every tenant
    # Spec 18: a share is made, listed and revoked with the share scope (or admin).
    "create_share": Call("POST", "/sessions/demo/shares", Scope.SHARE, 201, {}),
    "list_shares": Call("GET", "/sessions/demo/shares", Scope.SHARE, 200),
    "revoke_share": Call("DELETE", "/sessions/demo/shares/share-0123456789abcdef", Scope.SHARE, 404),
    # A share is continued with a write key (a token that leads nowhere: after the key check, SHARE_NOT_FOUND).
    "fork_shared": Call("POST", "/shared/no-such-token/fork", Scope.WRITE, 404),
}
# The docs pages, and the files of the session browser and of the docs pages (the mounts "ui" and "docs_assets").
OPEN_ROUTES = {
    "openapi",
    "swagger_ui_html",
    "swagger_ui_redirect",
    "redoc_html",
    "healthz",
    "readyz",
    "ui",
    "docs_assets",
    # Spec 18: a share's reads need no key (the token in the path is the secret).
    "get_shared",
    "read_shared_events",
    "read_shared_history",
    "stream_shared_events",
    # Spec 18: the page a share link opens (it reads the share's open routes above).
    "shared_page",
}


def test_every_route_is_either_open_or_in_the_matrix(make_app: AppFactory, keys: Keys) -> None:
    names = {route.name for route in make_app(keys_file=keys.path).routes}  # type: ignore[attr-defined]
    assert names == set(CALLS) | OPEN_ROUTES


@pytest.mark.parametrize("caller", ["none", "unknown", "read", "write", "readwrite", "admin", "share", "other"])
@pytest.mark.parametrize("name", list(CALLS))
def test_every_route_by_every_kind_of_caller(
    keyed: Callable[[], TestClient], keys: Keys, name: str, caller: str
) -> None:
    client = keyed()
    fill(client, keys)
    call = CALLS[name]
    answer = call.send(client, keys.auth(caller))
    if caller in ("none", "unknown"):
        assert_problem(answer, 401, "UNAUTHENTICATED")
        assert answer.headers["www-authenticate"].startswith("Bearer")
        return
    tenant, scopes = CALLERS[caller]
    if not ApiKey(caller, tenant, frozenset(scopes), "").allows(call.scope):
        assert_problem(answer, 403, "FORBIDDEN")
        assert call.scope.value in answer.json()["detail"]
        return
    if caller == "other" and call.path.startswith("/sessions/"):
        assert_problem(answer, 404, "SESSION_NOT_FOUND")  # acme's session does not exist for beta
        return
    assert answer.status_code == call.ok, answer.text
    if name == "list_sessions":
        listed = [item["id"] for item in answer.json()["items"]]
        assert listed == ([] if caller == "other" else ["demo"])


def test_another_tenants_session_answers_exactly_as_a_missing_one(keyed: Callable[[], TestClient], keys: Keys) -> None:
    """beta's answers once acme has "demo" are byte for byte those from before anyone had it."""
    client = keyed()
    beta = keys.auth("other")
    calls = {name: call for name, call in CALLS.items() if call.path != "/sessions"}
    # The same request id both times: a problem body carries it (spec 13).
    before = {name: call.send(client, {**beta, "X-Request-Id": name}) for name, call in calls.items()}
    fill(client, keys)
    for name, call in calls.items():
        seen = call.send(client, {**beta, "X-Request-Id": name})
        assert (seen.status_code, seen.content) == (before[name].status_code, before[name].content), name
        assert seen.headers.get("content-type") == before[name].headers.get("content-type")


def test_tenants_with_equal_ids_have_two_sessions(keyed: Callable[[], TestClient], keys: Keys, data_dir: Path) -> None:
    client = keyed()
    acme, beta = keys.auth("readwrite"), keys.auth("other")
    for auth, word in ((acme, "from acme"), (beta, "from beta")):
        assert client.post("/sessions", json={"id": "demo"}, headers=auth).status_code == 201
        events = [note(word), *turn(1)]
        assert client.post("/sessions/demo/events", json={"events": events}, headers=auth).status_code == 201
    for auth, word, other in ((acme, "from acme", "from beta"), (beta, "from beta", "from acme")):
        log = client.get("/sessions/demo/events", headers=auth).text
        assert word in log and other not in log
    fork = client.post("/sessions/demo/fork", json={"sessionId": "kid"}, headers=beta)
    assert fork.status_code == 201
    assert client.get("/sessions/kid", headers=acme).status_code == 404
    lineage = client.get("/sessions/demo/lineage", headers=beta).json()
    assert [child["id"] for child in lineage["children"]] == ["kid"]
    assert client.get("/sessions/demo/lineage", headers=acme).json()["children"] == []


@pytest.mark.files_only
def test_each_tenant_has_its_own_folder_and_default_keeps_sessions(
    keyed: Callable[[], TestClient], keys: Keys, data_dir: Path
) -> None:
    client = keyed()
    for caller in ("readwrite", "other", "default"):
        assert client.post("/sessions", json={"id": "demo"}, headers=keys.auth(caller)).status_code == 201
    assert sorted(path.relative_to(data_dir).as_posix() for path in data_dir.rglob("*.jsonl.zstd")) == [
        "sessions/demo.jsonl.zstd",  # a new data directory's encoding: zstd
        "tenants/acme/sessions/demo.jsonl.zstd",
        "tenants/beta/sessions/demo.jsonl.zstd",
    ]


def test_a_key_of_the_default_tenant_sees_only_the_default_tenant(keyed: Callable[[], TestClient], keys: Keys) -> None:
    client = keyed()
    assert client.post("/sessions", json={"id": "mine"}, headers=keys.auth("default")).status_code == 201
    assert client.get("/sessions/mine", headers=keys.auth("readwrite")).status_code == 404
    listed = client.get("/sessions", headers=keys.auth("default")).json()["items"]
    assert [item["id"] for item in listed] == ["mine"]


def test_idempotency_keys_are_per_tenant(keyed: Callable[[], TestClient], keys: Keys) -> None:
    client = keyed()
    first = client.post(
        "/sessions", json={"id": "a"}, headers={**keys.auth("readwrite"), "Idempotency-Key": "same-key"}
    )
    other = client.post("/sessions", json={"id": "b"}, headers={**keys.auth("other"), "Idempotency-Key": "same-key"})
    assert (first.status_code, other.status_code) == (201, 201)
    assert "idempotent-replayed" not in other.headers
    assert other.json()["id"] == "b"


ASSET = "/docs/assets/swagger-ui-bundle.js"


def test_open_routes_need_no_key_and_ignore_a_bad_one(keyed: Callable[[], TestClient], keys: Keys) -> None:
    client = keyed()
    for path in ("/healthz", "/readyz", "/openapi.json", "/docs", "/redoc", "/ui/", "/ui/js/main.js", ASSET):
        for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic x"}):
            assert client.get(path, headers=headers).status_code == 200, (path, headers)


def test_readyz_details_are_for_an_admin_key(keyed: Callable[[], TestClient], keys: Keys) -> None:
    client = keyed()
    fill(client, keys)
    assert client.get("/readyz", headers=keys.auth("admin")).json() == {"status": "ready", "sessions": 1, "corrupt": []}
    assert client.get("/readyz", headers=keys.auth("read")).json() == {"status": "ready", "sessions": 1, "corrupt": 0}
    assert client.get("/readyz", headers=keys.auth("other")).json() == {"status": "ready", "sessions": 0, "corrupt": 0}
    for caller in ("none", "unknown"):
        assert client.get("/readyz", headers=keys.auth(caller)).json() == {"status": "ready"}, caller


def test_without_a_keys_file_readyz_tells_everything(client: TestClient) -> None:
    assert client.get("/readyz").json() == {"status": "ready", "sessions": 0, "corrupt": []}


def test_keys_come_before_every_other_check(keyed: Callable[[], TestClient], keys: Keys) -> None:
    client = keyed()
    unsupported = {"content-type": "text/plain"}
    assert_problem(client.post("/sessions", content=b"x", headers=unsupported), 401, "UNAUTHENTICATED")
    huge = b"[" * (17 * 1024 * 1024)
    read_only = {**keys.auth("read"), "content-type": "application/json"}
    assert_problem(client.post("/sessions", content=huge, headers=read_only), 403, "FORBIDDEN")
    assert_problem(client.get("/sessions/bad%2Fid"), 401, "UNAUTHENTICATED")
    assert_problem(client.get("/no/such/route"), 401, "UNAUTHENTICATED")


HOSTILE = {
    "empty": [(b"authorization", b"")],
    "scheme only": [(b"authorization", b"Bearer")],
    "scheme and a space": [(b"authorization", b"Bearer ")],
    "another scheme": [(b"authorization", b"Basic dXNlcjpwYXNz")],
    "two words": [(b"authorization", b"Bearer one two")],
    "10 KB": [(b"authorization", b"Bearer " + b"k" * 10_240)],
    "non-ASCII": [(b"authorization", "Bearer clé-ünïcödé".encode())],
    "latin-1 bytes": [(b"authorization", b"Bearer \xff\xfe")],
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_authorization_headers_are_refused_as_unauthenticated(
    keyed: Callable[[], TestClient], name: str
) -> None:
    client = keyed()
    answer = client.get("/sessions", headers=HOSTILE[name])
    assert_problem(answer, 401, "UNAUTHENTICATED")


def test_a_second_authorization_header_is_refused_even_with_a_good_key(
    keyed: Callable[[], TestClient], keys: Keys
) -> None:
    client = keyed()
    good = f"Bearer {keys.secrets['readwrite']}".encode()
    for pair in ([good, b"Bearer other"], [good, good]):
        answer = client.get("/sessions", headers=[(b"authorization", value) for value in pair])
        assert_problem(answer, 401, "UNAUTHENTICATED")


def test_a_key_with_a_trailing_newline_is_not_the_key(keyed: Callable[[], TestClient], keys: Keys) -> None:
    client = keyed()
    secret = keys.secrets["readwrite"]
    assert_problem(client.get(f"/sessions/x/events/stream?access_token={secret}%0A"), 401, "UNAUTHENTICATED")
    assert client.get("/sessions", headers={"Authorization": f"bearer   {secret}"}).status_code == 200


def test_the_stream_takes_its_key_as_access_token_and_no_other_route_does(
    keyed: Callable[[], TestClient], keys: Keys
) -> None:
    client = keyed()
    fill(client, keys)
    token = keys.secrets["readwrite"]
    assert_problem(client.get(f"/sessions/demo/events/stream?instance=0&access_token={token}"), 409, "SESSION_NOT_LIVE")
    assert_problem(client.get(f"/sessions/demo/events?access_token={token}"), 401, "UNAUTHENTICATED")
    for query in ("access_token=", f"access_token={token}&access_token={token}"):
        assert_problem(client.get(f"/sessions/demo/events/stream?{query}"), 401, "UNAUTHENTICATED")


def test_no_answer_holds_a_key(keyed: Callable[[], TestClient], keys: Keys) -> None:
    client = keyed()
    secret = keys.secrets["read"]
    answers = [
        client.post("/sessions", json={"id": "x"}, headers=keys.auth("read")),
        client.get(f"/sessions/demo/events/stream?access_token={secret}&from=-1"),
        client.get(f"/sessions/demo/events/stream?access_token={secret}x"),
        client.get("/sessions", headers={"Authorization": f"Bearer {secret}x"}),
    ]
    for answer in answers:
        assert answer.status_code >= 400
        assert secret not in answer.text and secret not in str(answer.headers)


def test_with_keys_any_host_is_served(keyed: Callable[[], TestClient], keys: Keys) -> None:
    client = keyed()
    answer = client.get("/sessions", headers={**keys.auth("read"), "Host": "forklog.example.com"})
    assert answer.status_code == 200


# -- the keys file -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b"not json", "not JSON"),
        (b"[]", "not a JSON object"),
        (b'{"id": "x", "tenant": "t", "scopes": ["read"]}', "missing sha256"),
        (b'{"id": "x", "tenant": "t/u", "scopes": ["read"], "sha256": "' + b"0" * 64 + b'"}', "tenant"),
        (b'{"id": "x", "tenant": "t", "scopes": [], "sha256": "' + b"0" * 64 + b'"}', "scopes"),
        (b'{"id": "x", "tenant": "t", "scopes": ["root"], "sha256": "' + b"0" * 64 + b'"}', "scopes"),
        (b'{"id": "x", "tenant": "t", "scopes": ["read"], "sha256": "abc"}', "sha256"),
        (b'{"id": "x", "tenant": "t", "scopes": ["read"], "sha256": "' + b"0" * 64 + b'", "key": "k"}', "unknown"),
        (b'{"id": "read", "tenant": "t", "scopes": ["read"], "sha256": "' + b"0" * 64 + b'"}', "already"),
    ],
)
def test_a_bad_line_stops_the_start_naming_the_line(make_app: AppFactory, keys: Keys, line: bytes, reason: str) -> None:
    keys.path.write_bytes(keys.path.read_bytes() + b"\n" + line + b"\n")
    bad_line = len(CALLERS) + 2
    with pytest.raises(KeysFileError, match=rf"line {bad_line}: .*{reason}"):
        make_app(keys_file=keys.path)


def test_a_missing_keys_file_stops_the_start(make_app: AppFactory, tmp_path: Path) -> None:
    with pytest.raises(KeysFileError, match="no such file; make one with: python -m app keys new"):
        make_app(keys_file=tmp_path / "absent.jsonl")


def wait_for(check: Callable[[], bool], seconds: float = 5.0) -> float:
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < seconds, "not within the spec's 5 s"
        time.sleep(0.05)
    return time.monotonic() - started


def test_keys_added_and_removed_take_effect_while_the_service_runs(keyed: Callable[[], TestClient], keys: Keys) -> None:
    client = keyed()
    newcomer = new_secret()
    line = key_line(ApiKey("newcomer", ACME, frozenset({Scope.READ}), digest_of(newcomer)))
    keys.path.write_bytes(keys.path.read_bytes() + line)
    wait_for(lambda: client.get("/sessions", headers={"Authorization": f"Bearer {newcomer}"}).status_code == 200)
    revoked = keys.auth("readwrite")
    kept = [raw for raw in keys.path.read_bytes().splitlines(keepends=True) if b'"readwrite"' not in raw]
    keys.path.write_bytes(b"".join(kept))
    wait_for(lambda: client.get("/sessions", headers=revoked).status_code == 401)
    assert client.get("/sessions", headers=keys.auth("read")).status_code == 200


def test_a_bad_file_on_reload_keeps_the_keys_in_force(
    keyed: Callable[[], TestClient], keys: Keys, caplog: pytest.LogCaptureFixture
) -> None:
    client = keyed()
    keys.path.write_bytes(b'{"id": "x"}\n')
    wait_for(lambda: "line 1" in caplog.text)
    assert "keys read before stay in force" in caplog.text
    assert client.get("/sessions", headers=keys.auth("read")).status_code == 200
    keys.path.unlink()
    time.sleep(1.5)
    assert client.get("/sessions", headers=keys.auth("read")).status_code == 200


# -- CORS ----------------------------------------------------------------------------------------------------------

PAGE = "https://app.example.com"


def test_a_preflight_from_an_allowed_origin(make_client: ClientFactory, keys: Keys) -> None:
    client = make_client(keys_file=keys.path, cors_origins=PAGE)
    requested = "authorization, content-type, idempotency-key, last-event-id"
    answer = client.options(
        "/sessions/demo/events",
        headers={"Origin": PAGE, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": requested},
    )
    assert answer.status_code == 204 and answer.content == b""
    assert answer.headers["access-control-allow-origin"] == PAGE
    assert {"GET", "POST", "DELETE"} <= {m.strip() for m in answer.headers["access-control-allow-methods"].split(",")}
    allowed = {h.strip().lower() for h in answer.headers["access-control-allow-headers"].split(",")}
    assert {"authorization", "content-type", "idempotency-key", "last-event-id"} <= allowed


def test_a_preflight_from_another_origin_is_refused(make_client: ClientFactory, keys: Keys) -> None:
    client = make_client(keys_file=keys.path, cors_origins=PAGE)
    answer = client.options(
        "/sessions", headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"}
    )
    assert_problem(answer, 403, "FORBIDDEN")
    assert "access-control-allow-origin" not in answer.headers


def test_answers_to_an_allowed_origin_expose_location_and_replay(make_client: ClientFactory, keys: Keys) -> None:
    client = make_client(keys_file=keys.path, cors_origins=PAGE)
    headers = {**keys.auth("readwrite"), "Origin": PAGE, "Idempotency-Key": "k1"}
    answer = client.post("/sessions", json={"id": "demo"}, headers=headers)
    assert answer.status_code == 201
    assert answer.headers["access-control-allow-origin"] == PAGE
    exposed = {h.strip().lower() for h in answer.headers["access-control-expose-headers"].split(",")}
    assert {"location", "idempotent-replayed"} <= exposed
    refused = client.get("/sessions", headers={"Origin": PAGE})
    assert_problem(refused, 401, "UNAUTHENTICATED")
    assert refused.headers["access-control-allow-origin"] == PAGE  # the page can read why
    other = client.get("/sessions", headers={**keys.auth("read"), "Origin": "https://evil.example"})
    assert "access-control-allow-origin" not in other.headers


def test_no_origin_is_allowed_by_default(make_client: ClientFactory, keys: Keys) -> None:
    client = make_client(keys_file=keys.path)
    answer = client.options("/sessions", headers={"Origin": PAGE, "Access-Control-Request-Method": "GET"})
    assert_problem(answer, 403, "FORBIDDEN")
