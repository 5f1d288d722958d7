"""Sessions kept in a real data directory: round trips across a restart, DSH's file format, and recovery."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from app.api.wire.resources import session_json
from app.backends.errors import DataDirLocked
from app.backends.files import FileBackend
from app.domain.clock import wall_clock_ms
from app.domain.dsh_records import decode_line
from app.domain.errors import ErrorCode, ForklogError
from tests.backends.files import builders as b
from tests.backends.files.conftest import REPO, FileStore, OpenStore, observe, session_file

META = {
    "cwd": "/work/project",
    "parentSession": "session-outside",
    "seedLength": 5,
    "origin": "subagent",
    "delegationDepth": 2,
    "agentPreset": "reviewer",
}


def file_lines(path: Path) -> list[dict[str, Any]]:
    data = path.read_bytes()
    assert data.endswith(b"\n")
    return [orjson.loads(line) for line in data.split(b"\n")[:-1]]


# -- round trips -----------------------------------------------------------------------------------------------------


def test_a_restart_finds_every_session_as_it_was(data_dir: Path, open_store: OpenStore) -> None:
    async def first_life() -> dict[str, dict[str, Any]]:
        store = await open_store(data_dir)
        await store.create("main", b.turns(1, 2), META)
        await store.append("main", b.open_turn(3))
        await store.append("main", b.close_turn(3))
        await store.append("main", b.open_turn(4))  # left open: a later turn in progress
        await store.create("empty", None, None)
        await store.create("gone", b.turns(1, 1), {"cwd": "/tmp"})
        await store.fork("main", child_id="early", at_seq=10)  # the end of turn 1
        await store.append("early", b.full_turn(2, "another way"))
        await store.fork("early", child_id="whole")
        await store.fork("empty", child_id="empty-child")
        await store.delete("gone")
        ids = ["main", "empty", "early", "whole", "empty-child"]
        seen = {session_id: observe(store, session_id) for session_id in ids}
        await store.close()
        return seen

    before = asyncio.run(first_life())
    assert before["main"]["view"]["openTurn"] == 4
    assert before["early"]["view"]["seedLength"] == 11
    assert before["whole"]["view"]["seedLength"] == before["early"]["view"]["eventCount"]

    async def second_life() -> None:
        store = await open_store(data_dir)
        assert store.corrupt == []
        for session_id, seen in before.items():
            assert observe(store, session_id) == seen, session_id
        page = store.page()
        assert [session.id for session in page] == ["main", "empty", "early", "whole", "empty-child"]
        with pytest.raises(ForklogError) as caught:
            store.get("gone")
        assert caught.value.code == ErrorCode.SESSION_NOT_FOUND
        # the recovered sessions go on: the open turn closes, the next seq follows on
        stored, _, view = await store.append("main", b.close_turn(4))
        assert [event["seq"] for event in stored] == list(range(before["main"]["view"]["eventCount"], view.head.count))
        assert view.head.forkable
        child = await store.fork("main", child_id="late", at_seq=21)
        assert child.head.count == 22
        await store.close()

    asyncio.run(second_life())
    assert not session_file(data_dir, "gone").exists()
    assert sorted(path.name for path in (data_dir / "sessions").iterdir()) == sorted(
        f"{name}.jsonl" for name in ["main", "empty", "early", "whole", "empty-child", "late"]
    )

    async def third_life() -> None:
        store = await open_store(data_dir)
        main = store.get("main")
        assert main.log.lines().startswith(before["main"]["lines"])
        assert main.view().head.forkable
        assert store.get("late").log.lines() == main.log.lines(0, 22)
        assert store.get("late").header.parent_session == "main"

    asyncio.run(third_life())


def test_headers_keep_their_meta_lineage_and_instance(data_dir: Path, open_store: OpenStore) -> None:
    async def first_life() -> dict[str, Any]:
        store = await open_store(data_dir)
        created = await store.create("meta", b.turns(1, 3), META)
        child = await store.fork("meta", child_id="child", at_seq=21)
        await store.close()
        return {"meta": session_json(created), "child": session_json(child)}

    before = asyncio.run(first_life())
    assert before["meta"]["createdAt"] < before["child"]["createdAt"]

    async def second_life() -> None:
        store = await open_store(data_dir)
        meta, child = store.get("meta").header, store.get("child").header
        assert (meta.cwd, meta.parent_session, meta.seed_length) == ("/work/project", "session-outside", 5)
        assert (meta.origin, meta.delegation_depth, meta.agent_preset) == ("subagent", 2, "reviewer")
        assert (meta.instance, meta.created_at) == (before["meta"]["instance"], before["meta"]["createdAt"])
        assert (child.cwd, child.parent_session, child.seed_length) == ("/work/project", "meta", 22)
        assert (child.origin, child.delegation_depth, child.agent_preset) == (None, 0, None)
        assert (child.instance, child.created_at) == (before["child"]["instance"], before["child"]["createdAt"])
        # createdAt keeps growing across a restart: a new create comes after every recovered one
        later = await store.create("later", None, None)
        assert later.header.created_at > before["child"]["createdAt"]

    asyncio.run(second_life())


def test_times_keep_growing_after_a_restart_even_from_a_future_seed(data_dir: Path, open_store: OpenStore) -> None:
    future = 4_102_444_800_000  # 2100-01-01
    seed = [{**event, "seq": seq, "time": future + seq} for seq, event in enumerate(b.turns(1, 1))]

    async def first_life() -> None:
        store = await open_store(data_dir)
        await store.create("future", seed, None)
        await store.close()

    async def second_life() -> None:
        store = await open_store(data_dir)
        stored, _, _ = await store.append("future", b.full_turn(2))
        assert [event["time"] for event in stored] == [future + 10] * 11

    asyncio.run(first_life())
    asyncio.run(second_life())


def test_a_deleted_and_recreated_id_is_a_new_incarnation(data_dir: Path, open_store: OpenStore) -> None:
    async def first_life() -> tuple[str, str]:
        store = await open_store(data_dir)
        old = await store.create("again", b.turns(1, 2), None)
        await store.delete("again")
        new = await store.create("again", b.turns(1, 1), None)
        await store.close()
        return old.header.instance, new.header.instance

    old_instance, new_instance = asyncio.run(first_life())
    assert old_instance != new_instance

    async def second_life() -> None:
        store = await open_store(data_dir)
        again = store.get("again")
        assert (again.header.instance, len(again.log)) == (new_instance, 11)

    asyncio.run(second_life())


def test_the_file_is_a_dsh_log(data_dir: Path, open_store: OpenStore) -> None:
    async def write() -> tuple[list[dict[str, Any]], Any]:
        store = await open_store(data_dir)
        created = await store.create("dsh", b.turns(1, 1), META)
        stored, _, _ = await store.append("dsh", b.open_turn(2))
        await store.fork("dsh", child_id="dsh-child", at_seq=10)
        events = store.get("dsh").log.events()
        await store.close()
        assert len(stored) == 6
        return events, created

    events, created = asyncio.run(write())
    header, *records = file_lines(session_file(data_dir, "dsh"))
    assert header == {
        "type": "session",
        "version": 0,
        "id": "dsh",
        "createdAt": created.header.created_at,
        "cwd": "/work/project",
        "parentSession": "session-outside",
        "seedLength": 5,
        "origin": "subagent",
        "delegationDepth": 2,
        "agentPreset": "reviewer",
        "instance": created.header.instance,
    }
    assert list(header)[:2] == ["type", "version"]
    assert records == events
    for seq, record in enumerate(records):
        assert record["seq"] == seq
        assert isinstance(record["time"], int)
        assert set(record) <= {"type", "seq", "time", "data", "surfaceOp", "sourceEventSeqs", "ignorable"}

    child_header, *child_records = file_lines(session_file(data_dir, "dsh-child"))
    assert child_header["parentSession"] == "dsh"
    assert child_header["seedLength"] == 11
    assert child_header["cwd"] == "/work/project"
    assert child_header["delegationDepth"] == 0
    assert not {"origin", "agentPreset"} & set(child_header)
    assert child_records == events[:11]  # the seed, written once
    assert not list((data_dir / "tmp").iterdir())


def test_a_failed_create_of_an_existing_id_leaves_the_file_alone(data_dir: Path, open_store: OpenStore) -> None:
    async def run() -> None:
        store = await open_store(data_dir)
        await store.create("taken", b.turns(1, 1), None)
        before = session_file(data_dir, "taken").read_bytes()
        with pytest.raises(ForklogError) as caught:
            await store.create("taken", b.turns(1, 2), None)
        assert caught.value.code == ErrorCode.SESSION_ALREADY_EXISTS
        with pytest.raises(ForklogError) as caught:
            await store.fork("taken", child_id="taken")
        assert caught.value.code == ErrorCode.SESSION_ALREADY_EXISTS
        assert session_file(data_dir, "taken").read_bytes() == before

    asyncio.run(run())


@pytest.mark.parametrize("bad_id", ["../escape", "a/b", ".hidden", "", "x" * 129])
def test_an_id_that_is_not_valid_never_reaches_the_file_system(
    data_dir: Path, open_store: OpenStore, bad_id: str
) -> None:
    async def run() -> None:
        store = await open_store(data_dir)
        with pytest.raises(ForklogError) as caught:
            await store.create(bad_id, b.turns(1, 1), None)
        assert caught.value.code == ErrorCode.INVALID_REQUEST
        await store.create("source", b.turns(1, 1), None)
        with pytest.raises(ForklogError) as caught:
            await store.fork("source", child_id=bad_id)
        assert caught.value.code == ErrorCode.INVALID_REQUEST

    asyncio.run(run())
    search_index = data_dir / "search"  # the search index's own files, named by forklog alone
    written = [path for path in data_dir.parent.rglob("*") if path.is_file() and search_index not in path.parents]
    assert sorted(path.name for path in written) == ["forklog.lock", "format.json", "source.jsonl"]


# -- DSH logs ----------------------------------------------------------------------------------------------------------

DSH_LOGS = [
    # packed text-, reasoning- and tool-call-chunks rows, one turn
    "apps__web__tests__snapshots__plan-review__session",
    # two turns, packed reasoning rows
    "examples__acp-agent__tests__snapshots__multi-turn__session",
    # a sub-agent's log: parentSession, seedLength, origin and delegationDepth in the header; text-chunks rows
    "examples__acp-agent__tests__snapshots__subagent-mixed__session.2",
]


def place_dsh_log(source: Path, data_dir: Path, session_id: str) -> bytes:
    """Copy a DSH log to ``sessions/<id>.jsonl`` with its header id rewritten; return its bytes."""
    header_line, rest = source.read_bytes().split(b"\n", 1)
    header = json.loads(header_line)
    header["id"] = session_id
    data = json.dumps(header).encode() + b"\n" + rest
    target = session_file(data_dir, session_id)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return data


@pytest.mark.parametrize("name", DSH_LOGS)
def test_a_dsh_log_loads_at_start(data_dir: Path, open_store: OpenStore, dsh_logs_dir: Path, name: str) -> None:
    expected = json.loads((dsh_logs_dir / f"{name}.expected.json").read_text())
    assert expected["verdict"] == "accept"
    source = dsh_logs_dir / f"{name}.jsonl"
    data = place_dsh_log(source, data_dir, "from-dsh")
    header = json.loads(data.split(b"\n", 1)[0])
    decoded = [event for line in data.split(b"\n")[1:] if line for event in decode_line(line)]
    assert len(decoded) == expected["eventCount"]
    assert len(decoded) > len(data.split(b"\n")) - 2, "the log should hold packed chunk rows"

    async def first_life() -> str:
        store = await open_store(data_dir)
        assert store.corrupt == []
        session = store.get("from-dsh")
        assert session.log.events() == decoded
        assert session.log.history() == expected["history"]
        view = session.view()
        assert view.head.count == expected["eventCount"]
        assert (view.header.created_at, view.header.cwd) == (header["createdAt"], header.get("cwd"))
        assert (view.header.parent_session, view.header.seed_length) == (
            header.get("parentSession"),
            header.get("seedLength"),
        )
        assert (view.header.origin, view.header.delegation_depth) == (
            header.get("origin"),
            header.get("delegationDepth", 0),
        )
        assert view.head.forkable == (decoded[-1]["type"] == "turn/end")
        for turn_end_seq in expected["turnEndSeqs"]:
            child = await store.fork("from-dsh", child_id=f"at-{turn_end_seq}", at_seq=turn_end_seq)
            assert store.get(child.id).log.lines() == session.log.lines(0, turn_end_seq + 1)
            assert store.get(child.id).log.history() == session.log.history(turn_end_seq)
        await store.close()
        return view.header.instance

    instance = asyncio.run(first_life())
    assert session_file(data_dir, "from-dsh").read_bytes() == data, "loading must not rewrite a DSH log"

    async def second_life() -> None:
        store = await open_store(data_dir)
        session = store.get("from-dsh")
        assert session.header.instance == instance, "a DSH log's derived instance is stable across restarts"
        assert session.log.events() == decoded
        next_turn = session.log.state.next_turn
        stored, _, view = await store.append("from-dsh", b.full_turn(next_turn))
        assert stored[0]["seq"] == len(decoded)
        assert view.head.forkable
        await store.close()

    asyncio.run(second_life())
    assert session_file(data_dir, "from-dsh").read_bytes().startswith(data)

    async def third_life() -> None:
        store = await open_store(data_dir)
        assert store.corrupt == []
        assert store.get("from-dsh").log.events()[: len(decoded)] == decoded
        assert len(store.get("from-dsh").log) == len(decoded) + 11

    asyncio.run(third_life())


# -- refused headers -------------------------------------------------------------------------------------------------

GOOD_HEADER = {"type": "session", "version": 0, "id": "hdr", "createdAt": 1785331618309, "cwd": "/work"}


def header_bytes(**changes: Any) -> bytes:
    header = {**GOOD_HEADER, **changes}
    return json.dumps({key: value for key, value in header.items() if value is not None}).encode() + b"\n"


async def assert_kept_out_of_service(store: FileStore, session_id: str) -> None:
    """Every operation naming a corrupt session's id, also as a new id, answers SESSION_CORRUPT."""
    refusals = [
        lambda: store.get(session_id),
        lambda: store.snapshot_lines(session_id),
        lambda: store.create(session_id, b.turns(1, 1), None),
        lambda: store.append(session_id, b.open_turn(3)),
        lambda: store.fork(session_id),
        lambda: store.delete(session_id),
    ]
    for refusal in refusals:
        with pytest.raises(ForklogError) as caught:
            result = refusal()
            if inspect.isawaitable(result):
                await result
        assert caught.value.code == ErrorCode.SESSION_CORRUPT


