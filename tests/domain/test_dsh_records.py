"""DSH storage records (facts 6.4 and the packed-row appendix): row expansion, malformed rows, header checks.

The expected expansions and the malformed-row verdicts are the ones DSH's own ``decodeStorageRecord`` gives
(``../shared/tools/dsh-oracle``), the header verdicts those of DSH's header validation (facts 4.2).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.domain.dsh_records import (
    MalformedRecord,
    canonical_header,
    decode_line,
    encode_header,
    expand_record,
    header_from_record,
    header_problem,
    may_round_trip_lossily,
    parse_line,
)
from app.domain.jsonvalue import JsonSyntaxError

TEXT_ROW: dict[str, Any] = {
    "type": "text-chunks",
    "seq0": 3,
    "time0": 100,
    "data": {"turn": 1, "step": 2, "index": 0, "dt": [5, -2], "texts": ["a", "b", "c"]},
}
TOOL_ROW: dict[str, Any] = {
    "type": "tool-call-chunks",
    "seq0": 10,
    "time0": 7,
    "data": {
        "turn": 2,
        "step": 1,
        "index": 1,
        "id": "call-1",
        "name": "shell",
        "dt": [0, 4],
        "args": ["{", '"a"', "}"],
    },
}


def as_text(value: Any) -> str:
    """JSON text with keys in their dict order: equality of this also checks key order."""
    return json.dumps(value, ensure_ascii=False)


def chunk_event(seq: int, time: int, turn: int, step: int, chunk: dict[str, Any]) -> dict[str, Any]:
    return {"type": "assistant/chunk", "seq": seq, "time": time, "data": {"turn": turn, "step": step, "chunk": chunk}}


# -- expansion -----------------------------------------------------------------------------------------------------


def test_text_chunks_expand_to_text_deltas_with_summed_gaps() -> None:
    expected = [
        chunk_event(3, 100, 1, 2, {"type": "text-delta", "index": 0, "text": "a"}),
        chunk_event(4, 105, 1, 2, {"type": "text-delta", "index": 0, "text": "b"}),
        chunk_event(5, 103, 1, 2, {"type": "text-delta", "index": 0, "text": "c"}),  # a negative gap
    ]
    assert as_text(expand_record(copy.deepcopy(TEXT_ROW))) == as_text(expected)


def test_reasoning_chunks_expand_to_reasoning_deltas() -> None:
    row = {**copy.deepcopy(TEXT_ROW), "type": "reasoning-chunks"}
    expanded = expand_record(row)
    assert [item["data"]["chunk"] for item in expanded] == [
        {"type": "reasoning-delta", "index": 0, "text": text} for text in "abc"
    ]
    assert as_text(expanded[0]["data"]["chunk"]) == '{"type": "reasoning-delta", "index": 0, "text": "a"}'


def test_tool_call_chunks_with_a_name() -> None:
    parts = [(7, "{"), (7, '"a"'), (11, "}")]
    expected = [
        chunk_event(
            10 + k,
            time,
            2,
            1,
            {"type": "tool-call-delta", "index": 1, "id": "call-1", "name": "shell", "argumentsDelta": part},
        )
        for k, (time, part) in enumerate(parts)
    ]
    assert as_text(expand_record(copy.deepcopy(TOOL_ROW))) == as_text(expected)


def test_tool_call_chunks_without_a_name() -> None:
    row = copy.deepcopy(TOOL_ROW)
    del row["data"]["name"]
    expanded = expand_record(row)
    assert [as_text(item["data"]["chunk"]) for item in expanded] == [
        as_text({"type": "tool-call-delta", "index": 1, "id": "call-1", "argumentsDelta": part})
        for part in ["{", '"a"', "}"]
    ]


def test_a_single_member_row_and_negative_times() -> None:
    row = {
        "type": "text-chunks",
        "seq0": 0,
        "time0": -5,
        "data": {"turn": 1, "step": 1, "index": 2, "dt": [], "texts": ["x"]},
    }
    assert expand_record(row) == [chunk_event(0, -5, 1, 1, {"type": "text-delta", "index": 2, "text": "x"})]


def test_turn_step_and_index_are_kept_as_written() -> None:
    row = copy.deepcopy(TEXT_ROW)
    row["data"].update(turn=1.5, step=2.0, index=3)
    expanded = expand_record(row)
    assert {(item["data"]["turn"], item["data"]["step"], item["data"]["chunk"]["index"]) for item in expanded} == {
        (1.5, 2.0, 3)
    }


@pytest.mark.parametrize(
    "record",
    [
        {"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1}},
        {"type": "assistant/chunk", "seq": 0, "time": 1, "data": {"turn": 1, "step": 1, "chunk": {}}},
        {"type": "text-chunk", "seq0": 0},
        ["not", "an", "object"],
        None,
        5,
    ],
)
def test_any_other_record_is_itself(record: Any) -> None:
    assert expand_record(copy.deepcopy(record)) == [record]


def test_decode_line_parses_and_expands() -> None:
    assert decode_line(json.dumps(TEXT_ROW).encode()) == expand_record(copy.deepcopy(TEXT_ROW))
    assert decode_line(b'{"type":"x","seq":0,"time":1,"data":null}') == [
        {"type": "x", "seq": 0, "time": 1, "data": None}
    ]


# -- malformed rows ------------------------------------------------------------------------------------------------


def text_row(**changes: Any) -> dict[str, Any]:
    row = copy.deepcopy(TEXT_ROW)
    for key, value in changes.items():
        target = row["data"] if key.startswith("d_") else row
        name = key.removeprefix("d_")
        if value is DROP:
            del target[name]
        else:
            target[name] = value
    return row


def tool_row(**changes: Any) -> dict[str, Any]:
    row = copy.deepcopy(TOOL_ROW)
    for key, value in changes.items():
        if value is DROP:
            del row["data"][key]
        else:
            row["data"][key] = value
    return row


DROP = object()

MALFORMED = [
    pytest.param(text_row(extra=1), "envelope must be exactly", id="envelope-extra-key"),
    pytest.param(text_row(seq0=DROP), "envelope must be exactly", id="envelope-no-seq0"),
    pytest.param({**text_row(seq0=DROP), "seq": 3}, "envelope must be exactly", id="envelope-seq-not-seq0"),
    pytest.param(text_row(seq0=-1), "seq0", id="seq0-negative"),
    pytest.param(text_row(seq0=1.5), "seq0", id="seq0-fraction"),
    pytest.param(text_row(seq0="3"), "seq0", id="seq0-string"),
    pytest.param(text_row(seq0=2**53), "seq0", id="seq0-unsafe"),
    pytest.param(text_row(time0="100"), "time0", id="time0-string"),
    pytest.param(text_row(time0=0.5), "time0", id="time0-fraction"),
    pytest.param(text_row(time0=None), "time0", id="time0-null"),
    pytest.param(text_row(data=[]), "data must be", id="data-array"),
    pytest.param(text_row(data=None), "data must be", id="data-null"),
    pytest.param(text_row(d_extra=1), "data must be exactly", id="data-extra-key"),
    pytest.param(text_row(d_dt=DROP), "data must be exactly", id="data-no-dt"),
    pytest.param(text_row(d_id="x"), "data must be exactly", id="text-row-with-id"),
    pytest.param(text_row(d_args=["a"], d_texts=DROP), "data must be exactly", id="text-row-with-args"),
    pytest.param(text_row(d_index="0"), "numbers", id="index-string"),
    pytest.param(text_row(d_turn="1"), "numbers", id="turn-string"),
    pytest.param(text_row(d_step=None), "numbers", id="step-null"),
    pytest.param(text_row(d_texts=[], d_dt=[]), "non-empty string array", id="texts-empty"),
    pytest.param(text_row(d_texts=["a", 1, "c"]), "non-empty string array", id="texts-number"),
    pytest.param(text_row(d_texts="abc"), "non-empty string array", id="texts-string"),
    pytest.param(text_row(d_dt=[1.5, 2]), "dt must be", id="dt-fraction"),
    pytest.param(text_row(d_dt=["1", 2]), "dt must be", id="dt-string"),
    pytest.param(text_row(d_dt=5), "dt must be", id="dt-number"),
    pytest.param(text_row(d_dt=[1]), "dt length 1 does not match 3 members", id="dt-short"),
    pytest.param(text_row(d_dt=[1, 2, 3]), "dt length 3 does not match 3 members", id="dt-long"),
    pytest.param(text_row(time0=2**53 - 2, d_dt=[1, 1]), "member times", id="time-overflow"),
    pytest.param(text_row(time0=-(2**53) + 2, d_dt=[-1, -1]), "member times", id="time-underflow"),
    pytest.param(
        {**text_row(), "type": "reasoning-chunks", "data": tool_row()["data"]},
        "data must be exactly",
        id="reasoning-row-with-tool-data",
    ),
    pytest.param(tool_row(name=None), "strings", id="tool-name-null"),
    pytest.param(tool_row(name=5), "strings", id="tool-name-number"),
    pytest.param(tool_row(id=5), "strings", id="tool-id-number"),
    pytest.param(tool_row(id=DROP), "data must be exactly", id="tool-no-id"),
    pytest.param(tool_row(texts=["a"], args=DROP), "data must be exactly", id="tool-row-with-texts"),
    pytest.param(tool_row(args=[]), "non-empty string array", id="tool-args-empty"),
    pytest.param(tool_row(extra=True), "data must be exactly", id="tool-data-extra-key"),
]


@pytest.mark.parametrize(("row", "fragment"), MALFORMED)
def test_malformed_rows_are_refused(row: dict[str, Any], fragment: str) -> None:
    with pytest.raises(MalformedRecord, match=f"^malformed {row['type']} storage row: ") as caught:
        expand_record(row)
    assert fragment in str(caught.value)


def test_a_line_that_breaks_lossless_json_is_malformed() -> None:
    with pytest.raises(MalformedRecord, match=r"data\.x"):
        parse_line(b'{"type":"x","seq":0,"time":1,"data":{"x":-0}}')
    with pytest.raises(MalformedRecord, match="duplicate"):
        decode_line(b'{"type":"x","type":"y","seq":0,"time":1,"data":null}')


@pytest.mark.parametrize(
    "text",
    [
        b'{"seq":1,"time":1e20}',
        b'{"n":[1,2.5E-7]}',
        b"1e5",
        b'{"n":12345678901234567}',
        b'{"n":[-9007199254740993]}',
        b"12345678901234567",
        b'{"n":-0.0}',
        b"-0.0",
        b'{"a":[1,-0.0]}',
        # in a window of lines, at the start of a line
        b'{"a":1}\n{"n":1e20}\n',
        b'{"a":1}\n-0.0\n',
        b'{"a":"x"}\n12345678901234567\n',
        b'{"a":"re-enter"}\n-1.5e-7\n',
        b'{"n":-12345678901234567}',
        b'{"n":[0,-1E5]}',
    ],
)
def test_every_number_orjson_may_read_lossily_is_flagged(text: bytes) -> None:
    assert may_round_trip_lossily(text)


@pytest.mark.parametrize(
    "text",
    [
        orjson.dumps({"id": "demo", "instance": "0e3f5b1a9c7d4e2f8a6b0c1d2e3f4a5b"}),
        orjson.dumps({"data": {"sha": "3e5a0e1d" * 8, "digits": "12345678901234567890", "neg": "x-0.0"}}),
        b'{"seq":900719925474099,"time":1700000000000,"x":-0.5,"y":1.25}',
    ],
)
def test_hex_and_digits_inside_strings_and_safe_numbers_are_not_flagged(text: bytes) -> None:
    assert not may_round_trip_lossily(text)
    assert parse_line(text) == orjson.loads(text)


@pytest.mark.parametrize(
    "text",
    [
        orjson.dumps({"text": "re-enter the pre-existing e-mail, co-exist -e -E 9-e"}),
        orjson.dumps({"ids": ["a3bef3ac9f8e1", "0e0e0e", "x-0.0e5", "1-2-3-4-5-6-7-8-9-0-1-2-3-4-5-6-7"]}),
        b'{"n":-15}\n{"m":[-1234,-0.5,-90071992547409]}\n',
    ],
)
def test_words_hex_and_safe_signed_numbers_are_not_flagged(text: bytes) -> None:
    assert not may_round_trip_lossily(text)


def _numbers_read_lossily(value: Any) -> bool:
    """Whether ``value`` holds a number whose canonical text orjson may read lossily, by the definition: an exponent,
    16+ characters, or negative zero."""
    if isinstance(value, dict):
        return any(_numbers_read_lossily(item) for item in value.values())
    if isinstance(value, list):
        return any(_numbers_read_lossily(item) for item in value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    text = orjson.dumps(value)
    return b"e" in text or b"E" in text or len(text) >= 16 or text.startswith(b"-0.0")


_NUMBERS = st.integers(min_value=-(2**63), max_value=2**64 - 1) | st.floats(allow_nan=False, allow_infinity=False)
_STRINGS = st.text(alphabet="0123456789abcdefEe.-:,[ ", max_size=40)
_VALUES = st.recursive(
    _NUMBERS | _STRINGS | st.booleans() | st.none(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_STRINGS, inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_VALUES, min_size=1, max_size=4))
def test_every_lossy_number_of_a_window_of_lines_is_flagged(values: list[Any]) -> None:
    window = b"".join(orjson.dumps(value) + b"\n" for value in values)
    if any(_numbers_read_lossily(value) for value in values):
        assert may_round_trip_lossily(window)
        assert may_round_trip_lossily(b"[" + window[:-1].replace(b"\n", b",") + b"]")


def test_a_line_that_is_not_json_is_a_syntax_error() -> None:
    with pytest.raises(JsonSyntaxError):
        decode_line(b'{"type":"x",')


# -- headers -------------------------------------------------------------------------------------------------------


def header(**changes: Any) -> dict[str, Any]:
    record: dict[str, Any] = {"type": "session", "version": 0, "id": "s1", "createdAt": 1785000000000}
    record.update(changes)
    return {key: value for key, value in record.items() if value is not DROP}


@pytest.mark.parametrize(
    "record",
    [
        header(),
        header(cwd="/workspace", delegationDepth=0),
        header(
            cwd="/",
            parentSession="",
            seedLength=0,
            origin="subagent",
            delegationDepth=3,
            agentPreset="",
            instance="9b1d",
        ),
        header(createdAt=0),
        header(version=0.0, createdAt=5.0),
        header(futureField={"anything": 1}),
    ],
)
def test_headers_dsh_accepts(record: dict[str, Any]) -> None:
    assert header_problem(record, "s1") is None


@pytest.mark.parametrize("version", [1, 2, 0.5, 99])
def test_a_newer_version_says_newer(version: float) -> None:
    problem = header_problem(header(version=version, id="other", sandboxMode="x"), "s1")
    assert problem is not None
    assert "newer" in problem
    assert "older" not in problem


@pytest.mark.parametrize("version", [-1, -0.5])
def test_an_older_version_says_older(version: float) -> None:
    problem = header_problem(header(version=version, createdAt="bad"), "s1")
    assert problem is not None
    assert "older" in problem
    assert "newer" not in problem


@pytest.mark.parametrize(
    ("record", "fragment"),
    [
        (None, "not a session header"),
        ([], "not a session header"),
        ({"version": 0, "id": "s1", "createdAt": 1}, "not a session header"),
        (header(type="turn/start"), "not a session header"),
        (header(version=DROP), "version"),
        (header(version="0"), "version"),
        (header(version=False), "version"),
        (header(version=None), "version"),
        (header(sandboxMode="workspace-write"), "sandboxMode"),
        (header(approvalPolicy="never"), "approvalPolicy"),
        (header(sandboxMode=None), "sandboxMode"),
        (header(id="s2"), "does not match"),
        (header(id=DROP), "does not match"),
        (header(id=5), "does not match"),
        (header(createdAt=DROP), "createdAt"),
        (header(createdAt=-1), "createdAt"),
        (header(createdAt=1.5), "createdAt"),
        (header(createdAt="1785000000000"), "createdAt"),
        (header(createdAt=2**53), "createdAt"),
        (header(createdAt=None), "createdAt"),
        (header(cwd="workspace"), "cwd"),
        (header(cwd="./w"), "cwd"),
        (header(cwd="C:/w"), "cwd"),
        (header(cwd=""), "cwd"),
        (header(cwd=5), "cwd"),
        (header(parentSession=5), "parentSession"),
        (header(seedLength=-1), "seedLength"),
        (header(seedLength=1.5), "seedLength"),
        (header(delegationDepth=-1), "delegationDepth"),
        (header(delegationDepth="0"), "delegationDepth"),
        (header(origin="main"), "origin"),
        (header(agentPreset=5), "agentPreset"),
        (header(instance=""), "instance"),
        (header(instance=5), "instance"),
    ],
)
def test_headers_that_are_refused(record: Any, fragment: str) -> None:
    problem = header_problem(record, "s1")
    assert problem is not None
    assert fragment in problem


@pytest.mark.parametrize("key", ["cwd", "parentSession", "seedLength", "origin", "delegationDepth", "agentPreset"])
def test_a_null_optional_header_field_is_refused_as_dsh_does(key: str) -> None:
    # DSH's header validation refuses e.g. "cwd": null ("session header cwd must be a string"): absent is not null
    problem = header_problem(header(**{key: None}), "s1")
    assert problem is not None
    assert key in problem


CANONICAL = {
    "type": "session",
    "version": 0,
    "id": "s-1",
    "createdAt": 1785331618309,
    "delegationDepth": 0,
    "instance": "0e3f5b1a9c7d4e2f8a6b0c1d2e3f4a5b",
}


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"cwd": "/work/é"},
        {"parentSession": "p", "seedLength": 12, "origin": "subagent", "delegationDepth": 2, "agentPreset": ""},
        {"cwd": "/", "parentSession": "", "seedLength": 0},
    ],
)
def test_a_header_as_forklog_writes_it_is_read_without_the_exact_parser_and_reads_the_same(
    fields: dict[str, Any],
) -> None:
    record: dict[str, Any] = {**CANONICAL, **fields}
    header = header_from_record(record, "s-1")
    line = encode_header(header)[:-1]
    fast = canonical_header(line, "s-1")
    assert fast == header
    assert header_problem(parse_line(line), "s-1") is None


@pytest.mark.parametrize(
    "line",
    [
        b'{"type":"session","version":0,"id":"s-1","createdAt":01,"delegationDepth":0,"instance":"' + b"a" * 32 + b'"}',
        b'{"type":"session","version":0,"id":"s-1","createdAt":1,"cwd":"/a\\"b","delegationDepth":0,"instance":"'
        + b"a" * 32
        + b'"}',
        b'{"type":"session","version":0,"id":"s-1","createdAt":1,"cwd":"rel","delegationDepth":0,"instance":"'
        + b"a" * 32
        + b'"}',
        b'{"type":"session","version":0,"id":"s-2","createdAt":1,"delegationDepth":0,"instance":"' + b"a" * 32 + b'"}',
        b'{"type":"session","version":0,"id":"s-1","createdAt":9007199254740993,"delegationDepth":0,"instance":"'
        + b"a" * 32
        + b'"}',
        b'{"type":"session","version":0,"id":"s-1","createdAt":1,"delegationDepth":0,"instance":"' + b"A" * 32 + b'"}',
        b'{"type":"session","version":0,"id":"s-1","createdAt":1,"agentPreset":"\xff","delegationDepth":0,"instance":"'
        + b"a" * 32
        + b'"}',
    ],
)
def test_any_other_header_line_takes_the_exact_path(line: bytes) -> None:
    assert canonical_header(line, "s-1") is None
