"""Schemathesis (v4) against the committed ``openapi/openapi.json`` and the ASGI app over a real data directory.

Two runs: every operation on its own (positive and negative examples), and the stateful run, which chains the
operations along the links Schemathesis infers from the document (create -> append -> snapshot/fork -> history ->
delete, and fork -> its child's reads). The checks: no 5xx at all (nothing here makes the disk fail or a log
corrupt, so not even the spec's 503s may appear), every response conforms to the document (status, content type,
headers, body schema), and every error is ``application/problem+json`` with a ``code`` from the spec's table whose
status matches.

Bounded by default (a couple of minutes at most on two cores); ``FORKLOG_FUZZ_LONG=1`` runs many more examples.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, settings
from schemathesis.checks import not_a_server_error
from schemathesis.python import asgi as schemathesis_asgi
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    ensure_resource_availability,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
    use_after_free,
)

from app.api.app import create_app
from app.api.settings import Settings
from app.api.wire.problems import PROBLEM_JSON, PROBLEMS
from tests.fuzz.support import REPO, scaled, seed_of_turns, turn_events

OPENAPI = REPO / "openapi" / "openapi.json"
Case = schemathesis.Case[Any]

# The live tail never ends by itself: tests/e2e/test_stream.py drives it with a real client and deadlines.
schema = schemathesis.openapi.from_path(OPENAPI).exclude(operation_id="stream_events")
# A long-poll may wait up to a minute: the fuzzers keep its waits short (the wait itself is tested elsewhere).
LONGEST_WAIT_MS = 20


def shorten_waits(case: Case) -> None:
    wait = (case.query or {}).get("waitMs")
    if isinstance(wait, int) and not isinstance(wait, bool) and wait > LONGEST_WAIT_MS:
        case.query["waitMs"] = LONGEST_WAIT_MS


# The stateful run walks the document's own links (create -> append -> snapshot/fork -> history, snapshot -> create).
# Schemathesis would also infer links of its own, among them a fork whose child id is its source's id (always 409).
schema.config.phases.stateful.inference.algorithms = []
# The app under test has no keys file: it asks for no key (spec 9), so a request without one is no negative example.
schema.config.generation.with_security_parameters = False

EXAMPLES = scaled(50, 1000)
STATEFUL_EXAMPLES = scaled(40, 500)
STATEFUL_STEPS = scaled(15, 50)


@schemathesis.check
def problem_json_with_spec_code(ctx: schemathesis.CheckContext, response: schemathesis.Response, case: Any) -> bool:
    """Every 4xx/5xx is an RFC 9457 problem with a ``code`` from the spec's table and the matching status."""
    if response.status_code < 400:
        return True
    content_type = response.headers.get("content-type", [""])[0]
    assert content_type.split(";")[0].strip() == PROBLEM_JSON, f"error {response.status_code} has type {content_type}"
    body = json.loads(response.content)
    assert isinstance(body, dict), "a problem is a JSON object"
    code = body.get("code")
    assert code in PROBLEMS, f"problem code {code!r} is not in the spec's table"
    expected = PROBLEMS[code].status
    assert expected == response.status_code == body.get("status"), (
        f"code {code} goes with {expected}, answered {response.status_code} (body status {body.get('status')})"
    )
    for member in ("type", "title", "detail", "instance"):
        assert isinstance(body.get(member), str), f"problem member {member!r} missing"
    if code == "INVALID_REQUEST":
        errors = body.get("errors")
        assert isinstance(errors, list) and errors, "INVALID_REQUEST carries a non-empty errors array"
    return True


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
    problem_json_with_spec_code,
]
# Along a chain of calls, also: a created session is there for the next call, and a deleted one is gone.
STATEFUL_CHECKS = [*CHECKS, ensure_resource_availability, use_after_free]