def recovered_problem(data_dir: Path, session_id: str, data: bytes) -> str:
    """Place ``data`` as a session file, recover, check the id is refused, and return the reason it is corrupt."""
    path = session_file(data_dir, session_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)

    async def run() -> str:
        store = await FileStore(data_dir).open()
        try:
            assert [(corrupt.id, corrupt.path) for corrupt in store.corrupt] == [(session_id, str(path))]
            await assert_kept_out_of_service(store, session_id)
            return store.corrupt[0].reason
        finally:
            await store.close()

    reason = asyncio.run(run())
    assert path.read_bytes() == data, "a corrupt file is left untouched"
    return reason


def test_a_good_header_alone_is_an_empty_session(data_dir: Path, open_store: OpenStore) -> None:
    path = session_file(data_dir, "hdr")
    path.parent.mkdir(parents=True)
    path.write_bytes(header_bytes())

    async def run() -> None:
        store = await open_store(data_dir)
        assert store.corrupt == []
        assert len(store.get("hdr").log) == 0

    asyncio.run(run())


@pytest.mark.parametrize(("version", "word"), [(1, "newer"), (7, "newer"), (-1, "older")])
def test_a_header_of_another_version_is_corrupt_and_says_which_way(data_dir: Path, version: int, word: str) -> None:
    reason = recovered_problem(data_dir, "hdr", header_bytes(version=version) + b'{"type":"x/y","seq":0}\n')
    assert word in reason


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(header_bytes(sandboxMode="workspace-write"), id="retired-sandboxMode"),
        pytest.param(header_bytes(approvalPolicy="never"), id="retired-approvalPolicy"),
        pytest.param(header_bytes(id="someone-else"), id="id-not-the-file-name"),
        pytest.param(header_bytes(id=None), id="no-id"),
        pytest.param(header_bytes(version=None), id="no-version"),
        pytest.param(header_bytes(version="0"), id="version-a-string"),
        pytest.param(header_bytes(type="turn/start"), id="first-line-not-a-header"),
        pytest.param(header_bytes(createdAt=-5), id="negative-createdAt"),
        pytest.param(header_bytes(cwd="relative/dir"), id="relative-cwd"),
        pytest.param(header_bytes(origin="user"), id="bad-origin"),
        pytest.param(header_bytes(seedLength=-1), id="negative-seedLength"),
        pytest.param(b"", id="empty-file"),
        pytest.param(header_bytes()[:-1], id="header-without-newline"),
        pytest.param(header_bytes()[:30], id="torn-header"),
        pytest.param(b"not json\n", id="header-not-json"),
        pytest.param(b'{"type":"session","type":"session","version":0}\n', id="header-duplicate-key"),
    ],
)
def test_a_refused_header_makes_the_file_corrupt(data_dir: Path, data: bytes) -> None:
    assert recovered_problem(data_dir, "hdr", data)


