"""A client generated from the committed openapi/openapi.json by openapi-python-client drives a real server."""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from tests.e2e.server import REPO, Server

pytestmark = pytest.mark.e2e

COMMITTED = REPO / "openapi" / "openapi.json"
PACKAGE = "forklog_client"
FLAGS = ("--meta", "none", "--fail-on-warning", "--config")
OPERATIONS = (
    "create_session",
    "list_sessions",
    "get_session",
    "append_events",
    "read_events",
    "read_history",
    "snapshot_session",
    "fork_session",
)


def generator() -> str:
    found = shutil.which("openapi-python-client", path=str(Path(sys.executable).parent)) or shutil.which(
        "openapi-python-client"
    )
    if found is None:
        pytest.fail("openapi-python-client is missing: install the test extras (pip install -e '.[test]')")
    return found


@pytest.fixture(scope="module")
def gen(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    """The generated package: ``gen.models``, ``gen.Client`` and one module per operation (``gen.fork_session``)."""
    root = tmp_path_factory.mktemp("generated")
    config = root / "config.json"
    config.write_text(json.dumps({"post_hooks": []}))  # no formatter run: nothing outside the tmp dir is needed
    done = subprocess.run(
        [generator(), "generate", "--path", str(COMMITTED), "--output-path", str(root / PACKAGE), *FLAGS, str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"the generator refused openapi/openapi.json:\n{done.stdout}\n{done.stderr}"
    sys.path.insert(0, str(root))
    try:
        package: ModuleType = importlib.import_module(PACKAGE)
        operations = {name: importlib.import_module(f"{PACKAGE}.api.default.{name}") for name in OPERATIONS}
        yield SimpleNamespace(Client=package.Client, models=importlib.import_module(f"{PACKAGE}.models"), **operations)
    finally:
        sys.path.remove(str(root))
        for name in [name for name in sys.modules if name == PACKAGE or name.startswith(PACKAGE + ".")]:
            del sys.modules[name]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server for this module's tests (they use distinct session ids)."""
    root = tmp_path_factory.mktemp("server")
    running = Server(root / "data", root / "server.log").start()
    yield running
    running.kill()


def user_message(message_id: str, text: str) -> dict[str, Any]:
    return {"id": message_id, "role": "user", "content": [{"type": "text", "text": text}], "source": {"kind": "user"}}


def test_the_served_document_is_the_committed_one(server: Server) -> None:
    assert server.get("/openapi.json").json() == json.loads(COMMITTED.read_text(encoding="utf-8"))


def test_create_append_fork_and_read_through_the_generated_client(gen: SimpleNamespace, server: Server) -> None:
    m = gen.models
    with gen.Client(base_url=server.base, raise_on_unexpected_status=True) as client:
        created = gen.create_session.sync_detailed(
            client=client, body=m.SessionCreate(id="gen", meta=m.CreateMeta(cwd="/work"))
        )
        assert created.status_code == 201
        assert isinstance(created.parsed, m.SessionOut)
        assert (created.parsed.id, created.parsed.cwd, created.parsed.event_count) == ("gen", "/work", 0)

        answer = {
            "id": "a1",
            "role": "assistant",
            "content": [{"type": "text", "text": "Hi!"}],
            "source": {"kind": "model", "provider": "deepseek", "model": "deepseek-chat"},
        }
        turn = [
            m.NewEvent(type_="turn/start", data={"turn": 1}),
            m.NewEvent(type_="user/message", data=user_message("u1", "Hello"), surface_op="append"),
            m.NewEvent(type_="step/start", data={"turn": 1, "step": 1}),
            m.NewEvent(type_="assistant/message", data={"turn": 1, "step": 1, "message": answer}, surface_op="append"),
            m.NewEvent(type_="step/end", data={"turn": 1, "step": 1}),
            m.NewEvent(
                type_="user/message",
                data=user_message("u1b", "Hello, edited"),
                surface_op=m.ReplaceOp(op="replace", start=1, end=1),
                source_event_seqs=[1],
            ),
            m.NewEvent(type_="turn/end", data={"turn": 1, "reason": {"kind": "completed"}}),
        ]
        appended = gen.append_events.sync_detailed(
            "gen", client=client, body=m.AppendRequest(events=turn, expected_seq=0)
        )
        assert appended.status_code == 201
        assert isinstance(appended.parsed, m.AppendResponse)
        assert [event.seq for event in appended.parsed.events] == list(range(7))
        replace = appended.parsed.events[5].surface_op
        assert isinstance(replace, m.ReplaceOp)
        assert (replace.start, replace.end) == (1, 1)
        assert appended.parsed.session.forkable is True
        assert appended.parsed.session.last_turn_end_seq == 6

        forked = gen.fork_session.sync_detailed("gen", client=client, body=m.ForkRequest(session_id="gen-child"))
        assert forked.status_code == 201
        assert isinstance(forked.parsed, m.SessionOut)
        assert (forked.parsed.parent_session, forked.parsed.seed_length) == ("gen", 7)

        history = gen.read_history.sync_detailed("gen-child", client=client)
        assert history.status_code == 200
        assert isinstance(history.parsed, m.History)
        assert [message.to_dict() for message in history.parsed.messages] == [
            user_message("u1b", "Hello, edited"),
            answer,
        ]

        events = gen.read_events.sync_detailed("gen-child", client=client, from_=5, limit=10)
        assert events.status_code == 200
        assert isinstance(events.parsed, m.EventsPage)
        assert [event.type_ for event in events.parsed.events] == ["user/message", "turn/end"]
        assert (events.parsed.next_seq, events.parsed.event_count) == (7, 7)

        children = gen.list_sessions.sync_detailed(client=client, parent="gen")
        assert isinstance(children.parsed, m.SessionPage)
        assert [item.id for item in children.parsed.items] == ["gen-child"]
        assert children.parsed.next_cursor is None

        # A snapshot, posted back as is, creates what the fork created (the RFC's other creation path).
        snapshot = gen.snapshot_session.sync_detailed("gen", client=client, body=m.SnapshotRequest(at_seq=6))
        assert isinstance(snapshot.parsed, m.SnapshotOut)
        replayed = gen.create_session.sync_detailed(
            client=client, body=m.SessionCreate.from_dict(snapshot.parsed.to_dict())
        )
        assert replayed.status_code == 201
        assert (replayed.parsed.parent_session, replayed.parsed.seed_length) == ("gen", 7)
        replayed_events = gen.read_events.sync_detailed(replayed.parsed.id, client=client)
        child_events = gen.read_events.sync_detailed("gen-child", client=client)
        assert replayed_events.parsed.to_dict() == child_events.parsed.to_dict()


def test_problems_arrive_as_typed_problem_models(gen: SimpleNamespace, server: Server) -> None:
    m = gen.models
    with gen.Client(base_url=server.base, raise_on_unexpected_status=True) as client:
        missing = gen.get_session.sync_detailed("nope", client=client)
        assert missing.status_code == 404
        assert isinstance(missing.parsed, m.Problem)
        assert missing.parsed.code == m.ProblemCode.SESSION_NOT_FOUND
        assert missing.parsed.type_ == "urn:forklog:problem:session-not-found"
        assert missing.parsed.instance == "/sessions/nope"

        gen.create_session.sync_detailed(client=client, body=m.SessionCreate(id="open"))
        start = m.AppendRequest(events=[m.NewEvent(type_="turn/start", data={"turn": 1})])
        assert gen.append_events.sync_detailed("open", client=client, body=start).status_code == 201

        mid_turn = gen.fork_session.sync_detailed("open", client=client)
        assert mid_turn.status_code == 409
        assert isinstance(mid_turn.parsed, m.Problem)
        assert mid_turn.parsed.code == m.ProblemCode.NOT_AT_TURN_BOUNDARY
        assert (mid_turn.parsed.open_turn, mid_turn.parsed.last_event_type) == (1, "turn/start")
        assert mid_turn.parsed.last_turn_end_seq is None

        bad = m.AppendRequest(events=[m.NewEvent(type_="user/message", data=user_message("u", "no surfaceOp"))])
        rejected = gen.append_events.sync_detailed("open", client=client, body=bad)
        assert rejected.status_code == 422
        assert isinstance(rejected.parsed, m.Problem)
        assert rejected.parsed.code == m.ProblemCode.INVALID_EVENT
        assert rejected.parsed.index == 0
        assert "surfaceOp" in rejected.parsed.reason

        stale = gen.append_events.sync_detailed(
            "open", client=client, body=m.AppendRequest(events=start.events, expected_seq=0)
        )
        assert stale.status_code == 409
        assert (stale.parsed.code, stale.parsed.current_seq) == (m.ProblemCode.SEQ_CONFLICT, 1)
