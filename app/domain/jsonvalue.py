"""Lossless JSON: parse request and log bytes without silently changing a value, and compare values as JSON does.

The standard library's C scanner does the parsing; its hooks refuse what JSON cannot carry losslessly (a duplicate
key, ``-0``, a non-finite number, an integer beyond +-(2**53 - 1)). When a hook refuses, a second, slower pass
parses again with markers instead of errors, so the caller learns *where* each break is (which event of a batch)
and can name the lowest index. Nesting depth is checked before parsing so that the scanner never recurses deeper
than the contract allows.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

import orjson

__all__ = [
    "MAX_DEPTH",
    "MAX_SAFE_INTEGER",
    "UNDEFINED",
    "Break",
    "JsTypeError",
    "JsonPath",
    "JsonSyntaxError",
    "JsonTooDeep",
    "dumps",
    "is_event_seq",
    "is_marker",
    "is_number",
    "is_safe_integer",
    "js_get",
    "js_str",
    "json_equal",
    "loads",
    "nests_too_deep",
    "strict_equal",
]

MAX_SAFE_INTEGER = 2**53 - 1
MAX_DEPTH = 1000

# Where a value sits in a document: object keys and array indexes from the root.
JsonPath = tuple[str | int, ...]


class JsonSyntaxError(ValueError):
    """The bytes are not one JSON value (or not UTF-8). Like :class:`JsonTooDeep`, a parser's ``ValueError`` that
    the caller turns into its own answer (INVALID_REQUEST for a body, a damaged line for a log)."""


class JsonTooDeep(ValueError):
    """Arrays and objects nest deeper than MAX_DEPTH."""


@dataclass(frozen=True, slots=True)
class Break:
    """A value that JSON cannot carry losslessly, found at ``path``."""

    path: JsonPath
    reason: str


class _Marker:
    """Stands in the parsed tree where the slow pass found a break."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


class _Refused(ValueError):
    pass


class _NotJson(ValueError):
    """NaN and Infinity are no JSON values at all: the document does not parse."""


_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKET = re.compile(rb"[^\[\]{}]")
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_DEPTH_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def nests_too_deep(data: bytes) -> bool:
    """Arrays and objects in ``data`` nest deeper than MAX_DEPTH (strings are not counted)."""
    if data.count(b"[") + data.count(b"{") <= MAX_DEPTH:
        return False
    brackets = _NOT_BRACKET.sub(b"", _STRING.sub(b"", data))
    return max(accumulate(_DEPTH_STEP[b] for b in brackets), default=0) > MAX_DEPTH


def _number_problem(text: str, value: float) -> str | None:
    if value != value or value in (float("inf"), float("-inf")):
        return f"number {text[:40]} is out of range"
    if value == 0:
        mantissa = re.split("[eE]", text, maxsplit=1)[0]
        if text.startswith("-") and not any(c in "123456789" for c in mantissa):
            return "-0 cannot be stored losslessly"
        return None
    if value == int(value) and abs(value) > MAX_SAFE_INTEGER:
        return f"integer {text[:40]} is beyond +-(2^53-1)"
    return None


def _strict_int(text: str) -> int:
    if len(text) > 17:
        raise _Refused(f"integer {text[:40]} is beyond +-(2^53-1)")
    value = int(text)
    if value == 0 and text.startswith("-"):
        raise _Refused("-0 cannot be stored losslessly")
    if abs(value) > MAX_SAFE_INTEGER:
        raise _Refused(f"integer {text} is beyond +-(2^53-1)")
    return value


def _strict_float(text: str) -> float:
    value = float(text)
    problem = _number_problem(text, value)
    if problem is not None:
        raise _Refused(problem)
    return value if value != 0 else 0.0


def _strict_constant(text: str) -> Any:
    raise _NotJson(f"{text} is not a JSON value")


def _strict_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise _Refused(f"duplicate key {_first_duplicate(pairs)!r} in one object")
    return obj


def _first_duplicate(pairs: list[tuple[str, Any]]) -> str:
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            return key
        seen.add(key)
    return ""


def _marking_int(text: str) -> Any:
    try:
        return _strict_int(text)
    except _Refused as refused:
        return _Marker(str(refused))


