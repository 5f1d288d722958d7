"""The API's browsable pages: Swagger UI at ``/docs`` and ReDoc at ``/redoc``, with their scripts and styles served
by forklog itself (``/docs/assets/``, :mod:`app.api.ui`), so they work on a machine with no way out."""

from __future__ import annotations

from fastapi import Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import JSONResponse, Response

from app.api.routing.calling import new_router
from app.api.routing.declarations import RouteSpec
from app.api.ui import DOCS_ASSETS

__all__ = ["router"]

OPENAPI_URL = "/openapi.json"
OAUTH2_REDIRECT_URL = "/docs/oauth2-redirect"
FAVICON_URL = f"{DOCS_ASSETS}/favicon-32x32.png"
# Swagger UI would ask an online validator about the document and show its badge: nothing leaves this machine.
SWAGGER_PARAMETERS = {"validatorUrl": None}
# The pages may load only what this service serves (ReDoc's bundle, for one, shows a logo from its vendor's CDN):
# their own inline start-up script and styles, images inline or from here, ReDoc's search worker from a blob.
DOCS_POLICY = (
    "default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; worker-src 'self' blob:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


def _local_only(page: Response) -> Response:
    page.headers["Content-Security-Policy"] = DOCS_POLICY
    return page


router = new_router()


def _page(path: str) -> RouteSpec:
    """An open route outside the document: a page must load before it can ask for a key."""
    return RouteSpec("GET", path, None, store=False)


# The document is served by this route rather than by FastAPI's own, so that it is declared like every other.
@router.declare(_page(OPENAPI_URL), include_in_schema=False)
async def openapi(request: Request) -> Response:
    return JSONResponse(request.app.openapi())


@router.declare(_page("/docs"), include_in_schema=False)
async def swagger_ui_html(request: Request) -> Response:
    return _local_only(
        get_swagger_ui_html(
            openapi_url=OPENAPI_URL,
            title="forklog - Swagger UI",
            swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
            swagger_favicon_url=FAVICON_URL,
            oauth2_redirect_url=OAUTH2_REDIRECT_URL,
            swagger_ui_parameters=SWAGGER_PARAMETERS,
        )
    )


@router.declare(_page(OAUTH2_REDIRECT_URL), include_in_schema=False)
async def swagger_ui_redirect(request: Request) -> Response:
    return get_swagger_ui_oauth2_redirect_html()


@router.declare(_page("/redoc"), include_in_schema=False)
async def redoc_html(request: Request) -> Response:
    return _local_only(
        get_redoc_html(
            openapi_url=OPENAPI_URL,
            title="forklog - ReDoc",
            redoc_js_url=f"{DOCS_ASSETS}/redoc.standalone.js",
            redoc_favicon_url=FAVICON_URL,
            with_google_fonts=False,
        )
    )
