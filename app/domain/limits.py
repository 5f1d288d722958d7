"""What one tenant or key may take (spec 14): a key's rate limit, a tenant's quotas and retention, as the keys file
(or, without one, the settings) states them; the token bucket that enforces a rate; ISO 8601 durations.

A rate limit is a token bucket: ``burst`` tokens at most, refilled at ``perSecond`` tokens a second; a request takes
one, and when none is left it is refused with the time until the next one. Quotas and retention are checked by the
service (:mod:`app.service.quotas`, :mod:`app.service.retention`); here they are only values.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.domain.errors import ConfigurationError, ErrorCode, SessionError
from app.domain.ids import is_valid_id
from app.domain.jsonvalue import is_safe_integer

__all__ = [
    "NO_LIMITS",
    "TENANT_LIMIT_MEMBERS",
    "BadLimit",
    "RateLimit",
    "TenantLimits",
    "TokenBucket",
    "parse_duration_ms",
    "parse_rate_limit",
    "parse_rate_text",
    "parse_tenant_limits",
    "quota_refusal",
]

TENANT_LIMITS_ORDER = ("tenant", "maxSessions", "maxBytes", "retention")
TENANT_LIMIT_MEMBERS = frozenset(TENANT_LIMITS_ORDER)

# P[nY][nM][nW][nD][T[nH][nM][nS]]; a year counts 365 days and a month 30 (a retention is not a calendar date).
_DURATION = re.compile(
    r"P(?:(?P<years>\d+)Y)?(?:(?P<months>\d+)M)?(?:(?P<weeks>\d+)W)?(?:(?P<days>\d+)D)?"
    r"(?:T(?:(?P<hours>\d+)H)?(?:(?P<minutes>\d+)M)?(?:(?P<seconds>\d+(?:[.,]\d+)?)S)?)?"
)
_MS_PER = {
    "years": 365 * 86_400_000,
    "months": 30 * 86_400_000,
    "weeks": 7 * 86_400_000,
    "days": 86_400_000,
    "hours": 3_600_000,
    "minutes": 60_000,
}


class BadLimit(ConfigurationError, ValueError):
    """A limit's value that is not one; the message says what it must be."""


def parse_duration_ms(text: Any) -> int:
    """An ISO 8601 duration (``P30D``, ``PT12H``, ``PT5S``, ``PT0.5S``) in whole milliseconds, more than 0."""
    match = _DURATION.fullmatch(text) if isinstance(text, str) else None
    if match is None or text.endswith("T") or text == "P":
        raise BadLimit("must be an ISO 8601 duration such as P30D, PT12H or PT5S")
    total = 0.0
    for name, value in match.groupdict().items():
        if value is None:
            continue
        if name == "seconds":
            total += float(value.replace(",", ".")) * 1000
        else:
            total += int(value) * _MS_PER[name]
    milliseconds = math.ceil(total)
    if milliseconds <= 0:
        raise BadLimit("must be a duration longer than zero")
    return milliseconds


@dataclass(frozen=True, slots=True)
class RateLimit:
    """``per_second`` requests a second on average, ``burst`` at once."""

    per_second: float
    burst: int


def parse_rate_limit(value: Any) -> RateLimit:
    """A key line's ``rateLimit``: ``{"perSecond": R, "burst": B}`` with R > 0 and B a whole number >= 1."""
    if not isinstance(value, dict) or set(value) != {"perSecond", "burst"}:
        raise BadLimit('rateLimit must be {"perSecond": R, "burst": B}')
    rate, burst = value["perSecond"], value["burst"]
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not math.isfinite(rate) or rate <= 0:
        raise BadLimit("rateLimit.perSecond must be a number greater than 0")
    if not is_safe_integer(burst) or burst < 1:
        raise BadLimit("rateLimit.burst must be a whole number of at least 1")
    return RateLimit(float(rate), int(burst))


