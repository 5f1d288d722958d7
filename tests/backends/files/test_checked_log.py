"""A worker's check of a whole file (:class:`CheckedLog`): the same verdict, and the same checkpoint record, as the
log a start in one process recovers from the same bytes."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import orjson
import pytest

from app.backends.files.checkpoints.records import encode_record
from app.backends.files.start.log_check import WINDOW_BYTES, CorruptLog, check_log, recover_log
from app.backends.log_parts import log_since
from app.domain.log import SessionLog, seed_log
from app.domain.session import SessionKey
from tests.backends.files import builders as b
from tests.backends.files.builders import packed

T0 = 1_785_000_000_000
KEY = SessionKey("default", "checked")


def file_of(events: list[dict[str, Any]]) -> bytes:
    header = {"type": "session", "version": 0, "id": KEY.id, "createdAt": T0, "cwd": "/w"}
    return orjson.dumps(header) + b"\n" + seed_log(events, now=T0).lines()


def recovered_log(data: bytes) -> SessionLog:
    log = recover_log(KEY.id, data, now=T0).log
    assert isinstance(log, SessionLog)  # (a log recovered from no checkpoint is never a frozen one)
    return log


@pytest.mark.parametrize("shape", ["canonical", "packed row", "torn tail", "open last turn"])
def test_a_workers_check_gives_the_record_of_the_log_a_start_recovers(shape: str) -> None:
    events = b.turns(1, 300) + (b.open_turn(301) if shape == "open last turn" else [])
    data = file_of(events)
    assert len(data) > 4 * WINDOW_BYTES  # checked over several windows, looking back at earlier ones
    if shape == "packed row":
        data = packed(data)
    elif shape == "torn tail":
        data += b'{"type":"assistant/chunk","seq":'

    header, checked, mirrored = check_log(KEY.id, data, now=T0)
    recovered = recover_log(KEY.id, data, now=T0)
    log = recovered_log(data)

    assert mirrored == (shape != "packed row")  # a packed row is expanded: the log's lines are not the file's
    assert header == recovered.header
    assert len(checked) == recovered.events == len(events)
    assert checked.lines() == log.lines()
    record = b"".join(encode_record(KEY, header.instance, checked.delta()))
    assert record == b"".join(encode_record(KEY, header.instance, log_since(log, 0, 0)))
    for seq in (0, 1, 7, len(events) // 2, len(events) - 1):
        assert checked.event(seq) == log.event(seq)


def test_a_worker_refuses_a_file_with_the_reason_a_start_gives() -> None:
    lines = file_of(b.turns(1, 300)).split(b"\n")
    far = len(lines) - 20  # in a later window: the rules' state was carried over from the earlier ones
    event = orjson.loads(lines[far])
    assert event["type"] == "assistant/chunk"
    event["data"]["step"] = 2  # a chunk of a step that is not open: the common shape, but the rules refuse it
    lines[far] = orjson.dumps(event)
    data = b"\n".join(lines)

    with pytest.raises(CorruptLog) as in_one_process:
        recover_log(KEY.id, data, now=T0)
    with pytest.raises(CorruptLog) as by_a_worker:
        check_log(KEY.id, data, now=T0)
    assert by_a_worker.value.reason == in_one_process.value.reason
    assert f"event seq {far - 1} breaks the rules" in by_a_worker.value.reason
    assert by_a_worker.value.created_at == in_one_process.value.created_at == T0


def test_a_check_worker_starts_without_importing_the_backend() -> None:
    imported = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, app.backends.files.start.parallel_checks; print('app.backends.files.backend' in sys.modules)",
        ],
        capture_output=True,
        check=True,
        text=True,
    )
    assert imported.stdout.strip() == "False"  # a worker process imports the checker alone (asyncio and all not)
