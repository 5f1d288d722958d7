"""The files forklog serves to browsers itself (spec 11; no page it serves loads anything from another host).

- ``page/``: the session browser, plain ES modules and CSS (no build step), served at ``/ui/``.
- ``templates/``: the shared page and its "not found" page, which ``/ui/shared/{token}`` answers
  (:mod:`app.api.routes.shared_page`).
- ``vendor/``: the docs pages' Swagger UI and ReDoc bundles, served at ``/docs/assets/``; ``make vendor`` refreshes
  them from ``vendor/package-lock.json`` and ``vendor/VENDORED.json`` records their versions and digests.

Both are open routes (each mount's declaration, :class:`OpenFiles`): a page must load before it can ask for a key.
"""

from __future__ import annotations

import os
from pathlib import Path

from starlette.responses import Response
from starlette.routing import Mount
from starlette.staticfiles import PathLike, StaticFiles
from starlette.types import ASGIApp, Scope

from app.api.routing.declarations import RouteSpec

__all__ = [
    "DOCS_ASSETS",
    "PAGE_DIR",
    "PAGE_POLICY",
    "TEMPLATES_DIR",
    "UI_PATH",
    "VENDOR_DIR",
    "OpenFiles",
    "static_mounts",
]

PAGE_DIR = Path(__file__).parent / "page"
TEMPLATES_DIR = Path(__file__).parent / "templates"  # pages a route answers (the shared page), not served as files
VENDOR_DIR = Path(__file__).parent / "vendor"
UI_PATH = "/ui"
DOCS_ASSETS = "/docs/assets"

# The page runs only its own scripts and talks only to this service: a browser enforcing this policy refuses any
# other host even if a session's content tried to make it load one (messages are rendered as text, never as HTML).
PAGE_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


class PageFiles(StaticFiles):
    """The session browser's files, with the page's security headers; revalidated on every load (``ETag``), so an
    upgraded service is never shown with the previous version's modules."""

    def file_response(
        self, full_path: PathLike, stat_result: os.stat_result, scope: Scope, status_code: int = 200
    ) -> Response:
        response = super().file_response(full_path, stat_result, scope, status_code)
        response.headers["Cache-Control"] = "no-cache"
        response.headers["Content-Security-Policy"] = PAGE_POLICY
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        return response


class OpenFiles(Mount):
    """A folder of files anyone may load, declared as an open route."""

    def __init__(self, path: str, *, app: ASGIApp, name: str) -> None:
        super().__init__(path, app=app, name=name)
        self.spec = RouteSpec("GET", f"{self.path}/{{path}}", None, store=False)


def static_mounts() -> list[Mount]:
    """``/ui/`` (its ``index.html`` for the folder itself) and ``/docs/assets/``."""
    return [
        OpenFiles(UI_PATH, app=PageFiles(directory=PAGE_DIR, html=True), name="ui"),
        OpenFiles(DOCS_ASSETS, app=StaticFiles(directory=VENDOR_DIR), name="docs_assets"),
    ]
