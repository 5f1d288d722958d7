"""The OpenAPI document: committed, served, in step with the code, and shaped for client generators (spec 5.1).

Which problems each operation declares is checked against what it answers in test_problem_declarations.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from app.api.docs.openapi_document import COMMITTED, document, render
from app.api.wire.problems import PROBLEMS
from app.api.wire.schemas import problem_name
from app.domain.errors import ErrorCode
from app.domain.event_shapes import CORE_TYPES as VOCABULARY
from tests.api.helpers import PROBLEM_JSON, SESSION_FIELDS

# operationId -> (method, path, success status)
OPERATIONS = {
    "create_session": ("post", "/sessions", "201"),
    "list_sessions": ("get", "/sessions", "200"),
    "get_session": ("get", "/sessions/{id}", "200"),
    "update_session": ("patch", "/sessions/{id}", "200"),
    "delete_session": ("delete", "/sessions/{id}", "204"),
    "append_events": ("post", "/sessions/{id}/events", "201"),
    "read_events": ("get", "/sessions/{id}/events", "200"),
    "stream_events": ("get", "/sessions/{id}/events/stream", "200"),
    "read_log": ("get", "/sessions/{id}/log", "200"),
    "read_lineage": ("get", "/sessions/{id}/lineage", "200"),
    "read_history": ("get", "/sessions/{id}/history", "200"),
    "snapshot_session": ("post", "/sessions/{id}/snapshot", "200"),
    "fork_session": ("post", "/sessions/{id}/fork", "201"),
    "interrupt_turn": ("post", "/sessions/{id}/interrupt", "201"),
    "healthz": ("get", "/healthz", "200"),
    "readyz": ("get", "/readyz", "200"),
    "metrics": ("get", "/metrics", "200"),
}
PUBLIC = {"healthz", "readyz"}  # spec 9: no key needed
OPERATORS = {"metrics"}  # spec 13: an admin key
CORE_TYPES = [
    "turn/start",
    "turn/end",
    "step/start",
    "step/end",
    "user/message",
    "assistant/chunk",
    "assistant/message",
    "tool/call",
    "tool/result",
    "request/header",
    "todo/write",
    "request/context",
    "session/end-seed",
]
SURFACE_TYPES = {"user/message", "assistant/message", "tool/result"}


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return document()


def _operation(schema: dict[str, Any], operation_id: str) -> dict[str, Any]:
    method, path, _ = OPERATIONS[operation_id]
    operation: dict[str, Any] = schema["paths"][path][method]
    return operation


def _component(schema: dict[str, Any], reference: dict[str, Any]) -> dict[str, Any]:
    prefix = "#/components/schemas/"
    assert reference["$ref"].startswith(prefix), reference
    component: dict[str, Any] = schema["components"]["schemas"][reference["$ref"].removeprefix(prefix)]
    return component


def _walk(node: Any, where: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema object (and every other mapping) in ``node``, with its JSON pointer."""
    if isinstance(node, dict):
        yield where, node
        for key, value in node.items():
            yield from _walk(value, f"{where}/{key}")
    elif isinstance(node, list):
        for index, item in enumerate(node):
            yield from _walk(item, f"{where}/{index}")


def test_the_committed_document_is_the_codes(schema: dict[str, Any]) -> None:
    assert render(schema) == COMMITTED.read_text(encoding="utf-8"), (
        "openapi/openapi.json is out of date with the code: run `make openapi` and commit the result"
    )


def test_the_service_serves_the_committed_document(client: TestClient) -> None:
    response = client.get("/openapi.json")

    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == json.loads(COMMITTED.read_text(encoding="utf-8"))


def test_docs_is_a_browsable_page_of_the_document(client: TestClient) -> None:
    response = client.get("/docs")

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert "swagger-ui" in response.text
    assert "/openapi.json" in response.text


def test_every_route_is_an_operation_with_a_stable_id(schema: dict[str, Any]) -> None:
    declared = {
        (method, path): operation["operationId"]
        for path, item in schema["paths"].items()
        for method, operation in item.items()
    }

    assert declared == {(method, path): name for name, (method, path, _) in OPERATIONS.items()}


@pytest.mark.parametrize("operation_id", OPERATIONS)
def test_every_error_answer_is_a_problem_schema_per_code(schema: dict[str, Any], operation_id: str) -> None:
    responses = _operation(schema, operation_id)["responses"]

    assert OPERATIONS[operation_id][2] in responses
    for status, response in responses.items():
        if int(status) < 400:
            continue
        assert list(response["content"]) == [PROBLEM_JSON], f"{operation_id} {status}"
        declared = _component(schema, response["content"][PROBLEM_JSON]["schema"])
        members = [_component(schema, member) for member in declared.get("oneOf", [])] or [declared]
        codes = [member["properties"]["code"]["const"] for member in members]
        assert all(PROBLEMS[ErrorCode(code)].status == int(status) for code in codes if status != "400"), codes
        assert response["description"].split(": ")[0] == codes[0]
        if "oneOf" in declared:  # one type per status, told apart by its code
            assert declared["discriminator"]["propertyName"] == "code"
            assert set(declared["discriminator"]["mapping"]) == set(codes)


