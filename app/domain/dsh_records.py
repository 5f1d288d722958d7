"""DSH's JSONL storage records, pure: bytes in, records out (facts file 6.4 and its packed-row appendix).

A session file is a header line (``{"type": "session", "version": 0, ...}``) and then one storage record per line:
either an event, or a packed row of streamed chunks (``text-chunks``, ``reasoning-chunks``, ``tool-call-chunks``)
that expands to the exact ``assistant/chunk`` events DSH would see.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from app.domain.ids import derived_instance
from app.domain.jsonvalue import Break, is_number, is_safe_integer, loads, nests_too_deep
from app.domain.session import HEADER_FIELDS, SessionHeader

__all__ = [
    "ROW_TAGS",
    "SESSION_FORMAT_VERSION",
    "MalformedRecord",
    "canonical_header",
    "decode_line",
    "encode_header",
    "expand_record",
    "export_header",
    "header_bytes",
    "header_from_record",
    "header_problem",
    "loads_stored",
    "may_round_trip_lossily",
    "parse_line",
]

ROW_TAGS = frozenset({"text-chunks", "reasoning-chunks", "tool-call-chunks"})
SESSION_FORMAT_VERSION = 0
RETIRED_HEADER_FIELDS = ("sandboxMode", "approvalPolicy")


class MalformedRecord(ValueError):
    """A line that is not a storage record DSH could read. Its callers turn it into what they answer (a damaged
    session, an import's refusal naming the line), so it is a plain ``ValueError``, not an error of the tree."""


def header_record(header: SessionHeader) -> dict[str, Any]:
    """The DSH header record (line 1 of a session's file), with forklog's ``instance`` last. DSH's reader requires
    ``delegationDepth``, so it is always written."""
    return {
        "type": "session",
        "version": SESSION_FORMAT_VERSION,
        "id": header.id,
        "createdAt": header.created_at,
        **header.lineage(),
        "instance": header.instance,
    }


def encode_header(header: SessionHeader) -> bytes:
    """The header line a backend stores (and counts in ``bytes``): without ``archived``, which is kept beside the
    log, so that archiving changes no stored byte and no quota."""
    return orjson.dumps(header_record(header)) + b"\n"


def export_header(header: SessionHeader) -> bytes:
    """The header line ``export`` writes: the stored one, with ``"archived": true`` before ``instance`` when the
    session is archived (a member DSH's reader ignores, as it ignores ``instance``), so that an import keeps it."""
    if not header.archived:
        return encode_header(header)
    record = header_record(header)
    instance = record.pop("instance")
    return orjson.dumps({**record, "archived": True, "instance": instance}) + b"\n"


def header_bytes(header: SessionHeader) -> int:
    """The bytes of a session's header line as ``export`` writes it: with its event lines, a session's ``bytes``."""
    return len(encode_header(header))


# The header line as forklog writes it, for the common fields: matched, it needs no JSON parse and no check beyond
# what the pattern says (strings without escapes or control characters, numbers without a sign, a leading zero or
# more than 15 digits, so safe integers). Anything else (escapes, other fields, another order) takes the exact path.
_PLAIN = rb'"((?:[^"\\\x00-\x1f])*)"'
_COUNT = rb"(0|[1-9][0-9]{0,14})"
_CANONICAL_HEADER = re.compile(
    rb'\{"type":"session","version":0,"id":"([A-Za-z0-9][A-Za-z0-9._-]{0,127})","createdAt":'
    + _COUNT
    + rb'(?:,"cwd":"(/(?:[^"\\\x00-\x1f])*)")?'
    + rb"(?:,\"parentSession\":"
    + _PLAIN
    + rb")?"
    + rb"(?:,\"seedLength\":"
    + _COUNT
    + rb")?"
    + rb'(?:,"origin":"(subagent)")?'
    + rb',"delegationDepth":'
    + _COUNT
    + rb"(?:,\"agentPreset\":"
    + _PLAIN
    + rb")?"
    + rb',"instance":"([0-9a-f]{32})"\}'
)


def canonical_header(line: bytes, session_id: str) -> SessionHeader | None:
    """The header of a header line written as forklog writes it (see the pattern above), or None: then the line
    must be parsed and checked the exact way (:func:`parse_line`, :func:`header_problem`)."""
    match = _CANONICAL_HEADER.fullmatch(line)
    if match is None:
        return None
    found_id, created_at, cwd, parent, seed_length, origin, depth, preset, instance = match.groups()
    if found_id != session_id.encode():
        return None
    try:  # the id, the numbers and the instance are ASCII by the pattern; the free-text fields may be anything
        return SessionHeader(
            id=session_id,
            created_at=int(created_at),
            instance=instance.decode(),
            cwd=cwd.decode() if cwd is not None else None,
            parent_session=parent.decode() if parent is not None else None,
            seed_length=int(seed_length) if seed_length is not None else None,
            origin=origin.decode() if origin is not None else None,
            delegation_depth=int(depth),
            agent_preset=preset.decode() if preset is not None else None,
        )
    except UnicodeDecodeError:
        return None


def header_from_record(record: dict[str, Any], session_id: str) -> SessionHeader:
    """The header a checked record (see :func:`header_problem`) holds; a log without an instance gets its stable
    derived one."""
    created_at = int(record["createdAt"])
    instance = record.get("instance")
    values: dict[str, Any] = {}
    for field in HEADER_FIELDS:
        value = record.get(field.key)
        if value is not None:
            values[field.attr] = int(value) if field.json_type == "integer" else value
    return SessionHeader(
        id=session_id,
        created_at=created_at,
        instance=instance if isinstance(instance, str) else derived_instance(session_id, created_at),
        **values,
    )


# What a canonical line may hold that orjson would read lossily yet write back unchanged: -0.0, an integer past
# 2**53 (or a float written with 16+ digits), a number with an exponent. Each of them is a number token, and in
# canonical JSON (no whitespace) a number token starts a document or follows ":", "," or "[" (or a newline, in a
# window of lines): never a letter or a quote. So the text is mapped to its shape (number characters to "0", an
# exponent letter to "e", those delimiters to "D", anything else to "x") and only number tokens are looked at: a hex
# digest or a uuid inside a string ("...0e4f...") is not taken for an exponent. The check stays exact (it never
# misses a lossy number); it may still flag a string that holds ":1e5", which only costs the slower exact parse.
_SHAPE_OF = {
    **dict.fromkeys(b"0123456789.-", ord("0")),
    **dict.fromkeys(b"eE", ord("e")),
    **dict.fromkeys(b":,[\n", ord("D")),
}
_SHAPE = bytes.maketrans(bytes(range(256)), bytes(_SHAPE_OF.get(char, ord("x")) for char in range(256)))
_SIXTEEN_NUMBER_CHARACTERS = b"D" + b"0" * 16
_MAY_BE_EXPONENT = re.compile(rb"0e")  # (a compiled search of two bytes: several times faster than ``in`` here)
_NUMBER, _DELIMITER = ord("0"), ord("D")
# How far back from an exponent letter its run of number characters is followed (a longer run is taken for a token
# at once: so long a run of digits before an "e" is rare in text, and the exact parse is right either way).
_LOOK_BACK = 32
_MAY_BE_NEGATIVE_ZERO = re.compile(rb"-0\.0")  # (a compiled search again: faster than ``find`` here)
_NEGATIVE_ZERO = re.compile(rb"(?:\A|[:,\[\n])-0\.0")


def may_round_trip_lossily(text: bytes) -> bool:
    """Whether canonical JSON ``text`` (a document, or lines of them) may hold a number orjson reads lossily (see
    above); never a false no."""
    shape = text.translate(_SHAPE)
    # (plain searches first, a regex only where one found a candidate: a start checks every stored line with this)
    # (find, not ``in``: bytes' ``in`` tries its operand as an integer first, making and dropping a TypeError)
    if shape.find(_SIXTEEN_NUMBER_CHARACTERS) >= 0 or shape.startswith(_SIXTEEN_NUMBER_CHARACTERS[1:]):
        return True
    if _exponent_token(shape):
        return True
    return _MAY_BE_NEGATIVE_ZERO.search(text) is not None and _NEGATIVE_ZERO.search(text) is not None


def _exponent_token(shape: bytes) -> bool:
    """Whether a number token of ``shape`` may have an exponent: an "e" after a run of number characters that starts
    the text or follows a delimiter. Each "0e" is followed back through its run (a few characters: a regex search
    for the whole pattern tries every number token of the text, and costs as much as parsing it)."""
    found = _MAY_BE_EXPONENT.search(shape)
    while found is not None:
        at = found.start()
        low = max(at - _LOOK_BACK, 0)
        run = at
        while run > low and shape[run - 1] == _NUMBER:
            run -= 1
        if run == 0 or shape[run - 1] == _DELIMITER or shape[run - 1] == _NUMBER:  # (the last: followed too far)
            return True
        found = _MAY_BE_EXPONENT.search(shape, at + 2)
    return False


def loads_stored(line: bytes) -> tuple[Any, list[Break]]:
    """Lossless :func:`~app.domain.jsonvalue.loads` for a stored line: fast when the line is canonical (as forklog
    writes it), exact always.

    orjson parses; if writing the value back gives the very same bytes, nothing was folded (no duplicate key,
    no ``-0``), and the few lossy cases that survive a round trip are ruled out by a scan. Anything else takes
    the exact path.
    """
    if nests_too_deep(line) or may_round_trip_lossily(line):
        return loads(line)
    try:
        value = orjson.loads(line)
        canonical = orjson.dumps(value) == line
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):  # not JSON, or deeper than orjson writes
        return loads(line)
    return (value, []) if canonical else loads(line)


