"""A bounded loopback load against a real server, with a client-side record of everything acknowledged.

One *owner* per session appends whole turns, in one to three appends each, with ``expectedSeq`` (an agent driving
its session); a few *chaos* workers meanwhile snapshot, fork (with and without ``atSeq``), read events and
histories, append whole turns to fork children, delete children, and send racing appends (two or three identical
whole turns at once, with or without ``expectedSeq``) to sessions at a boundary. Every 2xx is recorded: the events
an append stored (by seq), the sessions a create or fork made, the deletes, the snapshots' seeds. ``verify``
then checks the server against that record.

The load survives the server's death (``kill -9``): a worker that loses its connection stops, and what it had
in flight counts as unacknowledged. A new :class:`Load` over the same :class:`Record` resumes on the restarted
server: each owner re-reads its log, closes a turn the crash left open (``turn/end`` reason ``interrupted``) and
goes on.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.fuzz.support import (
    SPEC_CODES,
    check_every_log,
    data_files,
    turn_events,
)

# What each operation may answer under this load; anything else (above all a 5xx) is a finding.
ALLOWED: dict[str, set[tuple[int, str]]] = {
    "create": {(201, ""), (409, "SESSION_ALREADY_EXISTS")},
    # An owner's first append of a turn conflicts when a racer stored a whole turn first; a later one never may.
    "owner-append": {(201, ""), (409, "SEQ_CONFLICT")},
    "resync-append": {(201, "")},
    "race-append": {(201, ""), (409, "SEQ_CONFLICT"), (422, "INVALID_EVENT")},
    "child-append": {(201, ""), (409, "SEQ_CONFLICT"), (404, "SESSION_NOT_FOUND")},
    "snapshot": {(200, ""), (409, "NOT_AT_TURN_BOUNDARY"), (404, "SESSION_NOT_FOUND")},
    "fork": {(201, ""), (409, "NOT_AT_TURN_BOUNDARY"), (404, "SESSION_NOT_FOUND")},
    "delete": {(204, ""), (404, "SESSION_NOT_FOUND")},
    "read": {(200, ""), (404, "SESSION_NOT_FOUND")},
    "list": {(200, "")},
}


@dataclass
class Record:
    """Everything the server acknowledged, across rounds (and restarts)."""

    owners: list[str]
    acked: dict[str, dict[int, dict[str, Any]]] = field(default_factory=dict)
    created: set[str] = field(default_factory=set)
    children: list[str] = field(default_factory=list)
    deleted: set[str] = field(default_factory=set)
    maybe_deleted: set[str] = field(default_factory=set)
    snapshots: list[tuple[str, list[dict[str, Any]]]] = field(default_factory=list)
    answers: Counter[tuple[str, int, str]] = field(default_factory=Counter)
    unexpected: list[str] = field(default_factory=list)
    races: int = 0
    race_winners: Counter[int] = field(default_factory=Counter)

    def operations(self) -> int:
        return sum(self.answers.values())


class ServerGone(Exception):
    """The connection failed: the server was killed (or died)."""


@dataclass
class _OwnerState:
    count: int = 0
    next_turn: int = 1


def log_state(events: list[dict[str, Any]]) -> tuple[int, int | None, int | None]:
    """(last closed turn, open turn, open step) of a log."""
    last_turn, open_turn, open_step = 0, None, None
    for event in events:
        kind, data = event["type"], event["data"]
        if kind == "turn/start":
            open_turn = data["turn"]
        elif kind == "step/start":
            open_step = data["step"]
        elif kind == "step/end":
            open_step = None
        elif kind == "turn/end":
            last_turn, open_turn, open_step = data["turn"], None, None
    return last_turn, open_turn, open_step


class Load:
    def __init__(
        self,
        base_url: str,
        record: Record,
        *,
        seed: int,
        turns_per_owner: int = 6,
        chaos_workers: int = 4,
        max_seconds: float = 20.0,
    ) -> None:
        self.base_url = base_url
        self.record = record
        self.seed = seed
        self.turns_per_owner = turns_per_owner
        self.chaos_workers = chaos_workers
        self.max_seconds = max_seconds
        self._owners_done = asyncio.Event()
        self._fork_serial = 0

    # -- requests --------------------------------------------------------------------------------------------------

    async def _call(self, client: httpx.AsyncClient, op: str, method: str, url: str, **kwargs: Any) -> httpx.Response:
        try:
            response = await client.request(method, url, **kwargs)
        except httpx.TransportError as exc:
            raise ServerGone(repr(exc)) from None
        code = ""
        if response.status_code >= 400:
            try:
                code = str(response.json().get("code", "?"))
            except ValueError:
                code = "<not json>"
            if not response.headers.get("content-type", "").startswith("application/problem+json"):
                code += " <not problem+json>"
            elif code not in SPEC_CODES:
                code += " <not a spec code>"
        self.record.answers[(op, response.status_code, code)] += 1
        if (response.status_code, code) not in ALLOWED[op]:
            self.record.unexpected.append(f"{op} {method} {url} -> {response.status_code} {response.text[:300]}")
        return response

    def _ack(self, session_id: str, stored: list[dict[str, Any]]) -> None:
        acked = self.record.acked.setdefault(session_id, {})
        for event in stored:
            acked[event["seq"]] = event

    async def _append(
        self, client: httpx.AsyncClient, op: str, session_id: str, events: list[dict[str, Any]], expected: int | None
    ) -> httpx.Response:
        body: dict[str, Any] = {"events": events}
        if expected is not None:
            body["expectedSeq"] = expected
        response = await self._call(client, op, "POST", f"/sessions/{session_id}/events", json=body)
        if response.status_code == 201:
            self._ack(session_id, response.json()["events"])
        return response

    async def _read_log(self, client: httpx.AsyncClient, session_id: str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        while True:
            response = await self._call(
                client, "read", "GET", f"/sessions/{session_id}/events", params={"from": len(events), "limit": 10000}
            )
            if response.status_code != 200:
                return events
            page = response.json()
            events.extend(page["events"])
            if page["nextSeq"] >= page["eventCount"]:
                return events

    # -- owners ----------------------------------------------------------------------------------------------------

    async def _sync(self, client: httpx.AsyncClient, session_id: str) -> _OwnerState:
        """The owner's view of its log, re-read; a turn a crash left open is closed as interrupted."""
        events = await self._read_log(client, session_id)
        last_turn, open_turn, open_step = log_state(events)
        if open_turn is not None:
            closing = []
            if open_step is not None:
                closing.append({"type": "step/end", "data": {"turn": open_turn, "step": open_step}})
            closing.append({"type": "turn/end", "data": {"turn": open_turn, "reason": {"kind": "interrupted"}}})
            response = await self._append(client, "resync-append", session_id, closing, len(events))
            if response.status_code != 201:
                return await self._sync(client, session_id)
            return _OwnerState(count=len(events) + len(closing), next_turn=open_turn + 1)
        return _OwnerState(count=len(events), next_turn=last_turn + 1)

    async def _owner(self, client: httpx.AsyncClient, index: int, session_id: str) -> None:
        rng = random.Random(self.seed * 1000 + index)
        state = await self._sync(client, session_id)
        turns_done = 0
        while turns_done < self.turns_per_owner:
            events = turn_events(state.next_turn, steps=rng.randint(1, 2), chunks=rng.randint(0, 3))
            cuts = sorted(rng.sample(range(1, len(events)), rng.randint(0, 2)))
            parts = [events[start:stop] for start, stop in zip([0, *cuts], [*cuts, len(events)], strict=True)]
            for number, part in enumerate(parts):
                response = await self._append(client, "owner-append", session_id, part, state.count)
                if response.status_code == 409:
                    if number > 0:
                        self.record.unexpected.append(f"{session_id}: a racer got into the middle of a turn")
                        return
                    # A racer stored a whole turn first: re-read and start the turn again.
                    state = await self._sync(client, session_id)
                    break
                if response.status_code != 201:
                    return
                state.count += len(part)
                await asyncio.sleep(rng.random() * 0.01)
            else:
                state.next_turn += 1
                turns_done += 1

    # -- chaos -----------------------------------------------------------------------------------------------------

    async def _boundary_turn(self, client: httpx.AsyncClient, session_id: str) -> tuple[int, int] | None:
        """(event count, next turn) of a session at a turn boundary now, or None."""
        response = await self._call(client, "read", "GET", f"/sessions/{session_id}")
        if response.status_code != 200:
            return None
        session = response.json()
        if not session["forkable"]:
            return None
        count = session["eventCount"]
        if count == 0:
            return 0, 1
        tail = await self._call(client, "read", "GET", f"/sessions/{session_id}/events", params={"from": count - 1})
        if tail.status_code != 200 or not tail.json()["events"]:
            return None
        last = tail.json()["events"][0]
        return count, int(last["data"]["turn"]) + 1

    def _turn_end_seqs(self, session_id: str) -> list[int]:
        return [seq for seq, event in self.record.acked.get(session_id, {}).items() if event["type"] == "turn/end"]

    async def _race(self, client: httpx.AsyncClient, rng: random.Random) -> None:
        session_id = rng.choice(self.record.owners)
        found = await self._boundary_turn(client, session_id)
        if found is None:
            return
        count, turn = found
        events = turn_events(turn, text="race")
        expected = count if rng.random() < 0.5 else None
        racers = rng.randint(2, 3)
        answers = await asyncio.gather(
            *(self._append(client, "race-append", session_id, events, expected) for _ in range(racers))
        )
        winners = sum(1 for answer in answers if answer.status_code == 201)
        self.record.races += 1
        self.record.race_winners[winners] += 1
        if winners > 1:
            self.record.unexpected.append(f"race on {session_id}: {winners} identical turns {turn} were all stored")

    async def _snapshot_or_fork(self, client: httpx.AsyncClient, rng: random.Random, fork: bool) -> None:
        candidates = self.record.owners + self.record.children
        session_id = rng.choice(candidates)
        body: dict[str, Any] = {}
        turn_ends = self._turn_end_seqs(session_id)
        if turn_ends and rng.random() < 0.5:
            body["atSeq"] = rng.choice(turn_ends)
        if not fork:
            response = await self._call(client, "snapshot", "POST", f"/sessions/{session_id}/snapshot", json=body)
            if response.status_code == 200:
                self.record.snapshots.append((session_id, response.json()["seed"]))
            return
        if rng.random() < 0.5:
            self._fork_serial += 1
            body["sessionId"] = f"fork-{self.seed}-{self._fork_serial}"
        response = await self._call(client, "fork", "POST", f"/sessions/{session_id}/fork", json=body)
        if response.status_code == 201:
            child = response.json()
            self.record.created.add(child["id"])
            self.record.children.append(child["id"])

    async def _child_append(self, client: httpx.AsyncClient, rng: random.Random) -> None:
        live = [child for child in self.record.children if child not in self.record.deleted]
        if not live:
            return
        session_id = rng.choice(live)
        found = await self._boundary_turn(client, session_id)
        if found is not None:
            await self._append(client, "child-append", session_id, turn_events(found[1], text="child"), found[0])

    async def _delete_child(self, client: httpx.AsyncClient, rng: random.Random) -> None:
        live = [child for child in self.record.children if child not in self.record.deleted]
        if len(live) < 3:
            return
        session_id = rng.choice(live)
        self.record.maybe_deleted.add(session_id)
        response = await self._call(client, "delete", "DELETE", f"/sessions/{session_id}")
        if response.status_code == 204:
            self.record.deleted.add(session_id)

    async def _read(self, client: httpx.AsyncClient, rng: random.Random) -> None:
        session_id = rng.choice(self.record.owners + self.record.children)
        if rng.random() < 0.5:
            await self._call(
                client, "read", "GET", f"/sessions/{session_id}/events", params={"from": rng.randint(0, 20)}
            )
            return
        turn_ends = self._turn_end_seqs(session_id)
        params = {"atSeq": rng.choice(turn_ends)} if turn_ends and rng.random() < 0.5 else {}
        await self._call(client, "read", "GET", f"/sessions/{session_id}/history", params=params)

    async def _chaos(self, client: httpx.AsyncClient, index: int) -> None:
        rng = random.Random(self.seed * 1000 + 500 + index)
        actions = [
            (self._race, 3),
            (lambda c, r: self._snapshot_or_fork(c, r, fork=False), 2),
            (lambda c, r: self._snapshot_or_fork(c, r, fork=True), 3),
            (self._child_append, 2),
            (self._delete_child, 1),
            (self._read, 3),
            (lambda c, r: self._call(c, "list", "GET", "/sessions", params={"limit": 1000}), 1),
        ]
        functions = [function for function, _ in actions]
        weights = [weight for _, weight in actions]
        while not self._owners_done.is_set():
            await rng.choices(functions, weights)[0](client, rng)
            await asyncio.sleep(rng.random() * 0.01)

    # -- running ---------------------------------------------------------------------------------------------------

    async def run(self) -> bool:
        """Run until every owner has appended its turns; False if the server went away meanwhile."""
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
        async with httpx.AsyncClient(base_url=self.base_url, timeout=30, limits=limits) as client:
            try:
                for session_id in self.record.owners:
                    if session_id not in self.record.created:
                        response = await self._call(client, "create", "POST", "/sessions", json={"id": session_id})
                        if response.status_code in (201, 409):
                            self.record.created.add(session_id)
            except ServerGone:
                return False
            owners = [self._owner(client, index, session_id) for index, session_id in enumerate(self.record.owners)]

            async def owners_then_stop() -> list[BaseException | None]:
                try:
                    return await asyncio.gather(*owners, return_exceptions=True)
                finally:
                    self._owners_done.set()

            # No task is cancelled: once the server is gone every worker's next request fails at once, and a
            # worker left to end by itself closes its connections (a cancelled one may leave a socket open).
            chaos = [self._chaos(client, index) for index in range(self.chaos_workers)]
            outcomes = await asyncio.wait_for(
                asyncio.gather(owners_then_stop(), *chaos, return_exceptions=True), self.max_seconds
            )
        flat = [*outcomes[0], *outcomes[1:]] if isinstance(outcomes[0], list) else outcomes
        failures = [outcome for outcome in flat if isinstance(outcome, BaseException)]
        for failure in failures:
            if not isinstance(failure, ServerGone):
                raise failure
        return not failures


