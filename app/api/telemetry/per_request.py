"""What every request leaves for operators (spec 13): its id, its metrics and, when traces are on, its span.

:class:`RequestTelemetry` runs first and last in the app's one layer (:mod:`app.api.fast_path.gateway`): it gives the
request its id (``X-Request-Id`` on the answer, ``requestId`` in the access log and in a problem body), counts it as
active, and when it has been answered records its duration by method, route template and status, and the problem code it
answered if any. With traces on it runs the request inside a server span named ``METHOD route``.
:class:`StorageTelemetry` is what the backend is told of its durable writes
(:class:`~app.backends.observer.StorageObserver`): their metrics and child spans.
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import StatusCode
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from app.api.edge.auth import KEY_STATE
from app.api.routing.declarations import matched_route, spec_of
from app.api.telemetry.metrics import KNOWN_METHODS, NO_TENANT, Metrics
from app.api.telemetry.request_ids import REQUEST_ID_STATE, new_request_id, valid_request_id
from app.api.telemetry.tracing import Tracing, incoming_trace_id
from app.api.wire.problems import PROBLEM_CODE_STATE
from app.api.wire.share_paths import public_path
from app.backends.observer import NO_SPAN, StorageObserver
from app.domain.session import DEFAULT_TENANT

__all__ = [
    "TRACE_ID_STATE",
    "UNMATCHED_ROUTE",
    "OpenRequest",
    "RequestTelemetry",
    "StorageTelemetry",
    "answer_bug",
    "route_template",
]

TRACE_ID_STATE = "trace_id"
# The route label of a request that matches no route (never its raw path: a client could mint series at will).
UNMATCHED_ROUTE = "unmatched"


def route_template(scope: Scope) -> str:
    """The request's route as declared (``/sessions/{id}/events``), or :data:`UNMATCHED_ROUTE`: the route the router
    handed it to, or for an answer given before the router ran (a key check, a guard) the one it names."""
    route = scope.get("route") or matched_route(scope).route
    spec = spec_of(route)
    return spec.path if spec is not None else UNMATCHED_ROUTE


class StorageTelemetry(StorageObserver):
    """The backend's durable writes, into the metrics and (with traces) as child spans of the request waiting."""

    def __init__(self, metrics: Metrics | None, tracing: Tracing | None) -> None:
        self._metrics = metrics
        self._tracing = tracing

    def synced(self, events: int, seconds: float) -> None:
        if self._metrics is not None:
            self._metrics.synced(events, seconds)

    def standby_read(self, server: str) -> None:
        if self._metrics is not None:
            self._metrics.standby_read(server)

    def durable_write(self, name: str, events: int) -> AbstractContextManager[object]:
        if self._tracing is None:
            return NO_SPAN
        return self._tracing.child_span(name, events)


@dataclass(slots=True)
class OpenRequest:
    """What :meth:`RequestTelemetry.begin` started for a request, for :meth:`RequestTelemetry.end`."""

    method: str  # as the metrics label it
    began: float
    span: trace.Span | None
    token: object  # the span's context, attached while the request runs
    id_header: tuple[bytes, bytes]  # X-Request-Id, added to the answer


