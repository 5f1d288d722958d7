"""The session browser's fixtures: Debian's chromium driven by Playwright (never a downloaded browser), real
``python -m app`` servers, and tabs that record every request the page makes."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, Request, ViewportSize, expect, sync_playwright

from tests.e2e.server import Server
from tests.ui.api import Api

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
DESKTOP: ViewportSize = {"width": 1280, "height": 900}
PHONE: ViewportSize = {"width": 390, "height": 844}
WAIT_MS = 10_000  # every wait for the page; a test fails with what it waited for rather than hanging
# Schemes that never leave the page (ReDoc runs its search in a worker made from a blob).
LOCAL_SCHEMES = ("data", "blob", "about")

StartServer = Callable[..., Server]
Connect = Callable[..., Api]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "e2e: starts real server processes (deselect with -m 'not e2e')")


expect.set_options(timeout=WAIT_MS)


@pytest.fixture(scope="package")
def chromium() -> Iterator[Browser]:
    """One headless chromium for the package; skipped without /usr/bin/chromium, except on CI (.ci/run installs it)."""
    if not CHROMIUM.exists():
        reason = f"{CHROMIUM} not found (apt-get install chromium)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}: CI=true needs the browser tests")
        pytest.skip(reason)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="package")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the main views' screenshots go: under pytest's temporary folder (`make screenshots` copies them to
    docs/screenshots/, which no test writes)."""
    folder = tmp_path_factory.getbasetemp() / "screenshots"
    folder.mkdir(exist_ok=True)
    return folder


def _start(data_dir: Path, log: Path, *args: str) -> Server:
    return Server(data_dir, log, args=args).start()


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One keyless server for a module's tests (each names its own sessions)."""
    folder = tmp_path_factory.mktemp("server")
    server = _start(folder / "data", folder / "server.log")
    yield server
    server.kill()


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[StartServer]:
    """``start_server(*args)``: a server of the test's own (``args`` are more command-line flags)."""
    started: list[Server] = []

    def start(*args: str) -> Server:
        server = _start(tmp_path / f"data-{len(started)}", tmp_path / f"server-{len(started)}.log", *args)
        started.append(server)
        return server

    yield start
    for server in started:
        server.kill()


@pytest.fixture
def connect() -> Iterator[Connect]:
    """``connect(server, key=None)``: the other client (closed at the end of the test)."""
    clients: list[Api] = []

    def make(server: Server, key: str | None = None) -> Api:
        clients.append(Api(server, key))
        return clients[-1]

    yield make
    for client in clients:
        client.close()


@dataclass
class Tabs:
    """Opens pages in fresh browser contexts (a tab each: its own sessionStorage) and keeps what they did."""

    browser: Browser
    requests: list[Request] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    contexts: list[BrowserContext] = field(default_factory=list)

    def open(
        self,
        base: str,
        fragment: str = "#/",
        *,
        viewport: ViewportSize = DESKTOP,
        path: str = "/ui/",
        offline: bool = False,
        init_script: str | None = None,
    ) -> Page:
        """A new tab on ``base + path + fragment``; ``offline`` refuses every request that would leave this machine
        (it is still recorded, and the test fails on it)."""
        context = self.browser.new_context(viewport=viewport)
        context.set_default_timeout(WAIT_MS)
        context.on("request", lambda request: self.requests.append(request))
        if offline:
            context.route(lambda url: not is_local(url), lambda route: route.abort())
        if init_script is not None:
            context.add_init_script(init_script)
        self.contexts.append(context)
        return self.new_page(context, f"{base}{path}{fragment}")

    def new_page(self, context: BrowserContext, url: str) -> Page:
        """Another tab in the same browser profile (its own sessionStorage)."""
        page = context.new_page()
        page.on("pageerror", lambda error: self.errors.append(str(error)))
        # The page's own policy refusing something of its own would be a bug of the page (and reported only here).
        page.on(
            "console",
            lambda message: self.errors.append(message.text) if "Content Security Policy" in message.text else None,
        )
        page.goto(url)
        return page

    def foreign_requests(self) -> list[str]:
        return [request.url for request in self.requests if not is_local(request.url)]


def is_local(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in LOCAL_SCHEMES or parts.hostname == "127.0.0.1"


@pytest.fixture
def tabs(chromium: Browser) -> Iterator[Tabs]:
    """Browser tabs; at the end of the test no request has left 127.0.0.1 and no script error happened."""
    opened = Tabs(chromium)
    yield opened
    for context in opened.contexts:
        context.close()
    assert opened.requests, "the browser made no request at all"
    assert opened.foreign_requests() == [], "every request goes to the forklog on 127.0.0.1"
    assert opened.errors == [], "the page raised no uncaught error and broke no rule of its policy"
