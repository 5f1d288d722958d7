"""Lossless JSON (spec 1.1): what is refused, what is accepted and how, and where each break is reported."""

from __future__ import annotations

import math
import sys
from typing import Any

import pytest

from app.domain.jsonvalue import (
    MAX_DEPTH,
    JsonSyntaxError,
    JsonTooDeep,
    dumps,
    is_marker,
    json_equal,
    loads,
)


def break_paths(document: str | bytes) -> list[tuple[str | int, ...]]:
    _, breaks = loads(document.encode() if isinstance(document, str) else document)
    return [found.path for found in breaks]


def only_break(document: str) -> str:
    """The reason of the single break in ``{"x": <document>}``, which must sit at ("x",)."""
    _, breaks = loads(('{"x": ' + document + "}").encode())
    assert [found.path for found in breaks] == [("x",)], breaks
    return breaks[0].reason


def accepted(document: str) -> object:
    value, breaks = loads(document.encode())
    assert breaks == [], breaks
    return value


# -- plain JSON ----------------------------------------------------------------------------------------------------


def test_parses_every_json_kind_without_breaks() -> None:
    value = accepted('{"a": [1, -2, 2.5, "x", null, true, false, {}, []], "b": {"c": "\\u00e9\\n"}}')
    assert value == {"a": [1, -2, 2.5, "x", None, True, False, {}, []], "b": {"c": "é\n"}}


def test_accepts_str_as_well_as_bytes() -> None:
    assert loads('{"a": 1}') == ({"a": 1}, [])


def test_integers_stay_integers_and_fractions_stay_floats() -> None:
    value = accepted("[1, 1.0, 1e2]")
    assert value == [1, 1.0, 100.0]
    assert isinstance(value, list)
    assert type(value[0]) is int


# -- duplicate keys ------------------------------------------------------------------------------------------------


def test_duplicate_key_is_a_break_at_the_object() -> None:
    _, breaks = loads(b'{"events": [{}, {}, {"data": {"x": 1, "y": 2, "x": 1}}]}')
    assert [found.path for found in breaks] == [("events", 2, "data")]
    assert "duplicate key 'x'" in breaks[0].reason


def test_keys_equal_after_unescaping_are_duplicates() -> None:
    assert break_paths('{"a": 1, "\\u0061": 2}') == [()]


def test_keys_that_differ_only_in_case_are_not_duplicates() -> None:
    assert accepted('{"a": 1, "A": 2}') == {"a": 1, "A": 2}


# -- -0 ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("notation", ["-0", "-0.0", "-0e0", "-0E+3", "-0.000e-5", "-0e10", "-0.0E0"])
def test_negative_zero_is_refused_in_every_notation(notation: str) -> None:
    assert "-0" in only_break(notation)


@pytest.mark.parametrize("notation", ["0", "0.0", "0e5", "0E-3", "0.000"])
def test_positive_zero_is_accepted(notation: str) -> None:
    value = accepted(notation)
    assert value == 0


@pytest.mark.parametrize("notation", ["1e-400", "-1e-400", "-2.5e-500", "0.1e-330"])
def test_nonzero_underflow_is_accepted_as_positive_zero(notation: str) -> None:
    value = accepted(notation)
    assert value == 0
    assert isinstance(value, float)
    assert math.copysign(1.0, value) == 1.0, "underflow must not produce -0"


def test_smallest_subnormal_is_kept() -> None:
    assert accepted("5e-324") == 5e-324


# -- infinities and non-numbers ------------------------------------------------------------------------------------


@pytest.mark.parametrize("notation", ["1e400", "-1e400", "1.8e308", "-123456789e305"])
def test_overflow_to_infinity_is_refused(notation: str) -> None:
    assert "out of range" in only_break(notation)


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", '{"a": [1, NaN]}', '{"a": -0, "b": NaN}'])
def test_nan_and_infinity_literals_are_not_json(literal: str) -> None:
    # Not a value JSON can carry losslessly but no JSON at all: the document does not parse (INVALID_REQUEST).
    with pytest.raises(JsonSyntaxError, match="not a JSON value"):
        loads(literal)


def test_largest_finite_double_is_refused_as_an_unsafe_integer_not_accepted() -> None:
    # 1.7976931348623157e308 is finite but integral and far beyond 2^53 - 1.
    assert "2^53" in only_break("1.7976931348623157e308")


