"""forklog and DSH's own published JSONL backend read each other's ``.jsonl.zstd`` logs (spec 16), both ways.

DSH to forklog: DSH's backend (``@deepseek-ai/dsh-session-persistence-jsonl`` 0.1.0-rc.8, at its default
compression) writes every shared DSH fixture log as ``session.jsonl.zstd``; forklog imports each and serves a zstd
data directory made of them, with the events, the history and the verdict of the raw fixture.

forklog to DSH: what forklog writes in zstd (an exported log, ``GET /sessions/{id}/log``'s answer, and the files of a
zstd data directory, appended one event at a time, compacted and forked) loads in DSH's backend with forklog's
events, and DSH reads back forklog's logical lines byte for byte.

The Node packages install once per run (tests/e2e/dsh_backend.py); without npm or the shared fixtures these skip,
under ``CI=true`` they fail.
"""

from __future__ import annotations

import asyncio
import io
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

from app.api.app import create_app
from app.api.settings import Settings
from app.backends.open import StoreSettings
from app.domain.dsh_frames import decode_log, walk_frames
from app.domain.session import DEFAULT_TENANT, SessionKey
from app.service.errors import TransferFailed
from app.service.transfer.dsh_log import LogEncoding
from app.service.transfer.export import export_session
from app.service.transfer.import_ import import_session, read_log
from bench import streamed_sessions
from tests.api.helpers import assert_problem, wait_ready
from tests.e2e.dsh_backend import DshBackend, dsh_backend
from tests.e2e.server import REPO

pytestmark = pytest.mark.e2e

SHARED = Path(os.environ.get("FORKLOG_SHARED") or REPO.parent / "shared")
FIXTURES = SHARED / "fixtures" / "dsh-logs"
FIXTURE_LOGS = sorted(FIXTURES.glob("*.jsonl")) if FIXTURES.is_dir() else []


def _missing(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true needs it)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def dsh() -> Iterator[DshBackend]:
    backend = dsh_backend()
    yield backend
    backend.close()


@pytest.fixture
def fixture_logs() -> list[Path]:
    if not FIXTURE_LOGS:
        _missing(f"the shared DSH fixture logs are not at {FIXTURES} (set FORKLOG_SHARED to the shared folder)")
    return FIXTURE_LOGS


def verdict(data: bytes) -> tuple[list[Any], list[Any]] | str:
    """What forklog's import makes of a DSH log's bytes: its events and history, or its refusal."""
    try:
        _, log = read_log(data, "fixture")  # as `import --id`: some fixture ids are not forklog ids
    except TransferFailed as refused:
        return str(refused)
    return log.events(), log.history()


def test_forklog_imports_every_fixture_as_dsh_compresses_it(
    dsh: DshBackend, fixture_logs: list[Path], tmp_path: Path
) -> None:
    written = 0
    for number, raw_log in enumerate(fixture_logs):
        raw = raw_log.read_bytes()
        root = tmp_path / f"root-{number}"
        path = dsh.write(root, raw_log).path
        if not path.exists():  # a log of no events: DSH writes nothing before the first one
            assert raw.count(b"\n") == 1, raw_log.name
            continue
        written += 1
        compressed = path.read_bytes()
        assert compressed[:4] == b"\x28\xb5\x2f\xfd", raw_log.name
        assert verdict(compressed) == verdict(raw), raw_log.name
    assert written >= len(fixture_logs) - 10


def export(data_dir: Path, session_id: str, encoding: LogEncoding) -> bytes:
    out = io.BytesIO()
    asyncio.run(
        export_session(
            StoreSettings(data_dir), SessionKey(DEFAULT_TENANT, session_id), out, salvage=False, encoding=encoding
        )
    )
    return out.getvalue()


def test_an_export_in_zstd_loads_in_dsh_with_the_same_events_and_lines(
    dsh: DshBackend, fixture_logs: list[Path], tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    # A fifth of the logs DSH accepts (every shape of them costs a store open and an export or two here)
    accepted = [log for log in fixture_logs if isinstance(verdict(log.read_bytes()), tuple)][::5]
    for number, raw_log in enumerate(accepted):
        header, log = read_log(raw_log.read_bytes(), f"fx{number}")
        asyncio.run(import_session(StoreSettings(data_dir), DEFAULT_TENANT, header, log))
    cli = _app("export", "fx0", "--compression", "zstd", "--data-dir", str(data_dir))
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout == export(data_dir, "fx0", "zstd")
    for number, raw_log in enumerate(accepted):
        raw = export(data_dir, f"fx{number}", "none")
        compressed = export(data_dir, f"fx{number}", "zstd")
        assert decode_log(compressed) == raw
        header = orjson.loads(raw.split(b"\n", 1)[0])
        root, raw_root = tmp_path / f"root-{number}", tmp_path / f"raw-root-{number}"
        dsh.place(root, header, compressed)
        dsh.place(raw_root, header, raw, compression="none")

        loaded = dsh.load(root, f"fx{number}")

        assert loaded.listed == [f"fx{number}"]
        assert loaded.raw == raw, "DSH reads forklog's lines byte for byte"
        # DSH's loader interprets some legacy shapes its own way (spec 4): as it does the raw form, exactly
        assert loaded.events == dsh.load(raw_root, f"fx{number}", compression="none").events, raw_log.name
        assert {k: v for k, v in loaded.meta.items() if k != "version"} == {
            k: v for k, v in header.items() if k not in ("type", "version", "instance")
        }


def _app(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "app", *args], cwd=REPO, capture_output=True, timeout=60, check=False)


