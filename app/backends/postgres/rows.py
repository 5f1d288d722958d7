"""A batch of events as the column arrays the statements insert (events, surface changes, turn/end checkpoints)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.backends.log_parts import log_parts
from app.backends.postgres.packs import BATCH_BYTES, BATCH_EVENTS, Packs, pack_runs
from app.backends.postgres.state import encode_checkpoint
from app.domain.history import SurfaceChange
from app.domain.log import SessionLog
from app.domain.session import SessionHeader
from app.domain.staging import Checkpoint, StagedEvents

__all__ = ["Rows", "header_of_row"]


@dataclass(slots=True)
class Rows:
    seqs: list[int]
    lines: list[str]
    surface_seqs: list[int]
    surface_starts: list[int]
    surface_ends: list[int]
    turn_end_seqs: list[int]
    turn_end_times: list[int]
    turn_end_checkpoints: list[str]

    @classmethod
    def of(
        cls,
        base: int,
        lines: bytes,
        surface: Sequence[SurfaceChange],
        checkpoints: Mapping[int, Checkpoint],
        time_of: Any,
        end_of: Any,
    ) -> Rows:
        texts = lines.decode().split("\n")[:-1] if lines else []
        turn_ends = sorted(checkpoints)
        return cls(
            seqs=list(range(base, base + len(texts))),
            lines=texts,
            surface_seqs=[change[0] for change in surface],
            surface_starts=[change[1] for change in surface],
            surface_ends=[change[2] for change in surface],
            turn_end_seqs=turn_ends,
            turn_end_times=[int(time_of(seq)) for seq in turn_ends],
            turn_end_checkpoints=[encode_checkpoint(checkpoints[seq], end_of(seq)) for seq in turn_ends],
        )

    @classmethod
    def of_staged(cls, staged: StagedEvents) -> Rows:
        base = staged.base_count
        base_bytes = staged.state.body_bytes - len(staged.lines)
        return cls.of(
            base,
            staged.lines,
            staged.surface_ops,
            staged.checkpoints,
            lambda seq: staged.events[seq - base]["time"],
            lambda seq: base_bytes + staged.ends[seq - base],
        )

    @classmethod
    def of_log(cls, log: SessionLog) -> Rows:
        parts = log_parts(log)
        flat = parts.surface
        surface = [(flat[i], flat[i + 1], flat[i + 2]) for i in range(0, len(flat), 3)]
        checkpoints = dict(zip(parts.turn_ends, parts.checkpoints, strict=True))
        return cls.of(
            0, log.lines(), surface, checkpoints, lambda seq: log.event(seq)["time"], lambda seq: log.offset(seq + 1)
        )

    def take_events(self) -> tuple[list[int], list[str]]:
        """The event columns, leaving none here (they are copied in separately)."""
        taken = (self.seqs, self.lines)
        self.seqs, self.lines = [], []
        return taken

    def take_packs(self) -> Packs:
        """The packs of the events up to the last turn/end, leaving here only the small rows of those after."""
        if not self.turn_end_seqs or not self.seqs:
            return Packs()
        first = self.seqs[0]
        cut = max(self.turn_end_seqs) + 1 - first
        packs = pack_runs(first, [line.encode() + b"\n" for line in self.lines[:cut]], self.turn_end_seqs)
        self.seqs, self.lines = self.seqs[cut:], self.lines[cut:]
        return packs

    def take_batch_packs(self) -> Packs:
        """An append's events as packs when the batch is large enough (none left here then), else none."""
        if len(self.lines) < BATCH_EVENTS and sum(len(line) for line in self.lines) < BATCH_BYTES:
            return Packs()
        packs = pack_runs(self.seqs[0], [line.encode() + b"\n" for line in self.lines], self.turn_end_seqs)
        self.seqs, self.lines = [], []
        return packs

    def params(self) -> list[Any]:
        return [
            self.seqs,
            self.lines,
            self.surface_seqs,
            self.surface_starts,
            self.surface_ends,
            self.turn_end_seqs,
            self.turn_end_times,
            self.turn_end_checkpoints,
        ]


def header_of_row(session_id: str, row: Any) -> SessionHeader:
    """The header a ``forklog_sessions`` row stores (its id given apart: a row may be read without it)."""
    return SessionHeader(
        id=session_id,
        created_at=row["created_at"],
        instance=row["instance"],
        cwd=row["cwd"],
        parent_session=row["parent_session"],
        seed_length=row["seed_length"],
        origin=row["origin"],
        delegation_depth=row["delegation_depth"],
        agent_preset=row["agent_preset"],
        archived=row.get("archived") is True,  # (a row read without the column is one no archive reached)
    )