@pytest.mark.parametrize("code", list(PROBLEMS))
def test_a_problem_schema_fixes_its_code_and_requires_its_facts(schema: dict[str, Any], code: ErrorCode) -> None:
    components = schema["components"]["schemas"]
    if problem_name(code) not in components:
        assert code in (ErrorCode.NOT_FOUND, ErrorCode.METHOD_NOT_ALLOWED)  # answers of no operation's path
        return
    problem = components[problem_name(code)]
    spec = PROBLEMS[code]

    assert problem["properties"]["code"] == {"type": "string", "const": code.value}
    assert set(problem["required"]) == {
        "type",
        "title",
        "status",
        "detail",
        "code",
        "instance",
        "requestId",
        *spec.facts,
    }
    assert set(problem["properties"]) == {"type", "title", "status", "detail", "code", "instance", "requestId"} | {
        *spec.facts,
        *spec.optional,
    }
    assert problem["additionalProperties"] is False  # a fact the code does not carry is absent


def test_not_at_turn_boundary_requires_its_facts_the_last_two_nullable(schema: dict[str, Any]) -> None:
    problem = schema["components"]["schemas"]["NotAtTurnBoundaryProblem"]

    assert problem["properties"]["lastEventType"]["type"] == "string"
    assert problem["properties"]["openTurn"]["type"] == ["integer", "null"]
    assert problem["properties"]["lastTurnEndSeq"]["type"] == ["integer", "null"]
    assert schema["components"]["schemas"]["SeqConflictProblem"]["properties"]["currentSeq"]["type"] == "integer"


@pytest.mark.parametrize(("union", "prefix"), [("NewEvent", "New"), ("Event", ""), ("SeedEvent", "Seed")])
def test_each_core_event_type_has_its_schema_in_a_union_with_an_open_one(
    schema: dict[str, Any], union: str, prefix: str
) -> None:
    components = schema["components"]["schemas"]
    assert components[union]["oneOf"] == [
        {"$ref": f"#/components/schemas/{prefix}CoreEvent"},
        {"$ref": f"#/components/schemas/{prefix}OtherEvent"},
    ]
    discriminated = components[f"{prefix}CoreEvent"]
    core = [_component(schema, member) for member in discriminated["oneOf"]]
    other = components[f"{prefix}OtherEvent"]
    members = [*core, other]

    assert [member["properties"]["type"]["const"] for member in core] == CORE_TYPES
    assert [kind.type for kind in VOCABULARY] == CORE_TYPES
    # Discriminated on type, every member mapped by its own type: generators then narrow an event by its type.
    assert discriminated["discriminator"]["propertyName"] == "type"
    assert discriminated["discriminator"]["mapping"] == dict(
        zip(CORE_TYPES, [member["$ref"] for member in discriminated["oneOf"]], strict=True)
    )
    assert set(CORE_TYPES) <= set(other["properties"]["type"]["not"]["enum"])
    assert "request/header-delta" in other["properties"]["type"]["not"]["enum"]  # never allowed
    for member in members:
        assert member["additionalProperties"] is False  # no other top-level key (spec 1.1)
        assert member["properties"]["ignorable"] == {"type": "boolean", "const": True}
        assert "type" in member["required"]
        stored = {"seq", "time"} <= set(member["required"])
        assert stored is (union == "Event")
        assert ("seq" in member["properties"]) is (union != "NewEvent")
    for kind, member in zip(CORE_TYPES, core, strict=True):
        surface = kind in SURFACE_TYPES
        assert ("surfaceOp" in member["required"]) is surface
        assert ("sourceEventSeqs" in member["properties"]) is surface
        if surface:
            assert member["properties"]["surfaceOp"] == {"$ref": "#/components/schemas/SurfaceOp"}


def test_surface_op_is_one_named_schema_and_messages_one_schema(schema: dict[str, Any]) -> None:
    components = schema["components"]["schemas"]

    assert {json.dumps(member, sort_keys=True) for member in components["SurfaceOp"]["oneOf"]} == {
        json.dumps({"type": "string", "const": "append"}, sort_keys=True),
        json.dumps({"$ref": "#/components/schemas/ReplaceOp"}, sort_keys=True),
    }
    assert components["ReplaceOp"]["required"] == ["op", "start", "end"]
    assert set(components["Message"]["required"]) == {"id", "role", "content", "source"}
    assert components["History"]["properties"]["messages"]["items"] == {"$ref": "#/components/schemas/Message"}
    assert components["UserMessageEvent"]["properties"]["data"] == {"$ref": "#/components/schemas/Message"}
    assert components["AssistantMessageData"]["properties"]["message"] == {"$ref": "#/components/schemas/Message"}
    assert components["ToolResultData"]["properties"]["message"] == {"$ref": "#/components/schemas/Message"}


def test_no_member_has_a_title_or_a_null_default(schema: dict[str, Any]) -> None:
    for where, node in _walk(schema["components"]):
        for name, member in (node.get("properties") or {}).items():
            if isinstance(member, dict):
                assert "title" not in member, f"{where}/properties/{name}"
                assert member.get("default", 0) is not None, f"{where}/properties/{name}"
    for name, component in schema["components"]["schemas"].items():
        assert component["title"] == name


