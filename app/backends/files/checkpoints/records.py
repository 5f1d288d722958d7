"""Checkpoints: what a start needs to resume a session without checking its stored events again.

A checkpoint record says "the session ``tenant/id`` of incarnation ``instance`` held these events, checked": the
events ``start`` .. ``stop - 1`` (their line ends, surface changes, ``turn/end`` seqs and checkpoints, and the rules'
state after them) and a digest of every block of ``BLOCK_BYTES`` of its lines (after the header line) that those
events touch. A session's records form a *chain*: the first starts at event 0, each next one where the previous
stopped. The records of all sessions are kept in one journal (:mod:`app.backends.files.checkpoints.journal`), written in
the background while the service runs (:mod:`app.backends.files.checkpoints.keeper`).

At a start, a chain is used only when the file's header names the same instance and the file's lines still begin
with exactly the bytes every block digest covers; then the checked prefix is resumed and only the lines after it are
checked. Any doubt (no chain, another instance, a digest that differs, a file shorter than the prefix, a record
that does not decode) means the whole file is checked as if there were no checkpoint: checkpoints make a start
faster, never different.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Iterable, Sequence

import orjson
from blake3 import blake3

from app.backends.log_parts import LogDelta, LogParts, resume_log
from app.domain.history import fold_surface
from app.domain.log import Buffer, SessionLog
from app.domain.log_state import LogState
from app.domain.session import LogHead, SessionKey, head_of
from app.domain.staging import Checkpoint, checkpoint
from app.domain.stats import stats_of_columns

__all__ = [
    "BLOCK_BYTES",
    "COLD_BYTES",
    "ColdLog",
    "RecordChain",
    "decode_record",
    "encode_record",
    "read_chains",
]

BLOCK_BYTES = 64 * 1024
DIGEST_BYTES = 16
# A session whose log is at most this many bytes, and which nothing changed since its first record, is kept frozen
# (its record and its lines in one bytes object) until it is used.
COLD_BYTES = 16 * 1024

# tenant, id and instance lengths; the width of the columns' numbers (2 or 8 bytes); start, stop, body_start,
# body_stop; lengths of the JSON, the line ends, the surface values, the turn ends; the first block and how many
# digests follow.
_HEAD = struct.Struct("<HHHBqqqqIIIIII")
# A record of a whole log this small keeps its columns as 16-bit numbers (and a start keeps it as it is, frozen).
NARROW_BYTES = 1 << 15


def _digest(data: Buffer) -> bytes:
    # (BLAKE3: a start digests every checkpointed byte it resumes; SHA-256 ran at a quarter of its speed here)
    return blake3(data).digest(DIGEST_BYTES)


def block_digests(pieces: Iterable[Buffer], body_from: int, body_stop: int) -> bytes:
    """The digest of each block of the lines from ``body_from`` (a block boundary) to ``body_stop``, given as
    ``pieces`` (the last block may be partial)."""
    digests = bytearray()
    hasher = blake3()
    filled = 0
    for piece in pieces:
        view = memoryview(piece)
        while len(view):
            take = min(BLOCK_BYTES - filled, len(view))
            hasher.update(view[:take])
            filled += take
            view = view[take:]
            if filled == BLOCK_BYTES:
                digests += hasher.digest(DIGEST_BYTES)
                hasher = blake3()
                filled = 0
    if filled:
        digests += hasher.digest(DIGEST_BYTES)
    expected = -(-(body_stop - body_from) // BLOCK_BYTES)
    if len(digests) != expected * DIGEST_BYTES:
        raise ValueError("the pieces do not cover the bytes they were said to")
    return bytes(digests)


def encode_record(key: SessionKey, instance: str, delta: LogDelta, digests: bytes | None = None) -> list[Buffer]:
    """The checkpoint record of what ``delta`` holds (``delta.body_from`` must be a block boundary), as pieces (the
    columns' are views of ``delta``'s: a large log's record is never copied whole); ``digests`` are its blocks' when
    they are known already (else they are computed from ``delta.body``)."""
    description = orjson.dumps([*delta.state.columns(), [point.columns() for point in delta.checkpoints]])
    tenant, session_id, incarnation = key.tenant.encode(), key.id.encode(), instance.encode()
    width = 2 if delta.start == 0 and delta.body_stop < NARROW_BYTES and delta.stop < NARROW_BYTES else 8
    ends = _column(delta.ends, width)
    surface = _column(delta.surface, width)
    turn_ends = _column(delta.turn_ends, width)
    if digests is None:
        digests = block_digests(delta.body, delta.body_from, delta.body_stop)
    head = _HEAD.pack(
        len(tenant),
        len(session_id),
        len(incarnation),
        width,
        delta.start,
        delta.stop,
        delta.body_start,
        delta.body_stop,
        len(description),
        _length(ends) // width,
        _length(surface) // width,
        _length(turn_ends) // width,
        delta.body_from // BLOCK_BYTES,
        len(digests) // DIGEST_BYTES,
    )
    return [head, tenant, session_id, incarnation, description, *ends, *surface, *turn_ends, digests]


def _length(pieces: Sequence[Buffer]) -> int:
    return sum(len(piece) for piece in pieces)


def _column(pieces: tuple[memoryview, ...], width: int) -> Sequence[Buffer]:
    """A column's pieces (native 64-bit numbers) as the little-endian numbers of ``width`` bytes a record holds."""
    if width == 8 and sys.byteorder == "little":
        return pieces
    column = array("q")
    for piece in pieces:
        column.frombytes(piece)
    narrowed = array("h", column) if width == 2 else column
    if sys.byteorder != "little":
        narrowed.byteswap()
    return (narrowed.tobytes(),)


def _ints(data: Buffer, width: int = 8) -> array[int]:
    column = array("q" if width == 8 else "h")
    column.frombytes(data)
    if sys.byteorder != "little":
        column.byteswap()
    return column if width == 8 else array("q", column)


class Record:
    """A checkpoint record's fixed fields (the rest is decoded from ``payload`` only when it is used)."""

    # A plain class, not a dataclass: a start decodes one per session, and a frozen dataclass is slow to make.
    __slots__ = (
        "_at",
        "_lengths",
        "body_start",
        "body_stop",
        "digests",
        "first_block",
        "instance",
        "key",
        "payload",
        "start",
        "stop",
        "width",
    )

    def __init__(
        self,
        key: SessionKey,
        instance: str,
        start: int,
        stop: int,
        body_start: int,
        body_stop: int,
        first_block: int,
        digests: bytes,
        payload: bytes | memoryview,
        at: int,
        lengths: tuple[int, int, int, int],
        width: int = 8,
    ) -> None:
        self.key = key
        self.width = width  # bytes per number in its columns
        self.instance = instance
        self.start = start
        self.stop = stop
        self.body_start = body_start
        self.body_stop = body_stop
        self.first_block = first_block
        self.digests = digests
        self.payload = payload
        self._at = at  # where the JSON description starts in ``payload``
        self._lengths = lengths

    def columns(self) -> tuple[memoryview, array[int], array[int], array[int]]:
        """Its description (JSON) and its line ends, surface values and turn ends."""
        json_length, ends_length, surface_length, turns_length = self._lengths
        at, width = self._at, self.width
        payload = memoryview(self.payload)
        description = payload[at : at + json_length]
        at += json_length
        ends = _ints(payload[at : at + width * ends_length], width)
        at += width * ends_length
        surface = _ints(payload[at : at + width * surface_length], width)
        at += width * surface_length
        turn_ends = _ints(payload[at : at + width * turns_length], width)
        return description, ends, surface, turn_ends

    def narrow_columns(self) -> memoryview | None:
        """Its description and 16-bit columns as they lie in the record (a frozen log keeps them so), or None."""
        if self.width != 2:
            return None
        json_length, ends_length, surface_length, turns_length = self._lengths
        size = json_length + 2 * (ends_length + surface_length + turns_length)
        return memoryview(self.payload)[self._at : self._at + size]

    def parts(self) -> tuple[LogState, array[int], array[int], array[int], list[Checkpoint]]:
        """The state after its events, and their line ends, surface values, turn ends and checkpoints."""
        description, ends, surface, turn_ends = self.columns()
        state, checkpoints = _described(description, self.stop)
        if len(ends) != self.stop - self.start or len(checkpoints) != len(turn_ends):
            raise ValueError("the record's columns do not fit its events")
        return state, ends, surface, turn_ends, checkpoints


def _described(description: Buffer, count: int) -> tuple[LogState, list[Checkpoint]]:
    """The state and the checkpoints a record's description says (``count`` events)."""
    *columns, points = orjson.loads(description)
    state = LogState.of_columns(columns, count=count)
    # (a point of an older forklog, without the figures, does not unpack: its record is not used)
    return state, [
        checkpoint(turn, step, frozenset(calls), stats_of_columns(stats)) for turn, step, calls, stats in points
    ]


def _head(description: Buffer, count: int) -> LogHead:
    *columns, _ = orjson.loads(description)
    return head_of(LogState.of_columns(columns, count=count))


def decode_record(payload: bytes | memoryview) -> Record:
    """The fixed fields of a checkpoint record; ValueError (or struct.error) if it does not decode."""
    (
        tenant_length,
        id_length,
        instance_length,
        width,
        start,
        stop,
        body_start,
        body_stop,
        json_length,
        ends_length,
        surface_length,
        turns_length,
        first_block,
        digest_count,
    ) = _HEAD.unpack_from(payload)
    at = _HEAD.size
    tenant = str(payload[at : at + tenant_length], "utf-8")
    at += tenant_length
    session_id = str(payload[at : at + id_length], "utf-8")
    at += id_length
    instance = str(payload[at : at + instance_length], "utf-8")
    at += instance_length
    if width not in (2, 8):
        raise ValueError("the checkpoint record's numbers are neither 2 nor 8 bytes wide")
    columns = json_length + width * (ends_length + surface_length + turns_length)
    digests_at = at + columns
    digests = bytes(payload[digests_at : digests_at + DIGEST_BYTES * digest_count])
    if (
        len(digests) != DIGEST_BYTES * digest_count
        or len(payload) != digests_at + len(digests)
        or not 0 <= start <= stop
        or not 0 <= body_start <= body_stop
        or ends_length != stop - start
        or first_block * BLOCK_BYTES > body_start
        or digest_count != -(-(body_stop - first_block * BLOCK_BYTES) // BLOCK_BYTES)
    ):
        raise ValueError("the checkpoint record does not decode")
    return Record(
        SessionKey(tenant, session_id),
        instance,
        start,
        stop,
        body_start,
        body_stop,
        first_block,
        digests,
        payload,
        at,
        (json_length, ends_length, surface_length, turns_length),
        width,
    )


class RecordChain:
    """A session's records, the first starting at event 0 and each next where the previous stopped."""

    __slots__ = ("digests", "records")

    def __init__(self, first: Record) -> None:
        self.records = [first]
        self.digests: bytes | bytearray = first.digests

    @property
    def last(self) -> Record:
        return self.records[-1]

    @property
    def instance(self) -> str:
        return self.records[0].instance

    @property
    def stop(self) -> int:
        return self.last.stop

    @property
    def body_stop(self) -> int:
        return self.last.body_stop

    def extend(self, record: Record) -> bool:
        """Add ``record`` if it goes on where this chain stops (else it is dropped, and False)."""
        last = self.last
        if record.instance != last.instance or record.start != last.stop or record.body_start != last.body_stop:
            return False
        digests = self.digests if isinstance(self.digests, bytearray) else bytearray(self.digests)
        del digests[DIGEST_BYTES * record.first_block :]
        digests += record.digests
        self.digests = digests
        self.records.append(record)
        return True

    def holds(self, body: memoryview) -> bool:
        """Whether ``body`` (a file's lines after its header) begins with exactly the checked bytes."""
        stop = self.body_stop
        digests = self.digests
        if len(body) < stop or len(digests) != DIGEST_BYTES * -(-stop // BLOCK_BYTES):
            return False
        if stop <= BLOCK_BYTES:  # most sessions: one block
            return not stop or _digest(body[:stop]) == digests
        for block, position in enumerate(range(0, stop, BLOCK_BYTES)):
            at = DIGEST_BYTES * block
            if _digest(body[position : min(position + BLOCK_BYTES, stop)]) != digests[at : at + DIGEST_BYTES]:
                return False
        return True

    def parts(self) -> LogParts:
        """The checked prefix's parts (ValueError if the records do not fit together)."""
        ends, surface, turn_ends = array("q"), array("q"), array("q")
        checkpoints: list[Checkpoint] = []
        state = LogState()
        for record in self.records:
            state, record_ends, record_surface, record_turns, record_points = record.parts()
            ends += record_ends
            surface += record_surface
            turn_ends += record_turns
            checkpoints += record_points
        state.nodes = _fold(surface)
        return LogParts(state, ends, surface, turn_ends, checkpoints)

    def merged(self) -> list[Buffer]:
        """One record of the whole chain, as pieces (a journal rewrite keeps one per session)."""
        if len(self.records) == 1:
            return [self.last.payload]
        parts = self.parts()
        first = self.records[0]
        return encode_merged(first.key, first.instance, parts, self.body_stop, bytes(self.digests))


def _fold(surface: Sequence[int]) -> list[int]:
    """The surface nodes after the changes (flat ``seq, start, end`` triples), in order."""
    return fold_surface(zip(surface[0::3], surface[1::3], surface[2::3], strict=True))


def encode_merged(key: SessionKey, instance: str, parts: LogParts, body_stop: int, digests: bytes) -> list[Buffer]:
    """A record of events 0 .. the end whose block digests are already known."""

    def raw(column: Sequence[int]) -> tuple[memoryview, ...]:
        return (memoryview(column if isinstance(column, array) else array("q", column)).cast("B"),)

    delta = LogDelta(
        0,
        parts.state.count,
        0,
        0,
        body_stop,
        (),
        parts.state,
        raw(parts.ends),
        raw(parts.surface),
        raw(parts.turn_ends),
        tuple(parts.checkpoints),
    )
    return encode_record(key, instance, delta, digests)


def read_chains(payloads: Iterable[bytes | memoryview]) -> dict[SessionKey, RecordChain]:
    """Every session's chain in the journal's records, in order: a record from event 0 starts a chain anew (a new
    incarnation, or a rewrite), any other one extends its session's chain if it fits; a record that does not decode
    is skipped."""
    chains: dict[SessionKey, RecordChain] = {}
    for payload in payloads:
        try:
            record = decode_record(payload)
        except (ValueError, struct.error, UnicodeDecodeError):
            continue
        if record.start == 0:
            chains[record.key] = RecordChain(record)
            continue
        chain = chains.get(record.key)
        if chain is not None:
            chain.extend(record)
    return chains


class ColdLog(bytes):
    """A small session's log kept as one bytes object (its description, its columns as 16-bit numbers, its lines)
    and thawed into a :class:`SessionLog` on first use: an idle session costs little more than its bytes."""

    __slots__ = ()

    _HEAD = struct.Struct("<IIII")  # description length, line ends, surface values, turn ends

    @classmethod
    def of(cls, record: Record, lines: Buffer) -> ColdLog | None:
        """The frozen form of a whole log's one ``record`` and its ``lines``; None if they are too large for it."""
        json_length, ends_length, surface_length, turns_length = record._lengths
        try:  # a record an older forklog wrote lacks what the Session resource says now: the log is checked instead
            _head(memoryview(record.payload)[record._at : record._at + json_length], record.stop)
        except (ValueError, TypeError):
            return None
        head = cls._HEAD.pack(json_length, ends_length, surface_length, turns_length)
        narrow = record.narrow_columns()
        if narrow is not None and sys.byteorder == "little":  # as it lies in the record: nothing to convert
            return cls(b"".join((head, narrow, lines)))
        description, ends, surface, turn_ends = record.columns()
        try:
            columns = (array("h", ends), array("h", surface), array("h", turn_ends))
        except OverflowError:
            return None
        return cls(b"".join((head, description, *(column.tobytes() for column in columns), lines)))

    def _description(self) -> tuple[memoryview, int, int, int, int]:
        json_length, ends, surface, turns = self._HEAD.unpack_from(self)
        start = self._HEAD.size
        return memoryview(self)[start : start + json_length], json_length, ends, surface, turns

    def thaw(self) -> SessionLog:
        description, json_length, ends_length, surface_length, turns_length = self._description()
        at = self._HEAD.size + json_length
        columns = []
        for length in (ends_length, surface_length, turns_length):
            column = array("h")
            column.frombytes(self[at : at + 2 * length])
            columns.append(array("q", column))
            at += 2 * length
        ends, surface, turn_ends = columns
        state, checkpoints = _described(description, ends_length)
        state.nodes = _fold(surface)
        return resume_log(bytes(self[at:]), LogParts(state, ends, surface, turn_ends, checkpoints))

    def head(self) -> LogHead:
        description, _, ends, _, _ = self._description()
        return _head(description, ends)

    def body_bytes(self) -> int:
        _, json_length, ends, surface, turns = self._description()
        return len(self) - self._HEAD.size - json_length - 2 * (ends + surface + turns)

    def last_time(self) -> int | None:
        """The first column of the description, read without parsing the rest (a start asks it of every session)."""
        description = self._description()[0]
        text = bytes(description[1:24])
        comma = text.find(b",")
        try:
            return None if text[:comma] == b"null" else int(text[:comma])
        except ValueError:
            return self.head().last_time
