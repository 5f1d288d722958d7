"""The shared page (spec 18): ``GET /ui/shared/{token}``, a share's conversation read-only in the session browser's
style, for a reader with no key.

The page is the script ``page/js/shared_page.js`` reading the open ``/shared/{token}…`` routes; this route only
answers it, or the plain "not found" page for every token that leads to no share (one body, whatever the reason, as
``/shared/{token}`` answers one ``404 SHARE_NOT_FOUND``). Its answers send no ``Referer`` onwards
(``Referrer-Policy: no-referrer``: the token is in this page's URL), run only this service's own scripts (the page's
policy) and are never stored by a cache; the access log writes the path ``/ui/shared/…``
(:mod:`app.api.wire.share_paths`).
"""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import HTMLResponse, Response

from app.api.routing.calling import new_router, service_of
from app.api.routing.declarations import RouteSpec
from app.api.ui import PAGE_POLICY, TEMPLATES_DIR
from app.service.shares import ShareNotFound

__all__ = ["SHARED_PAGE", "router"]

SHARED_PAGE = RouteSpec("GET", "/ui/shared/{token}", None, tag="sharing")
# What the page is told of its share, in a meta element (the policy runs no inline script): it follows a live share.
_MODE = "{{share}}"
_PAGE = (TEMPLATES_DIR / "shared.html").read_text(encoding="utf-8")
_MISSING = (TEMPLATES_DIR / "shared_missing.html").read_text(encoding="utf-8")
_HEADERS = {
    "Content-Security-Policy": PAGE_POLICY,
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
    "X-Robots-Tag": "noindex, nofollow",
}

router = new_router()


@router.declare(SHARED_PAGE, include_in_schema=False)
async def shared_page(request: Request) -> Response:
    try:
        view = await service_of(request).shares.open(request.path_params["token"])
    except ShareNotFound:
        return HTMLResponse(_MISSING, status_code=404, headers=_HEADERS)
    mode = "live" if view.share.up_to is None else "frozen"
    return HTMLResponse(_PAGE.replace(_MODE, mode), headers=_HEADERS)
