"""The README's curl walk through an openapi-python-client client. No cast, no Any (mypy --strict).

tests/e2e/test_generated_clients.py generates ./forklog_client (openapi-python-client generate --meta none), checks
`mypy walk.py forklog_client` (strict; walk.py also with disallow_any_expr, see mypy.ini), then runs it with BASE and
WALK_ID set.
"""

from __future__ import annotations

import os
from typing import assert_type

from forklog_client import Client
from forklog_client.api.sessions import append_events, create_session, fork_session, read_events, read_history
from forklog_client.models import (
    AppendRequest,
    AppendResponse,
    AssistantMessageData,
    ContentBlock,
    CreateMeta,
    EventsPage,
    ForkRequest,
    History,
    Message,
    MessageSource,
    NewAssistantMessageEvent,
    NewStepEndEvent,
    NewStepStartEvent,
    NewTurnEndEvent,
    NewTurnStartEvent,
    NewUserMessageEvent,
    NotAtTurnBoundaryProblem,
    ReplaceOp,
    SessionCreate,
    SessionOut,
    StepData,
    TurnEndData,
    TurnEndReason,
    TurnStartData,
    UserMessageEvent,
)

BASE = os.environ.get("BASE", "http://127.0.0.1:8000")
ID = os.environ.get("WALK_ID", "demo")
CHILD = f"{ID}-child"


def turn_one() -> AppendRequest:
    return AppendRequest(
        events=[
            NewTurnStartEvent(type_="turn/start", data=TurnStartData(turn=1)),
            NewUserMessageEvent(
                type_="user/message",
                surface_op="append",
                data=Message(
                    id="u1",
                    role="user",
                    content=[ContentBlock(type_="text", text="Hello")],
                    source=MessageSource(kind="user"),
                ),
            ),
            NewStepStartEvent(type_="step/start", data=StepData(turn=1, step=1)),
            NewAssistantMessageEvent(
                type_="assistant/message",
                surface_op="append",
                data=AssistantMessageData(
                    turn=1,
                    step=1,
                    message=Message(
                        id="a1",
                        role="assistant",
                        content=[ContentBlock(type_="text", text="Hi!")],
                        source=MessageSource(kind="model", provider="deepseek", model="deepseek-chat"),
                    ),
                ),
            ),
            NewStepEndEvent(type_="step/end", data=StepData(turn=1, step=1)),
            NewTurnEndEvent(type_="turn/end", data=TurnEndData(turn=1, reason=TurnEndReason(kind="completed"))),
        ]
    )


def main() -> None:
    client = Client(base_url=BASE)

    # 1. create "demo" with meta.cwd: 201 + Location
    created = create_session.sync_detailed(client=client, body=SessionCreate(id=ID, meta=CreateMeta(cwd="/work")))
    session = created.parsed
    if not isinstance(session, SessionOut):
        raise SystemExit(f"create: {created.status_code} {created.content!r}")
    cwd = session.cwd
    assert_type(cwd, str | None)
    print("1.", int(created.status_code), created.headers.get("location"), session.id, cwd)

    # 2. one whole turn of 6 events
    appended = append_events.sync_detailed(ID, client=client, body=turn_one())
    result = appended.parsed
    if not isinstance(result, AppendResponse):
        raise SystemExit(f"append: {appended.status_code} {appended.content!r}")
    last_seq = result.events[-1].seq
    assert_type(last_seq, int)
    print("2.", int(appended.status_code), len(result.events), "events, last seq", last_seq)

    # 3. fork into "demo-child"
    forked = fork_session.sync_detailed(ID, client=client, body=ForkRequest(session_id=CHILD))
    child = forked.parsed
    if not isinstance(child, SessionOut):
        raise SystemExit(f"fork: {forked.status_code} {forked.content!r}")
    print("3.", int(forked.status_code), forked.headers.get("location"), child.parent_session, child.seed_length)

    # 4. the child's model history: content[0].text of the first message
    history = read_history.sync(CHILD, client=client)
    if not isinstance(history, History):
        raise SystemExit(f"history: {history!r}")
    block = history.messages[0].content[0]
    text = block.text
    if block.type_ != "text" or not isinstance(text, str):
        raise SystemExit(f"first block is {block.type_}")
    assert_type(text, str)
    print("4.", text, "eventCount", history.event_count)

    # 5. open turn 2, then fork mid-turn: 409 NOT_AT_TURN_BOUNDARY
    opened = append_events.sync(
        ID,
        client=client,
        body=AppendRequest(events=[NewTurnStartEvent(type_="turn/start", data=TurnStartData(turn=2))]),
    )
    if not isinstance(opened, AppendResponse):
        raise SystemExit(f"turn 2: {opened!r}")
    print("5a.", opened.session.open_turn)

    mid_turn = fork_session.sync_detailed(ID, client=client)
    problem = mid_turn.parsed
    if not isinstance(problem, NotAtTurnBoundaryProblem):
        raise SystemExit(f"the mid-turn fork answered {mid_turn.status_code} {problem!r}")
    last_event_type = problem.last_event_type
    assert_type(last_event_type, str)
    open_turn = problem.open_turn
    assert_type(open_turn, int | None)
    last_turn_end_seq = problem.last_turn_end_seq
    assert_type(last_turn_end_seq, int | None)
    print("5b.", int(mid_turn.status_code), problem.code, last_event_type, open_turn, last_turn_end_seq)

    # 6. a replace appended to the child reads back as a ReplaceOp, the stored "append" of seq 1 as "append"
    edited = Message(
        id="u1b",
        role="user",
        content=[ContentBlock(type_="text", text="Hello, edited")],
        source=MessageSource(kind="user"),
    )
    replace = NewUserMessageEvent(
        type_="user/message", surface_op=ReplaceOp(op="replace", start=1, end=1), source_event_seqs=[1], data=edited
    )
    replaced = append_events.sync(CHILD, client=client, body=AppendRequest(events=[replace]))
    if not isinstance(replaced, AppendResponse):
        raise SystemExit(f"replace: {replaced!r}")
    replacement = replaced.events[0]
    if not isinstance(replacement, UserMessageEvent) or not isinstance(replacement.surface_op, ReplaceOp):
        raise SystemExit(f"the replace reads back as {replacement!r}")
    start = replacement.surface_op.start
    assert_type(start, int)
    read = read_events.sync(CHILD, client=client, from_=1, limit=1)
    if not isinstance(read, EventsPage):
        raise SystemExit(f"read: {read!r}")
    stored = read.events[0]
    if not isinstance(stored, UserMessageEvent) or stored.surface_op != "append":
        raise SystemExit(f"seq 1 reads back as {stored!r}")
    print("6.", replacement.surface_op.op, start, stored.type_, stored.surface_op)


if __name__ == "__main__":
    main()
