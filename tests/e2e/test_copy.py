"""``python -m app copy`` (spec 10): data directory -> PostgreSQL -> data directory gives back the very same files."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pty
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from app.backends.base import SeedLog, SeedPrefix
from app.backends.files import FileBackend
from app.domain.clock import wall_clock_ms
from app.domain.dsh_frames import decode_log
from app.domain.ids import new_instance
from app.domain.log import seed_log
from app.domain.session import SessionKey
from app.domain.staging_rules import stage
from tests.e2e.server import REPO, run_app

pytestmark = pytest.mark.e2e


def turn(number: int, text: str) -> list[dict[str, Any]]:
    return [
        {"type": "turn/start", "data": {"turn": number}},
        {
            "type": "user/message",
            "surfaceOp": "append",
            "data": {"id": f"u{number}", "role": "user", "content": [{"type": "text", "text": text}],
                     "source": {"kind": "user"}},
        },
        {"type": "forklog-test/odd", "data": {"z": 1, "a": [1.5, -2, 9007199254740991], "é": "\u2028 ☃"}},
        {"type": "turn/end", "data": {"turn": number, "reason": {"kind": "completed"}}},
    ]  # fmt: skip


async def fill(data_dir: Path, compression: str = "none") -> None:
    """Sessions of two tenants: seeded, appended to (an open turn too), forked, forked again, one deleted."""
    backend = FileBackend(data_dir, clock=wall_clock_ms, sync=False, compression=compression)
    await backend.open()

    async def fork(source: SessionKey, child: str, count: int, **lineage: Any) -> None:
        found = await backend.find(source)
        assert found is not None
        seed = SeedPrefix(source, found.header.instance, count)
        lineage = {"parent_session": source.id, "seed_length": count, **lineage}
        await backend.create(SessionKey(source.tenant, child), new_instance(), lineage, seed)

    async def make(key: SessionKey, events: list[Any], **lineage: Any) -> None:
        await backend.create(key, new_instance(), lineage, SeedLog(seed_log(events, now=1)))

    try:
        for tenant in ("default", "acme"):
            src = SessionKey(tenant, "src")
            await make(src, turn(1, "one"), cwd="/work")
            tip = await backend.tip(src)
            assert tip is not None
            await backend.append(src, stage(tip.log, [*turn(2, "two"), turn(3, "x")[0]], appended=True, now=2))
            await fork(src, "kid", 8, cwd="/work")
            await fork(SessionKey(tenant, "kid"), "grandkid", 4)
            await make(SessionKey(tenant, "empty"), [], origin="subagent", delegation_depth=2)
            await make(SessionKey(tenant, "gone"), [])
            await backend.delete(SessionKey(tenant, "gone"))
    finally:
        await backend.close()


def session_files(data_dir: Path, suffix: str = ".jsonl") -> dict[str, bytes]:
    return {
        str(path.relative_to(data_dir)): path.read_bytes()
        for path in sorted(data_dir.rglob(f"*{suffix}"))
        if "sessions" in path.parts
    }


def logical_files(data_dir: Path) -> dict[str, bytes]:
    """Each session file's lines (a .jsonl.zstd decompressed), by its path without the encoding's suffix; the data
    directory holds files of one encoding only."""
    raw, compressed = session_files(data_dir), session_files(data_dir, ".jsonl.zstd")
    assert not (raw and compressed), "a data directory of two encodings"
    return {name.removesuffix(".jsonl"): data for name, data in raw.items()} | {
        name.removesuffix(".jsonl.zstd"): decode_log(data) for name, data in compressed.items()
    }


def test_files_to_postgres_to_files_gives_the_same_session_files(tmp_path: Path, forklog_db: str) -> None:
    original, back, back_raw = tmp_path / "original", tmp_path / "back", tmp_path / "back-raw"
    asyncio.run(fill(original))
    files = session_files(original)
    assert len(files) == 8

    there = run_app("copy", "--from", str(original), "--to", forklog_db)
    assert there.returncode == 0, there.stderr
    assert "copied 8 sessions" in there.stderr
    assert "\x1b[" not in there.stderr  # no progress bar without a terminal
    again = run_app("copy", "--from", forklog_db, "--to", str(back_raw), "--compression", "none")
    assert again.returncode == 0, again.stderr
    assert session_files(back_raw) == files

    compressed = run_app("copy", "--from", forklog_db, "--to", str(back))  # a new directory: zstd
    assert compressed.returncode == 0, compressed.stderr
    assert not session_files(back) and len(session_files(back, ".jsonl.zstd")) == 8
    assert logical_files(back) == logical_files(original)


@pytest.mark.parametrize("encoding", ["none", "zstd"])
def test_a_copy_between_data_directories_converts_the_encoding_keeping_every_line(
    tmp_path: Path, encoding: str
) -> None:
    other = "zstd" if encoding == "none" else "none"
    original, converted, back = tmp_path / "original", tmp_path / "converted", tmp_path / "back"
    asyncio.run(fill(original, encoding))
    lines = logical_files(original)
    assert len(lines) == 8

    done = run_app("copy", "--from", str(original), "--to", str(converted), "--compression", other)
    assert done.returncode == 0, done.stderr
    assert orjson.loads((converted / "format.json").read_bytes()) == {"compression": other}
    assert logical_files(converted) == lines
    assert len(session_files(converted, ".jsonl.zstd" if other == "zstd" else ".jsonl")) == 8

    again = run_app("copy", "--from", str(converted), "--to", str(back), "--compression", encoding)
    assert again.returncode == 0, again.stderr
    assert logical_files(back) == lines
    if encoding == "none":
        assert session_files(back) == session_files(original), "raw files come back byte for byte"


def test_copy_into_a_data_directory_of_the_other_encoding_is_refused_naming_both(tmp_path: Path) -> None:
    original, target = tmp_path / "original", tmp_path / "target"
    asyncio.run(fill(original, "zstd"))
    asyncio.run(fill(target, "zstd"))  # the same ids: only the encoding is refused first
    before = logical_files(target)

    refused = run_app("copy", "--from", str(original), "--to", str(target), "--compression", "none")

    assert refused.returncode != 0
    assert "'zstd'" in refused.stderr and "'none'" in refused.stderr and "forklog copy" in refused.stderr
    assert logical_files(target) == before
    database = run_app("copy", "--from", str(original), "--to", "postgresql://u@localhost/x", "--compression", "zstd")
    assert database.returncode != 0 and "is a database" in database.stderr


def test_a_taken_id_stops_the_copy_before_anything_is_written(tmp_path: Path, forklog_db: str) -> None:
    original, partial = tmp_path / "original", tmp_path / "partial"
    asyncio.run(fill(original))
    (partial / "sessions").mkdir(parents=True)
    kept = (original / "sessions" / "kid.jsonl").read_bytes()
    (partial / "sessions" / "kid.jsonl").write_bytes(kept)
    assert run_app("copy", "--from", str(partial), "--to", forklog_db).returncode == 0

    refused = run_app("copy", "--from", str(original), "--to", forklog_db)
    assert refused.returncode != 0
    assert "already exist" in refused.stderr and '"kid"' in refused.stderr and "nothing was copied" in refused.stderr
    back = tmp_path / "back"
    assert run_app("copy", "--from", forklog_db, "--to", str(back)).returncode == 0
    assert list(logical_files(back)) == ["sessions/kid"]

    skipping = run_app("copy", "--from", str(original), "--to", forklog_db, "--skip-existing")
    assert skipping.returncode == 0, skipping.stderr
    assert "copied 7 sessions" in skipping.stderr and "1 skipped" in skipping.stderr


def test_copy_refuses_what_is_not_a_store(tmp_path: Path) -> None:
    result = run_app("copy", "--from", "mysql://user:pw@host/db", "--to", str(tmp_path / "d"))
    assert result.returncode != 0
    assert "neither a data directory nor a postgresql:// URL" in result.stderr
    assert "pw@" not in result.stderr


def test_copy_shows_a_progress_bar_on_a_terminal(tmp_path: Path, forklog_db: str) -> None:
    original = tmp_path / "original"
    asyncio.run(fill(original))
    primary, secondary = pty.openpty()
    try:
        process = subprocess.run(
            [sys.executable, "-m", "app", "copy", "--from", str(original), "--to", forklog_db],
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=secondary,
            timeout=60,
            check=False,
        )
        os.close(secondary)
        shown = b""
        with contextlib.suppress(OSError):  # EIO once everything written has been read
            while chunk := os.read(primary, 65536):
                shown += chunk
    finally:
        os.close(primary)
    assert process.returncode == 0
    assert b"\x1b[" in shown  # the bar was drawn (and cleared: it is transient)
    assert b"copied 8 sessions" in shown