class RequestTelemetry:
    """A request's id, metrics and span: :meth:`begin` before any other layer looks at it, :meth:`end` once it is
    answered (app.api.fast_path.gateway calls both, around everything else). ``keyed``: whether a keys file is in force
    (then a request's tenant is its key's, and a request without one has none); without one every request is
    ``default``'s, as every session is."""

    def __init__(self, *, metrics: Metrics | None, tracing: Tracing | None, keyed: bool) -> None:
        self.metrics = metrics
        self.tracing = tracing
        self.keyed = keyed

    def begin(self, scope: Scope) -> OpenRequest:
        """Give the HTTP request its id (the client's if well-formed), count it as active, start its span."""
        offered = traceparent = tracestate = None
        for name, value in scope["headers"]:
            if name == b"x-request-id":
                offered = value if offered is None else offered
            elif name == b"traceparent":
                traceparent = value
            elif name == b"tracestate":
                tracestate = value
        request_id = valid_request_id(offered) or new_request_id()
        state = scope.setdefault("state", {})
        state[REQUEST_ID_STATE] = request_id
        method = scope["method"] if scope["method"] in KNOWN_METHODS else "_OTHER"
        if self.metrics is not None:
            self.metrics.started(method)
        span: trace.Span | None = None
        token: object = None
        if self.tracing is not None:
            span = self._start_span(scope, method, traceparent, tracestate)
            state[TRACE_ID_STATE] = format(span.get_span_context().trace_id, "032x")
            token = otel_context.attach(trace.set_span_in_context(span))
        elif traceparent is not None:
            trace_id = incoming_trace_id(traceparent)
            if trace_id is not None:
                state[TRACE_ID_STATE] = trace_id
        return OpenRequest(method, time.perf_counter(), span, token, (b"x-request-id", request_id.encode("ascii")))

    def end(self, scope: Scope, opened: OpenRequest, status: int) -> None:
        """Record the answered request's duration by method, route and status (and its problem code), end its span."""
        metrics, span = self.metrics, opened.span
        if metrics is None and span is None:
            return
        route = route_template(scope)
        if metrics is not None:
            state = scope["state"]
            tenant = self._tenant(state)
            metrics.answered(opened.method, route, status, tenant, time.perf_counter() - opened.began)
            code = state.get(PROBLEM_CODE_STATE)
            if code is not None:
                metrics.problem(code.value, tenant)
        if span is not None:
            otel_context.detach(opened.token)  # type: ignore[arg-type]
            _end_span(span, scope, opened.method, route, status)

    def _tenant(self, state: dict[str, Any]) -> str:
        """The request's tenant as the metrics label it: :data:`~app.api.telemetry.metrics.NO_TENANT` for a request with
        a keys file in force but no key of it (a 401, an open route such as ``/readyz`` called without one, a CORS
        preflight), never ``default``, which a real tenant may be named."""
        key = state.get(KEY_STATE)
        if key is not None:
            tenant: str = key.tenant
            return tenant
        return NO_TENANT if self.keyed else DEFAULT_TENANT

    def _start_span(self, scope: Scope, method: str, traceparent: bytes | None, tracestate: bytes | None) -> trace.Span:
        assert self.tracing is not None
        carrier: dict[str, str] = {}
        if traceparent is not None:
            carrier["traceparent"] = traceparent.decode("latin-1")
            if tracestate is not None:
                carrier["tracestate"] = tracestate.decode("latin-1")
        attributes: dict[str, str | int] = {
            "http.request.method": method,
            # Never the query string (a stream's may carry a key), nor a share's token (written /shared/…).
            "url.path": public_path(scope["path"]),
            "url.scheme": scope.get("scheme", "http"),
            "network.protocol.version": scope.get("http_version", "1.1"),
        }
        server, client = scope.get("server"), scope.get("client")
        if server:
            attributes["server.address"], attributes["server.port"] = server[0], server[1]
        if client:
            attributes["client.address"] = client[0]
        return self.tracing.server_span(_span_method(method), carrier, attributes)


def _span_method(method: str) -> str:
    """OpenTelemetry's span names say ``HTTP`` for a method outside HTTP's own."""
    return "HTTP" if method == "_OTHER" else method


def _end_span(span: trace.Span, scope: Scope, method: str, route: str, status: int) -> None:
    if route != UNMATCHED_ROUTE:
        span.update_name(f"{_span_method(method)} {route}")
        span.set_attribute("http.route", route)
        session_id = scope.get("path_params", {}).get("id")
        if session_id is not None and route.startswith("/sessions/{id}"):
            span.set_attribute("forklog.session.id", session_id)
            span.set_attribute("gen_ai.conversation.id", session_id)
    span.set_attribute("http.response.status_code", status)
    if status >= 500:
        span.set_attribute("error.type", str(status))
        span.set_status(StatusCode.ERROR)
    span.end()


async def answer_bug(scope: Scope, receive: Receive, send: Send, exc: Exception) -> None:
    """Answer an error no layer answered with the app's own handler for bugs (the server's error layer, outside
    every layer of the app, would answer without the request's id)."""
    app = scope.get("app")
    handler = getattr(app, "exception_handlers", {}).get(Exception)
    if handler is None:
        return
    response = await handler(Request(scope, receive), exc)
    await response(scope, receive, send)
