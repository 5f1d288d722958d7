"""A session's figures (spec 17): DSH's ``sessionStats`` fold of its log, and the tokens its ``usage`` chunks report.

:class:`SessionStats` is a port of ``sessionStatsProjectionDefinition`` (``@deepseek-ai/dsh-session-stats``): model
time runs from ``step/start`` to the step's ``assistant/message``, the first token is the step's first non-empty
delta chunk, decode time runs from it to the message on steps that report ``outputTokens``, tool time pairs
``tool/call`` with ``tool/result`` by ``callId``, and a step counts at its ``step/end``. Comparisons are JavaScript's
``===`` (:func:`~app.domain.jsonvalue.strict_equal`), as DSH's are.

Beside it, ``usage`` sums every integer member of every ``usage`` chunk, and ``ownUsage`` the same over the events
from ``own_from`` on (a fork's child starts counting after its seed, so its parent's spending is not counted twice).

A value is never changed once made: :func:`fold_stats` returns the same object for an event that changes nothing
(most streamed chunks) and a new one otherwise, so a committed log state can share it with the batch staged on it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from app.domain.jsonvalue import is_number, is_safe_integer, strict_equal

__all__ = ["NO_STATS", "SessionStats", "fold_stats", "fold_stats_all", "stats_of_columns", "token_sums"]

_EMPTY: dict[str, Any] = {}


def _plain(value: Any) -> Any:
    """A figure as JSON writes it: an integral float (``3.0``: tokens may be reported so) as the integer."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


class SessionStats:
    """DSH's ``sessionStats`` state after a log's events, with the log's token sums.

    ``open_step`` is ``(turn, step, start_time, first_token_time)`` of the step whose message has not come yet, or
    None; ``pending_calls`` maps each dispatched ``callId`` to its ``tool/call``'s time until its result (or the
    turn's end). ``usage`` and ``own_usage`` are read-only mappings shared between values until one changes.
    """

    __slots__ = (
        "decode_ms",
        "decode_tokens",
        "last_turn",
        "llm_ms",
        "open_step",
        "own_from",
        "own_usage",
        "pending_calls",
        "steps",
        "tool_ms",
        "ttft_ms",
        "ttft_steps",
        "turns",
        "usage",
    )

    turns: int
    steps: int
    llm_ms: Any
    tool_ms: Any
    ttft_ms: Any
    ttft_steps: int
    decode_ms: Any
    decode_tokens: Any
    last_turn: Any
    open_step: tuple[Any, Any, Any, Any] | None
    pending_calls: Mapping[str, Any]
    usage: Mapping[str, int]
    own_usage: Mapping[str, int]
    own_from: int

    def __init__(self, own_from: int = 0) -> None:
        self.turns = 0
        self.steps = 0
        self.llm_ms = 0
        self.tool_ms = 0
        self.ttft_ms = 0
        self.ttft_steps = 0
        self.decode_ms = 0
        self.decode_tokens = 0
        self.last_turn = None
        self.open_step = None
        self.pending_calls = _EMPTY
        self.usage = _EMPTY
        self.own_usage = _EMPTY
        self.own_from = own_from

    def _copy(self) -> SessionStats:
        copy: SessionStats = object.__new__(SessionStats)
        for name in SessionStats.__slots__:
            object.__setattr__(copy, name, getattr(self, name))
        return copy

    def view(self) -> dict[str, Any]:
        """The ``stats`` member of the Session resource: DSH's ``view`` of the fold."""
        return {
            "turns": self.turns,
            "steps": self.steps,
            "llmMs": _plain(self.llm_ms),
            "toolMs": _plain(self.tool_ms),
            "ttftMs": _plain(self.ttft_ms),
            "ttftSteps": self.ttft_steps,
            "decodeMs": _plain(self.decode_ms),
            "decodeTokens": _plain(self.decode_tokens),
        }

    def owned_from(self, own_from: int) -> SessionStats:
        """The same figures for a log whose own events start at ``own_from`` (a fork's child: everything up to its
        seed's end is its parent's), its own usage counted from there on."""
        copy = self._copy()
        copy.own_from = own_from
        copy.own_usage = _EMPTY
        return copy

    # -- storage ---------------------------------------------------------------------------------------------------

    def columns(self) -> list[Any]:
        """What a store keeps of it (read back by :func:`stats_of_columns`); the pending calls sorted by id, so that
        equal states are stored as equal bytes."""
        return [
            self.turns,
            self.steps,
            self.llm_ms,
            self.tool_ms,
            self.ttft_ms,
            self.ttft_steps,
            self.decode_ms,
            self.decode_tokens,
            self.last_turn,
            list(self.open_step) if self.open_step is not None else None,
            sorted(self.pending_calls.items()),
            self.usage,
            self.own_usage,
            self.own_from,
        ]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SessionStats):
            return NotImplemented
        return self.columns() == other.columns()

    def __hash__(self) -> int:
        return hash((self.turns, self.steps, self.llm_ms, self.tool_ms, self.decode_tokens, self.own_from))

    def __repr__(self) -> str:
        return f"SessionStats({self.view()}, usage={dict(self.usage)}, ownUsage={dict(self.own_usage)})"