HYPOTHESIS = {
    "deadline": None,
    # The app fixture is deliberately shared by all the examples of one test: state carries over, as in real use.
    "suppress_health_check": [
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
    "database": None,
    "derandomize": False,
}


class ServedApp:
    """The app over a fresh data directory, started (lifespan) and ready; its lifespan is ended at teardown."""

    def __init__(self) -> None:
        self.data_dir = Path(tempfile.mkdtemp(prefix="forklog-schemathesis-"))
        self.app = create_app(
            Settings(data_dir=self.data_dir, fsync=False, log_level="warning", allowed_hosts=["testserver"])
        )
        with schemathesis_asgi.get_client(self.app) as client:  # type: ignore[arg-type]
            deadline = time.monotonic() + 10
            while client.get("/readyz").status_code != 200:
                assert time.monotonic() < deadline, "the app never became ready"
                time.sleep(0.01)
            # A few sessions with whole turns, so that generated ids sometimes name a live, forkable session.
            for name, turns in (("s1", 2), ("s2", 0), ("a", 1)):
                answer = client.post("/sessions", json={"id": name, "seed": seed_of_turns(turns)})
                assert answer.status_code == 201, answer.text

    def close(self) -> None:
        schemathesis_asgi.shutdown_lifespans()
        shutil.rmtree(self.data_dir, ignore_errors=True)


@pytest.fixture
def served() -> Iterator[ServedApp]:
    # One app per test: Schemathesis's pytest plugin ends every ASGI lifespan when a test ends, and the app's
    # lifespan (recovery, then the journal's close) runs once per app, as under a real server.
    served = ServedApp()
    try:
        yield served
    finally:
        served.close()


@schema.parametrize()
@settings(max_examples=EXAMPLES, **HYPOTHESIS)  # type: ignore[arg-type]
def test_every_operation(case: Case, served: ServedApp) -> None:
    shorten_waits(case)
    case.call_and_validate(app=served.app, checks=CHECKS)


# -- stateful --------------------------------------------------------------------------------------------------------


class _Workflow(schema.as_state_machine()):  # type: ignore[misc]
    """Chains operations along the document's links, each scenario on a fresh app and data directory (so that the
    rules Hypothesis can draw depend only on the scenario, never on an earlier one).

    Appends are steered: when a generated append body has an even number of events and the session has no open
    turn, the body becomes one valid whole turn (its next turn number is read from the app); a generated seed of
    even length becomes 0-2 whole turns (not when it is a snapshot posted back, which has a ``source``). So the
    chains reach non-empty logs, forks at a real boundary and non-empty model histories, not only 404s and 422s."""

    served: ServedApp | None = None

    def setup(self) -> None:
        self.served = ServedApp()

    def teardown(self) -> None:
        if self.served is not None:
            self.served.close()
            self.served = None

    @property
    def app(self) -> Any:
        assert self.served is not None
        return self.served.app

    def get_call_kwargs(self, case: Case) -> dict[str, Any]:
        return {"app": self.app}

    def before_call(self, case: Case) -> None:
        shorten_waits(case)
        if case.method.upper() != "POST" or not isinstance(case.body, dict):
            return
        if case.operation.path == "/sessions/{id}/events":
            events = case.body.get("events")
            if isinstance(events, list) and len(events) % 2 == 0:
                session_id = (case.path_parameters or {}).get("id")
                with schemathesis_asgi.get_client(self.app) as client:
                    answer = client.get(f"/sessions/{session_id}")
                if answer.status_code == 200 and answer.json()["openTurn"] is None:
                    case.body = cast(Any, {"events": turn_events(_turns(answer.json()) + 1)})
        elif case.operation.path == "/sessions":
            seed = case.body.get("seed")
            if "source" not in case.body and isinstance(seed, list) and len(seed) % 2 == 0:
                case.body = {key: value for key, value in case.body.items() if key != "meta"}
                case.body["seed"] = cast(Any, seed_of_turns(len(seed) // 2 % 3))

    def validate_response(self, response: Any, case: Case, *args: Any, **kwargs: Any) -> None:
        case.validate_response(
            response,
            checks=STATEFUL_CHECKS,
            transport_kwargs={"app": self.app},
            recorder=getattr(self, "recorder", None),
        )


def _turns(session: dict[str, Any]) -> int:
    """How many whole turns a session holds (its valid turns all come from this file's builders, of one length)."""
    last = session["lastTurnEndSeq"]
    return 0 if last is None else int((last + 1) // len(turn_events(1)))


def test_stateful_links() -> None:
    _Workflow.run(
        settings=settings(
            max_examples=STATEFUL_EXAMPLES,
            stateful_step_count=STATEFUL_STEPS,
            phases=[Phase.explicit, Phase.generate, Phase.shrink],
            **HYPOTHESIS,  # type: ignore[arg-type]
        )
    )