@pytest.mark.parametrize("name", ["-leading-dash.jsonl", "notes.txt", "space in.jsonl", ".jsonl", "hdr.jsonl.bak"])
def test_a_file_whose_name_is_not_a_valid_id_is_only_reported(data_dir: Path, open_store: OpenStore, name: str) -> None:
    sessions = data_dir / "sessions"
    sessions.mkdir(parents=True)
    stray = sessions / name
    stray.write_bytes(header_bytes())

    async def run() -> None:
        store = await open_store(data_dir)
        assert [Path(corrupt.path).name for corrupt in store.corrupt] == [name]
        assert store.corrupt[0].path == str(stray)
        # nothing else is refused: the names that look like ids stay free to use
        for session_id in ("hdr", "notes.txt", "hdr.jsonl.bak"):
            with pytest.raises(ForklogError) as caught:
                store.get(session_id)
            assert caught.value.code == ErrorCode.SESSION_NOT_FOUND
            await store.create(session_id, b.turns(1, 1), None)
            assert len(store.get(session_id).log) == 11

    asyncio.run(run())
    assert stray.read_bytes() == header_bytes()


# -- torn tails and damage -------------------------------------------------------------------------------------------


def write_session(data_dir: Path, open_store: OpenStore, session_id: str, events: list[dict[str, Any]]) -> bytes:
    async def run() -> bytes:
        store = await open_store(data_dir)
        await store.create(session_id, events, {"cwd": "/work"})
        await store.close()
        return session_file(data_dir, session_id).read_bytes()

    return asyncio.run(run())


