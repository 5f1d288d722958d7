"""A look at the database before the service starts: a schema newer than this forklog's stops the start at once.

The backend itself waits for an unreachable database (the port opens, ``/readyz`` says NOT_READY); only a database
that is reachable and too new is a reason not to start, and the command line says so before it serves.
"""

from __future__ import annotations

import asyncio

from app.backends.errors import StartRefused
from app.backends.postgres.pool import PoolSettings, connect
from app.backends.postgres.schema import SCHEMA_VERSION, newer_schema, stored_version

__all__ = ["refusal_of"]


async def _refusal(url: str, settings: PoolSettings) -> StartRefused | None:
    try:
        conn = await connect(url, settings)
    except Exception:
        return None  # not reachable now: the service starts and waits for it
    try:
        found = await stored_version(conn)
    except Exception:
        return None
    finally:
        await conn.close()
    return newer_schema(found) if found > SCHEMA_VERSION else None


def refusal_of(url: str, settings: PoolSettings | None = None) -> StartRefused | None:
    """Why forklog must not start on the database at ``url`` (its schema is newer), or None."""
    return asyncio.run(_refusal(url, settings or PoolSettings(connect_timeout=3.0)))
