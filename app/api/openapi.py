"""The OpenAPI document: each route's part comes from its request description (:mod:`app.api.requests`) and its
answer's model (:mod:`app.api.schemas`); :func:`build_document` adds the shared components, the problem answers and
the links between operations."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

from app.api.problems import PROBLEM_JSON, PROBLEMS
from app.api.requests import APPEND, CREATE, FORK, ID_REGEX, SNAPSHOT, BodyShape, QueryShape
from app.api.schemas import CreateMeta, NewEvent, Problem, SeedEvent

__all__ = ["build_document", "operation"]

_PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}
_PATH_ID = {
    "name": "id",
    "in": "path",
    "required": True,
    "description": "the session id",
    "schema": {"type": "string", "pattern": ID_REGEX},
}
# One frame of a stream, as OpenAPI 3.2's itemSchema describes an item of a sequential media type.
_SSE_FRAME = {
    "type": "object",
    "properties": {
        "data": {"type": "string"},
        "event": {"type": "string"},
        "id": {"type": "string"},
        "retry": {"type": "integer", "minimum": 0},
    },
}
BODY_SHAPES: tuple[BodyShape, ...] = (CREATE, APPEND, SNAPSHOT, FORK)
COMPONENT_MODELS: tuple[type[BaseModel], ...] = (NewEvent, SeedEvent, CreateMeta, Problem)


def _problems_by_status() -> dict[int, str]:
    by_status: dict[int, list[str]] = {}
    for code, spec in PROBLEMS.items():
        by_status.setdefault(spec.status, []).append(code.value)
    return {status: ", ".join(codes) for status, codes in by_status.items()}


def operation(
    model: type[BaseModel] | None,
    *,
    body: BodyShape | None = None,
    query: QueryShape | None = None,
    problems: tuple[int, ...] = (),
    created: bool = False,
    stream: bool = False,
) -> dict[str, Any]:
    """The route decorator's documentation arguments: answer model, query parameters, body and problem answers
    (the path's ``{id}`` is declared by :func:`build_document`)."""
    parameters = query.openapi() if query is not None else []
    extra: dict[str, Any] = {}
    if parameters:
        extra["parameters"] = parameters
    if body is not None:
        extra["requestBody"] = {
            "required": not body.empty_is_object,
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{body.name}"}}},
        }
    described = _problems_by_status()
    responses: dict[int | str, dict[str, Any]] = {
        status: {"description": described.get(status, "a problem"), "content": {PROBLEM_JSON: {"schema": _PROBLEM_REF}}}
        for status in (*problems, 404, 405, 500)
    }
    if created:
        location = {"description": "the new session: /sessions/{id}", "schema": {"type": "string"}}
        responses[201] = {"description": "created", "headers": {"Location": location}}
    if stream:
        responses[200] = {
            "description": "server-sent events: id = seq, data = the event's JSON; event: deleted at the end",
            "content": {"text/event-stream": {"schema": {"type": "string"}, "itemSchema": _SSE_FRAME}},
        }
    arguments: dict[str, Any] = {"responses": responses, "openapi_extra": extra}
    if model is not None:
        arguments["response_model"] = model
    return arguments


def _session_links(id_expression: str) -> dict[str, Any]:
    """What a client can do next with the session whose id ``id_expression`` names."""
    targets = {
        "GetSession": "get_session",
        "AppendEvents": "append_events",
        "ReadEvents": "read_events",
        "ReadHistory": "read_history",
        "Snapshot": "snapshot_session",
        "Fork": "fork_session",
        "DeleteSession": "delete_session",
    }
    return {name: {"operationId": target, "parameters": {"id": id_expression}} for name, target in targets.items()}


# OpenAPI links (operationId -> status -> links): the flows a client follows, create -> append -> snapshot/fork ->
# history. Generated clients document them; stateful fuzzers (tests/fuzz) walk them.
_LINKS: dict[str, dict[str, dict[str, Any]]] = {
    "create_session": {"201": _session_links("$response.body#/id")},
    "fork_session": {
        "201": {
            **_session_links("$response.body#/id"),
            "ReadSourceHistory": {"operationId": "read_history", "parameters": {"id": "$request.path.id"}},
            "ListSiblings": {"operationId": "list_sessions", "parameters": {"parent": "$request.path.id"}},
        }
    },
    "append_events": {"201": _session_links("$request.path.id")},
    "snapshot_session": {
        "200": {
            "CreateFromSnapshot": {
                "operationId": "create_session",
                "requestBody": "$response.body",
                "description": "the snapshot posted as is creates a session equal to what fork creates",
            },
            "ForkSource": {"operationId": "fork_session", "parameters": {"id": "$request.path.id"}},
        }
    },
}


def build_document(app: FastAPI) -> dict[str, Any]:
    """The app's OpenAPI document (built once, then kept)."""
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(title="forklog", version=app.version, description=app.description, routes=app.routes)
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for model in COMPONENT_MODELS:
        model_schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        components.update(model_schema.pop("$defs", {}))
        components[model.__name__] = model_schema
    for shape in BODY_SHAPES:
        components[shape.name] = shape.json_schema()
    for path, path_item in schema["paths"].items():
        for details in path_item.values():
            if "{id}" in path:
                details["parameters"] = [_PATH_ID, *details.get("parameters", [])]
            for status, links in _LINKS.get(details.get("operationId", ""), {}).items():
                details["responses"][status]["links"] = links
    for unused in ("HTTPValidationError", "ValidationError"):
        components.pop(unused, None)
    app.openapi_schema = schema
    return schema
