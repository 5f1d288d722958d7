"""The app factory: ``create_app(settings)`` builds everything; nothing is built at import."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from opentelemetry.sdk.trace import TracerProvider
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.docs.openapi import build_document
from app.api.edge.exposure import check_exposure
from app.api.edge.keys_file import KeysFile
from app.api.edge.keys_in_force import KeysInForce
from app.api.fast_path.app_state import AppState
from app.api.fast_path.append_shortcut import AppendShortcut
from app.api.fast_path.gateway import Gateway
from app.api.routes import routers
from app.api.routes.events import APPEND_EVENTS
from app.api.routing.calling import PlainRoute
from app.api.settings import Settings
from app.api.store import open_backend
from app.api.telemetry.metrics import Metrics
from app.api.telemetry.per_request import StorageTelemetry
from app.api.telemetry.tracing import Tracing, provider_from_environment
from app.api.ui import static_mounts
from app.api.wire.idempotency_key import WIRE_ANSWERS
from app.api.wire.problems import install_problem_handlers
from app.backends.base import Backend
from app.domain.limits import TenantLimits
from app.domain.session import DEFAULT_TENANT
from app.service.observer import NO_SESSION_OBSERVER
from app.service.sessions import SessionService

__all__ = ["ForklogApp", "create_app"]


def _append_route(app: FastAPI) -> PlainRoute:
    """The documented append route, which the shortcut (app.api.fast_path.append_shortcut) matches and calls."""
    for route in app.router.routes:
        if isinstance(route, PlainRoute) and route.spec is APPEND_EVENTS:
            return route
    raise LookupError("no append route")


class ForklogApp(FastAPI):
    """FastAPI with the gateway (:mod:`app.api.fast_path.gateway`) and the append shortcut in front of the framework's
    own layers instead of among them: an HTTP request meets the gateway first, an append goes from there straight to
    its route, and every other request goes on into FastAPI (its error, exception and body-limit layers, then the
    router) as before. Five framework layers a request, each a coroutine call and some a wrapper of ``send``, were
    a measurable share of an append's CPU; none of them did anything for an append. The lifespan goes to FastAPI."""

    front: ASGIApp | None = None  # the gateway, set once the app is built

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.state = AppState()  # read on every request (app.api.fast_path.app_state)

    async def framework(self, scope: Scope, receive: Receive, send: Send) -> None:
        """FastAPI's own handling of a request: what the gateway and the shortcut hand on."""
        await super().__call__(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.front is None:
            await super().__call__(scope, receive, send)
            return
        scope["app"] = self  # as Starlette notes it: the gateway's guards and the routes look the app up there
        if self.root_path:
            scope["root_path"] = self.root_path
        await self.front(scope, receive, send)


def create_app(
    settings: Settings | None = None, *, backend: Backend | None = None, tracer_provider: TracerProvider | None = None
) -> ForklogApp:
    """Build the service on ``backend`` (by default the one the settings name, opened here). Refuses
    (:class:`~app.api.edge.exposure.ExposureRefused`, :class:`~app.api.edge.keys_file.KeysFileError`) a service that
    would let anyone in, or whose keys file is bad, before the backend is touched. Traces go to ``tracer_provider``, by
    default to the one the ``OTEL_*`` variables select (none without them)."""
    settings = settings or Settings()
    check_exposure(settings)
    keys_file = KeysFile(settings.keys_file) if settings.keys_file is not None else None
    # Spec 14: the tenant lines of the keys file (read again with its keys), or without one the settings' limits.
    keyless_limits = {DEFAULT_TENANT: settings.tenant_limits()}

    def tenant_limits() -> Mapping[str, TenantLimits]:
        return keys_file.tenant_limits if keys_file is not None else keyless_limits

    metrics = Metrics(tenant_label=settings.metrics_tenant_label) if settings.metrics else None
    provider = tracer_provider if tracer_provider is not None else provider_from_environment()
    tracing = Tracing(provider, dropped=metrics.span_dropped if metrics else None) if provider is not None else None
    store = backend if backend is not None else open_backend(settings)
    if metrics is not None or tracing is not None:
        store.observer = StorageTelemetry(metrics, tracing)
    service = SessionService(
        store,
        observer=metrics or NO_SESSION_OBSERVER,
        tenant_limits=tenant_limits,
        answers=WIRE_ANSWERS,
        interrupt_after_ms=settings.interrupt_after_ms,
    )
    # A reload wakes every stream and long-poll, so that those of a removed key end (app.api.edge.keys_in_force).
    keys = KeysInForce(keys_file, on_change=service.changes.wake_everyone) if keys_file is not None else None

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # The store opens while the port is open: /healthz answers, every session route answers NOT_READY.
        opening = asyncio.create_task(service.start())
        opening.add_done_callback(lambda task: task.cancelled() or task.exception())
        if keys is not None:
            keys.watcher.start()
        try:
            yield
        finally:
            if keys is not None:
                await keys.watcher.stop()
            if not opening.done():
                opening.cancel()
            with contextlib.suppress(BaseException):
                await opening
            await service.stop()
            if tracing is not None:
                await asyncio.to_thread(tracing.shutdown)

    app = ForklogApp(
        title="forklog",
        version="0.1.0",
        description="Event-sourced AI-agent sessions, forked safely at turn boundaries.",
        lifespan=lifespan,
        # FastAPI's own docs pages load their scripts from a CDN: app.api.routes.docs serves them from this service.
        docs_url=None,
        redoc_url=None,
        # The document is served by a declared route of its own (app.api.routes.docs).
        openapi_url=None,
        generate_unique_id_function=lambda route: route.name,
        # forklog exports no OpenTelemetry data; with it off FastAPI skips a provider check on every request.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    app.state.settings = settings
    app.state.service = service
    app.state.metrics = metrics
    install_problem_handlers(app, [route for router in routers for route in router.routes])
    for router in routers:
        # The routes themselves, not the routers: FastAPI matches an included router as one more level per request.
        app.router.routes.extend(router.routes)
    # The session browser (/ui/) and the docs pages' scripts (/docs/assets/): files, after every API route.
    app.router.routes.extend(static_mounts())
    app.state.keys = keys
    # The gateway does, in one layer, what every request meets first (app.api.fast_path.gateway): its id, metrics and
    # span, the access log, CORS, then keys and rate limits (or without keys the loopback guard) and the encoded-slash
    # guard, before anything else is looked at; then appends skip the framework, the others go into it.
    app.front = Gateway(
        AppendShortcut(app.framework, route=_append_route(app)),
        metrics=metrics,
        tracing=tracing,
        cors_origins=settings.cors_origins,
        allowed_hosts=settings.allowed_hosts,
        keys=(lambda: keys.ring) if keys is not None else None,
    )
    app.openapi = lambda: build_document(app)  # type: ignore[method-assign]
    return app