def test_forklog_finds_the_frames_dsh_writes_one_an_append(
    dsh: DshBackend, fixture_logs: list[Path], tmp_path: Path
) -> None:
    many_turns = max(fixture_logs, key=lambda log: log.read_bytes().count(b'"turn/end"'))
    written = dsh.write(tmp_path / "root", many_turns)
    assert written.batches > 1

    walk = walk_frames(written.path.read_bytes())

    assert walk.torn_at is None
    assert len(walk.frames) == 1 + written.batches
    assert walk.frames[0].text.count(b"\n") == 1
    assert all(frame.text.rstrip(b"\n").endswith(b"}") for frame in walk.frames)


@contextmanager
def serving(data_dir: Path, compression: str) -> Iterator[TestClient]:
    app = create_app(Settings(data_dir=data_dir, fsync=False, compression=compression))
    with TestClient(app, base_url="http://localhost") as client:
        wait_ready(client)
        yield client


def every_event(client: TestClient, session_id: str) -> list[Any]:
    events: list[Any] = []
    while True:
        response = client.get(f"/sessions/{session_id}/events", params={"from": len(events), "limit": 10000})
        assert response.status_code == 200, response.text
        page = response.json()
        events += page["events"]
        if page["nextSeq"] >= page["eventCount"]:
            return events


def readiness(client: TestClient) -> tuple[int, dict[str, str]]:
    ready = client.get("/readyz").json()
    return ready["sessions"], {entry["id"]: entry["reason"] for entry in ready["corrupt"]}


def test_forklog_serves_a_zstd_data_directory_of_dsh_files_as_their_raw_form(
    dsh: DshBackend, fixture_logs: list[Path], tmp_path: Path
) -> None:
    compressed_dir, raw_dir = tmp_path / "compressed", tmp_path / "raw"
    (compressed_dir / "sessions").mkdir(parents=True)
    (compressed_dir / "format.json").write_bytes(b'{"compression": "zstd"}\n')
    (raw_dir / "sessions").mkdir(parents=True)
    ids: list[str] = []
    for number, raw_log in enumerate(fixture_logs):
        session_id = f"dsh-{number}"  # the fixtures' own ids repeat, and some are no forklog ids
        written = dsh.write(tmp_path / "root" / session_id, raw_log, session_id)
        if not written.path.exists():
            continue  # no events: DSH writes nothing
        ids.append(session_id)
        (compressed_dir / "sessions" / f"{session_id}.jsonl.zstd").write_bytes(written.path.read_bytes())
        header_line, rest = raw_log.read_bytes().split(b"\n", 1)
        header = {**orjson.loads(header_line), "id": session_id}
        (raw_dir / "sessions" / f"{session_id}.jsonl").write_bytes(orjson.dumps(header) + b"\n" + rest)
    assert len(ids) >= len(fixture_logs) - 10

    with serving(compressed_dir, "zstd") as compressed, serving(raw_dir, "none") as raw:
        live, corrupt = readiness(compressed)
        assert (live, corrupt) == readiness(raw), "the same logs load, the same are refused, for the same reasons"
        assert live + len(corrupt) == len(ids) and live > len(ids) // 2
        for session_id in ids:
            if session_id in corrupt:
                assert_problem(compressed.get(f"/sessions/{session_id}"), 503, "SESSION_CORRUPT")
                continue
            assert every_event(compressed, session_id) == every_event(raw, session_id), session_id
            assert compressed.get(f"/sessions/{session_id}/history").json() == (
                raw.get(f"/sessions/{session_id}/history").json()
            ), session_id


def test_dsh_loads_what_forklog_wrote_in_a_zstd_data_directory(dsh: DshBackend, tmp_path: Path) -> None:
    data_dir, root = tmp_path / "data", tmp_path / "root"
    with serving(data_dir, "zstd") as client:
        assert client.post("/sessions", json={"id": "stepwise", "meta": {"cwd": "/work/app"}}).status_code == 201
        for batch in streamed_sessions.steps(turns=2, seed=1):
            assert client.post("/sessions/stepwise/events", json={"events": batch}).status_code == 201
        assert client.post("/sessions", json={"id": "eventwise"}).status_code == 201
        appends = 0
        for batch in streamed_sessions.events(turns=2, seed=2):
            assert client.post("/sessions/eventwise/events", json={"events": batch}).status_code == 201
            appends += 1
        fork = client.post("/sessions/eventwise/fork", json={"sessionId": "child"})
        assert fork.status_code == 201, fork.text
        for batch in streamed_sessions.turn_batches(3, random.Random(3)):  # the child's own third turn
            assert client.post("/sessions/child/events", json={"events": batch}).status_code == 201
        served = {session_id: every_event(client, session_id) for session_id in ("stepwise", "eventwise", "child")}
        lines = {session_id: client.get(f"/sessions/{session_id}/log").content for session_id in served}

    files = {path.name.removesuffix(".jsonl.zstd"): path.read_bytes() for path in (data_dir / "sessions").iterdir()}
    assert sorted(files) == ["child", "eventwise", "stepwise"]
    eventwise_frames = len(walk_frames(files["eventwise"]).frames)
    assert eventwise_frames < appends // 10, "the ended turns' one-event frames were rewritten into few"
    for data in files.values():
        header = orjson.loads(decode_log(data).split(b"\n", 1)[0])
        dsh.place(root, header, data)

    for session_id, events in served.items():
        loaded = dsh.load(root, session_id)

        assert loaded.events == events, session_id
        assert loaded.raw == lines[session_id], "DSH reads forklog's logical lines byte for byte"
    assert dsh.load(root, "child").meta["parentSession"] == "eventwise"
    assert dsh.load(root, "child").meta["seedLength"] == len(served["eventwise"])
    assert sorted(dsh.load(root, "child").listed) == ["child", "eventwise", "stepwise"]
