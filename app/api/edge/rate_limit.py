"""Rate limits per key (spec 14): a key whose line carries ``rateLimit`` gets a token bucket, and a request beyond it
answers ``429 RATE_LIMITED`` with ``Retry-After`` (whole seconds, at least 1) and ``retryAfterMs``.

It runs right after the key check, so before the body is read and before any route (the append shortcut
included) does anything. Each process counts alone: N replicas behind a balancer let a key through up to N times
its rate. A key's bucket starts full and is made anew when its line's limit changes; the buckets of keys no longer
in the file are dropped at the next look.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from starlette.types import ASGIApp, Scope, Send

from app.api.edge.auth import KEY_STATE, required_scope
from app.api.edge.guard import Guard
from app.api.routing.declarations import matched_route
from app.api.wire.problems import send_problem
from app.domain.access import ApiKey
from app.domain.errors import ErrorCode
from app.domain.limits import TokenBucket

__all__ = ["RateLimiter"]

# Buckets of keys not seen for this long are dropped (a full bucket is what a new one would be anyway).
IDLE_SECONDS = 3600.0


class RateLimiter(Guard):
    def __init__(self, app: ASGIApp, *, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(app)
        self.clock = clock
        self._buckets: dict[str, tuple[TokenBucket, float]] = {}
        self._next_cleanup = 0.0

    async def refused(self, scope: Scope, send: Send) -> bool:
        """Whether the HTTP request was refused, its key over its rate (the answer sent)."""
        key: ApiKey | None = scope.get("state", {}).get(KEY_STATE)
        # Only requests that need a key count (its route's declaration says; the match is kept in the scope).
        if key is not None and key.rate_limit is not None and _needs_key(scope):
            wait = self._take(key)
            if wait > 0:
                await _refuse(scope, send, key, wait)
                return True
        return False

    def _take(self, key: ApiKey) -> float:
        now = self.clock()
        assert key.rate_limit is not None
        found = self._buckets.get(key.id)
        bucket = found[0] if found is not None and found[0].limit == key.rate_limit else None
        if bucket is None:
            bucket = TokenBucket(key.rate_limit, now)
        self._buckets[key.id] = (bucket, now)
        if now >= self._next_cleanup:
            self._next_cleanup = now + IDLE_SECONDS
            self._buckets = {name: seen for name, seen in self._buckets.items() if now - seen[1] < IDLE_SECONDS}
        return bucket.take(now)


def _needs_key(scope: Scope) -> bool:
    return required_scope(scope["method"], matched_route(scope)) is not None


async def _refuse(scope: Scope, send: Send, key: ApiKey, wait: float) -> None:
    milliseconds = max(1, math.ceil(wait * 1000))
    seconds = max(1, math.ceil(milliseconds / 1000))
    detail = f"key {key.id!r} is over its rate limit; retry in {seconds} s"
    facts = {"retryAfterMs": milliseconds}
    await send_problem(scope, send, ErrorCode.RATE_LIMITED, detail, facts, headers={"Retry-After": str(seconds)})
