"""Clients generated from the committed openapi/openapi.json do the README's walk without a cast (spec 5.1).

Five generators, each with its default flags (datamodel-code-generator adds ``--use-annotated``, which mypy needs,
and openapi-generator ``withoutRuntimeChecks``, whose checks cannot nest the event unions):
openapi-typescript (types for openapi-fetch), @hey-api/openapi-ts, openapi-generator's typescript-fetch (its jar,
from the PyPI package openapi-generator-cli, on java), openapi-python-client and datamodel-code-generator. For each,
the client is generated into a temporary folder, the walk program of ``tests/e2e/generators/<tool>/`` is type-checked
(``tsc`` strict, TypeScript 7's native compiler; ``mypy --strict``, and ``disallow_any_expr`` on the Python walks) and
then run against a real ``python -m app``. The walks hold no cast and no ``any``: a TypeScript value that is ``any``
fails ``notAny``, a Python one fails mypy. ``redocly lint`` (its recommended rules) must report no error.

The npm tools are the ones ``tests/e2e/generators/package-lock.json`` pins, installed by ``npm ci`` into a cache
folder (``$FORKLOG_E2E_CACHE``, else ``~/.cache/forklog-e2e``) named after the lock's hash. Without node, npm or
java the tests that need them are skipped, with the reason; under ``CI=true`` they fail instead. The generators run
in parallel, while the first test waits.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest

from tests.e2e.server import REPO, Server

pytestmark = pytest.mark.e2e

COMMITTED = REPO / "openapi" / "openapi.json"
WALKS = Path(__file__).parent / "generators"
BIN = Path(sys.executable).parent
CI = os.environ.get("CI") == "true"
STEP_TIMEOUT = 300.0
# What a walk prints at its last steps: the mid-turn fork's problem, then the replace read back.
WALK_ENDS = re.compile(
    r"^5b\. (409 )?NOT_AT_TURN_BOUNDARY turn/start 2 5$.*^6\. (201 )?replace 1 user/message append$", re.M | re.S
)


class BuildFailed(Exception):
    """A generator or a type checker refused: the message holds its output."""


@dataclass(frozen=True, slots=True)
class Build:
    """A generated client with its walk, checked: ``run`` runs the walk in ``work``; or why there is none."""

    work: Path | None = None
    run: tuple[str, ...] = ()
    missing: str | None = None  # a tool this machine lacks
    failure: str | None = None  # what refused


def unavailable(reason: str) -> NoReturn:
    """Skip for want of a tool, except on CI, where every generator test must run."""
    if CI:
        pytest.fail(f"{reason}; CI=true needs every generator test", pytrace=False)
    pytest.skip(reason)


def step(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        command,
        cwd=cwd,
        env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", **(env or {})},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT,
        check=False,
    )
    if done.returncode != 0:
        raise BuildFailed(f"$ {' '.join(command)}  (in {cwd})\n{done.stdout}\n{done.stderr}")
    return done.stdout


# -- the tools ---------------------------------------------------------------------------------------------------------


def npm_tools() -> Path | str:
    """``node_modules`` of the committed lock, installed once per lock into the cache; or why it cannot be."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        return "node and npm are needed for the TypeScript generators and redocly (Debian: nodejs, npm)"
    lock = (WALKS / "package-lock.json").read_bytes()
    cache = Path(os.environ.get("FORKLOG_E2E_CACHE", Path.home() / ".cache" / "forklog-e2e"))
    folder = cache / f"npm-{hashlib.sha256(lock).hexdigest()[:16]}"
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / ".lock").open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # one install, whatever runs beside this one
        done = folder / "node_modules" / ".forklog-installed"
        if not done.exists():
            shutil.copy(WALKS / "package.json", folder / "package.json")
            (folder / "package-lock.json").write_bytes(lock)
            step([npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"], folder)
            done.touch()
    return folder / "node_modules"


def generator_jar() -> Path | str:
    java = shutil.which("java")
    if java is None:
        return "java is needed for openapi-generator (Debian: default-jre-headless)"
    found = importlib.util.find_spec("openapi_generator_cli")
    if found is None or found.origin is None:
        pytest.fail("openapi-generator-cli is missing: install the test extras (pip install -e '.[test]')")
    return Path(found.origin).parent / "openapi-generator.jar"


def python_tool(name: str) -> str:
    found = BIN / name
    if not found.exists():
        pytest.fail(f"{name} is missing: install the test extras (pip install -e '.[test]')")
    return str(found)


# -- one build per generator -------------------------------------------------------------------------------------------


def _typescript(tool: str, work: Path, modules: Path, generate: list[str]) -> Build:
    shutil.copy(WALKS / tool / "walk.ts", work)
    shutil.copy(WALKS / tool / "tsconfig.json", work)
    (work / "package.json").write_text('{"private": true}\n')  # CommonJS, as tsconfig's nodenext reads it
    (work / "node_modules").symlink_to(modules)
    step(generate, work)
    step([str(modules / "typescript-native" / "bin" / "tsc"), "-p", "."], work)  # strict; emits only if clean
    return Build(work, (shutil.which("node") or "node", "dist/walk.js"))


def build_openapi_typescript(work: Path, modules: Path) -> Build:
    generate = [str(modules / ".bin" / "openapi-typescript"), str(COMMITTED), "-o", "gen/schema.d.ts"]
    return _typescript("ots", work, modules, generate)


def build_hey_api(work: Path, modules: Path) -> Build:
    return _typescript(
        "hey", work, modules, [str(modules / ".bin" / "openapi-ts"), "-i", str(COMMITTED), "-o", "gen/client"]
    )


def build_openapi_generator(work: Path, modules: Path, jar: Path) -> Build:
    java = shutil.which("java") or "java"
    # Its runtime checks (FromJSON, instanceOf) cannot nest a oneOf in a oneOf, which the event unions do (a core
    # event discriminated on type, or any other type): they import an instanceOf the inner union never gets.
    checks = "--additional-properties=withoutRuntimeChecks=true"
    generate = [java, "-jar", str(jar), "generate", "-i", str(COMMITTED), "-g", "typescript-fetch", "-o", "gen", checks]
    return _typescript("oag", work, modules, generate)


def _python(tool: str, work: Path, generate: list[str], checked: list[str]) -> Build:
    shutil.copy(WALKS / tool / "walk.py", work)
    shutil.copy(WALKS / tool / "mypy.ini", work)
    step(generate, work)
    step([python_tool("mypy"), "--config-file", "mypy.ini", "--cache-dir", ".mypy_cache", "walk.py", *checked], work)
    return Build(work, (sys.executable, "walk.py"))


def build_openapi_python_client(work: Path) -> Build:
    generate = [python_tool("openapi-python-client"), "generate", "--path", str(COMMITTED), "--meta", "none"]
    return _python("opc", work, generate, ["forklog_client"])


def build_datamodel_code_generator(work: Path) -> Build:
    generate = [python_tool("datamodel-codegen"), "--input", str(COMMITTED), "--input-file-type", "openapi"]
    return _python("dcg", work, [*generate, "--output", "models.py", "--use-annotated"], ["models.py"])


def lint(modules: Path) -> Build:
    """``redocly lint`` with its recommended rules: the run's command prints the totals as JSON."""
    command = (str(modules / ".bin" / "redocly"), "lint", str(COMMITTED), "--format=json")
    return Build(REPO, command)


GENERATORS = (
    "openapi-typescript",
    "hey-api",
    "openapi-generator",
    "openapi-python-client",
    "datamodel-code-generator",
)


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Future[Build]]]:
    """Every generator's build, started at once (in parallel); each test waits for its own."""
    modules, jar = npm_tools(), generator_jar()
    jobs: dict[str, Callable[[], Build]] = {
        "openapi-python-client": lambda: build_openapi_python_client(tmp_path_factory.mktemp("opc")),
        "datamodel-code-generator": lambda: build_datamodel_code_generator(tmp_path_factory.mktemp("dcg")),
    }
    if isinstance(modules, Path):
        node_modules = modules
        jobs["openapi-typescript"] = lambda: build_openapi_typescript(tmp_path_factory.mktemp("ots"), node_modules)
        jobs["hey-api"] = lambda: build_hey_api(tmp_path_factory.mktemp("hey"), node_modules)
        jobs["redocly"] = lambda: lint(node_modules)
        if isinstance(jar, Path):
            generator = jar
            work = tmp_path_factory.mktemp("oag")
            jobs["openapi-generator"] = lambda: build_openapi_generator(work, node_modules, generator)

    def guarded(job: Callable[[], Build]) -> Build:
        try:
            return job()
        except BuildFailed as refused:
            return Build(failure=str(refused))

    lacking = {name: modules for name in ("openapi-typescript", "hey-api", "openapi-generator", "redocly")}
    if isinstance(jar, str):
        lacking["openapi-generator"] = jar if isinstance(modules, Path) else f"{jar}; {modules}"
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        futures = {name: pool.submit(guarded, job) for name, job in jobs.items()}
        for name, reason in lacking.items():
            if name not in futures and isinstance(reason, str):
                futures[name] = Future()
                futures[name].set_result(Build(missing=reason))
        yield futures


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server for every walk (each uses its own session ids)."""
    root = tmp_path_factory.mktemp("server")
    running = Server(root / "data", root / "server.log").start()
    yield running
    running.kill()


def _ready(builds: dict[str, Future[Build]], name: str) -> Build:
    build = builds[name].result()
    if build.missing is not None:
        unavailable(build.missing)
    if build.failure is not None:
        pytest.fail(f"{name}: the generated client or its walk does not check:\n{build.failure}", pytrace=False)
    return build


@pytest.mark.parametrize("name", GENERATORS)
def test_a_generated_client_does_the_walk(builds: dict[str, Future[Build]], server: Server, name: str) -> None:
    build = _ready(builds, name)
    assert build.work is not None

    done = subprocess.run(
        build.run,
        cwd=build.work,
        env={**os.environ, "BASE": server.base, "WALK_ID": f"walk-{name}"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 0, f"the {name} walk failed:\n{done.stdout}\n{done.stderr}\n{server.output()[-3000:]}"
    assert done.stdout.startswith("1. "), done.stdout
    assert WALK_ENDS.search(done.stdout), done.stdout


def test_redocly_lint_reports_no_error(builds: dict[str, Future[Build]]) -> None:
    build = _ready(builds, "redocly")

    output = step(list(build.run), REPO, {"REDOCLY_TELEMETRY": "off", "REDOCLY_SUPPRESS_UPDATE_NOTICE": "true"})

    report = json.loads(output)
    errors = [problem for problem in report["problems"] if problem["severity"] == "error"]
    on_events = [problem for problem in report["problems"] if "Event" in json.dumps(problem.get("location", []))]
    assert report["totals"]["errors"] == 0, json.dumps(errors, indent=1)
    assert on_events == [], json.dumps(on_events, indent=1)  # not even a warning: the event unions are exclusive


# A cast or an `any` would make a walk's types prove nothing: none is written (string literals and comments aside).
TS_ESCAPES = re.compile(r"\bas\s+(?!const\b)[A-Za-z{(\[]|\bany\b|(?:[=(,:]|return)\s*<\s*[A-Z]\w*\s*>")
PY_ESCAPES = re.compile(r"\bcast\(|\bAny\b|type:\s*ignore")


def code_of(source: str, comment: str) -> str:
    without_strings = re.sub(r'"(?:\\.|[^"\\])*"|`(?:\\.|[^`\\])*`', '""', source)
    return "\n".join(line.split(comment, 1)[0] for line in without_strings.splitlines())


@pytest.mark.parametrize("walk", sorted(WALKS.glob("*/walk.*")), ids=lambda path: path.parent.name)
def test_a_walk_holds_no_cast_and_no_any(walk: Path) -> None:
    if walk.suffix == ".ts":
        found = TS_ESCAPES.findall(code_of(walk.read_text(), "//"))
    else:
        found = PY_ESCAPES.findall(code_of(re.sub(r'"""(?:.|\n)*?"""', '""', walk.read_text()), "#"))

    assert found == []