# -- integers beyond +-(2^53 - 1) ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "notation",
    [
        "9007199254740992",
        "-9007199254740992",
        "9007199254740993",
        "9007199254740992.0",
        "-9007199254740992.0",
        "1e16",
        "1E16",
        "9.007199254740992e15",
        "90071992547409920e-1",
        "12345678901234567890",
        "-100000000000000000000000",
        "1e300",
    ],
)
def test_integers_beyond_the_safe_range_are_refused_whatever_the_notation(notation: str) -> None:
    assert "2^53" in only_break(notation)


@pytest.mark.parametrize(
    ("notation", "expected"),
    [
        ("9007199254740991", 2**53 - 1),
        ("-9007199254740991", -(2**53 - 1)),
        ("9007199254740991.0", 2**53 - 1),
        ("9.007199254740991e15", 2**53 - 1),
        ("1e15", 10**15),
        ("123456789012345.5", 123456789012345.5),
    ],
)
def test_safe_integers_and_non_integral_numbers_are_accepted(notation: str, expected: float) -> None:
    assert accepted(notation) == expected


# -- surrogates ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("escape", ["\\ud800", "\\udbff", "\\udc00", "\\udfff", "\\ude00\\ud83d", "a\\ud83db"])
def test_unpaired_surrogate_escapes_are_refused(escape: str) -> None:
    assert "surrogate" in only_break(f'"{escape}"')


def test_a_valid_surrogate_pair_is_one_character() -> None:
    assert accepted('"\\ud83d\\ude00"') == "\U0001f600"


def test_an_unpaired_surrogate_in_a_key_is_refused() -> None:
    assert break_paths('{"ok": {"\\ud800": 1}}') == [("ok", "\ud800")]


def test_an_escaped_backslash_before_u_d800_is_plain_text() -> None:
    assert accepted('"\\\\ud800"') == "\\ud800"


# -- nesting -------------------------------------------------------------------------------------------------------


def nested_arrays(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def nested_objects(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


def test_nesting_exactly_1000_levels_is_accepted() -> None:
    assert MAX_DEPTH == 1000
    value, breaks = loads(nested_arrays(1000))
    assert breaks == []
    for _ in range(999):
        assert isinstance(value, list)
        value = value[0]
    assert value == []
    assert loads(nested_objects(1000))[1] == []


@pytest.mark.parametrize("document", [nested_arrays(1001), nested_objects(1001), b"[" * 100_000 + b"]" * 100_000])
def test_nesting_deeper_than_1000_is_refused(document: bytes) -> None:
    with pytest.raises(JsonTooDeep):
        loads(document)


def test_depth_is_refused_even_when_the_document_is_unterminated() -> None:
    with pytest.raises(JsonTooDeep):
        loads(b"[" * 5000)


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    assert accepted('["' + "[{" * 3000 + '"]') == ["[{" * 3000]
    assert accepted('["\\"' + "[" * 3000 + '"]') == ['"' + "[" * 3000]


def test_a_break_at_depth_1000_is_still_located() -> None:
    document = b"[" * 999 + b"[1e400]" + b"]" * 999
    _, breaks = loads(document)
    assert [found.path for found in breaks] == [(0,) * 999 + (0,)]


# -- not JSON ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "document",
    [b'"\xff"', b'{"a": "\xc3"}', b'"\xed\xa0\x80"', b'"\xc0\xaf"', b"\xfe\xff"],
    ids=["ff", "truncated", "encoded-surrogate", "overlong", "bom16"],
)
def test_invalid_utf8_is_a_syntax_error(document: bytes) -> None:
    with pytest.raises(JsonSyntaxError, match="UTF-8"):
        loads(document)


@pytest.mark.parametrize(
    "document",
    [
        b"",
        b"   ",
        b"{",
        b"[1,]",
        b'{"a": 1,}',
        b"{'a': 1}",
        b"1 2",
        b'{"a" 1}',
        b"tru",
        b"01",
        b"+1",
        b".5",
        b"1.",
        b"0x10",
        b'"a\tb"',
        b'{"a": undefined}',
        b'"\\x41"',
    ],
)
def test_syntax_errors_raise(document: bytes) -> None:
    with pytest.raises(JsonSyntaxError):
        loads(document)


# -- where breaks are reported -------------------------------------------------------------------------------------


def test_break_path_names_the_event_and_the_key() -> None:
    body = b'{"events": [{"type": "a", "data": 1}, {"type": "b", "data": 2}, {"type": "c", "data": {"x": 1e400}}]}'
    value, breaks = loads(body)
    assert [found.path for found in breaks] == [("events", 2, "data", "x")]
    # the rest of the document is intact, only the broken value is a marker
    assert value["events"][0] == {"type": "a", "data": 1}
    assert is_marker(value["events"][2]["data"]["x"])


def test_break_path_through_arrays() -> None:
    assert break_paths('{"events": [{"data": {"list": [1, 2, -0]}}]}') == [("events", 0, "data", "list", 2)]


def test_every_break_is_reported_in_document_order() -> None:
    body = (
        '{"meta": {"n": 9007199254740992}, "events": [{"data": 1}, {"data": "\\udc00"}, {"data": 1}, '
        '{"data": {"k": 1, "k": 2}}, {"data": 1e400}]}'
    )
    assert break_paths(body) == [("meta", "n"), ("events", 1, "data"), ("events", 3, "data"), ("events", 4, "data")]


def test_a_break_at_the_top_level_has_the_empty_path() -> None:
    assert break_paths("-0") == [()]
    assert break_paths('"\\ud800"') == [()]


# -- comparing JSON values -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [
        (1, 1.0, True),
        ({"a": [1, {"b": 2}]}, {"a": [1.0, {"b": 2.0}]}, True),
        (1, "1", False),
        (1, True, False),
        (0, False, False),
        (None, False, False),
        ({"a": 1}, {"a": 1, "b": None}, False),
        ([1, 2], [2, 1], False),
        ({"a": 1, "b": 2}, {"b": 2, "a": 1}, True),
    ],
)
def test_json_equal(a: object, b: object, equal: bool) -> None:
    assert json_equal(a, b) is equal
    assert json_equal(b, a) is equal