def parse_line(line: bytes) -> Any:
    """One line's JSON value, refusing anything that is not lossless JSON."""
    value, breaks = loads_stored(line)
    if breaks:
        raise MalformedRecord(_describe(breaks[0]))
    return value


def _describe(found: Break) -> str:
    where = ".".join(str(part) for part in found.path) or "the record"
    return f"{where}: {found.reason}"


def _exact_keys(value: dict[str, Any], keys: tuple[str, ...]) -> bool:
    return len(value) == len(keys) and all(key in value for key in keys)


def _malformed(tag: str, why: str) -> MalformedRecord:
    return MalformedRecord(f"malformed {tag} storage row: {why}")


def _validate_row(row: dict[str, Any], tag: str) -> list[str]:
    if not _exact_keys(row, ("type", "seq0", "time0", "data")):
        raise _malformed(tag, "envelope must be exactly {type, seq0, time0, data}")
    if not is_safe_integer(row["seq0"]) or row["seq0"] < 0:
        raise _malformed(tag, "seq0 must be a non-negative safe integer")
    if not is_safe_integer(row["time0"]):
        raise _malformed(tag, "time0 must be a safe integer")
    data = row["data"]
    if not isinstance(data, dict):
        raise _malformed(tag, "data must be an object")
    if tag == "tool-call-chunks":
        with_name = _exact_keys(data, ("turn", "step", "index", "id", "name", "dt", "args"))
        if not with_name and not _exact_keys(data, ("turn", "step", "index", "id", "dt", "args")):
            raise _malformed(tag, "data must be exactly {turn, step, index, id, name?, dt, args}")
        if not isinstance(data["id"], str) or (with_name and not isinstance(data["name"], str)):
            raise _malformed(tag, "id (and name when present) must be strings")
        payload_key = "args"
    else:
        if not _exact_keys(data, ("turn", "step", "index", "dt", "texts")):
            raise _malformed(tag, "data must be exactly {turn, step, index, dt, texts}")
        payload_key = "texts"
    if not (is_number(data["turn"]) and is_number(data["step"]) and is_number(data["index"])):
        raise _malformed(tag, "turn/step/index must be numbers")
    payload = data[payload_key]
    if not isinstance(payload, list) or not payload or any(not isinstance(entry, str) for entry in payload):
        raise _malformed(tag, f"{payload_key} must be a non-empty string array")
    gaps = data["dt"]
    if not isinstance(gaps, list) or any(not is_safe_integer(gap) for gap in gaps):
        raise _malformed(tag, "dt must be an array of safe integers")
    if len(gaps) != len(payload) - 1:
        raise _malformed(tag, f"dt length {len(gaps)} does not match {len(payload)} members")
    if not is_safe_integer(row["seq0"] + len(payload) - 1):
        raise _malformed(tag, "member seqs must stay safe integers")
    moment = row["time0"]
    for gap in gaps:
        moment += gap
        if not is_safe_integer(moment):
            raise _malformed(tag, "member times must stay safe integers")
    return payload


