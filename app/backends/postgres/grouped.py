"""One append as a member of a group commit (:mod:`~app.backends.postgres.group_commit`), and a group's statement."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from app.backends.postgres import queries
from app.backends.postgres.errors import server_lost
from app.backends.postgres.pool import Connection
from app.backends.postgres.rows import Rows
from app.domain.session import SessionKey

__all__ = ["GroupRefused", "GroupedAppend", "commit_group"]


class GroupRefused(Exception):
    """The server refused a group's statement (one append's row, a deadlock with another replica's group): it was
    rolled back whole, nothing of it is stored, and each of its appends may be run alone."""


@dataclass(frozen=True, slots=True)
class GroupedAppend:
    """An append without packs, idempotency records or a quota check: its head's move and its small rows."""

    key: SessionKey
    log: int
    base: int
    count: int
    state: str
    added: int  # the bytes its lines add to the session's log
    changed_at: int
    rows: Rows
    # The archived flag of the tip it was staged on: another replica's archive makes that tip stale (spec 17).
    archived: bool = False


def _params(group: Sequence[GroupedAppend]) -> list[Any]:
    heads: list[list[Any]] = [[] for _ in range(9)]
    tagged: list[list[Any]] = [[] for _ in range(11)]
    for ord_, append in enumerate(group):
        for column, value in zip(
            heads,
            (ord_, append.key.tenant, append.key.id, append.log, append.base, append.count, append.state,
             append.added, append.changed_at),
            strict=True,
        ):  # fmt: skip
            column.append(value)
        # Each table's columns after the ordinal's: events (seq, line), surface (seq, start, end), turn/ends
        # (seq, time, checkpoint), as Rows.params() lists them.
        own = append.rows.params()
        for at, columns in ((0, own[0:2]), (3, own[2:5]), (7, own[5:8])):
            tagged[at].extend([ord_] * len(columns[0]))
            for offset, values in enumerate(columns, start=1):
                tagged[at + offset].extend(values)
    return [*heads, *tagged, [append.archived for append in group]]


async def commit_group(conn: Connection, group: Sequence[GroupedAppend]) -> list[int | None]:
    """Each append's change number, or None where its head had moved (nothing of it stored); one statement.
    GroupRefused if the server refused it (a server lost or no longer a primary is the caller's outage instead)."""
    try:
        found = await conn.fetch(queries.GROUP_APPEND, *_params(group))
    except asyncpg.PostgresError as exc:
        if server_lost(exc):
            raise
        raise GroupRefused(str(exc)) from exc
    moved = {row["ord"]: row["change_seq"] for row in found}
    return [moved.get(ord_) for ord_ in range(len(group))]