def test_a_start_counts_a_sessions_last_change_from_its_file_and_a_cut_tail_keeps_it(
    data_dir: Path, open_store: OpenStore
) -> None:
    """Retention counts from the last change the server acknowledged (spec 14): after a restart, the time its file
    was last written, not the start's; and cutting away a torn tail, never acknowledged, changes nothing of it."""
    committed = write_session(data_dir, open_store, "torn", b.open_turn(1))
    path = session_file(data_dir, "torn")
    path.write_bytes(committed + b'{"type":"assistant/chunk","seq":6,"ti')
    an_hour_ago_ms = wall_clock_ms() - 3_600_000
    os.utime(path, ns=(an_hour_ago_ms * 1_000_000, an_hour_ago_ms * 1_000_000))

    async def next_life() -> int:
        store = await open_store(data_dir)
        changed_at = store.get("torn").view().changed_at
        await store.close()
        return changed_at

    assert asyncio.run(next_life()) == an_hour_ago_ms
    assert path.read_bytes() == committed, "the torn tail is truncated away"
    assert path.stat().st_mtime_ns // 1_000_000 == an_hour_ago_ms
    assert asyncio.run(next_life()) == an_hour_ago_ms


@pytest.mark.parametrize(
    "fragment",
    [
        b'{"type":"assistant/chunk","seq":6,"ti',
        b'{"type":"forklog-test/note","seq":6,"time":1,"data":{}}',  # whole, but its newline never made it
        b"{",
        b"\x00\x00\x00",
    ],
)
def test_a_torn_last_line_is_dropped_and_the_open_turn_goes_on(
    data_dir: Path, open_store: OpenStore, fragment: bytes
) -> None:
    committed = write_session(data_dir, open_store, "torn", b.open_turn(1))
    path = session_file(data_dir, "torn")
    path.write_bytes(committed + fragment)

    async def second_life() -> bytes:
        store = await open_store(data_dir)
        assert store.corrupt == []
        session = store.get("torn")
        assert path.read_bytes() == committed, "the torn tail is truncated away"
        assert (len(session.log), session.view().head.open_turn, session.view().head.forkable) == (6, 1, False)
        stored, _, view = await store.append("torn", b.close_turn(1))
        assert [event["seq"] for event in stored] == [6, 7, 8, 9, 10]
        assert view.head.forkable
        lines = session.log.lines()
        await store.close()
        return lines

    lines = asyncio.run(second_life())

    async def third_life() -> None:
        store = await open_store(data_dir)
        assert store.corrupt == []
        assert store.get("torn").log.lines() == lines
        assert store.get("torn").log.history() == store.get("torn").log.history(10)

    asyncio.run(third_life())


