"""Packed rows: a run of a log's events as one row of ``forklog_packs``, its lines concatenated and compressed.

A log's own events are stored in two ways (spec 16, bytes at rest): as packs, at most :data:`MAX_EVENTS` events and
:data:`MAX_BYTES` bytes of lines each, or one small row each in ``forklog_events``. An append of at least
:data:`BATCH_EVENTS` events (or :data:`BATCH_BYTES` bytes) stores its events as packs at once; a smaller one as
small rows, which the packer (:mod:`~app.backends.postgres.packing`) replaces by packs once their turn has ended. A
seed stores its ended turns as packs.

A pack's ``body`` is its lines, each ending in ``\\n``, exactly as they were appended (the exact bytes of spec 6);
from :data:`COMPRESS_FROM` bytes on it is one Zstandard frame (level 3, with its content size) when that is smaller.
``size`` is the lines' bytes (what a quota counts, without decompressing). A ``turn/end`` is always the last event
of its pack: a fork point, a chain piece's end, a sweep's cut is never inside a pack, so forks keep sharing whole
packs and the sweep drops whole packs.

Reads ask for a range of seqs; a statement answers the packs that overlap it (at most MAX_EVENTS - 1 before its
start, on the (log, seq) index) and the small rows in it (as one part), and :func:`assemble` cuts them to the
range in order.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import zstandard

__all__ = [
    "BATCH_BYTES",
    "BATCH_EVENTS",
    "COMPRESS_FROM",
    "MAX_BYTES",
    "MAX_EVENTS",
    "PARTS",
    "PARTS_AT",
    "Packs",
    "assemble",
    "events_in",
    "lines_of",
    "pack_runs",
    "range_parts",
]

MAX_EVENTS = 1024
MAX_BYTES = 1 << 20
BATCH_EVENTS = 16
BATCH_BYTES = 4096
COMPRESS_FROM = 1024
LEVEL = 3

# A zstandard (de)compressor may not be used by two threads at once; a seed's packs are made off the event loop.
_CODECS = threading.local()


def _compress(text: bytes) -> bytes:
    compressor = getattr(_CODECS, "compressor", None)
    if compressor is None:
        compressor = _CODECS.compressor = zstandard.ZstdCompressor(level=LEVEL)
    return bytes(compressor.compress(text))


def _decompress(body: bytes) -> bytes:
    decompressor = getattr(_CODECS, "decompressor", None)
    if decompressor is None:
        decompressor = _CODECS.decompressor = zstandard.ZstdDecompressor()
    return bytes(decompressor.decompress(body))


# The parts of a chain's pieces ($1 logs, $2 starts, $3 stops), in seq order: each pack that overlaps a piece, and
# each of its small rows (seq, n, z, body: first seq, events, compressed, lines).
_PARTS_OF_RANGE = """
    SELECT k.seq, k.count AS n, k.compressed AS z, k.body FROM forklog_packs k
    WHERE k.log = {log} AND k.seq > {lo} - {span} AND k.seq < {hi} AND k.seq + k.count > {lo}
    UNION ALL
    SELECT e.seq, 1, false, convert_to(e.line || E'\\n', 'UTF8')
    FROM forklog_events e WHERE e.log = {log} AND e.seq >= {lo} AND e.seq < {hi}
"""


def range_parts(log: str, lo: str, hi: str) -> str:
    """The parts of one log's events ``lo`` .. ``hi - 1`` (SQL expressions of them), for a LATERAL join."""
    return _PARTS_OF_RANGE.format(log=log, lo=f"({lo})", hi=f"({hi})", span=MAX_EVENTS)


