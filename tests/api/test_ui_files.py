"""The files served to browsers (spec 11): the session browser at /ui/ with a policy that keeps it on this service,
and the docs pages' scripts at /docs/assets/, vendored from vendor/package-lock.json as VENDORED.json records."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from app.api.ui import PAGE_DIR, VENDOR_DIR

REPO = Path(__file__).resolve().parents[2]
LOCK = REPO / "vendor" / "package-lock.json"


def test_ui_serves_the_page_and_its_modules(client: TestClient) -> None:
    moved = client.get("/ui", follow_redirects=False)
    assert moved.status_code in (307, 308) and moved.headers["location"].endswith("/ui/")
    page = client.get("/ui/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert '<script type="module" src="js/main.js">' in page.text
    policy = page.headers["content-security-policy"]
    assert "default-src 'none'" in policy and "connect-src 'self'" in policy and "script-src 'self';" in policy
    assert page.headers["cache-control"] == "no-cache" and page.headers["x-content-type-options"] == "nosniff"
    script = client.get("/ui/js/main.js")
    assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")


def test_every_module_the_page_imports_is_served(client: TestClient) -> None:
    for module in sorted((PAGE_DIR / "js").glob("*.js")):
        for imported in re.findall(r'from "\./([\w.]+)"', module.read_text(encoding="utf-8")):
            assert (PAGE_DIR / "js" / imported).is_file(), f"{module.name} imports a missing {imported}"
        assert client.get(f"/ui/js/{module.name}").status_code == 200


def test_the_page_names_no_other_host() -> None:
    for path in sorted(PAGE_DIR.rglob("*")):
        if path.is_file():
            # (an SVG's namespace is a name, not a request)
            assert not re.search(r"https?://(?!www\.w3\.org/2000/svg\b)", path.read_text(encoding="utf-8")), path


@pytest.mark.parametrize("path", ["/ui/missing.js", "/docs/assets/missing.js"])
def test_a_missing_file_is_a_problem(client: TestClient, path: str) -> None:
    answer = client.get(path)
    assert answer.status_code == 404
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.json()["code"] == "NOT_FOUND"


@pytest.mark.parametrize("path", ["/docs", "/redoc"])
def test_the_docs_pages_load_only_local_assets(client: TestClient, path: str) -> None:
    page = client.get(path)
    assert page.status_code == 200
    sources = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert sources and all(source.startswith(("/docs/assets/", "/openapi.json")) for source in sources), sources
    assert "cdn." not in page.text and "fonts.googleapis" not in page.text
    assert "default-src 'none'" in page.headers["content-security-policy"]
    for source in sources:
        if source.startswith("/docs/assets/"):
            assert client.get(source).status_code == 200, source


def test_the_vendored_files_are_the_locked_versions() -> None:
    manifest = json.loads((VENDOR_DIR / "VENDORED.json").read_text(encoding="utf-8"))
    locked = json.loads(LOCK.read_text(encoding="utf-8"))["packages"]
    wanted = json.loads((REPO / "vendor" / "package.json").read_text(encoding="utf-8"))["dependencies"]
    for package, facts in manifest["packages"].items():
        entry = locked[f"node_modules/{package}"]
        assert (facts["version"], facts["integrity"]) == (entry["version"], entry["integrity"]), package
        assert wanted[package] == entry["version"], f"{package} is pinned exactly"
    served = {path.name for path in VENDOR_DIR.iterdir()} - {"VENDORED.json"}
    assert served == set(manifest["files"]), "make vendor wrote every file, and only those"
    for name, facts in manifest["files"].items():
        assert hashlib.sha256((VENDOR_DIR / name).read_bytes()).hexdigest() == facts["sha256"], f"{name} was edited"
