"""The store a service's settings name, opened before anything else of the service is built."""

from __future__ import annotations

from app.api.settings import Settings
from app.backends.base import Backend
from app.backends.open import open_named_backend

__all__ = ["open_backend"]


def open_backend(settings: Settings) -> Backend:
    """The backend the settings name (see :func:`~app.backends.open.open_named_backend`)."""
    database_url = settings.database_url.get_secret_value() if settings.database_url is not None else None
    return open_named_backend(
        settings.backend, data_dir=settings.data_dir, database_url=database_url, fsync=settings.fsync
    )
