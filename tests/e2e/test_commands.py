"""The operator's commands (spec 10) as real processes: ``verify``, ``export`` and ``import`` on clean and damaged
data directories, beside a running service and without one."""

from __future__ import annotations

import asyncio
import hashlib
import os
import pty
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
import zstandard

from tests.backends.files import builders as b
from tests.backends.files.conftest import FileStore
from tests.e2e.conftest import StartServer
from tests.e2e.server import REPO, run_app

pytestmark = pytest.mark.e2e
TURN = len(b.full_turn(1))


def make_sessions(data_dir: Path) -> None:
    """Three sessions in raw .jsonl files (the tests read and damage their lines)."""

    async def make() -> None:
        store = await FileStore(data_dir, compression="none").open()
        await store.create("demo", b.turns(1, 2), {"cwd": "/work"})
        await store.fork("demo", child_id="child")
        await store.create("other", b.turns(1, 1), None)
        await store.close()

    asyncio.run(make())


def fingerprint(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` and a digest of its bytes."""
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
        for path in sorted(folder.rglob("*"))
    }


def damage(data_dir: Path) -> None:
    demo = data_dir / "sessions" / "demo.jsonl"
    lines = demo.read_bytes().split(b"\n")
    lines[5] = b'{"type":"assistant/chunk","seq":4,'  # line 6 (the header is line 1) is cut in the middle
    demo.write_bytes(b"\n".join(lines))
    (data_dir / "sessions" / "Not A Name.jsonl").write_bytes(b"{}\n")
    other = data_dir / "sessions" / "other.jsonl"
    other.write_bytes(other.read_bytes() + b'{"type":"turn/st')  # a torn tail: not damage, a start cuts it


def test_verify_on_a_clean_directory_says_so_and_changes_nothing(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    make_sessions(data_dir)
    before = fingerprint(data_dir)
    done = run_app("verify", "--data-dir", str(data_dir))
    assert done.returncode == 0, done.stderr
    size = sum(path.stat().st_size for path in (data_dir / "sessions").iterdir())
    assert done.stdout == f"3 sessions, {5 * TURN} events, {size} bytes, 0 damaged\n"
    full = run_app("verify", "--full", "--data-dir", str(data_dir))
    assert (full.returncode, full.stdout) == (0, done.stdout)
    assert fingerprint(data_dir) == before


def test_verify_lists_each_damaged_file_and_exits_1_changing_nothing(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    make_sessions(data_dir)
    damage(data_dir)
    before = fingerprint(data_dir)
    done = run_app("verify", "--data-dir", str(data_dir))
    assert done.returncode == 1, done.stderr
    size = sum((data_dir / "sessions" / f"{name}.jsonl").stat().st_size for name in ("child", "other"))
    assert done.stdout.splitlines() == [
        f"{data_dir / 'sessions' / 'Not A Name.jsonl'}: the file name is not <valid id>.jsonl",
        f"{data_dir / 'sessions' / 'demo.jsonl'}: line 6 is not a storage record: the body is not valid JSON: "
        "Expecting property name enclosed in double quotes at line 1 column 35",
        f"2 sessions, {3 * TURN} events, {size} bytes, 2 damaged",
    ]
    assert fingerprint(data_dir) == before, "verify changed the data directory"
    assert done.stderr == ""


def test_verify_runs_beside_a_running_service(start_server: StartServer, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    make_sessions(data_dir)
    server = start_server(data_dir)
    done = run_app("verify", "--data-dir", str(data_dir))
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith(", 0 damaged\n")
    assert server.get("/readyz").status_code == 200


def test_verify_without_a_data_directory_exits_2(tmp_path: Path) -> None:
    done = run_app("verify", "--data-dir", str(tmp_path / "nowhere"))
    assert done.returncode == 2
    assert "there is no data directory at" in done.stderr
    assert not (tmp_path / "nowhere").exists()


def test_export_writes_the_session_as_its_dsh_log_and_import_makes_it_anew(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    make_sessions(data_dir)
    exported = run_app("export", "child", "--data-dir", str(data_dir))
    assert exported.returncode == 0, exported.stderr
    on_disk = (data_dir / "sessions" / "child.jsonl").read_text()
    assert exported.stdout == on_disk  # forklog's own file: the same header line, the same lines
    header = orjson.loads(exported.stdout.split("\n", 1)[0])
    log = tmp_path / "child.jsonl"
    log.write_text(exported.stdout)

    elsewhere = tmp_path / "elsewhere"
    imported = run_app("import", str(log), "--data-dir", str(elsewhere))
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.startswith(f"imported child (tenant default): {2 * TURN} events, ")
    again = run_app("export", "child", "--data-dir", str(elsewhere))
    copy = orjson.loads(again.stdout.split("\n", 1)[0])
    kept = ("id", "createdAt", "cwd", "parentSession", "seedLength", "delegationDepth")
    assert {field: copy[field] for field in kept} == {field: header[field] for field in kept}
    assert copy["instance"] != header["instance"]  # a new incarnation
    assert again.stdout.split("\n", 1)[1] == exported.stdout.split("\n", 1)[1]

    renamed = run_app("import", str(log), "--id", "renamed", "--tenant", "team-a", "--data-dir", str(elsewhere))
    assert renamed.returncode == 0, renamed.stderr
    taken = run_app("import", str(log), "--data-dir", str(elsewhere))
    assert taken.returncode == 1
    assert "session 'child' already exists" in taken.stderr
    assert run_app("verify", "--data-dir", str(elsewhere)).stdout.endswith(", 0 damaged\n")


def test_import_refuses_a_log_that_is_not_a_valid_seed(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    make_sessions(data_dir)
    log = (data_dir / "sessions" / "demo.jsonl").read_bytes().split(b"\n")
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"\n".join([log[0], *log[2:]]))  # the first event is missing: a seq gap
    done = run_app("import", str(bad), "--id", "bad", "--data-dir", str(data_dir))
    assert done.returncode == 1
    assert "seed event at index 0 is invalid" in done.stderr
    bad.write_bytes(b'{"type":"session","version":1,"id":"x","createdAt":1}\n')
    done = run_app("import", str(bad), "--data-dir", str(data_dir))
    assert done.returncode == 1 and "newer" in done.stderr
    assert not (data_dir / "sessions" / "bad.jsonl").exists()


def test_export_and_import_refuse_while_a_service_owns_the_directory(start_server: StartServer, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    make_sessions(data_dir)
    start_server(data_dir)
    log = tmp_path / "demo.jsonl"
    log.write_bytes((data_dir / "sessions" / "demo.jsonl").read_bytes())
    for args in (("export", "demo"), ("import", str(log), "--id", "copy")):
        done = run_app(*args, "--data-dir", str(data_dir))
        assert done.returncode == 1
        assert f"the data directory {data_dir} is in use by another forklog process" in done.stderr
    assert not (data_dir / "sessions" / "copy.jsonl").exists()


def test_export_of_a_damaged_session_refuses_and_salvage_keeps_what_comes_before_the_damage(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    make_sessions(data_dir)
    damage(data_dir)
    refused = run_app("export", "demo", "--data-dir", str(data_dir))
    assert refused.returncode == 1 and "is damaged (line 6 is not a storage record" in refused.stderr
    salvaged = run_app("export", "demo", "--salvage", "--data-dir", str(data_dir))
    assert salvaged.returncode == 0, salvaged.stderr
    assert "salvaged 4 events of 'demo'; the rest was left out: line 6" in salvaged.stderr
    kept = salvaged.stdout.split("\n")
    assert len(kept) == 1 + 4 + 1 and kept[-1] == ""
    # The repair walk: move the damaged file away, import what was salvaged, verify.
    good = tmp_path / "demo.good.jsonl"
    good.write_text(salvaged.stdout)
    os.rename(data_dir / "sessions" / "demo.jsonl", tmp_path / "demo.jsonl.bak")
    os.unlink(data_dir / "sessions" / "Not A Name.jsonl")
    assert run_app("import", str(good), "--data-dir", str(data_dir)).returncode == 0
    assert run_app("verify", "--data-dir", str(data_dir)).stdout.endswith(", 0 damaged\n")
    missing = run_app("export", "nobody", "--data-dir", str(data_dir))
    assert missing.returncode == 1 and "there is no session 'nobody'" in missing.stderr


def test_verify_shows_a_progress_bar_on_a_terminal_only(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    make_sessions(data_dir)
    piped = run_app("verify", "--data-dir", str(data_dir))
    assert "verifying" not in piped.stdout + piped.stderr
    controller, terminal = pty.openpty()
    with subprocess.Popen(
        [sys.executable, "-m", "app", "verify", "--data-dir", str(data_dir)],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=terminal,
        stderr=terminal,
    ) as process:
        os.close(terminal)
        seen = b""
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # the terminal closes with the process
                break
            if not chunk:
                break
            seen += chunk
        assert process.wait(30) == 0
    os.close(controller)
    assert b"verifying" in seen
    assert b"3 sessions, " in seen


def test_export_compression_zstd_writes_dsh_frames_and_import_reads_them_by_content(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    make_sessions(data_dir)
    raw = subprocess.run(
        [sys.executable, "-m", "app", "export", "demo", "--data-dir", str(data_dir)],
        cwd=REPO, capture_output=True, check=True,
    ).stdout  # fmt: skip
    compressed = subprocess.run(
        [sys.executable, "-m", "app", "export", "demo", "--compression", "zstd", "--data-dir", str(data_dir)],
        cwd=REPO, capture_output=True, check=True,
    ).stdout  # fmt: skip
    assert compressed[:4] == b"\x28\xb5\x2f\xfd"
    assert zstandard.ZstdDecompressor().stream_reader(compressed, read_across_frames=True).read() == raw
    log = tmp_path / "demo.jsonl"  # a name that says nothing of the encoding: the content does
    log.write_bytes(compressed)

    imported = run_app("import", str(log), "--id", "again", "--data-dir", str(data_dir))

    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.startswith(f"imported again (tenant default): {2 * TURN} events, ")
    again = run_app("export", "again", "--data-dir", str(data_dir)).stdout
    assert again.split("\n", 1)[1] == raw.decode().split("\n", 1)[1]


def test_import_refuses_a_damaged_or_torn_zstd_log_saying_where(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    make_sessions(data_dir)
    compressed = subprocess.run(
        [sys.executable, "-m", "app", "export", "demo", "--compression", "zstd", "--data-dir", str(data_dir)],
        cwd=REPO, capture_output=True, check=True,
    ).stdout  # fmt: skip
    torn, flipped = tmp_path / "torn.jsonl.zstd", tmp_path / "flipped.jsonl.zstd"
    torn.write_bytes(compressed[:-3])
    damaged = bytearray(compressed)
    damaged[-6] ^= 0xFF  # inside the last frame: its checksum no longer holds
    flipped.write_bytes(bytes(damaged))

    for path in (torn, flipped):
        done = run_app("import", str(path), "--id", "bad", "--data-dir", str(data_dir))
        assert done.returncode == 1
        assert "is not an intact .jsonl.zstd log" in done.stderr and "at byte" in done.stderr, done.stderr
    assert run_app("export", "bad", "--data-dir", str(data_dir)).returncode == 1


def test_export_refuses_an_unknown_compression(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    make_sessions(data_dir)
    done = run_app("export", "demo", "--compression", "gzip", "--data-dir", str(data_dir))
    assert done.returncode == 2
    assert "invalid choice: 'gzip'" in done.stderr
