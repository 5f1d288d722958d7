"""A look at the database before the service starts: a schema newer than this forklog's, or a connection pooler that
forklog cannot keep its rules through (:mod:`~app.backends.postgres.pooler`), stops the start at once.

The backend itself waits for an unreachable database (the port opens, ``/readyz`` says NOT_READY); only a database
that is reachable and too new is a reason not to start, and the command line says so before it serves.
"""

from __future__ import annotations

import asyncio

from app.backends.errors import StartRefused
from app.backends.postgres.pool import PoolSettings, connect, redact
from app.backends.postgres.pooler import behind_pooler, pooled_direct_url, pooling_of
from app.backends.postgres.schema import SCHEMA_VERSION, newer_schema, stored_version

__all__ = ["refusal_of"]


async def _refusal(url: str, settings: PoolSettings, direct_url: str | None) -> StartRefused | None:
    try:
        conn = await connect(url, settings)
    except Exception:
        return None  # not reachable now: the service starts and waits for it
    try:
        await pooling_of(conn, redact(url))
        found = await stored_version(conn)
    except StartRefused as refusal:
        return refusal
    except Exception:
        return None
    finally:
        await conn.close()
    if found > SCHEMA_VERSION:
        return newer_schema(found)
    return None if direct_url is None else await _direct_refusal(direct_url, settings)


async def _direct_refusal(direct_url: str, settings: PoolSettings) -> StartRefused | None:
    try:
        conn = await connect(direct_url, settings)
    except Exception:
        return None  # the service polls through the pooler until the direct URL answers
    try:
        pooled = await behind_pooler(conn)
    except Exception:
        return None
    finally:
        await conn.close()
    if not pooled:
        return None
    return pooled_direct_url(redact(direct_url))


def refusal_of(url: str, settings: PoolSettings | None = None, *, direct_url: str | None = None) -> StartRefused | None:
    """Why forklog must not start on the database at ``url`` (its schema is newer, or a pooler in front of it would
    break a rule), or None."""
    return asyncio.run(_refusal(url, settings or PoolSettings(connect_timeout=3.0), direct_url))