def test_dumps_writes_the_deepest_value_even_under_the_default_recursion_limit() -> None:
    # A restart that resumes from an index parses nothing slowly, so nothing has raised the limit before the first
    # history of a deep event is written.
    value: Any = "bottom"
    for _ in range(995):
        value = [value]
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    try:
        written = dumps({"messages": [{"content": value}]})
    finally:
        sys.setrecursionlimit(max(limit, sys.getrecursionlimit()))
    assert loads(written)[0] == {"messages": [{"content": value}]}


# Compact documents exactly as orjson (or JSON.stringify) writes them take a faster path: they must be parsed, and
# refused, just as the same documents written with a space.
COMPACT_DOCUMENTS = [
    b'{"events":[{"type":"assistant/chunk","data":{"turn":1,"step":1,"chunk":{"text":"\\u00e9 \\"q\\" \\n"}}}]}',
    b'{"a":1,"a":2}',
    b'{"x":-0}',
    b'{"x":-0.0}',
    b'{"x":-0.5,"y":0.0,"z":1.0,"w":-1}',
    b'{"x":9007199254740991,"y":-9007199254740991}',
    b'{"x":9007199254740992}',
    b'{"x":1e+20}',
    b'{"x":1e20}',
    b'{"x":1.5e-7}',
    b'{"x":18446744073709551616}',
    b'{"x":"\\ud800"}',
    b'{"x":"\\ud83d\\ude00"}',
    b'{"x":"2024-01-05 -0 1e9"}',
    b'{"x":[true,false,null,[],{}]}',
    b'{"x":NaN}',
]


@pytest.mark.parametrize("document", COMPACT_DOCUMENTS)
def test_a_compact_document_is_parsed_and_refused_as_the_same_document_spaced_out(document: bytes) -> None:
    def outcome(raw: bytes) -> tuple[str, list[tuple[Any, str]]]:
        try:
            value, breaks = loads(raw)
        except JsonSyntaxError as exc:
            return f"syntax error {exc}", []
        typed = repr(value) if not breaks else "marked"  # repr tells 1 from 1.0 and -0.0 from 0.0
        return typed, [(found.path, found.reason) for found in breaks]

    assert outcome(document) == outcome(b" " + document)


def test_a_compact_document_with_an_unsafe_integer_or_negative_zero_is_refused() -> None:
    assert break_paths(b'{"events":[{"n":9007199254740993}]}') == [("events", 0, "n")]
    assert break_paths(b'{"events":[{"n":-0.0}]}') == [("events", 0, "n")]
    assert break_paths(b'{"a":1,"a":2}') == [()]