NO_STATS = SessionStats()


def stats_of_columns(columns: Sequence[Any]) -> SessionStats:
    """The stats whose :meth:`SessionStats.columns` these are (ValueError or TypeError if they are not)."""
    (
        turns,
        steps,
        llm_ms,
        tool_ms,
        ttft_ms,
        ttft_steps,
        decode_ms,
        decode_tokens,
        last_turn,
        open_step,
        pending_calls,
        usage,
        own_usage,
        own_from,
    ) = columns
    for figure in (turns, steps, llm_ms, tool_ms, ttft_ms, ttft_steps, decode_ms, decode_tokens, own_from):
        if not is_number(figure):
            raise ValueError("a stored figure is not a number")
    if not isinstance(usage, dict) or not isinstance(own_usage, dict):
        raise ValueError("stored token sums are not objects")
    stats = SessionStats(int(own_from))
    stats.turns, stats.steps, stats.ttft_steps = int(turns), int(steps), int(ttft_steps)
    stats.llm_ms, stats.tool_ms, stats.ttft_ms = llm_ms, tool_ms, ttft_ms
    stats.decode_ms, stats.decode_tokens = decode_ms, decode_tokens
    stats.last_turn = last_turn
    if open_step is not None:
        turn, step, start_time, first_token_time = open_step
        stats.open_step = (turn, step, start_time, first_token_time)
    stats.pending_calls = {str(call_id): time for call_id, time in pending_calls} if pending_calls else _EMPTY
    stats.usage = usage or _EMPTY
    stats.own_usage = own_usage or _EMPTY
    return stats


# -- the fold ------------------------------------------------------------------------------------------------------


def _is_token_delta(chunk: dict[str, Any]) -> bool:
    """DSH's ``isTokenDelta``: a chunk that carries visible model output (``text !== ''``; for a tool call's delta,
    ``argumentsDelta !== ''`` or a ``name``)."""
    kind = chunk.get("type")
    if kind == "text-delta" or kind == "reasoning-delta":
        return chunk.get("text") != ""
    if kind == "tool-call-delta":
        return chunk.get("argumentsDelta") != "" or "name" in chunk
    return False


def _output_tokens(usage: Any) -> Any:
    """An assistant message's reported ``outputTokens`` when it is a finite non-negative number, else None."""
    if not isinstance(usage, dict):
        return None
    value = usage.get("outputTokens")
    return value if is_number(value) and value >= 0 else None  # type: ignore[operator]


def token_sums(sums: Mapping[str, int], usage: Any) -> Mapping[str, int]:
    """``sums`` plus every safe-integer member of a ``usage`` chunk's ``usage`` object (the same object when it
    holds none)."""
    if not isinstance(usage, dict):
        return sums
    added: dict[str, int] | None = None
    for name, value in usage.items():
        if is_safe_integer(value):
            if added is None:
                added = dict(sums)
            added[name] = added.get(name, 0) + int(value)
    return sums if added is None else added


