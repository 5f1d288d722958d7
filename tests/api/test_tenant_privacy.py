"""Nothing of one tenant reaches another, nor a server path anyone (spec 9): each tenant's own createdAt clock, its own
counts in /readyz, problem details without the data directory's path, and tenant names that would share a folder
refused in the keys file."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from app.api.edge.keys_file import KeysFileError
from app.backends.base import Backend
from app.backends.files import FileBackend
from app.backends.postgres import PostgresBackend
from app.domain.access import ApiKey, Scope, digest_of, key_line, new_secret
from tests.api.conftest import AppFactory, ClientFactory
from tests.api.helpers import assert_problem
from tests.api.test_access import Keys, wait_for, write_keys

NOW = 1_785_331_618_309
WRITERS: dict[str, tuple[str, tuple[Scope, ...]]] = {
    "a": ("a", (Scope.READ, Scope.WRITE)),
    "b": ("b", (Scope.READ, Scope.WRITE)),
    "d": ("d", (Scope.READ, Scope.WRITE)),
}


@pytest.fixture
def keys(tmp_path: Path) -> Keys:
    return write_keys(tmp_path / "keys.jsonl", WRITERS)


def stopped_backend(store: str, data_dir: Path, request: pytest.FixtureRequest) -> Backend:
    """The test's store with a clock that stands still: a createdAt is then 1 + the largest one of its clock."""
    if store == "postgres":
        return PostgresBackend(request.getfixturevalue("forklog_db"), clock=lambda: NOW)
    return FileBackend(data_dir, clock=lambda: NOW, sync=False, compression="none")


def test_another_tenants_creates_never_move_a_tenants_created_at(
    make_client: ClientFactory, keys: Keys, data_dir: Path, store: str, request: pytest.FixtureRequest
) -> None:
    client = make_client(backend=stopped_backend(store, data_dir, request), keys_file=keys.path)

    def create(caller: str, session_id: str) -> int:
        made = client.post("/sessions", json={"id": session_id}, headers=keys.auth(caller))
        assert made.status_code == 201, made.text
        created_at: int = made.json()["createdAt"]
        return created_at

    assert create("a", "first") == NOW
    assert [create("b", f"b{n}") for n in range(4)] == [NOW, NOW + 1, NOW + 2, NOW + 3]
    assert create("a", "second") == NOW + 1, "tenant a must not see that b created four sessions"