def packed_row(tag: str, seq0: int, time0: int, **data: Any) -> bytes:
    return orjson.dumps({"type": tag, "seq0": seq0, "time0": time0, "data": data})


def test_packed_chunk_rows_in_a_file_expand_to_their_events(data_dir: Path, open_store: OpenStore) -> None:
    committed = write_session(data_dir, open_store, "packed", b.full_turn(1))
    header, *lines = committed.split(b"\n")[:-1]
    chunks = [orjson.loads(line) for line in lines[3:6]]
    assert [chunk["type"] for chunk in chunks] == ["assistant/chunk"] * 3
    time0 = chunks[0]["time"]
    row = packed_row(
        "text-chunks",
        3,
        time0,
        turn=1,
        step=1,
        index=0,
        dt=[chunks[1]["time"] - time0, chunks[2]["time"] - chunks[1]["time"]],
        texts=[chunk["data"]["chunk"]["text"] for chunk in chunks],
    )
    path = session_file(data_dir, "packed")
    path.write_bytes(b"\n".join([header, *lines[:3], row, *lines[6:]]) + b"\n")

    async def run() -> None:
        store = await open_store(data_dir)
        assert store.corrupt == []
        assert store.get("packed").log.lines() == b"\n".join(lines) + b"\n"

    asyncio.run(run())


