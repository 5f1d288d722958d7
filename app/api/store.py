"""The store a service's settings name, opened before anything else of the service is built."""

from __future__ import annotations

from app.api.settings import Settings
from app.backends.base import Backend
from app.backends.open import OpenFor, open_store

__all__ = ["open_backend"]


def open_backend(settings: Settings) -> Backend:
    """The backend the settings name, as a service opens it (see :func:`~app.backends.open.open_store`)."""
    return open_store(settings.store, OpenFor.SERVE)