@pytest.mark.files_only
def test_a_503_names_no_server_path_and_the_log_does(
    make_client: ClientFactory, keys: Keys, data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (data_dir / "tenants").mkdir(parents=True)
    (data_dir / "tenants" / "d").write_text("a file where tenant d's folder goes")
    client = make_client(keys_file=keys.path)
    caplog.set_level(logging.ERROR)
    refused = client.post("/sessions", json={"id": "s"}, headers=keys.auth("d"))
    assert_problem(refused, 503, "STORAGE_UNAVAILABLE")
    assert str(data_dir) not in refused.text
    assert "tenants/d" not in refused.text
    assert f"{data_dir / 'tenants' / 'd'} is a regular file" in caplog.text
    assert client.post("/sessions", json={"id": "s"}, headers=keys.auth("a")).status_code == 201


def with_line(keys: Keys, tenant: str) -> bytes:
    line = key_line(ApiKey("shouting", tenant, frozenset({Scope.READ}), digest_of(new_secret())))
    return keys.path.read_bytes() + line


@pytest.mark.files_only
def test_tenants_equal_but_for_letter_case_stop_the_start_naming_the_line(make_app: AppFactory, keys: Keys) -> None:
    keys.path.write_bytes(with_line(keys, "A"))
    with pytest.raises(KeysFileError, match=r"line 4: tenant 'A' .*'a' .*letter case"):
        make_app(keys_file=keys.path)


@pytest.mark.files_only
def test_tenants_equal_but_for_letter_case_on_reload_keep_the_keys_in_force(
    make_client: ClientFactory, keys: Keys, caplog: pytest.LogCaptureFixture
) -> None:
    client = make_client(keys_file=keys.path)
    keys.path.write_bytes(with_line(keys, "B"))
    wait_for(lambda: "letter case" in caplog.text)
    assert "line 4" in caplog.text and "keys read before stay in force" in caplog.text
    assert client.post("/sessions", json={"id": "s"}, headers=keys.auth("b")).status_code == 201
    time.sleep(1.5)  # another look at the (unchanged) bad file changes nothing either
    assert client.get("/sessions/s", headers=keys.auth("b")).status_code == 200


READYZ_CALLERS: dict[str, tuple[str, tuple[Scope, ...]]] = {
    "a": ("a", (Scope.READ, Scope.WRITE)),
    "b": ("b", (Scope.READ, Scope.WRITE)),
    "b-reader": ("b", (Scope.READ,)),
    "operator": ("a", (Scope.ADMIN,)),  # admin is not tied to the tenant its line names
}


def readyz_of(client: TestClient, keys: Keys, caller: str) -> Any:
    answer = client.get("/readyz", headers=keys.auth(caller))
    assert answer.status_code == 200, (caller, answer.text)
    return answer.json()


def test_readyz_counts_only_the_callers_tenant_and_every_tenant_for_admin(
    make_client: ClientFactory, tmp_path: Path
) -> None:
    keys = write_keys(tmp_path / "readyz-keys.jsonl", READYZ_CALLERS)
    client = make_client(keys_file=keys.path)
    for caller, session_id in (("a", "a1"), ("a", "a2"), ("a", "a3"), ("a", "gone"), ("b", "b1")):
        assert client.post("/sessions", json={"id": session_id}, headers=keys.auth(caller)).status_code == 201
    assert client.delete("/sessions/gone", headers=keys.auth("a")).status_code == 204

    assert readyz_of(client, keys, "b") == {"status": "ready", "sessions": 1, "corrupt": 0}
    assert readyz_of(client, keys, "b-reader") == {"status": "ready", "sessions": 1, "corrupt": 0}
    assert readyz_of(client, keys, "a") == {"status": "ready", "sessions": 3, "corrupt": 0}
    assert readyz_of(client, keys, "operator") == {"status": "ready", "sessions": 4, "corrupt": []}
    for keyless in ("none", "unknown"):  # no tenant whose counts it could see (a bad key is no key on /readyz)
        assert readyz_of(client, keys, keyless) == {"status": "ready"}, keyless


CORRUPT_HEADER = b'{"type":"session","version":0,"id":"%s","createdAt":1700000000000}\n'


@pytest.mark.files_only
def test_readyz_counts_a_tenants_own_corrupt_sessions_and_lists_them_to_admin_only(
    make_client: ClientFactory, data_dir: Path, tmp_path: Path
) -> None:
    keys = write_keys(tmp_path / "readyz-keys.jsonl", READYZ_CALLERS)
    sessions = data_dir / "tenants" / "a" / "sessions"
    sessions.mkdir(parents=True)
    (sessions / "bad.jsonl").write_bytes(CORRUPT_HEADER % b"bad" + b"{not json\n")
    (sessions / "-stray.jsonl").write_bytes(CORRUPT_HEADER % b"-stray")
    (sessions / "good.jsonl").write_bytes(CORRUPT_HEADER % b"good")
    client = make_client(keys_file=keys.path)

    assert readyz_of(client, keys, "a") == {"status": "ready", "sessions": 1, "corrupt": 2}
    assert readyz_of(client, keys, "b") == {"status": "ready", "sessions": 0, "corrupt": 0}
    operator = readyz_of(client, keys, "operator")
    assert operator["sessions"] == 1
    assert {(item["tenant"], item["id"]) for item in operator["corrupt"]} == {("a", "bad"), ("a", "-stray")}