def expand_record(value: Any) -> list[Any]:
    """The events one parsed storage record holds: itself, or the members of a packed chunk row."""
    if not isinstance(value, dict):
        return [value]
    tag = value.get("type")
    if type(tag) is not str or tag not in ROW_TAGS:  # (a list or an object as type is no tag: the rules refuse it)
        return [value]
    members = _validate_row(value, tag)
    data = value["data"]
    seq0 = int(value["seq0"])
    moment = int(value["time0"])
    events: list[Any] = []
    for k, member in enumerate(members):
        if k > 0:
            moment += int(data["dt"][k - 1])
        chunk: dict[str, Any]
        if tag == "text-chunks":
            chunk = {"type": "text-delta", "index": data["index"], "text": member}
        elif tag == "reasoning-chunks":
            chunk = {"type": "reasoning-delta", "index": data["index"], "text": member}
        else:
            chunk = {"type": "tool-call-delta", "index": data["index"], "id": data["id"]}
            if "name" in data:
                chunk["name"] = data["name"]
            chunk["argumentsDelta"] = member
        events.append(
            {
                "type": "assistant/chunk",
                "seq": seq0 + k,
                "time": moment,
                "data": {"turn": data["turn"], "step": data["step"], "chunk": chunk},
            }
        )
    return events


