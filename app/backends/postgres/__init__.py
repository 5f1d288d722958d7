"""The PostgreSQL backend (spec section 6): any number of forklog replicas on one database."""

from app.backends.postgres.backend import PostgresBackend
from app.backends.postgres.pool import PoolSettings, redact
from app.backends.postgres.probe import refusal_of

__all__ = ["PoolSettings", "PostgresBackend", "redact", "refusal_of"]
