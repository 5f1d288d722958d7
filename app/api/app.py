"""The app factory: ``create_app(settings)`` builds everything; nothing is built at import."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.openapi.utils import get_openapi

from app.api.loopback import LoopbackGuard
from app.api.problems import PROBLEM_JSON, PROBLEMS, install_problem_handlers, problem_for, send_problem
from app.api.routes import append, router
from app.api.schemas import REQUEST_MODELS
from app.api.settings import Settings
from app.persistence.durable import DurableStore, Journal
from app.persistence.files import FileJournal

access_log = logging.getLogger("forklog.access")
storage_log = logging.getLogger("forklog.storage")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

APPEND_PATH = re.compile(r"/sessions/([^/]+)/events")

INTEGER_QUERY_PARAMETERS = {
    "limit": {"type": "integer", "minimum": 1},
    "from": {"type": "integer", "minimum": 0},
    "atSeq": {"type": "integer", "minimum": 0},
}


class RequestGuard:
    """Refuses an encoded slash (in a session id a malformed id, elsewhere no route) and logs every request.

    The log line is structured JSON with no payload: method, path, status, duration.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_and_note(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            raw_path: bytes = (scope.get("raw_path") or scope["path"].encode()).split(b"?", 1)[0]
            if b"%2f" in raw_path.lower():
                segments = raw_path.split(b"/")
                if len(segments) > 2 and segments[1] == b"sessions" and b"%2f" in segments[2].lower():
                    detail = "the session id must not contain '/'"
                    facts = {"errors": [{"field": "id", "reason": detail}]}
                    await send_problem(scope, send_and_note, "INVALID_REQUEST", detail, facts)
                else:  # an encoded slash is a character of its segment: no route has such a segment
                    await send_problem(
                        scope, send_and_note, "NOT_FOUND", f"no route {raw_path.decode('latin-1')}; check the URL"
                    )
                return
            if scope["method"] == "POST" and (match := APPEND_PATH.fullmatch(scope["path"])) is not None:
                await _append_directly(scope, receive, send_and_note, match[1])
                return
            await self.app(scope, receive, send_and_note)
        finally:
            if access_log.isEnabledFor(logging.INFO):
                access_log.info(
                    orjson.dumps(
                        {
                            "method": scope.get("method"),
                            "path": scope.get("path"),
                            "status": status,
                            "ms": round((time.perf_counter() - started) * 1000, 3),
                        }
                    ).decode()
                )


async def _append_directly(scope: Scope, receive: Receive, send: Send, session_id: str) -> None:
    """The append route without the router and dependency machinery around it: appends are the hot path.

    It runs the very function the documented route runs, and answers errors through the same problem handlers.
    """
    request = Request(scope, receive)
    try:
        response = await append(request, request.app.state.durable, session_id)
    except Exception as exc:
        response = await problem_for(request, exc)
    await response(scope, receive, send)


def _openapi(app: FastAPI) -> Callable[[], dict[str, Any]]:
    def build() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(
            title="forklog",
            version=app.version,
            description=app.description,
            routes=app.routes,
        )
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for model in REQUEST_MODELS:
            model_schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
            components.update(model_schema.pop("$defs", {}))
            components[model.__name__] = model_schema
        from app.api.schemas import Problem

        problem_schema = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
        components.update(problem_schema.pop("$defs", {}))
        components["Problem"] = problem_schema
        for path_item in schema["paths"].values():
            for operation in path_item.values():
                for parameter in operation.get("parameters", []):
                    if parameter["in"] == "query" and parameter["name"] in INTEGER_QUERY_PARAMETERS:
                        parameter["schema"] = dict(INTEGER_QUERY_PARAMETERS[parameter["name"]])
                    if parameter["in"] == "path":
                        parameter["schema"] = {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"}
                for status, response in operation.get("responses", {}).items():
                    if status.isdigit() and int(status) >= 400:
                        response["content"] = {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}}
                        response["description"] = PROBLEMS_BY_STATUS.get(int(status), "a problem")
                operation["responses"].setdefault(
                    "404", {"description": "no such route", "content": {PROBLEM_JSON: {"schema": _PROBLEM_REF}}}
                )
                operation["responses"].setdefault(
                    "405", {"description": "wrong method", "content": {PROBLEM_JSON: {"schema": _PROBLEM_REF}}}
                )
                operation["responses"].setdefault(
                    "500", {"description": "a bug", "content": {PROBLEM_JSON: {"schema": _PROBLEM_REF}}}
                )
                for status, links in _LINKS.get(operation.get("operationId", ""), {}).items():
                    operation["responses"][status]["links"] = links
        for unused in ("HTTPValidationError", "ValidationError"):
            components.pop(unused, None)
        app.openapi_schema = schema
        return schema

    return build


_PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}


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
PROBLEMS_BY_STATUS = {
    status: ", ".join(code for code, (code_status, _) in PROBLEMS.items() if code_status == status)
    for status in {status for status, _ in PROBLEMS.values()}
}


def _report_failed_recovery(recovery: asyncio.Task[None]) -> None:
    # Recovery handles every file's damage itself; reaching here is a bug, and the service stays NOT_READY.
    if not recovery.cancelled() and recovery.exception() is not None:
        storage_log.critical("recovery failed; the service stays NOT_READY", exc_info=recovery.exception())


def create_app(settings: Settings | None = None, *, journal: Journal | None = None) -> FastAPI:
    """Build the service. The journal (the data directory and its lock) is opened here unless one is given."""
    settings = settings or Settings()
    durable = DurableStore(journal if journal is not None else FileJournal(settings.data_dir, sync=settings.fsync))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Recovery runs while the port is open: /healthz answers, every session route answers NOT_READY.
        recovery = asyncio.create_task(durable.recover())
        recovery.add_done_callback(_report_failed_recovery)
        try:
            yield
        finally:
            if not recovery.done():
                recovery.cancel()
            await asyncio.gather(recovery, return_exceptions=True)
            durable.close()

    app = FastAPI(
        title="forklog",
        version="0.1.0",
        description="Event-sourced AI-agent sessions, forked safely at turn boundaries.",
        lifespan=lifespan,
        generate_unique_id_function=lambda route: route.name,
        # forklog exports no OpenTelemetry data; with it off FastAPI skips a provider check on every request.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    app.state.settings = settings
    app.state.durable = durable
    install_problem_handlers(app, router.routes)
    app.include_router(router)
    app.add_middleware(RequestGuard)
    # Without keys (there are none yet) only this machine is served: foreign Hosts and cross-site changes are refused
    # before anything else runs (the request guard's append path included).
    app.add_middleware(LoopbackGuard, allowed_hosts=settings.allowed_hosts, allowed_origins=settings.cors_origins)
    app.openapi = _openapi(app)  # type: ignore[method-assign]
    return app
