"""What ``export``, ``copy`` and ``verify`` read they leave as they found it, and what is no store they refuse
(spec 10); ``export`` writes any session, whatever its last event, as ``GET …/events`` serves it."""

from __future__ import annotations

import asyncio
import hashlib
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import orjson
import pytest

from tests.backends.files import builders as b
from tests.e2e.conftest import StartServer
from tests.e2e.server import REPO, Server, run_app
from tests.e2e.test_copy import fill, session_files

pytestmark = pytest.mark.e2e

SESSIONS = [(tenant, name) for tenant in ("default", "acme") for name in ("src", "kid", "grandkid", "empty")]


def as_another_tool_left_it(data_dir: Path) -> None:
    """Sessions of two tenants (an open turn among them) as a tool other than a forklog service leaves them: no
    lock file, no index folder of the tenant, a torn last line, a leftover in tmp/ and an old index file."""
    asyncio.run(fill(data_dir))
    (data_dir / "forklog.lock").unlink()
    shutil.rmtree(data_dir / "tenants" / "acme" / "index")
    shutil.rmtree(data_dir / "index")
    (data_dir / "index").mkdir()
    (data_dir / "index" / "old.idx").write_bytes(b"an index file of an older forklog")
    (data_dir / "tmp" / "half-made.jsonl").write_bytes(b'{"type":"session"')
    with (data_dir / "sessions" / "src.jsonl").open("ab") as torn:
        torn.write(b'{"type":"turn/st')


def tree(folder: Path) -> dict[str, tuple[object, ...]]:
    """Every entry under ``folder`` (itself too): its kind, mode, size, mtime and, for a file, a digest of its bytes."""
    found: dict[str, tuple[object, ...]] = {}
    for path in [folder, *sorted(folder.rglob("*"))]:
        status = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
        found[str(path.relative_to(folder))] = (status.st_mode, status.st_size, status.st_mtime_ns, digest)
    return found


def logs_without_torn_tails(data_dir: Path) -> dict[tuple[str, str], bytes]:
    """Each session's file as a start reads it: up to its last whole line."""
    logs = {}
    for tenant, name in SESSIONS:
        folder = data_dir if tenant == "default" else data_dir / "tenants" / tenant
        data = (folder / "sessions" / f"{name}.jsonl").read_bytes()
        logs[(tenant, name)] = data[: data.rfind(b"\n") + 1]
    return logs