def _marking_float(text: str) -> Any:
    try:
        return _strict_float(text)
    except _Refused as refused:
        return _Marker(str(refused))


def _marking_object(pairs: list[tuple[str, Any]]) -> Any:
    try:
        return _strict_object(pairs)
    except _Refused as refused:
        return _Marker(str(refused))


_STRICT = json.JSONDecoder(
    parse_int=_strict_int,
    parse_float=_strict_float,
    parse_constant=_strict_constant,
    object_pairs_hook=_strict_object,
)
_MARKING = json.JSONDecoder(
    parse_int=_marking_int,
    parse_float=_marking_float,
    parse_constant=_strict_constant,
    object_pairs_hook=_marking_object,
)


def _ensure_recursion_room() -> None:
    # The C scanner and encoder count each nesting level against the interpreter's recursion limit; MAX_DEPTH
    # levels plus the server's own stack must fit.
    if sys.getrecursionlimit() < MAX_DEPTH * 4:
        sys.setrecursionlimit(MAX_DEPTH * 4)


def dumps(value: Any) -> bytes:
    """Compact JSON of a value that may nest as deep as lossless JSON allows (MAX_DEPTH levels), beyond the 254
    orjson writes. TypeError for what JSON cannot carry (e.g. a lone surrogate)."""
    try:
        return orjson.dumps(value)
    except TypeError as exc:
        if str(exc) != "Recursion limit reached":
            raise
    _ensure_recursion_room()
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()
    except (RecursionError, ValueError) as exc:
        raise TypeError(str(exc)) from None


def _walk_breaks(value: Any, path: JsonPath) -> Iterator[Break]:
    """Every break under ``value`` in document order (markers and unpaired surrogates)."""
    stack: list[tuple[Any, JsonPath]] = [(value, path)]
    while stack:
        current, where = stack.pop()
        if isinstance(current, _Marker):
            yield Break(where, current.reason)
        elif isinstance(current, str):
            if _SURROGATE.search(current):
                yield Break(where, "a string holds an unpaired UTF-16 surrogate")
        elif isinstance(current, dict):
            children: list[tuple[Any, JsonPath]] = []
            for key, item in current.items():
                if _SURROGATE.search(key):
                    yield Break((*where, key), "an object key holds an unpaired UTF-16 surrogate")
                children.append((item, (*where, key)))
            stack.extend(reversed(children))
        elif isinstance(current, list):
            stack.extend(reversed([(item, (*where, i)) for i, item in enumerate(current)]))


# Where a canonical document may still hold what the strict parse refuses: a -0 (``-0``, ``-0.0``), 16 digits in a
# row (an integer beyond +-(2^53-1) has them), an exponent (a float beyond it, or out of range). Digits are all read
# as 0 (one C pass) so that plain substring searches find the last two: ``re`` tries a character class at every
# byte, ~50x slower. Digits and signs inside strings match too: such a document only takes the strict path.
_NEGATIVE_ZERO = re.compile(rb"-0(?:\.0*)?(?![0-9.eE])")
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_DIGITS = b"0" * 16
_NOT_CANONICAL = object()


def _canonical_value(raw: bytes) -> Any:
    """The value of ``raw`` when ``raw`` is exactly orjson's encoding of it and holds no number hazard, else
    ``_NOT_CANONICAL``. Such a document is what the strict parse accepts, with the same value: its bytes coming back
    whole means no key was repeated (orjson keeps one), no escape stands for a surrogate and nothing but JSON was
    parsed; the hazards are what orjson reads without a complaint and the strict parse refuses. Compact clients'
    bodies (``JSON.stringify``, orjson) take this path: one C parse and one C encoding, no Python hook per value."""
    if _NEGATIVE_ZERO.search(raw) is not None:
        return _NOT_CANONICAL
    digits = raw.translate(_DIGITS_AS_ZERO)
    # find, not ``in``: bytes' ``in`` tries its operand as an integer first, making and dropping a TypeError each time.
    if digits.find(_LONG_DIGITS) >= 0 or digits.find(b"0e") >= 0 or digits.find(b"0E") >= 0:
        return _NOT_CANONICAL
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return _NOT_CANONICAL
    try:
        if orjson.dumps(value) != raw:
            return _NOT_CANONICAL
    except TypeError:  # nested beyond orjson's encoder
        return _NOT_CANONICAL
    return value


