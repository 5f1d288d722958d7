"""What a tenant holds in a backend that keeps every session in this process's memory (memory, files): its live
sessions and their bytes (spec 12's ``bytes``: each log as ``export`` writes it, header line and event lines)."""

from __future__ import annotations

from app.backends.base import Usage
from app.backends.catalog import Catalog
from app.backends.files.codec import encode_header
from app.domain.session import SessionKey

__all__ = ["catalog_log_bytes", "catalog_usage"]

# Sessions are summed in pages of this many (a page is a list the catalog makes).
PAGE = 10_000


def catalog_usage(catalog: Catalog, tenant: str) -> Usage:
    sessions = size = 0
    after: tuple[int, str] | None = None
    while True:
        page = catalog.page(tenant, parent=None, after=after, limit=PAGE)
        for live in page:
            size += len(encode_header(live.header)) + live.body_bytes()
        sessions += len(page)
        if len(page) < PAGE:
            return Usage(sessions, size)
        after = page[-1].order_key


def catalog_log_bytes(catalog: Catalog, key: SessionKey, count: int) -> int:
    live = catalog.live(key)
    return live.log.offset(min(count, len(live.log))) if live is not None else 0
