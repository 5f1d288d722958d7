"""The per-address rate of share reads (spec 18): every request to ``/shared/…`` (and to the shared page,
``/ui/shared/…``, which looks its token up too) takes a token of its client address's bucket
(``FORKLOG_SHARE_RATE``, ``perSecond:burst``, default ``10:50``); beyond it ``429 RATE_LIMITED`` with
``Retry-After``, before the token is even looked at. It bounds how fast anyone can try tokens, with or without
a key. Each process counts alone, as for key rates (spec 14); behind a proxy every client has the proxy's address.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from starlette.types import ASGIApp, Scope, Send

from app.api.edge.guard import Guard
from app.api.wire.problems import send_problem
from app.domain.errors import ErrorCode
from app.domain.limits import RateLimit, TokenBucket

__all__ = ["SHARED_PAGE_PREFIX", "SHARED_PREFIX", "ShareRateLimiter"]

SHARED_PREFIX = "/shared/"
SHARED_PAGE_PREFIX = "/ui/shared/"
# Buckets of addresses not seen for this long are dropped (a full bucket is what a new one would be anyway).
IDLE_SECONDS = 600.0


class ShareRateLimiter(Guard):
    def __init__(self, app: ASGIApp, *, limit: RateLimit, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(app)
        self.limit = limit
        self.clock = clock
        self._buckets: dict[str, tuple[TokenBucket, float]] = {}
        self._next_cleanup = 0.0

    async def refused(self, scope: Scope, send: Send) -> bool:
        """Whether the request, a share read over its address's rate, was refused (its answer sent)."""
        if not scope["path"].startswith((SHARED_PREFIX, SHARED_PAGE_PREFIX)):
            return False
        client = scope.get("client")
        wait = self._take(client[0] if client else "-")
        if wait <= 0:
            return False
        milliseconds = max(1, math.ceil(wait * 1000))
        seconds = max(1, math.ceil(milliseconds / 1000))
        detail = f"too many share reads from this address; retry in {seconds} s"
        facts = {"retryAfterMs": milliseconds}
        await send_problem(scope, send, ErrorCode.RATE_LIMITED, detail, facts, headers={"Retry-After": str(seconds)})
        return True

    def _take(self, address: str) -> float:
        now = self.clock()
        found = self._buckets.get(address)
        bucket = found[0] if found is not None else TokenBucket(self.limit, now)
        self._buckets[address] = (bucket, now)
        if now >= self._next_cleanup:
            self._next_cleanup = now + IDLE_SECONDS
            self._buckets = {name: seen for name, seen in self._buckets.items() if now - seen[1] < IDLE_SECONDS}
        return bucket.take(now)
