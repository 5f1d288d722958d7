"""One declaration a route (:class:`RouteSpec`): its path, its method and what it asks and answers.

Starlette's ``Route`` objects and its routing table are the model: the declaration rides on its route
(:class:`~app.api.routing.calling.PlainRoute`, a static files ``Mount``), and every layer that must know a fact of a
route matches the request against the app's routing table with Starlette's own ``route.matches(scope)`` and reads the
declaration of the route found (:func:`matched_route`): the key check its scope and whether it is open
(:mod:`app.api.edge.auth`), the OpenAPI document its operation (:func:`app.api.docs.openapi.operation`), the append
shortcut its match (:mod:`app.api.fast_path.append_shortcut`) and the metrics their ``http_route`` label
(:mod:`app.api.telemetry.per_request`).
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.routing import BaseRoute, Match
from starlette.types import Scope

from app.api.wire.requests import BodyShape, QueryShape
from app.domain.access import Scope as KeyScope
from app.domain.errors import ErrorCode

__all__ = ["MatchedRoute", "RouteSpec", "matched_route", "spec_of"]

# Where a request's match is kept once found, for the layers after the first that asks.
_MATCHED = "forklog.matched_route"


@dataclass(frozen=True, slots=True)
class RouteSpec:
    """A route, declared once. ``scope`` is the key scope it needs with a keys file; None makes it open (no key
    needed: health, the documents and pages a browser must load before it can ask for a key). ``refusals`` are the
    codes of its own refusals (those of its kind are added by the OpenAPI document); ``store`` says it asks the
    store; ``stream`` that it is a server-sent event stream, which also takes its key as ``?access_token=`` (a
    browser's ``EventSource`` cannot send headers); ``created`` that it answers a new session's ``Location``;
    ``standby_reads`` that its reads may be served by a hot standby (``FORKLOG_READ_DATABASE_URL``) that has replayed
    every change acknowledged before the request (:mod:`app.backends.read_routing`)."""

    method: str
    path: str
    scope: KeyScope | None
    body: BodyShape | None = None
    query: QueryShape | None = None
    refusals: tuple[ErrorCode, ...] = ()
    idempotent: bool = False
    store: bool = True
    created: bool = False
    stream: bool = False
    standby_reads: bool = False
    tag: str | None = None  # the OpenAPI tag; by default "health" for an open route, "sessions" for the others

    @property
    def public(self) -> bool:
        return self.scope is None


def spec_of(route: BaseRoute | None) -> RouteSpec | None:
    spec: RouteSpec | None = getattr(route, "spec", None)
    return spec


@dataclass(frozen=True, slots=True)
class MatchedRoute:
    """What the routing table makes of a request: the route that will answer it (``full``), else those whose path
    it names with another method (``partial``: a 405), else the mounts whose folder it names without the slash
    (``folder``: the router redirects to the slash)."""

    full: BaseRoute | None
    partial: tuple[BaseRoute, ...] = ()
    folder: tuple[BaseRoute, ...] = ()

    @property
    def route(self) -> BaseRoute | None:
        """The route the router hands the request to (the first partial one for a 405), as Starlette picks it."""
        return self.full if self.full is not None else next(iter(self.partial), None)


def matched_route(scope: Scope) -> MatchedRoute:
    """The request's match against the app's routing table, found once a request (Starlette's own matching)."""
    found: MatchedRoute | None = scope.get(_MATCHED)
    if found is not None:
        return found
    routes: list[BaseRoute] = getattr(getattr(scope.get("app"), "router", None), "routes", [])
    partial: list[BaseRoute] = []
    folder: tuple[BaseRoute, ...] = ()
    for route in routes:
        match, _ = route.matches(scope)
        if match is Match.FULL:
            found = MatchedRoute(route)
            break
        if match is Match.PARTIAL:
            partial.append(route)
    else:
        if not partial and not scope["path"].endswith("/"):
            with_slash = {**scope, "path": scope["path"] + "/"}
            folder = tuple(route for route in routes if route.matches(with_slash)[0] is Match.FULL)
        found = MatchedRoute(None, tuple(partial), folder)
    scope[_MATCHED] = found
    return found
