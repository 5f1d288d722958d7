"""The PostgreSQL backend (spec section 6): any number of forklog replicas on one database.

Its names are imported when first used: a service on files never imports the driver (the settings check a database
URL with :mod:`app.backends.database_url`, outside this package).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.backends.postgres.backend import PostgresBackend
    from app.backends.postgres.pool import PoolSettings, redact
    from app.backends.postgres.probe import refusal_of

__all__ = ["PoolSettings", "PostgresBackend", "redact", "refusal_of"]


def __getattr__(name: str) -> Any:
    if name == "PostgresBackend":
        from app.backends.postgres.backend import PostgresBackend

        return PostgresBackend
    if name in ("PoolSettings", "redact"):
        from app.backends.postgres import pool

        return getattr(pool, name)
    if name == "refusal_of":
        from app.backends.postgres.probe import refusal_of

        return refusal_of
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
