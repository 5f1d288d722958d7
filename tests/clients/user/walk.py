"""A user's program on the installed forklog-client: the README's walk, checked with ``mypy --strict`` (no cast,
no ignore) and run against a real server (``BASE``, ``WALK_ID``)."""

import asyncio
import os

from forklog_client import AsyncForklog, Event, Forklog, ForklogError, NotAtTurnBoundaryError, Session

BASE = os.environ.get("BASE", "http://127.0.0.1:8000")
ID = os.environ.get("WALK_ID", "demo")


def walk() -> None:
    with Forklog(BASE, max_retries=3) as client:
        created: Session = client.sessions.create(id=ID, meta={"cwd": "/work"})
        count: int = created.event_count
        print("1.", created.id, count, created.cwd)
        appended = client.sessions.append(ID, [{"type": "turn/start", "data": {"turn": 1}}])
        seqs: list[int] = [event.seq for event in appended.events]
        client.sessions.append(ID, [{"type": "turn/end", "data": {"turn": 1, "reason": {"kind": "completed"}}}])
        child = client.sessions.fork(ID, session_id=f"{ID}-child")
        parent: str | None = child.parent_session
        print("2.", seqs, parent, child.seed_length)
        client.sessions.append(ID, [{"type": "turn/start", "data": {"turn": 2}}])
        try:
            client.sessions.fork(ID)
        except NotAtTurnBoundaryError as refused:
            status: int = refused.status
            last_turn_end: object = refused.problem["lastTurnEndSeq"]
            print("3.", status, refused.code, last_turn_end)
        except ForklogError:
            raise
        events: list[Event] = list(client.sessions.events(ID, page_size=2))
        children = [session.id for session in client.sessions.list(parent=ID)]
        print("4.", [event.type for event in events], children)


async def follow() -> None:
    async with AsyncForklog(BASE) as client:
        history = await client.sessions.history(f"{ID}-child")
        turn_end: int | None = (await client.sessions.get(ID)).last_turn_end_seq
        print("5.", [message.role for message in history.messages], turn_end)
        await client.sessions.delete(f"{ID}-child")


walk()
asyncio.run(follow())
