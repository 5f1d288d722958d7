"""The OpenAPI document: committed, served, in step with the code, and declaring every problem answer."""

from __future__ import annotations

import json
from typing import Any

import pytest
from starlette.testclient import TestClient

from app.api.openapi_document import COMMITTED, document, render
from tests.api.helpers import PROBLEM_JSON, SESSION_FIELDS

SPEC_CODES = {
    "SESSION_NOT_FOUND",
    "SESSION_ALREADY_EXISTS",
    "SESSION_NOT_LIVE",
    "NOT_AT_TURN_BOUNDARY",
    "SEQ_CONFLICT",
    "INVALID_BOUNDARY",
    "INVALID_SEED",
    "INVALID_EVENT",
    "INVALID_REQUEST",
    "NOT_FOUND",
    "METHOD_NOT_ALLOWED",
    "PAYLOAD_TOO_LARGE",
    "UNSUPPORTED_MEDIA_TYPE",
    "NOT_READY",
    "STORAGE_UNAVAILABLE",
    "SESSION_CORRUPT",
    "INTERNAL",
    "UNAUTHENTICATED",
    "FORBIDDEN",
    "IDEMPOTENCY_KEY_IN_PROGRESS",
    "IDEMPOTENCY_KEY_REUSED",
    # forklog's names for the 408 and 431 answers of spec 9 (the spec gives no code): see the README
    "REQUEST_TIMEOUT",
    "HEADERS_TOO_LARGE",
}
# operationId -> (method, path, success status, the problem statuses it can answer besides 404/405/500)
OPERATIONS = {
    "create_session": ("post", "/sessions", "201", {409, 413, 415, 422, 503}),
    "list_sessions": ("get", "/sessions", "200", {422, 503}),
    "get_session": ("get", "/sessions/{id}", "200", {422, 503}),
    "delete_session": ("delete", "/sessions/{id}", "204", {422, 503}),
    "append_events": ("post", "/sessions/{id}/events", "201", {409, 413, 415, 422, 503}),
    "read_events": ("get", "/sessions/{id}/events", "200", {422, 503}),
    "stream_events": ("get", "/sessions/{id}/events/stream", "200", {409, 422, 503}),
    "read_lineage": ("get", "/sessions/{id}/lineage", "200", {422, 503}),
    "read_history": ("get", "/sessions/{id}/history", "200", {422, 503}),
    "snapshot_session": ("post", "/sessions/{id}/snapshot", "200", {409, 413, 415, 422, 503}),
    "fork_session": ("post", "/sessions/{id}/fork", "201", {409, 413, 415, 422, 503}),
    "healthz": ("get", "/healthz", "200", set()),
    "readyz": ("get", "/readyz", "200", {503}),
}


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return document()


def _operation(schema: dict[str, Any], operation_id: str) -> dict[str, Any]:
    method, path, _, _ = OPERATIONS[operation_id]
    operation: dict[str, Any] = schema["paths"][path][method]
    return operation


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

    assert declared == {(method, path): name for name, (method, path, _, _) in OPERATIONS.items()}


@pytest.mark.parametrize("operation_id", OPERATIONS)
def test_every_operation_declares_its_answers(schema: dict[str, Any], operation_id: str) -> None:
    operation = _operation(schema, operation_id)
    _, _, success, problems = OPERATIONS[operation_id]
    responses = operation["responses"]

    assert success in responses
    assert {int(status) for status in responses if int(status) >= 400} >= problems | {404, 405, 500}
    for status, response in responses.items():
        if int(status) >= 400:
            assert list(response["content"]) == [PROBLEM_JSON], f"{operation_id} {status}"
            assert response["content"][PROBLEM_JSON]["schema"] == {"$ref": "#/components/schemas/Problem"}


@pytest.mark.parametrize("operation_id", [name for name, spec in OPERATIONS.items() if spec[0] == "post"])
def test_every_post_declares_a_json_body(schema: dict[str, Any], operation_id: str) -> None:
    body = _operation(schema, operation_id)["requestBody"]

    assert list(body["content"]) == ["application/json"]
    assert body["required"] is (operation_id == "append_events")  # the others take an empty body


def test_the_problem_schema_holds_every_code_of_the_contract(schema: dict[str, Any]) -> None:
    problem = schema["components"]["schemas"]["Problem"]

    assert set(problem["required"]) == {"type", "title", "status", "detail", "code", "instance"}
    assert set(problem["properties"]["code"]["enum"]) == SPEC_CODES
    assert {"index", "reason", "lastEventType", "openTurn", "lastTurnEndSeq", "currentSeq", "errors"} <= set(
        problem["properties"]
    )


def test_the_session_schema_is_the_session_resource(schema: dict[str, Any]) -> None:
    session = schema["components"]["schemas"]["SessionOut"]

    assert set(session["properties"]) == SESSION_FIELDS
    assert set(session["required"]) == SESSION_FIELDS  # a nullable field is present, as null
