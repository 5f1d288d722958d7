"""``copy`` (app.service.transfer.copy) in-process: between two data directories, an id taken in the destination,
and a destination that gains an id while the copy runs."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from app.backends.memory import MemoryBackend
from app.domain.clock import wall_clock_ms
from app.domain.dsh_frames import decode_log
from app.domain.session import Session, SessionKey
from app.service.errors import TransferFailed
from app.service.transfer.copy import copy_sessions, copy_store
from tests.backends.files import builders as b
from tests.service.transfer.stores import fill, put, session_files


def test_a_copy_between_data_directories_keeps_every_session_file_byte_for_byte(tmp_path: Path) -> None:
    original, copied = tmp_path / "original", tmp_path / "copied"
    asyncio.run(fill(original))
    seen: list[tuple[int, int]] = []

    report = asyncio.run(
        copy_store(str(original), str(copied), skip_existing=False, compression="none", progress=_watching(seen))
    )

    assert session_files(copied) == session_files(original)
    assert (report.copied, report.skipped) == (6, 0)
    assert seen[-1] == (report.events, report.events) and report.events > 0


def test_an_id_taken_in_the_destination_stops_the_copy_before_anything_is_written(tmp_path: Path) -> None:
    original, partial = tmp_path / "original", tmp_path / "partial"
    asyncio.run(fill(original))
    (partial / "sessions").mkdir(parents=True)
    shutil.copy(original / "sessions" / "kid.jsonl", partial / "sessions" / "kid.jsonl")

    with pytest.raises(TransferFailed, match=r'1 of the 6 sessions already exist .*"kid".*nothing was copied'):
        asyncio.run(copy_store(str(original), str(partial), skip_existing=False))
    assert list(session_files(partial)) == ["sessions/kid.jsonl"]

    report = asyncio.run(copy_store(str(original), str(partial), skip_existing=True))  # a raw directory stays raw
    assert (report.copied, report.skipped) == (5, 1)
    assert session_files(partial) == session_files(original)


def test_a_copy_to_a_new_data_directory_is_zstd_and_back_to_none_gives_the_same_files(tmp_path: Path) -> None:
    original, compressed, back = tmp_path / "original", tmp_path / "compressed", tmp_path / "back"
    asyncio.run(fill(original))

    asyncio.run(copy_store(str(original), str(compressed), skip_existing=False))
    asyncio.run(copy_store(str(compressed), str(back), skip_existing=False, compression="none"))

    assert not list(compressed.rglob("*.jsonl")) and not list(back.rglob("*.jsonl.zstd"))
    files = {str(path.relative_to(compressed)): path for path in compressed.rglob("*.jsonl.zstd")}
    assert {name.removesuffix(".zstd"): decode_log(path.read_bytes()) for name, path in files.items()} == (
        session_files(original)
    )
    assert {
        str(path.relative_to(back)): path.read_bytes() for path in back.rglob("*.jsonl") if "sessions" in path.parts
    } == (session_files(original))


def test_a_database_as_destination_takes_no_compression(tmp_path: Path) -> None:
    asyncio.run(fill(tmp_path / "original"))
    with pytest.raises(TransferFailed, match="--compression is the encoding of a data directory"):
        asyncio.run(
            copy_store(
                str(tmp_path / "original"), "postgresql://u@localhost/x", skip_existing=False, compression="zstd"
            )
        )
    assert not (tmp_path / "x").exists()


def test_the_same_store_twice_or_a_foreign_url_is_refused_before_any_store_is_touched(tmp_path: Path) -> None:
    with pytest.raises(TransferFailed, match="--from and --to name the same store"):
        asyncio.run(copy_store(str(tmp_path / "d"), str(tmp_path / "d/../d"), skip_existing=False))
    with pytest.raises(TransferFailed, match=r"^mysql://user:\*\*\*@host/db is neither a data directory"):
        asyncio.run(copy_store("mysql://user:pw@host/db", str(tmp_path / "d"), skip_existing=False))
    assert not (tmp_path / "d").exists()


class _LateCreate(MemoryBackend):
    """A destination whose lookups miss a session that another process creates before it is copied."""

    async def find(self, key: SessionKey) -> Session | None:
        return None


def test_an_id_created_in_the_destination_during_the_copy_stops_it_or_is_skipped() -> None:
    async def copy(*, skip_existing: bool) -> tuple[int, int]:
        source, target = MemoryBackend(clock=wall_clock_ms), _LateCreate(clock=wall_clock_ms)
        await source.open()
        await target.open()
        for name in ("first", "second"):
            await put(source, SessionKey("default", name), b.full_turn(1, name))
        await put(target, SessionKey("default", "second"), [])
        report = await copy_sessions(source, target, skip_existing=skip_existing)
        return report.copied, report.skipped

    with pytest.raises(TransferFailed, match='"second" of tenant default was created in the destination during the '
                       "copy; 1 sessions were copied before it"):  # fmt: skip
        asyncio.run(copy(skip_existing=False))
    assert asyncio.run(copy(skip_existing=True)) == (1, 1)


def _watching(seen: list[tuple[int, int]]) -> contextlib.AbstractContextManager[Callable[[int, int], None]]:
    return contextlib.nullcontext(lambda events, total: seen.append((events, total)))
