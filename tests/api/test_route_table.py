"""Each route is declared once (app/api/routing/declarations.py): its key scope and whether it is open come from that
declaration, and a request that names no route's path and method needs what the routes of its path need."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi import Request
from fastapi.responses import Response

from app.api.routing.calling import PlainRoute, json_response
from app.api.routing.declarations import RouteSpec
from app.domain.access import Scope
from tests.api.conftest import AppFactory, ClientFactory
from tests.api.helpers import assert_problem
from tests.api.test_access import Keys, write_keys

pytestmark = pytest.mark.files_only


@pytest.fixture
def keys(tmp_path: Path) -> Keys:
    return write_keys(tmp_path / "keys.jsonl")


async def _hello(request: Request) -> Response:
    return json_response(b'{"hello":true}')


def test_a_new_route_is_guarded_as_its_declaration_says(
    make_app: AppFactory, make_client: ClientFactory, keys: Keys
) -> None:
    app = make_app(keys_file=keys.path)
    for path, scope in (("/open-thing", None), ("/admin-thing", Scope.ADMIN)):
        route = PlainRoute(path, _hello, methods=["GET"])
        route.spec = RouteSpec("GET", path, scope, store=False)
        app.router.routes.insert(0, route)
    client = make_client(app)
    assert client.get("/open-thing").json() == {"hello": True}
    assert_problem(client.get("/admin-thing"), 401, "UNAUTHENTICATED")
    assert_problem(client.get("/admin-thing", headers=keys.auth("readwrite")), 403, "FORBIDDEN")
    assert client.get("/admin-thing", headers=keys.auth("admin")).json() == {"hello": True}


def test_a_request_for_no_route_needs_the_key_its_path_and_method_need(make_client: ClientFactory, keys: Keys) -> None:
    client = make_client(keys_file=keys.path)
    assert_problem(client.get("/nowhere"), 401, "UNAUTHENTICATED")
    assert_problem(client.get("/nowhere", headers=keys.auth("read")), 404, "NOT_FOUND")
    assert_problem(client.put("/nowhere", headers=keys.auth("read")), 403, "FORBIDDEN")
    # Another method on a session's path: the method's scope (write for a PUT), then 405.
    assert_problem(client.put("/sessions/x", headers=keys.auth("read")), 403, "FORBIDDEN")
    assert_problem(client.put("/sessions/x", headers=keys.auth("write")), 405, "METHOD_NOT_ALLOWED")
    # A path only served to admins stays theirs whatever the method.
    assert_problem(client.post("/metrics", headers=keys.auth("readwrite")), 403, "FORBIDDEN")
    assert_problem(client.post("/metrics", headers=keys.auth("admin")), 405, "METHOD_NOT_ALLOWED")
    # An open route's path stays open whatever the method; the session browser's folder redirects to its slash.
    assert_problem(client.post("/healthz"), 405, "METHOD_NOT_ALLOWED")
    moved = client.get("/ui", follow_redirects=False)
    assert moved.status_code in (307, 308) and moved.headers["location"].endswith("/ui/")
