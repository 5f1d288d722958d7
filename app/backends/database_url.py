"""What ``FORKLOG_DATABASE_URL`` names: one PostgreSQL server, or several as libpq writes them (spec 6, Failover).

``postgresql://user:password@db1:5432,db2:5432/forklog?target_session_attrs=read-write``: forklog writes, so it
only ever uses a server that takes writes (the primary). ``target_session_attrs`` may be ``read-write`` or
``primary``; a value that could pick a standby (``any``, ``prefer-standby``, ``standby``, ``read-only``) is refused.
With several hosts and no ``target_session_attrs``, forklog uses ``read-write`` (libpq's default, ``any``, would
write to whichever host answered first, a standby included).

It sits beside the seam rather than in the PostgreSQL backend: the settings check a URL with it, and the layers
above reach no backend's insides (import-linter holds them to it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from app.domain.errors import ConfigurationError

__all__ = ["DEFAULT_PORT", "DatabaseTarget", "InvalidDatabaseUrl", "redact", "standby_urls"]

DEFAULT_PORT = 5432
WRITABLE = ("read-write", "primary")
_HOST = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.]+\]|[^:\[\]]*)(?::(?P<port>[^:]*))?$")


class InvalidDatabaseUrl(ConfigurationError, ValueError):
    """The database URL cannot be used; the message says what to write instead."""


@dataclass(frozen=True, slots=True)
class DatabaseTarget:
    """The hosts of a database URL, in their order, and the server attribute a connection must have."""

    hosts: tuple[tuple[str, int], ...]
    target_session_attrs: str

    @classmethod
    def parse(cls, url: str) -> DatabaseTarget:
        """The target of ``url``; :class:`InvalidDatabaseUrl` for a malformed URL or a writer that could pick a
        standby."""
        if not url.startswith(("postgresql://", "postgres://")):
            raise InvalidDatabaseUrl("must be a postgresql:// URL (postgresql://user:password@host:5432/dbname)")
        try:
            parts = urlsplit(url)
            query = dict(parse_qsl(parts.query, keep_blank_values=True))
        except ValueError:
            raise InvalidDatabaseUrl("is not a valid URL (postgresql://user:password@host:5432/dbname)") from None
        hosts = tuple(_host(spec) for spec in parts.netloc.rpartition("@")[2].split(","))
        if len(hosts) > 1 and any(not host for host, _ in hosts):
            raise InvalidDatabaseUrl("names an empty host among several (postgresql://u:p@db1:5432,db2:5432/db)")
        attrs = query.get("target_session_attrs")
        if attrs is None:
            attrs = "read-write" if len(hosts) > 1 else "any"
        elif attrs not in WRITABLE:
            raise InvalidDatabaseUrl(
                f"has target_session_attrs={attrs}, which may connect to a standby; forklog writes, so it needs "
                "target_session_attrs=read-write (or primary)"
            )
        return cls(hosts, attrs)

    @property
    def several(self) -> bool:
        return len(self.hosts) > 1


def _host(spec: str) -> tuple[str, int]:
    found = _HOST.match(spec)
    if found is None:
        raise InvalidDatabaseUrl(f"has a host {spec!r} that is not host[:port]")
    port = found["port"]
    if port is None or port == "":
        return found["host"].strip("[]"), DEFAULT_PORT
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise InvalidDatabaseUrl(f"has a port {port!r} that is not a number from 1 to 65535")
    return found["host"].strip("[]"), int(port)


def standby_urls(url: str) -> tuple[str, ...]:
    """The one-host URLs of the hot standbys ``FORKLOG_READ_DATABASE_URL`` names (one host or several, as libpq
    writes them), in their order; ``target_session_attrs`` is left out (each standby is asked for itself)."""
    if not url.startswith(("postgresql://", "postgres://")):
        raise InvalidDatabaseUrl("must be a postgresql:// URL (postgresql://user:password@standby1:5432/dbname)")
    try:
        parts = urlsplit(url)
        query = parse_qsl(parts.query, keep_blank_values=True)
    except ValueError:
        raise InvalidDatabaseUrl("is not a valid URL (postgresql://user:password@standby1:5432/dbname)") from None
    userinfo, at, hosts = parts.netloc.rpartition("@")
    specs = hosts.split(",")
    if len(specs) > 1 and any(not host for host, _ in map(_host, specs)):
        raise InvalidDatabaseUrl("names an empty host among several (postgresql://u:p@db2:5432,db3:5432/db)")
    kept = urlencode([(name, value) for name, value in query if name != "target_session_attrs"])
    found = []
    for spec in specs:
        host, port = _host(spec)
        netloc = f"{userinfo}{at}{f'[{host}]' if ':' in host else host}:{port}"
        found.append(urlunsplit(parts._replace(netloc=netloc, query=kept)))
    return tuple(found)


def redact(url: str) -> str:
    """``url`` with its password replaced by ``***`` (for messages and logs); every host kept."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "(a malformed URL)"
    userinfo, at, hosts = parts.netloc.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    user = userinfo.partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{hosts}"))
