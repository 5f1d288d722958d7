"""The README's curl walk with datamodel-code-generator models and hand-written, typed httpx calls.

datamodel-code-generator makes models only; "a client" here is `models.py` (generated, default flags) plus the
small typed layer below: one function per operation, bodies serialized with model_dump(exclude_unset=True),
answers parsed into the declared model or into Problem. No cast, no Any in the walk (mypy --strict).

tests/e2e/test_generated_clients.py generates ./models.py (datamodel-codegen --input-file-type openapi
--use-annotated), checks `mypy walk.py models.py` (strict, the pydantic plugin; walk.py also with disallow_any_expr,
see mypy.ini), then runs it with BASE and WALK_ID set.
"""

from __future__ import annotations

import os
from typing import Generic, TypeVar, assert_type

import httpx
from models import (
    AppendRequest,
    AppendResponse,
    AssistantMessageData,
    ContentBlock,
    CoreEvent,
    CreateMeta,
    Event,
    EventsPage,
    ForkRequest,
    ForkSession409Problem,
    History,
    Message,
    MessageSource,
    NewAssistantMessageEvent,
    NewCoreEvent,
    NewEvent,
    NewStepEndEvent,
    NewStepStartEvent,
    NewTurnEndEvent,
    NewTurnStartEvent,
    NewUserMessageEvent,
    NotAtTurnBoundaryProblem,
    ReplaceOp,
    SessionCreate,
    SessionOut,
    SourceEventSeq,
    StepData,
    SurfaceOp,
    TurnEndData,
    TurnEndReason,
    TurnStartData,
    UserMessageEvent,
)
from pydantic import BaseModel

BASE = os.environ.get("BASE", "http://127.0.0.1:8000")
ID = os.environ.get("WALK_ID", "demo")
CHILD = f"{ID}-child"

M = TypeVar("M", bound=BaseModel)
P = TypeVar("P", bound=BaseModel)


class Answer(Generic[M, P]):
    """One answer: the status, the Location header and either the declared model or the declared problem."""

    def __init__(self, response: httpx.Response, value: M | P) -> None:
        self.status = response.status_code
        # Headers.get is typed to return Any: indexing is typed str.
        self.location = response.headers["location"] if "location" in response.headers else None  # noqa: SIM401
        self.value = value


def _send(http: httpx.Client, method: str, path: str, body: BaseModel | None) -> httpx.Response:
    content = None if body is None else body.model_dump_json(exclude_unset=True, by_alias=True)
    headers = {} if content is None else {"Content-Type": "application/json"}
    return http.request(method, path, content=content, headers=headers)


def _call(
    http: httpx.Client, method: str, path: str, body: BaseModel | None, model: type[M], problem: type[P]
) -> Answer[M, P]:
    response = _send(http, method, path, body)
    if response.headers["content-type"].startswith("application/problem+json"):
        return Answer(response, problem.model_validate_json(response.content))
    response.raise_for_status()
    return Answer(response, model.model_validate_json(response.content))


def _ok(http: httpx.Client, method: str, path: str, body: BaseModel | None, model: type[M]) -> tuple[httpx.Response, M]:
    response = _send(http, method, path, body)
    if not response.is_success:
        raise SystemExit(f"{method} {path}: {response.status_code} {response.text}")
    return response, model.model_validate_json(response.content)


# A full hand-written client maps every status to its problem schema; the walk needs only the fork's 409.
def create_session(http: httpx.Client, body: SessionCreate) -> tuple[httpx.Response, SessionOut]:
    return _ok(http, "POST", "/sessions", body, SessionOut)


def append_events(http: httpx.Client, session_id: str, body: AppendRequest) -> tuple[httpx.Response, AppendResponse]:
    return _ok(http, "POST", f"/sessions/{session_id}/events", body, AppendResponse)


def fork_session(
    http: httpx.Client, session_id: str, body: ForkRequest | None = None
) -> Answer[SessionOut, ForkSession409Problem]:
    return _call(http, "POST", f"/sessions/{session_id}/fork", body, SessionOut, ForkSession409Problem)


def read_history(http: httpx.Client, session_id: str) -> tuple[httpx.Response, History]:
    return _ok(http, "GET", f"/sessions/{session_id}/history", None, History)


def read_events(http: httpx.Client, session_id: str, start: int, limit: int) -> tuple[httpx.Response, EventsPage]:
    return _ok(http, "GET", f"/sessions/{session_id}/events?from={start}&limit={limit}", None, EventsPage)


def stored(event: Event) -> CoreEvent:
    """A stored event of a core type (all the walk appends), else the walk stops."""
    if not isinstance(event.root, CoreEvent):
        raise SystemExit(f"{event.root.type} is not a core type")
    return event.root