def loads(data: bytes | str) -> tuple[Any, list[Break]]:
    """Parse one JSON document; return the value and every lossless break in it (usually none).

    Where a break was found, the value holds an opaque marker in its place: the caller must refuse the part of
    the document that holds a break and never store it.
    """
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JsonSyntaxError(f"the body is not UTF-8: {exc.reason} at byte {exc.start}") from None
    if nests_too_deep(raw):
        raise JsonTooDeep(f"JSON nests deeper than {MAX_DEPTH} levels")
    _ensure_recursion_room()
    value = _canonical_value(raw)
    if value is not _NOT_CANONICAL:
        return value, []
    try:
        try:
            value = _STRICT.decode(text)
        except _Refused:
            value = _MARKING.decode(text)
            return value, list(_walk_breaks(value, ()))
    except _NotJson as exc:
        raise JsonSyntaxError(f"the body is not valid JSON: {exc}") from None
    except json.JSONDecodeError as exc:
        raise JsonSyntaxError(
            f"the body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except RecursionError:
        raise JsonTooDeep(f"JSON nests deeper than {MAX_DEPTH} levels") from None
    if _SURROGATE_ESCAPE.search(raw):
        return value, list(_walk_breaks(value, ()))
    return value, []


def is_marker(value: Any) -> bool:
    """The stand-in :func:`loads` leaves where it found a break."""
    return isinstance(value, _Marker)


# -- JSON values as JavaScript sees them (DSH compares with ===) ---------------------------------------------------


class _Undefined:
    """JavaScript's ``undefined``: a key that is absent."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "undefined"


UNDEFINED: Any = _Undefined()


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_safe_integer(value: Any) -> bool:
    """``Number.isSafeInteger``: ``3`` and ``3.0`` alike, never a boolean."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER
    if isinstance(value, float):
        return value == value and value.is_integer() and abs(value) <= MAX_SAFE_INTEGER
    return False


def is_event_seq(value: Any) -> bool:
    return is_safe_integer(value) and value >= 0


def strict_equal(a: Any, b: Any) -> bool:
    """JavaScript ``===`` over parsed JSON values: objects and arrays are equal only to themselves."""
    if a is b:
        return True
    if type(a) is int and type(b) is int:  # the common case (turn and step numbers), decided at once
        return a == b
    if isinstance(a, dict | list) or isinstance(b, dict | list):
        return False
    if isinstance(a, bool) or isinstance(b, bool):
        return False  # identical booleans were caught by ``is``
    if is_number(a) and is_number(b):
        return bool(a == b)
    if isinstance(a, str) and isinstance(b, str):
        return a == b
    return False


def json_equal(a: Any, b: Any) -> bool:
    """Deep equality of JSON values: ``1`` equals ``1.0``; ``true`` never equals ``1``."""
    if isinstance(a, dict):
        return (
            isinstance(b, dict)
            and len(a) == len(b)
            and all(key in b and json_equal(item, b[key]) for key, item in a.items())
        )
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return strict_equal(a, b)


def js_str(value: Any) -> str:
    """``String(value)`` as JavaScript prints it inside a message."""
    if value is None:
        return "null"
    if value is UNDEFINED:
        return "undefined"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, dict):
        return "[object Object]"
    if isinstance(value, list):
        return ",".join("" if item is None else js_str(item) for item in value)
    return str(value)


class JsTypeError(TypeError):
    """JavaScript's TypeError: reading a key of ``null`` or ``undefined``. Raised where DSH itself would throw, so
    that the event's check refuses it (as INVALID_EVENT, with its index): never an answer of its own."""


def js_get(container: Any, key: str) -> Any:
    """``container[key]`` for a JSON value; reading a key of ``null`` or ``undefined`` is JavaScript's TypeError."""
    if isinstance(container, dict):
        return container.get(key, UNDEFINED)
    if container is None or container is UNDEFINED:
        raise JsTypeError(f"cannot read data.{key} of {js_str(container)}")
    return UNDEFINED