PARTS = f"""
SELECT x.seq, x.n, x.z, x.body FROM unnest($1::bigint[], $2::bigint[], $3::bigint[]) AS p(log, lo, hi)
CROSS JOIN LATERAL ({range_parts("p.log", "p.lo", "p.hi")}) AS x
ORDER BY x.seq
"""
# The parts holding single events ($1 logs, $2 seqs): each pack holding one of them (once), and their small rows.
PARTS_AT = """
WITH w AS (SELECT * FROM unnest($1::bigint[], $2::bigint[]) AS w(log, seq)),
hit AS (
    SELECT DISTINCT k.log, k.seq FROM w CROSS JOIN LATERAL (
        SELECT k.log, k.seq, k.count FROM forklog_packs k WHERE k.log = w.log AND k.seq <= w.seq
        ORDER BY k.seq DESC LIMIT 1
    ) AS k WHERE w.seq < k.seq + k.count
)
SELECT k.seq, k.count AS n, k.compressed AS z, k.body
FROM hit JOIN forklog_packs k ON k.log = hit.log AND k.seq = hit.seq
UNION ALL
SELECT e.seq, 1, false, convert_to(e.line || E'\\n', 'UTF8')
FROM w JOIN forklog_events e ON e.log = w.log AND e.seq = w.seq
"""


@dataclass(slots=True)
class Packs:
    """Packs as the column arrays an insert takes."""

    seqs: list[int] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    compressed: list[bool] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)

    def add(self, seq: int, lines: Sequence[bytes]) -> None:
        text = b"".join(lines)
        body, squeezed = text, False
        if len(text) >= COMPRESS_FROM:
            frame = _compress(text)
            if len(frame) < len(text):
                body, squeezed = frame, True
        self.seqs.append(seq)
        self.counts.append(len(lines))
        self.sizes.append(len(text))
        self.compressed.append(squeezed)
        self.bodies.append(body)

    @property
    def events(self) -> int:
        return sum(self.counts)

    def params(self) -> list[Any]:
        return [self.seqs, self.counts, self.sizes, self.compressed, self.bodies]


def pack_runs(first: int, lines: Sequence[bytes], turn_ends: Iterable[int]) -> Packs:
    """The packs of the events ``first`` .. ``first + len(lines) - 1`` (each line with its ``\\n``): cut after each
    turn/end of ``turn_ends`` and at MAX_EVENTS events or MAX_BYTES bytes."""
    ends = set(turn_ends)
    packs = Packs()
    run: list[bytes] = []
    start, size = first, 0
    for offset, line in enumerate(lines):
        if run and (len(run) == MAX_EVENTS or size + len(line) > MAX_BYTES):
            packs.add(start, run)
            run, start, size = [], first + offset, 0
        run.append(line)
        size += len(line)
        if first + offset in ends:
            packs.add(start, run)
            run, start, size = [], first + offset + 1, 0
    if run:
        packs.add(start, run)
    return packs


def lines_of(z: bool, body: bytes) -> bytes:
    """A part's lines (decompressed)."""
    return _decompress(body) if z else body


def assemble(parts: Iterable[Any], start: int, stop: int) -> tuple[bytes, int]:
    """The lines of events ``start`` .. ``stop - 1`` from ``parts`` (rows with the columns seq, n, z and body, in
    seq order), and how many events they are; the count falls short where an event is missing or out of order."""
    out: list[bytes] = []
    expected = start
    for part in parts:
        seq, n, z, body = part["seq"], part["n"], part["z"], part["body"]
        if seq is None:
            continue
        low, high = max(start, seq), min(stop, seq + n)
        if low >= high:
            continue
        if low != expected:
            break
        text = lines_of(z, bytes(body))
        if low == seq and high == seq + n:
            out.append(text)
        else:
            lines = text.split(b"\n")
            out.append(b"".join(line + b"\n" for line in lines[low - seq : high - seq]))
        expected = high
    return b"".join(out), expected - start


def events_in(parts: Iterable[Any], wanted: Iterable[int]) -> dict[int, bytes]:
    """The lines (without their ``\\n``) of the events ``wanted`` found in ``parts``."""
    seqs = set(wanted)
    found: dict[int, bytes] = {}
    for part in parts:
        seq, n = part["seq"], part["n"]
        lines = lines_of(part["z"], bytes(part["body"])).split(b"\n")
        for offset in range(n):
            if seq + offset in seqs:
                found[seq + offset] = lines[offset]
    return found