def parse_rate_text(text: str) -> RateLimit:
    """``perSecond:burst`` (``10:50``), as FORKLOG_SHARE_RATE writes a rate (spec 18)."""
    per_second, colon, burst = text.strip().partition(":")
    try:
        limit = parse_rate_limit({"perSecond": float(per_second), "burst": float(burst)}) if colon else None
    except ValueError:
        limit = None
    if limit is None:
        raise BadLimit("must be perSecond:burst, such as 10:50 (perSecond more than 0, burst a whole number from 1)")
    return limit


@dataclass(frozen=True, slots=True)
class TenantLimits:
    """A tenant's quotas and retention; None where it has none."""

    max_sessions: int | None = None
    max_bytes: int | None = None
    retention_ms: int | None = None

    @property
    def quotas(self) -> bool:
        return self.max_sessions is not None or self.max_bytes is not None


NO_LIMITS = TenantLimits()


def _count(record: Mapping[str, Any], name: str) -> int | None:
    value = record.get(name)
    if value is None:
        return None
    if not is_safe_integer(value) or value < 0:
        raise BadLimit(f"{name} must be a whole number of at least 0")
    return int(value)


def parse_tenant_limits(record: Mapping[str, Any]) -> tuple[str, TenantLimits]:
    """A tenant line of the keys file: ``{"tenant": T, "maxSessions": N, "maxBytes": B, "retention": "P30D"}``,
    each limit optional."""
    unknown = sorted(record.keys() - TENANT_LIMIT_MEMBERS)
    if unknown:
        raise BadLimit(f"unknown member {', '.join(unknown)} (a tenant line takes {', '.join(TENANT_LIMITS_ORDER)})")
    tenant = record["tenant"]
    if not is_valid_id(tenant):
        raise BadLimit("tenant must be 1-128 characters of [A-Za-z0-9._-], starting with a letter or digit")
    retention = record.get("retention")
    try:
        retention_ms = parse_duration_ms(retention) if retention is not None else None
    except BadLimit as exc:
        raise BadLimit(f"retention {exc}") from None
    return tenant, TenantLimits(_count(record, "maxSessions"), _count(record, "maxBytes"), retention_ms)


class TokenBucket:
    """One key's bucket: :meth:`take` spends a token, or says how long until one is there."""

    __slots__ = ("_at", "_tokens", "limit")

    def __init__(self, limit: RateLimit, now: float) -> None:
        self.limit = limit
        self._tokens = float(limit.burst)
        self._at = now

    def take(self, now: float) -> float:
        """0.0 when a token was taken; else the seconds until one will be there (nothing is taken)."""
        rate = self.limit.per_second
        if now > self._at:
            self._tokens = min(float(self.limit.burst), self._tokens + (now - self._at) * rate)
            self._at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return 0.0
        return (1.0 - self._tokens) / rate


def quota_refusal(
    tenant: str, limits: TenantLimits, used: tuple[int, int], adding: tuple[int, int]
) -> SessionError | None:
    """QUOTA_EXCEEDED if a change adding ``adding`` (sessions, bytes) to the tenant's ``used`` would take it past a
    quota (sessions first), else None. A change that adds nothing of a quota's unit never breaks it."""
    sessions, size = used
    more_sessions, more_bytes = adding
    if limits.max_sessions is not None and more_sessions > 0 and sessions + more_sessions > limits.max_sessions:
        detail = (
            f"tenant {tenant!r} holds {sessions} live sessions of its {limits.max_sessions}; delete one or ask for "
            "a larger quota"
        )
        return SessionError(
            ErrorCode.QUOTA_EXCEEDED, detail, quota="sessions", limit=limits.max_sessions, used=sessions
        )
    if limits.max_bytes is not None and more_bytes > 0 and size + more_bytes > limits.max_bytes:
        detail = (
            f"tenant {tenant!r} holds {size} bytes of its {limits.max_bytes}; this change needs {more_bytes} more: "
            "delete sessions or ask for a larger quota"
        )
        return SessionError(ErrorCode.QUOTA_EXCEEDED, detail, quota="bytes", limit=limits.max_bytes, used=size)
    return None
