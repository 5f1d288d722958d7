"""Rate limits per key (spec 14): a key line's ``rateLimit`` is a token bucket; requests beyond it answer
``429 RATE_LIMITED`` with ``Retry-After`` and ``retryAfterMs``, before anything else happens."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

from app.api.edge.keys_file import KeysFileError
from app.domain.access import ApiKey, Scope, digest_of, key_line, new_secret
from tests.api.builders import note
from tests.api.conftest import AppFactory, ClientFactory
from tests.api.helpers import assert_problem

pytestmark = pytest.mark.files_only  # the bucket sits in front of every backend alike

READ_WRITE = frozenset({Scope.READ, Scope.WRITE})


def key_record(name: str, secret: str, tenant: str = "acme", **extra: Any) -> bytes:
    record = orjson.loads(key_line(ApiKey(name, tenant, READ_WRITE, digest_of(secret))))
    return orjson.dumps({**record, **extra}) + b"\n"


def auth(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


@pytest.fixture
def secrets() -> dict[str, str]:
    return {"slow": new_secret(), "free": new_secret()}


def write(path: Path, secrets: dict[str, str], rate: dict[str, Any]) -> None:
    path.write_bytes(key_record("slow", secrets["slow"], rateLimit=rate) + key_record("free", secrets["free"]))


Limited = Callable[[dict[str, Any]], TestClient]


@pytest.fixture
def limited(make_client: ClientFactory, tmp_path: Path, secrets: dict[str, str]) -> Limited:
    """A client of a service whose key "slow" has the rate limit given (and "free" none)."""

    def client_with(rate: dict[str, Any]) -> TestClient:
        keys = tmp_path / "keys.jsonl"
        write(keys, secrets, rate)
        return make_client(keys_file=keys)

    return client_with


def test_requests_beyond_the_burst_answer_429_with_retry_after(limited: Limited, secrets: dict[str, str]) -> None:
    client = limited({"perSecond": 0.5, "burst": 3})

    answers = [client.get("/sessions", headers=auth(secrets["slow"])) for _ in range(5)]

    assert [answer.status_code for answer in answers[:3]] == [200, 200, 200]
    for refused in answers[3:]:
        body = assert_problem(refused, 429, "RATE_LIMITED")
        assert 1000 < body["retryAfterMs"] <= 2000  # one token comes back every 2 s
        assert refused.headers["Retry-After"] == "2"
    # another key, in the same tenant, has its own bucket (none at all here)
    assert all(client.get("/sessions", headers=auth(secrets["free"])).status_code == 200 for _ in range(20))


def test_a_refused_request_does_nothing_not_even_read_its_body(limited: Limited, secrets: dict[str, str]) -> None:
    client = limited({"perSecond": 0.01, "burst": 1})
    slow = auth(secrets["slow"])
    assert client.post("/sessions", json={"id": "s"}, headers=slow).status_code == 201

    # the append shortcut, a create and a body the service would refuse (415) all answer 429 first
    appended = client.post("/sessions/s/events", json={"events": [note("a")]}, headers=slow)
    created = client.post("/sessions", json={"id": "t"}, headers=slow)
    unsupported = client.post("/sessions", content=b"x", headers={**slow, "Content-Type": "text/plain"})

    for refused in (appended, created, unsupported):
        assert_problem(refused, 429, "RATE_LIMITED")
        assert int(refused.headers["Retry-After"]) >= 1
    free = auth(secrets["free"])
    assert client.get("/sessions/s", headers=free).json()["eventCount"] == 0
    assert client.get("/sessions/t", headers=free).status_code == 404


def test_tokens_come_back_at_the_rate(limited: Limited, secrets: dict[str, str]) -> None:
    client = limited({"perSecond": 20, "burst": 1})
    slow = auth(secrets["slow"])
    assert client.get("/sessions", headers=slow).status_code == 200
    refused = client.get("/sessions", headers=slow)
    if refused.status_code == 429:  # a slow machine may take the 50 ms between the two requests
        assert refused.json()["retryAfterMs"] <= 50
        assert refused.headers["Retry-After"] == "1"  # whole seconds, at least 1
    time.sleep(0.06)
    assert client.get("/sessions", headers=slow).status_code == 200


def test_open_routes_and_refused_keys_do_not_count(limited: Limited, secrets: dict[str, str]) -> None:
    client = limited({"perSecond": 0.01, "burst": 1})
    slow = auth(secrets["slow"])
    for _ in range(5):
        assert client.get("/healthz", headers=slow).status_code == 200
        assert client.get("/readyz", headers=slow).status_code == 200
    assert client.get("/sessions", headers=slow).status_code == 200
    assert_problem(client.get("/sessions", headers=slow), 429, "RATE_LIMITED")


def test_a_changed_limit_takes_effect_without_a_restart(
    limited: Limited, tmp_path: Path, secrets: dict[str, str]
) -> None:
    client = limited({"perSecond": 0.01, "burst": 1})
    slow = auth(secrets["slow"])
    assert client.get("/sessions", headers=slow).status_code == 200
    assert_problem(client.get("/sessions", headers=slow), 429, "RATE_LIMITED")

    write(tmp_path / "keys.jsonl", secrets, {"perSecond": 0.01, "burst": 50})
    deadline = time.monotonic() + 5
    while client.get("/sessions", headers=slow).status_code == 429:
        assert time.monotonic() < deadline, "the new limit did not take effect within 5 s"
        time.sleep(0.1)


@pytest.mark.parametrize(
    "rate",
    [
        {"perSecond": 0, "burst": 1},
        {"perSecond": -1, "burst": 1},
        {"perSecond": "1", "burst": 1},
        {"perSecond": 1, "burst": 0},
        {"perSecond": 1, "burst": 1.5},
        {"perSecond": 1},
        {"perSecond": 1, "burst": 1, "extra": 1},
        5,
    ],
)
def test_a_bad_rate_limit_is_a_bad_line(
    make_app: AppFactory, tmp_path: Path, secrets: dict[str, str], rate: Any
) -> None:
    keys = tmp_path / "keys.jsonl"
    write(keys, secrets, rate)
    with pytest.raises(KeysFileError, match="line 1: rateLimit"):
        make_app(keys_file=keys)


def test_a_fractional_rate_is_allowed(limited: Limited, secrets: dict[str, str]) -> None:
    client = limited({"perSecond": 2.5, "burst": 2})
    codes = [client.get("/sessions", headers=auth(secrets["slow"])).status_code for _ in range(3)]
    assert codes[:2] == [200, 200]
