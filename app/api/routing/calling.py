"""How a route is called: every endpoint takes the request and returns a finished response.

FastAPI's own route handler solves dependencies, serializes response models and keeps per-request exit stacks;
forklog's endpoints need none of it (they parse with :mod:`app.api.wire.requests` and write their own bytes), so a
:class:`PlainRoute` is matched and called as a plain Starlette route: Starlette's ``request_response``, which sends
every error to the app's registered problem handlers. It is still an ``APIRoute``, so the OpenAPI document describes
it like any other.

Each route is declared once (:class:`~app.api.routing.declarations.RouteSpec`: path, method, key scope, body, query,
refusals...) and added with :meth:`Routes.declare`, which builds its OpenAPI operation from that declaration and keeps
the declaration on the route (``route.spec``) for the layers that match a request against the routing table.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from fastapi.routing import APIRoute
from pydantic import BaseModel
from starlette.routing import Route, request_response
from starlette.types import ASGIApp, Receive, Send
from starlette.types import Scope as AsgiScope

from app.api.docs.openapi import operation
from app.api.edge.auth import KEY_STATE
from app.api.routing.declarations import RouteSpec
from app.api.settings import Settings
from app.api.wire.body import JsonBody, read_body
from app.api.wire.json_answer import JsonAnswer
from app.backends.read_routing import standby_reads
from app.domain.access import ApiKey, Scope
from app.domain.ids import check_id
from app.domain.session import DEFAULT_TENANT, SessionKey
from app.service.sessions import SessionService

__all__ = [
    "PlainRoute",
    "Routes",
    "body_of",
    "is_admin",
    "json_response",
    "key_in_force",
    "key_of",
    "new_router",
    "service_of",
    "settings_of",
    "tenant_of",
]

Endpoint = Callable[[Request], Coroutine[Any, Any, Response]]


class PlainRoute(APIRoute):
    spec: RouteSpec | None = None  # its declaration (set by Routes.declare)

    def __init__(self, path: str, endpoint: Endpoint, **options: Any) -> None:
        super().__init__(path, endpoint, **options)
        self.app = request_response(endpoint)

    def get_route_handler(self) -> Endpoint:
        endpoint: Endpoint = self.endpoint
        return endpoint

    # Starlette's matching: FastAPI's adds a per-request lookup of included-router contexts that these routes,
    # added to the app directly, never have.
    matches = Route.matches
    handle = Route.handle


class Routes(APIRouter):
    """A router of plain routes, each added from its declaration."""

    def declare(
        self, spec: RouteSpec, model: type[BaseModel] | None = None, **options: Any
    ) -> Callable[[Endpoint], Endpoint]:
        """Add the decorated endpoint as ``spec``'s route; ``options`` are FastAPI's (``summary``, ``status_code``,
        ``response_class``, ``include_in_schema``), and ``responses`` replace the documented answers of a status."""
        documentation = operation(model, spec)
        documentation["responses"].update(options.pop("responses", {}))

        def add(endpoint: Endpoint) -> Endpoint:
            self.add_api_route(spec.path, endpoint, methods=[spec.method], **documentation, **options)
            route = self.routes[-1]
            if not isinstance(route, PlainRoute):
                raise TypeError(f"{spec.path} was added as {type(route).__name__}; a Routes router adds PlainRoutes")
            route.spec = spec
            if spec.standby_reads:
                route.app = _reading_standbys(route.app)
            return endpoint

        return add


def _reading_standbys(app: ASGIApp) -> ASGIApp:
    """``app`` with its reads allowed on a standby, from the request's arrival to its answer's end (a stream's)."""

    async def call(scope: AsgiScope, receive: Receive, send: Send) -> None:
        with standby_reads():
            await app(scope, receive, send)

    return call


def new_router() -> Routes:
    """A router of plain routes whose operationIds are the endpoints' names (stable for generated clients)."""
    return Routes(route_class=PlainRoute, generate_unique_id_function=lambda route: route.name)


def service_of(request: Request) -> SessionService:
    service: SessionService = request.app.state.service
    return service


def settings_of(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def key_in_force(request: Request) -> ApiKey | None:
    """The caller's key (None without a keys file, or on an open route called without a valid one)."""
    key: ApiKey | None = request.scope.get("state", {}).get(KEY_STATE)
    return key


def tenant_of(request: Request) -> str:
    """The caller's tenant: its key's, or ``default`` when the service has no keys file."""
    key = key_in_force(request)
    return key.tenant if key is not None else DEFAULT_TENANT


def is_admin(request: Request) -> bool:
    """Without a keys file everyone is (only this machine is served); with one, a key with the admin scope."""
    if request.app.state.keys is None:
        return True
    key = key_in_force(request)
    return key is not None and key.allows(Scope.ADMIN)


def key_of(request: Request) -> SessionKey:
    """The session the path names; its id checked against the id rule before anything else is read."""
    return SessionKey(tenant_of(request), check_id(request.path_params["id"]))


async def body_of(request: Request, *, empty_is_object: bool) -> JsonBody:
    settings = settings_of(request)
    return await read_body(
        request, limit=settings.max_body_bytes, empty_is_object=empty_is_object, read_timeout=settings.read_timeout
    )


def json_response(content: bytes, status: int = 200) -> Response:
    return JsonAnswer(content, status)