def _replace_line(number: int, new: bytes) -> Any:
    def damage(lines: list[bytes]) -> list[bytes]:
        return [*lines[:number], new, *lines[number + 1 :]]

    return damage


def _event_line(**event: Any) -> bytes:
    return orjson.dumps(event)


MID_LOG_DAMAGE = {
    # line numbers count the header as line 0; the session is two complete turns (events 0..21, lines 1..22)
    "unparsable-line": _replace_line(5, b'{"type":"assistant/chunk","seq":4,'),
    "not-an-object": _replace_line(5, b"[1, 2, 3]"),
    "duplicate-key": _replace_line(1, b'{"type":"turn/start","type":"turn/start","seq":0,"time":1,"data":{"turn":1}}'),
    "empty-line": lambda lines: [*lines[:5], b"", *lines[5:]],
    "blank-line": lambda lines: [*lines[:5], b"   ", *lines[5:]],
    "empty-last-line": lambda lines: [*lines, b""],
    "seq-gap": lambda lines: [*lines[:5], *lines[6:]],
    "seq-repeated": lambda lines: [*lines[:5], lines[4], *lines[5:]],
    "event-without-time": _replace_line(1, b'{"type":"turn/start","seq":0,"data":{"turn":1}}'),
    "packed-row-dt-too-short": lambda lines: [
        *lines[:4],
        packed_row("text-chunks", 3, 5, turn=1, step=1, index=0, dt=[0], texts=["a", "b", "c"]),
        *lines[7:],
    ],
    "packed-row-extra-key": lambda lines: [
        *lines[:4],
        packed_row("text-chunks", 3, 5, turn=1, step=1, index=0, dt=[0, 0], texts=["a", "b", "c"], extra=1),
        *lines[7:],
    ],
    "packed-row-empty-texts": lambda lines: [
        *lines[:4],
        packed_row("reasoning-chunks", 3, 5, turn=1, step=1, index=0, dt=[], texts=[]),
        *lines[4:],
    ],
    "wrong-turn-number": _replace_line(
        12, _event_line(type="turn/start", seq=11, time=1785331618309, data={"turn": 3})
    ),
    "step-ended-twice": _replace_line(
        9, _event_line(type="step/end", seq=8, time=1785331618309, data={"turn": 1, "step": 1})
    ),
    "retired-event-type": _replace_line(
        20, _event_line(type="request/header-delta", seq=19, time=1785331618309, data={})
    ),
}


