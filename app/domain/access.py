"""Access keys (spec 9): what a keys file's line says, and which key a presented secret is.

A key file holds only SHA-256 digests of the keys. A presented key is hashed and looked up by its digest; the
digest found is compared again with ``hmac.compare_digest``, so no comparison depends on how much of a secret
matched (and the lookup itself only ever sees a digest, which tells nothing about the key).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

from app.domain.errors import ConfigurationError
from app.domain.ids import is_valid_id
from app.domain.limits import BadLimit, RateLimit, TenantLimits, parse_rate_limit, parse_tenant_limits

__all__ = [
    "ApiKey",
    "BadKeyLine",
    "KeyRing",
    "KeysFileContent",
    "Scope",
    "case_clash",
    "digest_of",
    "key_line",
    "new_secret",
    "parse_keys",
    "parse_keys_file",
]

# 256 random bits, URL-safe (a key goes in an Authorization header, or in ?access_token= for a stream).
SECRET_BYTES = 32
_HEX_DIGEST = re.compile(r"[0-9a-f]{64}")
_MEMBERS = frozenset({"id", "tenant", "scopes", "sha256"})
_OPTIONAL_MEMBERS = frozenset({"rateLimit"})


class Scope(StrEnum):
    READ = "read"
    WRITE = "write"
    SHARE = "share"  # making and revoking read-only share links (spec 18)
    ADMIN = "admin"


@dataclass(frozen=True, slots=True)
class ApiKey:
    """One line of the keys file: never the key itself, only its digest."""

    id: str
    tenant: str
    scopes: frozenset[Scope]
    sha256: str
    rate_limit: RateLimit | None = None

    def allows(self, scope: Scope) -> bool:
        # Spec 18: a share link is made by a key with the share scope, or by an admin key.
        return scope in self.scopes or (scope is Scope.SHARE and Scope.ADMIN in self.scopes)


class BadKeyLine(ConfigurationError, ValueError):
    """A keys file line that is not a key; ``line`` counts from 1."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"line {line}: {reason}")
        self.line = line
        self.reason = reason


