"""The writer takes the appends of one step of the event loop together: all are written, in one round, and an append
that arrived just before the writer closes is written, not left waiting."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from app.backends.files.cuts import CutRecords
from app.backends.files.fileops import FileOps
from app.backends.files.writer import AppendWriter


def new_writer() -> AppendWriter:
    ops = FileOps()
    return AppendWriter(ops, CutRecords(ops, sync=False), sync=False)


def test_the_appends_of_one_loop_step_are_written_in_one_round(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    writer = new_writer()
    rounds: list[int] = []
    take_round = writer._round

    def counted_round(batch: list[object]) -> None:
        rounds.append(len(batch))
        take_round(batch)  # type: ignore[arg-type]

    monkeypatch.setattr(writer, "_round", counted_round)
    paths = [tmp_path / f"s{number}.jsonl" for number in range(8)]
    for path in paths:  # a session's file exists before anything is appended to it
        path.touch()

    async def run() -> None:
        appends = [writer.append(path, b'{"n":1}\n', instance="i", cut_record=tmp_path / "cut") for path in paths]
        await asyncio.gather(*appends)

    try:
        asyncio.run(run())
    finally:
        writer.close()
    assert rounds == [len(paths)]
    assert [path.read_bytes() for path in paths] == [b'{"n":1}\n'] * len(paths)


def test_an_append_that_arrived_as_the_writer_closes_is_written(tmp_path: Path) -> None:
    writer = new_writer()
    path = tmp_path / "s.jsonl"
    path.touch()

    async def run() -> None:
        appended = asyncio.ensure_future(writer.append(path, b"line\n", instance="i", cut_record=tmp_path / "s.cut"))
        await asyncio.sleep(0)  # the append has arrived; the loop's step that hands it over has not run yet
        writer.close()
        await asyncio.wait_for(appended, 5)

    asyncio.run(run())
    assert path.read_bytes() == b"line\n"
