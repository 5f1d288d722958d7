"""The zstd encoding of the file backend (spec 16): DSH's .jsonl.zstd files, their recovery, forks and compaction."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

import orjson
import pytest
import zstandard

from app.api.settings import Settings
from app.backends.errors import StartRefused
from app.backends.files import FileBackend
from app.backends.files.frames.compaction import SMALL_FRAME_TEXT
from app.backends.files.reader import FileReader
from app.domain.clock import wall_clock_ms
from app.domain.dsh_frames import decode_log, encode_frame, walk_frames
from app.domain.errors import ErrorCode, ForklogError
from app.domain.session import SessionKey
from bench import streamed_sessions
from tests.backends.files import builders as b
from tests.backends.files.conftest import FileStore


def zstd_file(data_dir: Path, session_id: str) -> Path:
    return data_dir / "sessions" / f"{session_id}.jsonl.zstd"


async def opened(data_dir: Path, **options: Any) -> FileStore:
    options.setdefault("compression", "zstd")
    return await FileStore(data_dir, **options).open()


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def make(data_dir: Path, compression: str) -> None:
    async def open_and_close() -> None:
        await (await opened(data_dir, compression=compression)).close()

    run(open_and_close())


# -- the setting and the record ----------------------------------------------------------------------------------


def test_a_new_data_directory_is_zstd_by_default_and_records_it(data_dir: Path) -> None:
    async def scenario() -> bytes:
        backend = FileBackend(data_dir, clock=wall_clock_ms, sync=False)
        await backend.open()
        await backend.close()
        return (data_dir / "format.json").read_bytes()

    assert b'"compression":"zstd"' in run(scenario())
    assert Settings().store.compression is None, "no setting: the directory's own encoding, zstd for a new one"
    assert Settings(compression="none").store.compression == "none"


def test_a_data_directory_without_a_record_is_none(data_dir: Path) -> None:
    """A data directory written before the setting existed holds .jsonl files and no record: it stays none."""
    (data_dir / "sessions").mkdir(parents=True)

    async def scenario() -> None:
        store = await opened(data_dir, compression=None)
        await store.create("old", b.full_turn(1), None)
        await store.close()

    run(scenario())
    assert (data_dir / "sessions" / "old.jsonl").exists()
    assert not (data_dir / "format.json").exists()


@pytest.mark.parametrize(("made", "asked"), [("zstd", "none"), ("none", "zstd")])
def test_a_start_asking_for_the_other_encoding_is_refused(data_dir: Path, made: str, asked: str) -> None:
    make(data_dir, made)
    with pytest.raises(StartRefused) as refused:
        FileBackend(data_dir, clock=wall_clock_ms, compression=asked)
    message = str(refused.value)
    assert "'zstd'" in message and "'none'" in message and "forklog copy" in message and str(data_dir) in message
    FileBackend(data_dir, clock=wall_clock_ms).datadir.unlock()  # without the setting, the directory's own


def test_an_old_directory_started_with_zstd_is_refused(data_dir: Path) -> None:
    (data_dir / "sessions").mkdir(parents=True)
    with pytest.raises(StartRefused, match="forklog copy"):
        FileBackend(data_dir, clock=wall_clock_ms, compression="zstd")


def test_the_setting_takes_only_its_two_values() -> None:
    with pytest.raises(ValueError, match="compression"):
        Settings(compression="gzip")


# -- the files ---------------------------------------------------------------------------------------------------


def test_a_session_is_dsh_frames_holding_the_lines_a_raw_file_would(data_dir: Path, tmp_path: Path) -> None:
    async def write(directory: Path, compression: str) -> bytes:
        store = await opened(directory, compression=compression)
        await store.create("s", b.open_turn(1), None)
        await store.append("s", [b.log_only("one")])
        await store.append("s", [b.log_only("two")])
        lines = store.get("s").log.lines()
        await store.close()
        return lines

    lines = run(write(data_dir, "zstd"))
    data = zstd_file(data_dir, "s").read_bytes()
    walk = walk_frames(data)
    assert walk.frames[0].text.count(b"\n") == 1 and walk.frames[0].text.startswith(b'{"type":"session"')
    assert len(walk.frames) == 4, "the header's frame, the seed's, then a frame a durable append"
    assert all(zstandard.get_frame_parameters(data[f.offset : f.end]).has_checksum for f in walk.frames)
    assert decode_log(data) == walk.frames[0].text + lines
    raw_lines = run(write(tmp_path / "raw", "none"))
    raw = (tmp_path / "raw" / "sessions" / "s.jsonl").read_bytes()
    assert raw.split(b"\n", 1)[1] == raw_lines, "the none encoding's file holds its lines as they are"
    assert [_kind(line) for line in raw_lines.splitlines()] == [_kind(line) for line in lines.splitlines()]


def _kind(line: bytes) -> tuple[str, int]:
    record = orjson.loads(line)
    return record["type"], record["seq"]


def test_a_restart_reads_a_compressed_directory_back(data_dir: Path) -> None:
    async def scenario() -> None:
        store = await opened(data_dir)
        await store.create("s", b.turns(1, 3), None)
        await store.append("s", b.open_turn(4))
        before = store.get("s").log.lines()
        await store.crash()
        again = await opened(data_dir)
        assert again.get("s").log.lines() == before
        assert again.backend.recovery.events == len(again.get("s").log)
        await again.append("s", b.close_turn(4))
        await again.close()
        third = await opened(data_dir)
        assert third.backend.recovery.checked_events == 0, "the checkpoints of a clean stop still hold"
        assert decode_log(zstd_file(data_dir, "s").read_bytes()).split(b"\n", 1)[1] == third.get("s").log.lines()
        await third.close()

    run(scenario())


def test_a_torn_final_frame_is_dropped_whole_and_cut_away(data_dir: Path) -> None:
    async def write() -> bytes:
        store = await opened(data_dir)
        await store.create("s", b.full_turn(1), None)
        lines = store.get("s").log.lines()
        await store.close()
        return lines

    lines = run(write())
    path = zstd_file(data_dir, "s")
    intact = path.read_bytes()
    torn = encode_frame(b"".join(b'{"type":"forklog-test/note","seq":%d}\n' % n for n in range(11, 40)))
    path.write_bytes(intact + torn[: len(torn) // 2])

    async def restart() -> None:
        store = await opened(data_dir)
        assert store.get("s").log.lines() == lines
        assert not store.corrupt
        await store.close()

    run(restart())
    assert path.read_bytes() == intact


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda data: data[:-9] + bytes([data[-9] ^ 0x20]) + data[-8:], "damaged zstd frames"),
        (lambda data: data + b'{"type":"turn/start"}\n', "not a zstd frame"),
        (lambda data: data.replace(data, b'{"type":"session"}\n'), "raw JSONL (the 'none' encoding)"),
    ],
    ids=["a flipped byte", "raw bytes after the frames", "a raw file"],
)
def test_damage_in_a_complete_frame_makes_the_session_corrupt(data_dir: Path, damage: Any, reason: str) -> None:
    async def write() -> None:
        store = await opened(data_dir)
        await store.create("s", b.full_turn(1), None)
        await store.append("s", b.full_turn(2))
        await store.create("other", b.full_turn(1), None)
        await store.close()

    run(write())
    path = zstd_file(data_dir, "s")
    damaged = damage(path.read_bytes())
    path.write_bytes(damaged)

    async def restart() -> None:
        store = await opened(data_dir)
        assert [entry.reason for entry in store.corrupt if reason in entry.reason], store.corrupt
        with pytest.raises(ForklogError) as caught:
            await store.service.reads.get(store.key("s"))
        assert caught.value.code == ErrorCode.SESSION_CORRUPT
        assert len(store.get("other").log) == len(b.full_turn(1)), "every other session serves"
        await store.close()

    run(restart())
    assert path.read_bytes() == damaged, "a corrupt session's file is left untouched"


def test_a_file_of_the_other_encoding_is_corrupt_naming_it(data_dir: Path) -> None:
    make(data_dir, "zstd")
    (data_dir / "sessions" / "raw.jsonl").write_bytes(b'{"type":"session","version":0,"id":"raw","createdAt":1}\n')

    async def restart() -> None:
        store = await opened(data_dir)
        (entry,) = store.corrupt
        assert entry.id == "raw" and "'none' encoding" in entry.reason and "'zstd' encoding" in entry.reason
        await store.close()

    run(restart())


# -- forks -------------------------------------------------------------------------------------------------------


def test_a_fork_copies_its_seeds_whole_frames_as_they_are_stored(data_dir: Path) -> None:
    """Turns big enough that compaction leaves their frames alone: the fork's file holds the first three as they
    are, and only the frame its boundary falls in is written anew."""
    big = "x" * (SMALL_FRAME_TEXT // 2 + 1000)  # (a turn holds its text twice: the user's and the answer)

    async def scenario() -> None:
        store = await opened(data_dir)
        await store.create("s", b.full_turn(1, big), None)
        for turn in range(2, 6):
            await store.append("s", b.full_turn(turn, big))
        await store.append("s", b.open_turn(6))
        seed = sum(len(b.full_turn(turn)) for turn in range(1, 4))
        await store.fork("s", child_id="kid", at_seq=seed - 1)
        assert store.get("kid").log.lines() == store.get("s").log.lines(0, seed)
        source_data = zstd_file(data_dir, "s").read_bytes()
        source = walk_frames(source_data)
        child_data = zstd_file(data_dir, "kid").read_bytes()
        child = walk_frames(child_data)
        assert child.text.split(b"\n", 1)[1] == store.get("kid").log.lines()
        assert len(source.frames) == 1 + 6 and len(child.frames) == 1 + 3
        whole = source_data[source.frames[1].offset : source.frames[3].end]
        assert child_data[child.frames[1].offset :] == whole, "the seed's frames, byte for byte"
        await store.crash()
        again = await opened(data_dir)
        assert again.get("kid").log.lines() == again.get("s").log.lines(0, seed)
        await again.close()

    run(scenario())


# -- compaction and bytes at rest --------------------------------------------------------------------------------


def _streamed(batches: Any) -> tuple[int, int, int]:
    """A streamed session appended as ``batches`` say: (raw JSONL bytes, bytes at rest, frames of its file)."""

    async def scenario(data_dir: Path) -> tuple[int, int, int]:
        store = await opened(data_dir, sync=False)
        await store.create("s", [], None)
        for batch in batches:
            await store.append("s", batch)
        raw = len(store.get("s").log.lines())
        await store.close()
        data = zstd_file(data_dir, "s").read_bytes()
        return raw, len(data), len(walk_frames(data).frames)

    with tempfile.TemporaryDirectory() as folder:
        measured: tuple[int, int, int] = run(scenario(Path(folder) / "data"))
        return measured


def test_one_event_an_append_compacts_to_at_most_0_15_of_raw_once_the_turns_ended() -> None:
    raw, at_rest, frames = _streamed(streamed_sessions.events(turns=6))
    assert at_rest <= 0.15 * raw, (raw, at_rest)
    assert frames < 12, "each ended turn's small frames were rewritten into one"


def test_one_step_an_append_stays_at_most_0_12_of_raw() -> None:
    raw, at_rest, _ = _streamed(streamed_sessions.steps(turns=6))
    assert at_rest <= 0.12 * raw, (raw, at_rest)


def test_an_open_turns_frames_are_left_as_they_are(data_dir: Path) -> None:
    async def scenario() -> None:
        store = await opened(data_dir)
        await store.create("s", b.full_turn(1), None)
        for event in b.open_turn(2):
            await store.append("s", [event])
        frames = store.get("s").frames
        assert len(frames) == 1 + len(b.open_turn(2)), "no rewrite while the turn is open"
        for event in b.close_turn(2):
            await store.append("s", [event])
        frames = store.get("s").frames
        assert len(frames) == 1 and frames.text_size(0) < SMALL_FRAME_TEXT
        lines = store.get("s").log.lines()
        assert decode_log(zstd_file(data_dir, "s").read_bytes()).split(b"\n", 1)[1] == lines
        await store.crash()
        again = await opened(data_dir)
        assert again.get("s").log.lines() == lines
        assert len(walk_frames(zstd_file(data_dir, "s").read_bytes()).frames) == 1 + 1
        assert again.get("s").frames is None, "an idle session keeps no index of its frames"
        await again.append("s", b.full_turn(3))
        assert len(again.get("s").frames) == 1, "its first compaction reads the index off the file"
        await again.close()

    run(scenario())


def test_a_compacted_sessions_fork_and_checkpoint_see_the_new_frames(data_dir: Path) -> None:
    async def scenario() -> None:
        store = await opened(data_dir)
        await store.create("s", [], None)
        for turn in range(1, 4):
            for event in b.full_turn(turn):
                await store.append("s", [event])
            await store.checkpoint()
        seed = 2 * len(b.full_turn(1))
        await store.fork("s", child_id="kid", at_seq=seed - 1)
        assert store.get("kid").log.lines() == store.get("s").log.lines(0, seed)
        await store.close()
        again = await opened(data_dir)
        assert again.backend.recovery.checked_events == 0
        assert again.get("kid").log.lines() == again.get("s").log.lines(0, seed)
        await again.close()

    run(scenario())


def test_a_salvage_keeps_the_whole_frames_before_the_damage(data_dir: Path) -> None:
    async def write() -> bytes:
        store = await opened(data_dir)
        await store.create("s", b.full_turn(1, "x" * SMALL_FRAME_TEXT), None)
        await store.append("s", b.full_turn(2))
        kept = store.get("s").log.lines(0, len(b.full_turn(1)))
        await store.close()
        return kept

    kept = run(write())
    path = zstd_file(data_dir, "s")
    data = path.read_bytes()
    path.write_bytes(data[:-3] + bytes([data[-3] ^ 0xFF]) + data[-2:])
    header, log, left_out = FileReader(data_dir, clock=wall_clock_ms).salvage(SessionKey("default", "s"))
    assert header.id == "s" and log.lines() == kept
    assert left_out is not None and "damaged zstd frames" in left_out


def test_worker_processes_check_compressed_files_as_one_process_would(data_dir: Path) -> None:
    async def scenario() -> None:
        store = await opened(data_dir)
        for number in range(4):
            await store.create(f"s{number}", b.turns(1, 3), None)
            await store.append(f"s{number}", b.open_turn(4))
        before = {f"s{number}": store.get(f"s{number}").log.lines() for number in range(4)}
        await store.crash()
        for leftover in (data_dir / "index").iterdir():
            leftover.unlink()  # no checkpoint: every event is checked, by the workers
        again = await opened(data_dir, check_workers=2, parallel_check_bytes=0)
        assert again.backend.recovery.parallel_files == 4
        assert {name: again.get(name).log.lines() for name in before} == before
        await again.append("s0", b.close_turn(4))
        await again.close()

    run(scenario())
