"""Model history: the fold of a log's surface events (spec 1.3), exactly as DSH replays a log."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["SurfaceChange", "fold_surface", "project_message"]

# What one surface event did, as (seq, start, end); start and end are -1 for an append.
SurfaceChange = tuple[int, int, int]


def fold_surface(ops: Iterable[SurfaceChange], nodes: list[int] | None = None) -> list[int]:
    """The current surface nodes (seqs in model order) after applying ``ops`` in order to ``nodes`` (none if not
    given; the list is changed in place and returned).

    The ops were validated when their events were stored, so every replace names current nodes.
    """
    if nodes is None:
        nodes = []
    for seq, start, end in ops:
        if start < 0:
            nodes.append(seq)
        else:
            start_at, end_at = nodes.index(start), nodes.index(end)
            nodes[start_at : end_at + 1] = [seq]
    return nodes


def project_message(event: dict[str, Any]) -> Any:
    """The message a surface node contributes, or None (an assistant/message with empty content adds none)."""
    kind = event["type"]
    if kind == "user/message":
        return event["data"]
    if kind == "assistant/message":
        message = event["data"]["message"]
        return message if message["content"] else None
    if kind == "tool/result":
        return event["data"]["message"]
    return None