def digest_of(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogateescape")).hexdigest()


def new_secret() -> str:
    return secrets.token_urlsafe(SECRET_BYTES)


def _key_from(record: Any, line: int) -> ApiKey:
    if not isinstance(record, dict):
        raise BadKeyLine(line, "not a JSON object")
    missing = sorted(_MEMBERS - record.keys())
    if missing:
        raise BadKeyLine(line, f"missing {', '.join(missing)}")
    unknown = sorted(record.keys() - _MEMBERS - _OPTIONAL_MEMBERS)
    if unknown:
        raise BadKeyLine(line, f"unknown member {', '.join(unknown)}")
    key_id, tenant, scopes, digest = record["id"], record["tenant"], record["scopes"], record["sha256"]
    if not isinstance(key_id, str) or not key_id or len(key_id) > 128:
        raise BadKeyLine(line, "id must be a string of 1-128 characters")
    if not is_valid_id(tenant):
        raise BadKeyLine(line, "tenant must be 1-128 characters of [A-Za-z0-9._-], starting with a letter or digit")
    valid = {scope.value for scope in Scope}
    if not isinstance(scopes, list) or not scopes or not all(isinstance(s, str) and s in valid for s in scopes):
        raise BadKeyLine(line, f"scopes must be a non-empty list of {', '.join(sorted(valid))}")
    if not isinstance(digest, str) or not _HEX_DIGEST.fullmatch(digest):
        raise BadKeyLine(line, "sha256 must be 64 lower-case hex digits (the SHA-256 of the key's UTF-8 bytes)")
    try:
        rate_limit = parse_rate_limit(record["rateLimit"]) if "rateLimit" in record else None
    except BadLimit as exc:
        raise BadKeyLine(line, str(exc)) from None
    return ApiKey(key_id, tenant, frozenset(Scope(s) for s in scopes), digest, rate_limit)


@dataclass(frozen=True, slots=True)
class KeysFileContent:
    """What a keys file says: its keys, and the limits of the tenants it has a tenant line for (spec 14)."""

    keys: list[ApiKey]
    tenant_limits: dict[str, TenantLimits]


def _is_tenant_line(record: Any) -> bool:
    # A line with a key's own members but no sha256 is a key line missing its digest (said so), not a tenant line.
    return isinstance(record, dict) and "tenant" in record and not record.keys() & {"sha256", "id", "scopes"}


def parse_keys(text: bytes) -> list[ApiKey]:
    """Every key of a keys file (blank lines skipped), or :class:`BadKeyLine` for the first line that is not one:
    malformed, repeating an id or a digest of an earlier line, or naming a tenant that differs from an earlier
    line's only in letter case."""
    return parse_keys_file(text).keys


def parse_keys_file(text: bytes) -> KeysFileContent:
    """Every key and tenant line of a keys file (see :func:`parse_keys`); a second tenant line for one tenant is a
    bad line, and so is a tenant line whose tenant differs from a key's only in letter case."""
    keys: list[ApiKey] = []
    limits: dict[str, TenantLimits] = {}
    ids: set[str] = set()
    digests: set[str] = set()
    tenants: dict[str, str] = {}  # folded name -> the spelling of its first line
    for number, raw in enumerate(text.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            record = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise BadKeyLine(number, "not JSON") from None
        if _is_tenant_line(record):
            try:
                tenant, tenant_limits = parse_tenant_limits(record)
            except BadLimit as exc:
                raise BadKeyLine(number, str(exc)) from None
            if tenant in limits:
                raise BadKeyLine(number, f"tenant {tenant!r} has a tenant line already; keep one a tenant")
            clash = case_clash(tenant, tenants)
            if clash is not None:
                raise BadKeyLine(number, clash)
            tenants.setdefault(tenant.casefold(), tenant)
            limits[tenant] = tenant_limits
            continue
        key = _key_from(record, number)
        if key.id in ids:
            raise BadKeyLine(number, f"id {key.id!r} is already the id of an earlier line")
        if key.sha256 in digests:
            raise BadKeyLine(number, "the same key (sha256) is already on an earlier line")
        clash = case_clash(key.tenant, tenants)
        if clash is not None:
            raise BadKeyLine(number, clash)
        tenants.setdefault(key.tenant.casefold(), key.tenant)
        ids.add(key.id)
        digests.add(key.sha256)
        keys.append(key)
    return KeysFileContent(keys, limits)


def case_clash(tenant: str, known: Mapping[str, str]) -> str | None:
    """Why ``tenant`` cannot join the tenants ``known`` (folded name -> spelling), or None: two names equal but for
    letter case would share one folder on a case-insensitive file system (macOS, Docker Desktop bind mounts)."""
    spelling = known.get(tenant.casefold())
    if spelling is None or spelling == tenant:
        return None
    return (
        f"tenant {tenant!r} differs from the tenant {spelling!r} of another key only in letter case (they would "
        f"share one folder on a case-insensitive file system): spell it {spelling!r}"
    )


def key_line(key: ApiKey) -> bytes:
    """The keys file line of ``key`` (newline included)."""
    record: dict[str, Any] = {"id": key.id, "tenant": key.tenant, "scopes": sorted(key.scopes), "sha256": key.sha256}
    if key.rate_limit is not None:
        record["rateLimit"] = {"perSecond": key.rate_limit.per_second, "burst": key.rate_limit.burst}
    return orjson.dumps(record) + b"\n"


class KeyRing:
    """The keys in force: which key a presented secret is."""

    __slots__ = ("_by_digest",)

    def __init__(self, keys: Iterable[ApiKey] = ()) -> None:
        self._by_digest: Mapping[str, ApiKey] = {key.sha256: key for key in keys}

    def __len__(self) -> int:
        return len(self._by_digest)

    def line_of(self, key: ApiKey) -> ApiKey | None:
        """The line now in force for ``key``'s digest: None once it was removed (its scopes and tenant may differ)."""
        return self._by_digest.get(key.sha256)

    def find(self, secret: str) -> ApiKey | None:
        digest = digest_of(secret)
        key = self._by_digest.get(digest)
        if key is None or not hmac.compare_digest(key.sha256, digest):
            return None
        return key