@pytest.mark.parametrize("damage", list(MID_LOG_DAMAGE), ids=list(MID_LOG_DAMAGE))
def test_damage_inside_the_log_keeps_the_session_out_of_service(
    data_dir: Path, open_store: OpenStore, damage: str
) -> None:
    write_session(data_dir, open_store, "healthy", b.turns(1, 2))
    committed = write_session(data_dir, open_store, "damaged", b.turns(1, 2))
    lines = committed.split(b"\n")[:-1]
    assert len(lines) == 23
    damaged = b"\n".join(MID_LOG_DAMAGE[damage](lines)) + b"\n"
    path = session_file(data_dir, "damaged")
    path.write_bytes(damaged)

    async def run() -> None:
        store = await open_store(data_dir)
        assert [(corrupt.id, corrupt.path) for corrupt in store.corrupt] == [("damaged", str(path))]
        assert store.corrupt[0].reason
        await assert_kept_out_of_service(store, "damaged")
        with pytest.raises(ForklogError) as caught:
            await store.fork("healthy", child_id="damaged")
        assert caught.value.code == ErrorCode.SESSION_CORRUPT
        # every other session serves
        stored, _, _ = await store.append("healthy", b.full_turn(3))
        assert stored[0]["seq"] == 22
        await store.fork("healthy", child_id="healthy-child")
        await store.close()

    asyncio.run(run())
    assert path.read_bytes() == damaged, "a corrupt file is left untouched"
    # and it stays corrupt across another restart (nothing was repaired behind the operator's back)
    assert recovered_problem(data_dir, "damaged", damaged)


def test_a_corrupt_log_with_a_torn_tail_is_not_truncated(data_dir: Path, open_store: OpenStore) -> None:
    committed = write_session(data_dir, open_store, "damaged", b.turns(1, 1))
    lines = committed.split(b"\n")[:-1]
    damaged = b"\n".join([*lines[:3], *lines[4:]]) + b'\n{"type":"tu'
    assert recovered_problem(data_dir, "damaged", damaged)


# -- one owner per directory -----------------------------------------------------------------------------------------


def owner(data_dir: Path) -> FileBackend:
    return FileBackend(data_dir, clock=wall_clock_ms, compression="none")


def test_a_second_owner_of_the_same_directory_is_refused(data_dir: Path) -> None:
    first = owner(data_dir)
    try:
        with pytest.raises(DataDirLocked) as caught:
            owner(data_dir)
        assert str(data_dir) in str(caught.value)
    finally:
        asyncio.run(first.close())
    asyncio.run(owner(data_dir).close())  # free again once the owner is gone


def test_a_second_process_on_the_same_directory_exits_with_the_path(data_dir: Path) -> None:
    snippet = "import sys; from app.backends.files import FileBackend; FileBackend(sys.argv[1], clock=lambda: 0)"
    first = owner(data_dir)
    try:
        refused = subprocess.run(
            [sys.executable, "-c", snippet, str(data_dir)], cwd=REPO, capture_output=True, text=True, timeout=30
        )
    finally:
        asyncio.run(first.close())
    assert refused.returncode != 0
    assert str(data_dir) in refused.stderr
    allowed = subprocess.run(
        [sys.executable, "-c", snippet, str(data_dir)], cwd=REPO, capture_output=True, text=True, timeout=30
    )
    assert allowed.returncode == 0, allowed.stderr


def test_a_folder_left_in_tmp_does_not_stop_recovery(data_dir: Path, open_store: OpenStore) -> None:
    async def scenario() -> None:
        store = await open_store(data_dir)
        await store.create("s", b.turns(1, 1), None)
        await store.close()
        (data_dir / "tmp" / "odd.dir" / "inner").mkdir(parents=True)
        (data_dir / "index" / "gone.idx").mkdir()  # an orphan index that is a folder
        again = await open_store(data_dir)
        assert again.service.ready and again.corrupt == []
        assert len(again.get("s").log) == len(b.turns(1, 1))
        assert list((data_dir / "tmp").iterdir()) == []

    asyncio.run(scenario())