def decode_line(line: bytes) -> list[Any]:
    """Parse and expand one storage line (without its newline)."""
    return expand_record(parse_line(line))


def header_problem(record: Any, expected_id: str) -> str | None:
    """Why a header record is not one forklog (and DSH) can open, or None.

    The version is checked first, so a newer format says "upgrade", not "corrupt". As in DSH, an optional field
    that is present must be valid: ``null`` is not the same as absent.
    """
    if not isinstance(record, dict) or record.get("type") != "session":
        return "first line is not a session header"
    version: Any = record.get("version")
    if version != SESSION_FORMAT_VERSION or isinstance(version, bool):
        if is_number(version) and version > SESSION_FORMAT_VERSION:
            return (
                f"the log uses format v{version}, newer than the supported v{SESSION_FORMAT_VERSION}: "
                "it was written by a newer version; upgrade to open it"
            )
        if is_number(version):
            return f"the log uses format v{version}, older than the supported v{SESSION_FORMAT_VERSION}"
        return f"session header version must be {SESSION_FORMAT_VERSION}"
    for retired in RETIRED_HEADER_FIELDS:
        if retired in record:
            return f"session header carries the retired field {retired!r}"
    if record.get("id") != expected_id:
        return f'session header id "{record.get("id")}" does not match the file name "{expected_id}"'
    created_at: Any = record.get("createdAt")
    if not (is_safe_integer(created_at) and created_at >= 0):
        return "session header createdAt must be a non-negative safe integer"
    for field in HEADER_FIELDS:
        if field.key in record and not field.stored(record[field.key]):
            return f"session header {field.key} must be {field.stored_rule}"
    instance = record.get("instance")
    if instance is not None and (not isinstance(instance, str) or instance == ""):
        return "session header instance must be a non-empty string"
    return None
