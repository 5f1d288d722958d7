"""The OpenAPI document: each route's part comes from its request description (:mod:`app.api.wire.requests`), its
answer's model and the event and problem schemas (:mod:`app.api.wire.schemas`), and the codes it can answer (the table
of :mod:`app.api.wire.problems`); :func:`build_document` adds the shared components, names the problem unions and links
the operations.

A route declares the codes of its own refusals (its :class:`~app.api.routing.declarations.RouteSpec`'s ``refusals``);
the codes every request of its kind can get are added here: what the HTTP server, the loopback guard and a bug can
answer to any request, what a key check answers on a protected route, what a body, a query, an ``Idempotency-Key`` and
the store can answer. Per status, a code has its own schema (``code`` fixed, its facts required), and two or more codes
form a ``oneOf`` discriminated on ``code``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

from app.api.routing.declarations import RouteSpec
from app.api.wire.idempotency_key import HEADER as IDEMPOTENCY_KEY
from app.api.wire.idempotency_key import REPLAYED
from app.api.wire.problems import PROBLEM_JSON, PROBLEMS
from app.api.wire.requests import APPEND, CREATE, FORK, ID_REGEX, INTERRUPT, SNAPSHOT, UPDATE, BodyShape
from app.api.wire.schemas import (
    event_schemas,
    field_error_schema,
    meta_schema,
    problem_name,
    problem_schemas,
    ref,
)
from app.domain.errors import ErrorCode

__all__ = [
    "SESSION_ID",
    "build_document",
    "operation",
]

Schema = dict[str, Any]
Answerable = tuple[int, ErrorCode]  # a status and a code the operation can answer with it

# The codes of a route whose path names a session: a malformed id, one that is not live, one whose log is damaged.
SESSION_ID: tuple[ErrorCode, ...] = (
    ErrorCode.INVALID_REQUEST,
    ErrorCode.SESSION_NOT_FOUND,
    ErrorCode.SESSION_CORRUPT,
)


def _at(*codes: ErrorCode) -> tuple[Answerable, ...]:
    return tuple((PROBLEMS[code].status, code) for code in codes)


# The loopback guard's refusal of a Host this service does not serve (spec 9): INVALID_REQUEST, with status 400.
_FOREIGN_HOST: Answerable = (400, ErrorCode.INVALID_REQUEST)
# Any request, whatever its route: the HTTP server's limits (spec 9, "Bounded clients"), a foreign Host, and a bug.
_EVERY_REQUEST = (
    _FOREIGN_HOST,
    *_at(ErrorCode.REQUEST_TIMEOUT, ErrorCode.HEADERS_TOO_LARGE, ErrorCode.INTERNAL),
)
# A route that needs a key when a keys file is set (spec 9); FORBIDDEN is also the loopback guard's cross-site refusal.
_KEYED = _at(ErrorCode.UNAUTHENTICATED, ErrorCode.FORBIDDEN)
# A keyed route also answers a key over its rate limit (spec 14); a public route never counts.
_RATED = _at(ErrorCode.RATE_LIMITED)
_STORE = _at(ErrorCode.NOT_READY, ErrorCode.STORAGE_UNAVAILABLE)
_BODY = _at(ErrorCode.INVALID_REQUEST, ErrorCode.PAYLOAD_TOO_LARGE, ErrorCode.UNSUPPORTED_MEDIA_TYPE)
_IDEMPOTENT = _at(ErrorCode.INVALID_REQUEST, ErrorCode.IDEMPOTENCY_KEY_IN_PROGRESS, ErrorCode.IDEMPOTENCY_KEY_REUSED)

_BEARER = "bearerKey"
_SECURITY_SCHEMES = {
    _BEARER: {
        "type": "http",
        "scheme": "bearer",
        "description": "a key of the keys file (FORKLOG_KEYS_FILE); without one the service needs no key, and "
        "serves only this machine",
    }
}
_TAGS = [
    {"name": "sessions", "description": "sessions, their logs, model histories, snapshots and forks"},
    {"name": "health", "description": "liveness and readiness (no key needed)"},
    {"name": "operations", "description": "metrics for operators (an admin key)"},
]
_LICENSE = {"name": "proprietary", "identifier": "LicenseRef-proprietary"}

_PATH_ID = {
    "name": "id",
    "in": "path",
    "required": True,
    "description": "the session id",
    "schema": {"type": "string", "pattern": ID_REGEX, "minLength": 1, "maxLength": 128},
}
_IDEMPOTENCY_KEY = {
    "name": IDEMPOTENCY_KEY,
    "in": "header",
    "required": False,
    "description": "makes a retry safe: the same request with the same key within 24 hours gets the first answer",
    "schema": {"type": "string", "pattern": "^[!-~]{1,255}$", "minLength": 1, "maxLength": 255},
}
_LAST_EVENT_ID = {
    "name": "Last-Event-ID",
    "in": "header",
    "required": False,
    "description": "the id of the last event received: the stream resumes after it (wins over from)",
    "schema": {"type": "string", "pattern": "^[0-9]{1,16}$"},
}
_ACCESS_TOKEN = {
    "name": "access_token",
    "in": "query",
    "required": False,
    "description": "the key, for a client that cannot send an Authorization header (an EventSource)",
    "schema": {"type": "string"},
}
_SSE_FRAMES = (
    "one frame per event: an id: line (its seq) and a data: line (its JSON, as GET /sessions/{id}/events gives it); "
    'when the session is deleted, a frame "event: deleted" with data {"id": ...}, then the end; a ": ping" comment '
    "line at least every 15 s"
)
BODY_SHAPES: tuple[BodyShape, ...] = (CREATE, APPEND, SNAPSHOT, FORK, UPDATE, INTERRUPT)


def _declared_problems(
    *,
    refusals: Iterable[ErrorCode],
    body: bool,
    query: bool,
    idempotent: bool,
    public: bool,
    store: bool,
) -> set[Answerable]:
    """Every status and code an operation of this kind can answer (see the module's docstring)."""
    answers = set(_EVERY_REQUEST) | set(_at(*refusals))
    if not public:
        answers |= set(_KEYED) | set(_RATED)
    if store:
        answers |= set(_STORE)
    if body:
        answers |= set(_BODY)
    if query:
        answers |= set(_at(ErrorCode.INVALID_REQUEST))
    if idempotent:
        answers |= set(_IDEMPOTENT)
    return answers


def _problem_responses(answers: set[Answerable]) -> dict[int | str, Schema]:
    """Per status, its codes' problem schemas: one by name, or several inline in a ``oneOf`` (named later)."""
    order = {code: position for position, code in enumerate(PROBLEMS)}
    by_status: dict[int, list[ErrorCode]] = {}
    for status, code in sorted(answers, key=lambda answer: (answer[0], order[answer[1]])):
        by_status.setdefault(status, []).append(code)
    responses: dict[int | str, Schema] = {}
    for status, codes in by_status.items():
        schemas = [ref(problem_name(code)) for code in codes]
        schema = schemas[0] if len(schemas) == 1 else {"oneOf": schemas}
        description = "; ".join(f"{code.value}: {PROBLEMS[code].title}" for code in codes)
        if (status, codes[0]) == _FOREIGN_HOST:
            description += " (a Host this service does not serve: without keys it serves only this machine)"
        responses[status] = {"description": description, "content": {PROBLEM_JSON: {"schema": schema}}}
    return responses


def operation(model: type[BaseModel] | None, spec: RouteSpec) -> dict[str, Any]:
    """The route decorator's documentation arguments, from the route's declaration: the answer's model, the query
    parameters, the body, the headers, and a problem answer for every code the operation can answer (its own
    ``refusals`` and those of its kind: ``public`` routes need no key, ``store`` ones ask the store). The path's
    ``{id}`` is declared by :func:`build_document`."""
    body, query, idempotent, created, stream = spec.body, spec.query, spec.idempotent, spec.created, spec.stream
    parameters = query.openapi() if query is not None else []
    if idempotent:
        parameters.append(_IDEMPOTENCY_KEY)
    if stream:
        parameters += [_LAST_EVENT_ID, _ACCESS_TOKEN]
    extra: dict[str, Any] = {"tags": [spec.tag or ("health" if spec.public else "sessions")]}
    if spec.public:
        extra["security"] = []
    if parameters:
        extra["parameters"] = parameters
    if body is not None:
        extra["requestBody"] = {
            "required": not body.empty_is_object,
            "content": {"application/json": {"schema": ref(body.name)}},
        }
    answers = _declared_problems(
        refusals=spec.refusals,
        body=body is not None,
        query=query is not None,
        idempotent=idempotent,
        public=spec.public,
        store=spec.store,
    )
    responses = _problem_responses(answers)
    success_headers: Schema = {}
    if created:
        success_headers["Location"] = {
            "description": "the new session's path: /sessions/{id}",
            "required": True,
            "schema": {"type": "string"},
        }
    if idempotent:
        success_headers[REPLAYED] = {
            "description": "true when this is the kept answer of an earlier request with the same Idempotency-Key",
            "required": False,
            "schema": {"type": "string", "enum": ["true"]},
        }
    if success_headers:
        responses[201] = {"description": "created" if created else "stored", "headers": success_headers}
    if stream:
        responses[200] = {
            "description": "server-sent events: id = seq, data = the event's JSON; event: deleted at the end",
            "content": {"text/event-stream": {"schema": {"type": "string", "description": _SSE_FRAMES}}},
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


def _pascal(operation_id: str) -> str:
    return "".join(part.capitalize() for part in operation_id.split("_"))


def _name_problem_unions(operation_id: str, responses: dict[str, Schema], components: dict[str, Schema]) -> None:
    """Give each status's ``oneOf`` of problems a name (``ForkSession409Problem``) and a discriminator on ``code``:
    generators then make one type per status that a client can narrow by its code."""
    for status, response in responses.items():
        media = response.get("content", {}).get(PROBLEM_JSON)
        if media is None or "oneOf" not in media["schema"]:
            continue
        members = media["schema"]["oneOf"]
        name = f"{_pascal(operation_id)}{status}Problem"
        mapping = {
            code.value: member["$ref"]
            for member in members
            for code in PROBLEMS
            if member["$ref"].endswith(f"/{problem_name(code)}")
        }
        components[name] = {
            "description": f"a problem {operation_id} answers with status {status}",
            "oneOf": members,
            "discriminator": {"propertyName": "code", "mapping": mapping},
        }
        media["schema"] = ref(name)


def _clean(node: Any) -> Any:
    """FastAPI's and pydantic's JSON Schema, as a generator reads it best: integral bounds as integers, no
    per-member titles (generators would name types after them), an optional member without ``default: null``, and
    ``[T, "null"]`` for a nullable plain value."""
    if isinstance(node, list):
        return [_clean(item) for item in node]
    if isinstance(node, float) and node.is_integer():
        return int(node)  # FastAPI's document model writes every bound as a float: 1000.0
    if not isinstance(node, dict):
        return node
    cleaned = {key: _clean(value) for key, value in node.items()}
    properties = cleaned.get("properties")
    if isinstance(properties, dict):
        for member in properties.values():
            member.pop("title", None)
            if "default" in member and member["default"] is None:
                del member["default"]
    variants = cleaned.get("anyOf")
    if isinstance(variants, list) and len(variants) == 2 and variants[1] == {"type": "null"}:
        plain = variants[0]
        if isinstance(plain.get("type"), str) and plain["type"] not in ("object", "array"):
            del cleaned["anyOf"]
            cleaned = {**plain, "type": [plain["type"], "null"], **cleaned}
    return cleaned


def _references(node: Any) -> Iterator[str]:
    """Every ``$ref`` under ``node``."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref":
                yield value
            else:
                yield from _references(value)
    elif isinstance(node, list):
        for item in node:
            yield from _references(item)


def build_document(app: FastAPI) -> dict[str, Any]:
    """The app's OpenAPI document (built once, then kept)."""
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(
        title="forklog",
        version=app.version,
        description=app.description,
        routes=app.routes,
        servers=[{"url": "/"}],
        tags=_TAGS,
        license_info=_LICENSE,
    )
    cleaned: dict[str, Any] = _clean(schema)
    schema = cleaned
    components: dict[str, Schema] = schema.get("components", {}).get("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):
        components.pop(unused, None)
    components.update(event_schemas())
    components["CreateMeta"] = meta_schema()
    # A schema for each code some operation answers (NOT_FOUND and METHOD_NOT_ALLOWED answer no operation's path).
    referenced = set(_references(schema["paths"]))
    components.update({name: problem for name, problem in problem_schemas().items() if ref(name)["$ref"] in referenced})
    components["FieldError"] = field_error_schema()
    for shape in BODY_SHAPES:
        components[shape.name] = shape.json_schema()
    for path, path_item in schema["paths"].items():
        for details in path_item.values():
            if "{id}" in path:
                details["parameters"] = [_PATH_ID, *details.get("parameters", [])]
            operation_id = details["operationId"]
            _name_problem_unions(operation_id, details["responses"], components)
            for status, links in _LINKS.get(operation_id, {}).items():
                details["responses"][status]["links"] = links
    titled = {name: {"title": name, **component} for name, component in sorted(components.items())}
    schema["components"] = {"schemas": titled, "securitySchemes": _SECURITY_SCHEMES}
    schema["security"] = [{_BEARER: []}]
    app.openapi_schema = schema
    return schema
