"""Conformance with DSH on its own logs (spec 1.4 "Parity with DSH", ../shared/fixtures/README.md).

Each ``NAME.jsonl`` is seeded into a session; forklog must give DSH's verdict (``NAME.expected.json``), and for an
accepted log the same model history, the same event count and turn/end seqs, and a fork at every turn/end whose
history is the log's history at that seq, leaving the source unchanged.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from app.domain.dsh_records import decode_line
from app.domain.errors import ErrorCode, SessionError
from tests.domain.builders import make_store

LOGS = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "dsh-logs"
NAMES = sorted(path.name for path in LOGS.glob("*.jsonl")) if LOGS.is_dir() else ["(no fixture logs)"]


def expected_path(log: Path) -> Path:
    return log.with_name(log.name.removesuffix(".jsonl") + ".expected.json")


def read_events(log: Path) -> list[Any]:
    """The events of a DSH log: line 1 (the header) skipped, packed chunk rows expanded."""
    lines = log.read_bytes().split(b"\n")
    assert json.loads(lines[0])["type"] == "session"
    events: list[Any] = []
    for line in lines[1:]:
        if line.strip():
            events += decode_line(line)
    return events


def test_every_log_has_its_expected_verdict(dsh_logs_dir: Path) -> None:
    logs = sorted(dsh_logs_dir.glob("*.jsonl"))
    assert logs, f"no *.jsonl in {dsh_logs_dir}"
    verdicts = {json.loads(expected_path(log).read_text())["verdict"] for log in logs}
    assert verdicts == {"accept", "reject"}


@pytest.mark.parametrize("name", NAMES)
def test_forklog_agrees_with_dsh_on_its_log(dsh_logs_dir: Path, name: str) -> None:
    log = dsh_logs_dir / name
    expected = json.loads(expected_path(log).read_text())
    events = read_events(log)
    assert len(events) == expected["eventCount"]
    store = make_store()

    if expected["verdict"] == "reject":
        with pytest.raises(SessionError) as caught:
            store.create("src", events)
        assert caught.value.code == ErrorCode.INVALID_SEED
        # DSH checks shapes before relations, so its index is never lower than the lowest bad one forklog names
        dsh_index = re.search(r"at index (\d+)", expected["reason"])
        if dsh_index:
            assert caught.value.facts["index"] <= int(dsh_index.group(1))
        return

    assert expected["verdict"] == "accept"
    source = store.create("src", events)
    stored = source.log.events()
    assert stored == events  # the seed is kept exactly, seq and time included
    assert store.history("src") == (expected["history"], expected["eventCount"])
    turn_ends = [item["seq"] for item in stored if item["type"] == "turn/end"]
    assert turn_ends == expected["turnEndSeqs"]
    assert source.view().head.last_turn_end_seq == (turn_ends[-1] if turn_ends else None)

    before = (source.log.lines(), source.log.history(), source.view())
    for seq in expected["turnEndSeqs"]:
        child = store.fork("src", at_seq=seq)
        at_boundary, count = store.history("src", seq)
        assert count == len(events)
        assert store.history(child.id) == (at_boundary, seq + 1)
        assert child.log.events() == events[: seq + 1]
        assert child.header.seed_length == seq + 1
        # the history of the log up to that seq, derived on its own: a session seeded with just that prefix
        assert at_boundary == make_store().create("p", events[: seq + 1]).log.history()
    assert (source.log.lines(), source.log.history(), source.view()) == before