def export(
    data_dir: Path, tenant: str, name: str, runner: list[str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    command = [sys.executable, "-m", "app", "export", name, "--tenant", tenant, "--data-dir", str(data_dir)]
    return subprocess.run(
        [*(runner or []), *command], cwd=REPO, stdin=subprocess.DEVNULL, capture_output=True, timeout=60, check=False
    )


def test_verify_export_and_copy_change_nothing_of_the_directory_they_read(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    as_another_tool_left_it(data_dir)
    before = tree(data_dir)
    expected = logs_without_torn_tails(data_dir)

    verified = run_app("verify", "--data-dir", str(data_dir))
    assert verified.returncode == 0, verified.stderr
    assert verified.stdout.startswith("8 sessions, 42 events, ") and verified.stdout.endswith(", 0 damaged\n")
    assert run_app("verify", "--full", "--data-dir", str(data_dir)).returncode == 0
    assert tree(data_dir) == before, "verify changed the data directory"
    for tenant, name in SESSIONS:
        exported = export(data_dir, tenant, name)
        assert exported.returncode == 0, exported.stderr
        assert exported.stdout == expected[(tenant, name)]
        assert tree(data_dir) == before, f"export {name} --tenant {tenant} changed the data directory"
    copied = run_app("copy", "--from", str(data_dir), "--to", str(tmp_path / "copy"), "--compression", "none")
    assert copied.returncode == 0, copied.stderr
    assert "copied 8 sessions (42 events)" in copied.stderr
    assert tree(data_dir) == before, "copy changed its source"
    assert session_files(tmp_path / "copy") == {
        str(Path(*([] if tenant == "default" else ["tenants", tenant]), "sessions", f"{name}.jsonl")): log
        for (tenant, name), log in expected.items()
    }


def read_only_runner(data_dir: Path) -> list[str]:
    """A command prefix that runs its command with ``data_dir`` mounted read-only (in a mount namespace of its
    own, so nothing outlives it); skips the test where this machine cannot do that."""
    prefix = [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        f'mount --bind -o ro {shlex.quote(str(data_dir))} {shlex.quote(str(data_dir))} && exec "$@"',
        "read-only",
    ]
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) to mount a read-only view")
    probe = subprocess.run([*prefix, "sh", "-c", f"! touch {shlex.quote(str(data_dir / 'probe'))}"], check=False)
    if probe.returncode != 0 or (data_dir / "probe").exists():
        pytest.skip("this machine cannot mount a read-only view of a folder (needs CAP_SYS_ADMIN)")
    return prefix


def test_verify_export_and_copy_work_on_a_read_only_data_directory(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    as_another_tool_left_it(data_dir)
    runner = read_only_runner(data_dir)
    before = tree(data_dir)
    expected = logs_without_torn_tails(data_dir)

    def app(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*runner, sys.executable, "-m", "app", *args], cwd=REPO, capture_output=True, text=True, timeout=60
        )

    verified = app("verify", "--data-dir", str(data_dir))
    assert verified.returncode == 0, verified.stderr
    assert verified.stdout.startswith("8 sessions, 42 events, ")
    for tenant, name in SESSIONS:
        exported = export(data_dir, tenant, name, runner)
        assert exported.returncode == 0, exported.stderr
        assert exported.stdout == expected[(tenant, name)]
    copied = app("copy", "--from", str(data_dir), "--to", str(tmp_path / "copy"), "--compression", "none")
    assert copied.returncode == 0, copied.stderr
    assert len(session_files(tmp_path / "copy")) == 8
    assert tree(data_dir) == before


def no_stores(tmp_path: Path) -> list[tuple[Path, str]]:
    """Paths that are no data directory holding a forklog store, each with what the message says of it."""
    empty = tmp_path / "empty"
    empty.mkdir()
    unrelated = tmp_path / "photos"
    unrelated.mkdir()
    (unrelated / "cat.jpg").write_bytes(b"\xff\xd8")
    a_file = tmp_path / "a-file"
    a_file.write_bytes(b"")
    return [
        (tmp_path / "no" / "such" / "dir", "there is no data directory at"),
        (empty, "holds no forklog store"),
        (unrelated, "holds no forklog store"),
        (a_file, "not a data directory"),
    ]


def test_verify_export_and_copy_refuse_what_holds_no_store_and_touch_nothing(tmp_path: Path) -> None:
    for place, said in no_stores(tmp_path):
        before = tree(place) if place.exists() else None
        target = tmp_path / "copy-target"
        runs = {
            "verify": run_app("verify", "--data-dir", str(place)),
            "export": run_app("export", "src", "--data-dir", str(place)),
            "copy": run_app("copy", "--from", str(place), "--to", str(target)),
        }
        for command, done in runs.items():
            assert done.returncode != 0, f"{command} on {place} exited 0: {done.stderr}"
            assert f"forklog {command}: " in done.stderr and str(place) in done.stderr and said in done.stderr
            assert "Traceback" not in done.stderr and done.stdout == ""
            assert "0 sessions" not in done.stderr
        assert (tree(place) if place.exists() else None) == before, f"{place} was changed"
        assert not target.exists(), "copy made its destination from a source that is no store"
    assert not (tmp_path / "no").exists()


def test_a_directory_of_a_service_that_has_no_session_yet_is_an_empty_store(
    start_server: StartServer, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    start_server(data_dir).stop()
    verified = run_app("verify", "--data-dir", str(data_dir))
    assert (verified.returncode, verified.stdout) == (0, "0 sessions, 0 events, 0 bytes, 0 damaged\n")
    copied = run_app("copy", "--from", str(data_dir), "--to", str(tmp_path / "copy"))
    assert copied.returncode == 0 and "copied 0 sessions" in copied.stderr


# -- export writes what the service serves ---------------------------------------------------------------------------


def events_array(server: Server, session: str) -> bytes:
    """The raw ``events`` member of ``GET /sessions/{id}/events`` (every event, as the service serves it)."""
    body = httpx.get(f"{server.base}/sessions/{session}/events", params={"limit": 10000}, timeout=10).content
    assert body.startswith(b'{"events":[')
    array, _, tail = body[len(b'{"events":') :].rpartition(b',"nextSeq":')
    assert tail.endswith(b"}")
    return array


def shape_sessions(server: Server) -> None:
    """A forked child whose last turn is open, a session ending in a log-only event after its turn/end, and one
    ending in a log-only event in the middle of an open turn."""
    assert server.post("/sessions", {"id": "parent", "seed": b.turns(1, 2)}).status_code == 201
    assert server.post("/sessions/parent/fork", {"sessionId": "child"}).status_code == 201
    assert server.post("/sessions/child/events", {"events": b.open_turn(3)}).status_code == 201
    assert server.post("/sessions", {"id": "noted", "seed": b.turns(1, 1)}).status_code == 201
    assert server.post("/sessions/noted/events", {"events": [b.log_only("after the end")]}).status_code == 201
    assert server.post("/sessions", {"id": "mid", "seed": b.turns(1, 1)}).status_code == 201
    mid = [*b.open_turn(2), b.log_only("in the turn")]
    assert server.post("/sessions/mid/events", {"events": mid}).status_code == 201


def check_export_is_what_was_served(data_dir: Path, store: list[str], served: dict[str, tuple[bytes, bytes]]) -> None:
    for session, (resource, array) in served.items():
        exported = subprocess.run(
            [sys.executable, "-m", "app", "export", session, *store],
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert exported.returncode == 0, exported.stderr
        header, _, lines = exported.stdout.partition(b"\n")
        assert lines.endswith(b"\n")
        assert b"[" + b",".join(lines[:-1].split(b"\n")) + b"]" == array
        facts = orjson.loads(resource)
        seen = orjson.loads(header)
        assert (seen["id"], seen["instance"], seen["createdAt"]) == (session, facts["instance"], facts["createdAt"])


def test_export_writes_every_event_of_any_session_as_the_service_serves_them(
    start_server: StartServer, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    server = start_server(data_dir)
    shape_sessions(server)
    served = {
        session: (server.get(f"/sessions/{session}").content, events_array(server, session))
        for session in ("parent", "child", "noted", "mid")
    }
    assert orjson.loads(served["child"][0])["openTurn"] == 3
    assert orjson.loads(served["noted"][0])["lastEventType"] == "forklog-test/note"
    server.stop()  # export refuses while a service owns the directory
    check_export_is_what_was_served(data_dir, ["--data-dir", str(data_dir)], served)


def test_export_from_postgresql_writes_every_event_of_any_session_as_served(
    start_server: StartServer, forklog_db: str
) -> None:
    server = start_server(None, "--database-url", forklog_db)
    shape_sessions(server)
    served = {
        session: (server.get(f"/sessions/{session}").content, events_array(server, session))
        for session in ("parent", "child", "noted", "mid")
    }
    check_export_is_what_was_served(Path(), ["--database-url", forklog_db], served)


def test_export_and_import_give_up_at_once_on_a_database_that_cannot_be_reached(tmp_path: Path) -> None:
    nowhere = "postgresql://forklog:hunter2@127.0.0.1:1/forklog"  # port 1: nothing listens
    log = tmp_path / "one.jsonl"
    log.write_bytes(b'{"type":"session","version":0,"id":"one","createdAt":1}\n')
    for args in (("export", "one"), ("import", str(log))):
        done = run_app(*args, "--database-url", nowhere, timeout=15)  # a service would wait for the database
        assert done.returncode == 1, done.stderr
        said = f"forklog {args[0]}: cannot reach the database postgresql://forklog:***@127.0.0.1:1/forklog"
        assert said in done.stderr
        assert "hunter2" not in done.stderr and "Traceback" not in done.stderr
