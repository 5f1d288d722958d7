"""How the rules' state of a log is stored in a row, and rebuilt from it.

A session row holds the :class:`~app.domain.events.LogState` after its last event as JSON (``state``), without the
surface nodes, which grow with the log: those are rebuilt from the ``surface`` rows (one per surface event, O(surface
events), never O(events)). A ``turn/end`` row holds the checkpoint right after it (next turn, next step, pending
calls): with its time, that is the whole state of a fork's seed ending there, so a fork reads one row whatever the
seed's length. The values are DSH's JavaScript values (numbers stay ints or floats as they were sent).
"""

from __future__ import annotations

from typing import Any

import orjson

from app.domain.log_state import LogState
from app.domain.staging import Checkpoint, checkpoint
from app.domain.stats import stats_of_columns

__all__ = ["decode_checkpoint", "decode_state", "encode_checkpoint", "encode_state", "fork_state"]


def encode_state(state: LogState) -> str:
    return orjson.dumps(state.columns()).decode()


def decode_state(text: str, count: int, nodes: list[int]) -> LogState:
    return LogState.of_columns(orjson.loads(text), count=count, nodes=nodes)


def encode_checkpoint(point: Checkpoint, body_bytes: int) -> str:
    """A turn/end's checkpoint with the bytes of the lines up to it (a fork's seed's ``bytes``), then the session's
    figures there (spec 17)."""
    next_turn, next_step, pending, stats = point.columns()
    return orjson.dumps([next_turn, next_step, pending, body_bytes, stats]).decode()


def decode_checkpoint(text: str) -> tuple[Checkpoint, int]:
    """The checkpoint and the bytes of the lines up to its turn/end."""
    next_turn, next_step, pending, body_bytes, stats = orjson.loads(text)
    return checkpoint(next_turn, next_step, frozenset(pending), stats_of_columns(stats)), int(body_bytes)


def fork_state(count: int, last_time: Any, checkpoint: Checkpoint, body_bytes: int, source: LogState) -> LogState:
    """The state of a seed of ``count`` events ending at a ``turn/end`` (surface nodes not included), of a log whose
    whole state is ``source``: its preview is the seed's if the seed holds its event (its title is set by the
    caller when the seed ends before the source's last title)."""
    in_seed = source.preview_seq is not None and source.preview_seq < count
    return LogState(
        count=count,
        last_time=last_time,
        last_type="turn/end",
        last_turn_end_seq=count - 1,
        open_turn=None,
        open_step=None,
        next_turn=checkpoint.next_turn,
        next_step=checkpoint.next_step,
        pending=set(checkpoint.pending),
        body_bytes=body_bytes,
        title=source.title,
        title_seq=source.title_seq,
        preview=source.preview if in_seed else None,
        preview_seq=source.preview_seq if in_seed else None,
        stats=checkpoint.stats.owned_from(count),
    )