@pytest.mark.parametrize("body", ["SessionCreate", "AppendRequest", "SnapshotRequest", "ForkRequest", "CreateMeta"])
def test_optional_request_members_are_not_required(schema: dict[str, Any], body: str) -> None:
    shape = schema["components"]["schemas"][body]

    assert shape.get("required", []) == (["events"] if body == "AppendRequest" else [])


@pytest.mark.parametrize(
    ("operation_id", "name", "minimum", "maximum"),
    [
        ("list_sessions", "limit", 1, 1000),
        ("read_events", "limit", 1, 10000),
        ("read_events", "from", 0, 2**53 - 1),
        ("read_events", "waitMs", 0, 60000),
        ("stream_events", "from", 0, 2**53 - 1),
        ("read_history", "atSeq", 0, 2**53 - 1),
    ],
)
def test_every_query_limit_has_its_bounds(
    schema: dict[str, Any], operation_id: str, name: str, minimum: int, maximum: int
) -> None:
    parameters = {parameter["name"]: parameter for parameter in _operation(schema, operation_id)["parameters"]}

    assert parameters[name]["required"] is False
    assert (parameters[name]["schema"]["minimum"], parameters[name]["schema"]["maximum"]) == (minimum, maximum)


@pytest.mark.parametrize("body", ["AppendRequest", "SnapshotRequest", "ForkRequest"])
def test_every_body_limit_has_its_bounds(schema: dict[str, Any], body: str) -> None:
    members = schema["components"]["schemas"][body]["properties"]

    for name in ("atSeq", "expectedSeq"):
        if name in members:
            assert (members[name]["minimum"], members[name]["maximum"]) == (0, 2**53 - 1)
    if body == "AppendRequest":
        assert (members["events"]["minItems"], members["events"]["maxItems"]) == (1, 1000)


@pytest.mark.parametrize("operation_id", [name for name, spec in OPERATIONS.items() if spec[0] == "post"])
def test_every_post_declares_a_json_body(schema: dict[str, Any], operation_id: str) -> None:
    body = _operation(schema, operation_id)["requestBody"]

    assert list(body["content"]) == ["application/json"]
    assert body["required"] is (operation_id == "append_events")  # the others take an empty body


@pytest.mark.parametrize("operation_id", ["create_session", "fork_session"])
def test_a_201_that_creates_declares_its_location(schema: dict[str, Any], operation_id: str) -> None:
    headers = _operation(schema, operation_id)["responses"]["201"]["headers"]

    assert headers["Location"]["required"] is True
    assert headers["Location"]["schema"] == {"type": "string"}


def test_servers_tags_license_and_the_security_scheme(schema: dict[str, Any]) -> None:
    assert schema["servers"] == [{"url": "/"}]
    assert {tag["name"] for tag in schema["tags"]} == {"sessions", "health", "operations"}
    assert schema["info"]["license"]["name"]
    assert schema["components"]["securitySchemes"]["bearerKey"] == {
        "type": "http",
        "scheme": "bearer",
        "description": schema["components"]["securitySchemes"]["bearerKey"]["description"],
    }
    assert schema["security"] == [{"bearerKey": []}]
    for operation_id in OPERATIONS:
        operation = _operation(schema, operation_id)
        tag = "health" if operation_id in PUBLIC else "operations" if operation_id in OPERATORS else "sessions"
        assert operation["tags"] == [tag]
        assert operation.get("security") == ([] if operation_id in PUBLIC else None)
        errors = {status for status in operation["responses"] if int(status) >= 400}
        assert ({"401", "403"} <= errors) is (operation_id not in PUBLIC)


def test_the_stream_takes_the_key_as_a_query_parameter(schema: dict[str, Any]) -> None:
    parameters = {parameter["name"]: parameter for parameter in _operation(schema, "stream_events")["parameters"]}

    assert parameters["access_token"]["in"] == "query"
    assert parameters["access_token"]["required"] is False
    assert parameters["Last-Event-ID"]["in"] == "header"


def test_the_session_schema_is_the_session_resource(schema: dict[str, Any]) -> None:
    session = schema["components"]["schemas"]["SessionOut"]

    assert set(session["properties"]) == SESSION_FIELDS
    assert set(session["required"]) == SESSION_FIELDS  # a nullable field is present, as null


def test_metrics_answer_the_prometheus_text_format(schema: dict[str, Any]) -> None:
    answer = _operation(schema, "metrics")["responses"]["200"]

    assert answer["content"] == {"text/plain": {"schema": {"type": "string"}}}


@pytest.mark.parametrize("code", list(PROBLEMS))
def test_every_problem_schema_requires_the_request_id(schema: dict[str, Any], code: ErrorCode) -> None:
    components = schema["components"]["schemas"]
    if problem_name(code) not in components:
        pytest.skip(f"no operation answers {code.value}")
    problem = components[problem_name(code)]

    assert "requestId" in problem["required"]
    assert problem["properties"]["requestId"]["type"] == "string"