def turn_one() -> list[NewEvent]:
    return [
        NewEvent(NewCoreEvent(NewTurnStartEvent(type="turn/start", data=TurnStartData(turn=1)))),
        NewEvent(
            NewCoreEvent(
                NewUserMessageEvent(
                    type="user/message",
                    surfaceOp=SurfaceOp("append"),
                    data=Message(
                        id="u1",
                        role="user",
                        content=[ContentBlock(type="text", text="Hello")],
                        source=MessageSource(kind="user"),
                    ),
                )
            )
        ),
        NewEvent(NewCoreEvent(NewStepStartEvent(type="step/start", data=StepData(turn=1, step=1)))),
        NewEvent(
            NewCoreEvent(
                NewAssistantMessageEvent(
                    type="assistant/message",
                    surfaceOp=SurfaceOp("append"),
                    data=AssistantMessageData(
                        turn=1,
                        step=1,
                        message=Message(
                            id="a1",
                            role="assistant",
                            content=[ContentBlock(type="text", text="Hi!")],
                            source=MessageSource(kind="model", provider="deepseek", model="deepseek-chat"),
                        ),
                    ),
                )
            )
        ),
        NewEvent(NewCoreEvent(NewStepEndEvent(type="step/end", data=StepData(turn=1, step=1)))),
        NewEvent(
            NewCoreEvent(
                NewTurnEndEvent(type="turn/end", data=TurnEndData(turn=1, reason=TurnEndReason(kind="completed")))
            )
        ),
    ]


def main() -> None:
    with httpx.Client(base_url=BASE) as http:
        # 1. create "demo" with meta.cwd: 201 + Location
        response, session = create_session(http, SessionCreate(id=ID, meta=CreateMeta(cwd="/work")))
        cwd = session.cwd
        assert_type(cwd, str | None)
        print("1.", response.status_code, response.headers["location"], session.id, cwd)

        # 2. one whole turn of 6 events
        response, appended = append_events(http, ID, AppendRequest(events=turn_one()))
        last_seq = stored(appended.events[-1]).root.seq
        assert_type(last_seq, int)
        print("2.", response.status_code, len(appended.events), "events, last seq", last_seq)

        # 3. fork into "demo-child"
        forked = fork_session(http, ID, ForkRequest(sessionId=CHILD))
        if not isinstance(forked.value, SessionOut):
            raise SystemExit(f"fork: {forked.status} {forked.value!r}")
        print("3.", forked.status, forked.location, forked.value.parentSession, forked.value.seedLength)

        # 4. the child's model history: content[0].text of the first message
        response, history = read_history(http, CHILD)
        block = history.messages[0].content[0]
        text = block.text
        if block.type != "text" or text is None:
            raise SystemExit(f"first block is {block.type}")
        assert_type(text, str)
        print("4.", response.status_code, text, "eventCount", history.eventCount)

        # 5. open turn 2, then fork mid-turn: 409 NOT_AT_TURN_BOUNDARY
        turn_two = AppendRequest(
            events=[NewEvent(NewCoreEvent(NewTurnStartEvent(type="turn/start", data=TurnStartData(turn=2))))]
        )
        response, opened = append_events(http, ID, turn_two)
        print("5a.", response.status_code, opened.session.openTurn)

        mid_turn = fork_session(http, ID)
        if not isinstance(mid_turn.value, ForkSession409Problem):
            raise SystemExit(f"the mid-turn fork answered {mid_turn.status}")
        problem = mid_turn.value.root
        if not isinstance(problem, NotAtTurnBoundaryProblem):
            raise SystemExit(f"unexpected code {problem.code}")
        last_event_type = problem.lastEventType
        assert_type(last_event_type, str)
        open_turn = problem.openTurn
        assert_type(open_turn, int | None)
        last_turn_end_seq = problem.lastTurnEndSeq
        assert_type(last_turn_end_seq, int | None)
        print("5b.", mid_turn.status, problem.code, last_event_type, open_turn, last_turn_end_seq)

        # 6. a replace appended to the child reads back as a ReplaceOp, the stored "append" of seq 1 as "append"
        edited = Message(
            id="u1b",
            role="user",
            content=[ContentBlock(type="text", text="Hello, edited")],
            source=MessageSource(kind="user"),
        )
        replace = NewUserMessageEvent(
            type="user/message",
            surfaceOp=SurfaceOp(ReplaceOp(op="replace", start=1, end=1)),
            sourceEventSeqs=[SourceEventSeq(1)],
            data=edited,
        )
        response, replaced = append_events(http, CHILD, AppendRequest(events=[NewEvent(NewCoreEvent(replace))]))
        replacement = stored(replaced.events[0]).root
        if not isinstance(replacement, UserMessageEvent) or not isinstance(replacement.surfaceOp.root, ReplaceOp):
            raise SystemExit(f"the replace reads back as {replacement!r}")
        start = replacement.surfaceOp.root.start
        assert_type(start, int)
        response, read = read_events(http, CHILD, 1, 1)
        first = stored(read.events[0]).root
        if not isinstance(first, UserMessageEvent) or first.surfaceOp.root != "append":
            raise SystemExit(f"seq 1 reads back as {first!r}")
        print("6.", replacement.surfaceOp.root.op, start, first.type, first.surfaceOp.root)


if __name__ == "__main__":
    main()
