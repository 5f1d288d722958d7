"""A store held open for the length of a command's work, and closed after it whatever happens."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TypeVar

from app.backends.base import Reader

__all__ = ["opened"]

Store = TypeVar("Store", bound=Reader)


@asynccontextmanager
async def opened(store: Store) -> AsyncIterator[Store]:
    """``store``, opened; closed on the way out (also when its open failed half-way)."""
    try:
        await store.open()
        yield store
    finally:
        await store.close()
