"""Fork chains: which stored log holds which of a session's events.

A log's own rows start at its ``parent_count``; the events before come from its parent log (up to that count), and
so on to a log without a parent. A :class:`Chain` is that list of (log, first seq, end seq) pieces, oldest first; it
never changes once the log exists, so each process keeps the chains it has read. Every read of a session (events,
snapshot, history, tip) clips its range against the chain and asks each piece's log for its part, in one statement.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from app.backends.postgres.pool import Connection

__all__ = ["Chain", "ChainCache", "Piece"]

# Effectively unbounded: the end of the last piece (a log's own rows go on as the log grows).
OPEN_END = 2**62


@dataclass(frozen=True, slots=True)
class Piece:
    log: int
    start: int
    stop: int


@dataclass(frozen=True, slots=True)
class Chain:
    pieces: tuple[Piece, ...]

    @property
    def log(self) -> int:
        """The log whose own rows the session appends to."""
        return self.pieces[-1].log

    def clip(self, start: int, stop: int) -> list[Piece]:
        """The pieces of events ``start`` .. ``stop - 1``."""
        found = []
        for piece in self.pieces:
            low, high = max(start, piece.start), min(stop, piece.stop)
            if low < high:
                found.append(Piece(piece.log, low, high))
        return found

    def owner(self, seq: int) -> int:
        """The log that stores event ``seq``."""
        for piece in self.pieces:
            if piece.start <= seq < piece.stop:
                return piece.log
        raise LookupError(f"event {seq} is not in this chain")

    def arrays(self, start: int, stop: int) -> tuple[list[int], list[int], list[int]]:
        """The clipped pieces as three arrays (logs, starts, stops), the parameters of the chain statements."""
        pieces = self.clip(start, stop)
        return [p.log for p in pieces], [p.start for p in pieces], [p.stop for p in pieces]


_CHAIN = """
WITH RECURSIVE chain (id, parent, parent_count, stop, depth) AS (
    SELECT id, parent, parent_count, $2::bigint, 0 FROM forklog_logs WHERE id = $1
    UNION ALL
    SELECT l.id, l.parent, l.parent_count, LEAST(c.stop, c.parent_count), c.depth + 1
    FROM forklog_logs l JOIN chain c ON l.id = c.parent
)
SELECT id, parent_count, stop FROM chain ORDER BY depth DESC
"""


class ChainCache:
    """The chains this process has read, by log id (a chain never changes), the most recent ``size`` of them."""

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._chains: OrderedDict[int, Chain] = OrderedDict()

    async def get(self, conn: Connection, log: int) -> Chain:
        chain = self._chains.get(log)
        if chain is not None:
            self._chains.move_to_end(log)
            return chain
        rows = await conn.fetch(_CHAIN, log, OPEN_END)
        if not rows:
            raise LookupError(f"log {log} is not stored")
        chain = Chain(tuple(Piece(row["id"], row["parent_count"], row["stop"]) for row in rows))
        self._chains[log] = chain
        if len(self._chains) > self._size:
            self._chains.popitem(last=False)
        return chain