def _chunk(stats: SessionStats, event: dict[str, Any]) -> SessionStats:
    data = event["data"]
    chunk = data["chunk"]
    copied = False
    if chunk.get("type") == "usage":
        usage = chunk.get("usage")
        sums = token_sums(stats.usage, usage)
        if sums is not stats.usage:
            stats, copied = stats._copy(), True
            stats.usage = sums
            if event["seq"] >= stats.own_from:
                stats.own_usage = token_sums(stats.own_usage, usage)
    opened = stats.open_step
    if opened is None or opened[3] is not None:  # most chunks: the step's first token came already
        return stats
    if not strict_equal(opened[0], data.get("turn")) or not strict_equal(opened[1], data.get("step")):
        return stats
    if not _is_token_delta(chunk):
        return stats
    if not copied:
        stats = stats._copy()
    stats.open_step = (opened[0], opened[1], opened[2], event["time"])
    return stats


def _step_start(stats: SessionStats, event: dict[str, Any]) -> SessionStats:
    data = event["data"]
    stats = stats._copy()
    stats.open_step = (data.get("turn"), data.get("step"), event["time"], None)
    return stats


def _message(stats: SessionStats, event: dict[str, Any]) -> SessionStats:
    opened = stats.open_step
    data = event["data"]
    if opened is None or not strict_equal(opened[0], data.get("turn")) or not strict_equal(opened[1], data.get("step")):
        return stats
    start_time, first_token_time = opened[2], opened[3]
    time = event["time"]
    stats = stats._copy()
    stats.llm_ms = stats.llm_ms + max(0, time - start_time)
    stats.open_step = None
    if first_token_time is not None:
        stats.ttft_ms = stats.ttft_ms + max(0, first_token_time - start_time)
        stats.ttft_steps += 1
        output_tokens = _output_tokens(data.get("usage"))
        if output_tokens is not None:
            stats.decode_ms = stats.decode_ms + max(0, time - first_token_time)
            stats.decode_tokens = stats.decode_tokens + output_tokens
    return stats


def _tool_call(stats: SessionStats, event: dict[str, Any]) -> SessionStats:
    stats = stats._copy()
    stats.pending_calls = {**stats.pending_calls, str(event["data"]["callId"]): event["time"]}
    return stats


def _tool_result(stats: SessionStats, event: dict[str, Any]) -> SessionStats:
    call_id = event["data"]["message"]["source"]["callId"]
    dispatched = stats.pending_calls.get(call_id) if isinstance(call_id, str) else None
    if dispatched is None:
        return stats
    stats = stats._copy()
    stats.tool_ms = stats.tool_ms + max(0, event["time"] - dispatched)
    stats.pending_calls = {key: time for key, time in stats.pending_calls.items() if key != call_id}
    return stats


def _step_end(stats: SessionStats, event: dict[str, Any]) -> SessionStats:
    turn = event["data"].get("turn")
    stats = stats._copy()
    if not strict_equal(stats.last_turn, turn):
        stats.turns += 1
    stats.steps += 1
    stats.last_turn = turn
    stats.open_step = None
    return stats


def _turn_end(stats: SessionStats, event: dict[str, Any]) -> SessionStats:
    if not stats.pending_calls:
        return stats
    stats = stats._copy()
    stats.pending_calls = _EMPTY
    return stats


_FOLDS = {
    "assistant/chunk": _chunk,
    "step/start": _step_start,
    "assistant/message": _message,
    "tool/call": _tool_call,
    "tool/result": _tool_result,
    "step/end": _step_end,
    "turn/end": _turn_end,
}


def fold_stats(stats: SessionStats, event: dict[str, Any]) -> SessionStats:
    """The stats after ``event``, an admitted event (the rules have checked its shape): ``stats`` itself when it
    changes nothing."""
    fold = _FOLDS.get(event["type"])
    return stats if fold is None else fold(stats, event)


def fold_stats_all(stats: SessionStats, events: Iterable[dict[str, Any]]) -> SessionStats:
    for event in events:
        fold = _FOLDS.get(event["type"])
        if fold is not None:
            stats = fold(stats, event)
    return stats