def verify(base_url: str, record: Record, data_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """The server against the record: every acknowledged event at its seq, every acknowledged session there,
    every acknowledged delete gone, every snapshot a prefix of today's log, every log valid, nothing corrupt,
    and the data directory holding exactly one file per live session."""
    with httpx.Client(base_url=base_url, timeout=60) as client:
        ready = client.get("/readyz")
        assert ready.status_code == 200, ready.text
        assert ready.json()["corrupt"] == [], ready.json()
        logs = check_every_log(client)
    for session_id in record.created - record.maybe_deleted:
        assert session_id in logs, f"acknowledged session {session_id} is gone"
    for session_id in record.deleted:
        assert session_id not in logs, f"deleted session {session_id} is back"
    for session_id, acked in record.acked.items():
        if session_id in record.maybe_deleted:
            continue
        log = logs[session_id]
        for seq, event in acked.items():
            assert seq < len(log) and log[seq] == event, f"{session_id}: acknowledged event {seq} lost or changed"
    for session_id, seed in record.snapshots:
        if session_id in logs and session_id not in record.maybe_deleted:
            assert logs[session_id][: len(seed)] == seed, f"{session_id} changed under an earlier snapshot"
    files = data_files(data_dir)
    # (either encoding's file: .jsonl, or .jsonl.zstd)
    named = sorted(name.removesuffix(".zstd") for name in files)
    assert named == sorted(f"sessions/{session_id}.jsonl" for session_id in logs), sorted(files)
    return logs
