"""The one layer every request crosses before the append shortcut and the routes: what five layers did, in their order.

1. Telemetry (:mod:`app.api.telemetry.per_request`): the request's id, its count as active and its span; once answered,
its
   metrics and the span's end. Every answer carries ``X-Request-Id``; an error nothing answered is answered here by
   the app's handler for bugs, with the id.
2. The access log line (:mod:`app.api.telemetry.access_log`), once the request is answered.
3. CORS (:mod:`app.api.edge.cors`): a preflight is answered here; with origins allowed (or for any OPTIONS) every other
   answer is labelled for the browser, a refusal below included (a page must be able to read a 401).
4. The guards, in order: the key check and the rate limit (:mod:`app.api.edge.auth`, :mod:`app.api.edge.rate_limit`), or
   without keys the loopback guard (:mod:`app.api.edge.loopback`); the share reads' rate per address
   (:mod:`app.api.edge.share_rate`); then the encoded-slash guard
   (:mod:`app.api.edge.encoded_slash`). The first that refuses answers.

Why one layer: each ASGI layer is a coroutine call and a wrapper of ``send`` per request, and with five of them an
append spent about as much CPU crossing them as the framework's own route. Each guard is still an ASGI app of its
own (usable alone); here only its check runs. A WebSocket handshake is refused unaccepted (the service takes no
upgrade); the lifespan goes through.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.edge.auth import Authenticator
from app.api.edge.cors import Cors, is_preflight
from app.api.edge.encoded_slash import EncodedSlashGuard
from app.api.edge.guard import Guard, handled_outside_http
from app.api.edge.loopback import LoopbackGuard
from app.api.edge.rate_limit import RateLimiter
from app.api.edge.share_rate import ShareRateLimiter
from app.api.telemetry.access_log import log_access
from app.api.telemetry.metrics import Metrics
from app.api.telemetry.per_request import RequestTelemetry, answer_bug
from app.api.telemetry.tracing import Tracing
from app.domain.access import KeyRing
from app.domain.limits import RateLimit

__all__ = ["Gateway"]


class Gateway:
    def __init__(
        self,
        app: ASGIApp,
        *,
        metrics: Metrics | None,
        tracing: Tracing | None,
        cors_origins: Sequence[str],
        allowed_hosts: Sequence[str],
        keys: Callable[[], KeyRing] | None,
        share_rate: RateLimit | None = None,
    ) -> None:
        self.app = app
        self.telemetry = RequestTelemetry(metrics=metrics, tracing=tracing, keyed=keys is not None)
        self.cors = Cors(app, origins=cors_origins)
        guards: list[Guard]
        if keys is not None:
            guards = [Authenticator(app, keys=keys), RateLimiter(app)]  # the rate right after the key is known
        else:
            guards = [LoopbackGuard(app, allowed_hosts=allowed_hosts, allowed_origins=cors_origins)]
        if share_rate is not None:  # share reads, by address (spec 18): after the key's own rate
            guards.append(ShareRateLimiter(app, limit=share_rate))
        self.guards: tuple[Guard, ...] = (*guards, EncodedSlashGuard(app))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if await handled_outside_http(self.app, scope, receive, send):
            return
        opened = self.telemetry.begin(scope)
        id_header = opened.id_header
        status = 500  # until an answer starts
        started = False

        async def answer(message: Message) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                status = message["status"]
                started = True
                message["headers"] = [*message.get("headers", ()), id_header]
            await send(message)

        try:
            began = time.perf_counter()
            try:
                await self._admit(scope, receive, answer)
            finally:
                log_access(scope, status, time.perf_counter() - began)
        except Exception as exc:
            if not started:
                await answer_bug(scope, receive, answer, exc)
            raise
        finally:
            self.telemetry.end(scope, opened, status)

    async def _admit(self, scope: Scope, receive: Receive, send: Send) -> None:
        """CORS, the guards, then the app."""
        headers: Headers | None = None
        if scope["method"] == "OPTIONS":
            headers = Headers(scope=scope)
            if is_preflight(headers):
                await self.cors.answer_preflight(scope, send, headers)
                return
        elif self.cors.any_origin_allowed:
            headers = Headers(scope=scope)
        if headers is not None:
            # Starlette's labelling of an answer; with no origin allowed no answer but OPTIONS varies by Origin.
            send = functools.partial(self.cors.send, send=send, request_headers=headers)
        for guard in self.guards:
            if await guard.refused(scope, send):
                return
        await self.app(scope, receive, send)
