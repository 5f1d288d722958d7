"""The TypeScript client (spec 15): its own tests (``node --test``, in clients/typescript/test/) against a real
server and through the fault proxy, after a strict build; and its types kept in step with the OpenAPI document."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.clients.npm_tools import PACKAGE, STEP_TIMEOUT, build, dev_modules, node, step
from tests.clients.proxy import FaultProxy
from tests.clients.test_python_errors import CODES, class_name
from tests.e2e.server import REPO, Server
from tests.e2e.test_generated_clients import TS_ESCAPES, code_of

USER = Path(__file__).parent / "user"
# The user's walk reads a field that only turn/start's data has, once the event is narrowed by its type.
NARROWED = 'if (event.type === "turn/start") turns.push(notAny(event.data.turn, "ok"));'

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield build(tmp_path_factory.mktemp("ts-client"))


@pytest.fixture(scope="module")
def module_proxy(server: Server) -> Iterator[FaultProxy]:
    running = FaultProxy(server.port).start()
    yield running
    running.stop()


@pytest.mark.parametrize("suite", ["retry.test.mjs", "client.test.mjs", "shares.test.mjs"])
def test_the_node_suite_passes(package: Path, server: Server, module_proxy: FaultProxy, suite: str) -> None:
    env = {"FORKLOG_SERVER": server.base, "FORKLOG_PROXY": module_proxy.base, "NODE_NO_WARNINGS": "1"}

    output = step([node(), "--test", "--test-reporter=tap", f"test/{suite}"], package, env, timeout=120)

    assert re.search(r"^# pass [1-9]", output, re.M) and re.search(r"^# fail 0$", output, re.M), output


@pytest.mark.parametrize("code", CODES)
def test_each_code_has_its_error_class_named_as_in_python(code: str) -> None:
    source = (PACKAGE / "src" / "errors.ts").read_text()

    assert f"export class {class_name(code)} extends ForklogError {{" in source
    assert f"  {code}: {class_name(code)},\n" in source


def test_the_types_are_generated_from_the_committed_document(tmp_path: Path) -> None:
    generated = tmp_path / "schema.ts"
    tool = dev_modules() / "openapi-typescript" / "bin" / "cli.js"

    step([node(), str(tool), str(REPO / "openapi" / "openapi.json"), "-o", str(generated)], tmp_path)

    assert generated.read_text() == (PACKAGE / "src" / "schema.ts").read_text(), (
        "clients/typescript/src/schema.ts is not the document's: run `npm run generate` in clients/typescript"
    )


def test_the_build_is_strict_and_emits_es_modules_with_declarations(package: Path) -> None:
    manifest = json.loads((package / "package.json").read_text())

    assert json.loads((package / "tsconfig.json").read_text())["compilerOptions"]["strict"] is True
    assert manifest["type"] == "module" and manifest["exports"]["."]["types"] == "./dist/index.d.ts"
    assert (package / "dist" / "index.d.ts").exists()
    assert re.search(
        r"^export \{ Forklog, Sessions, Shared \} from \"./client.js\";$",
        (package / "dist" / "index.js").read_text(),
        re.M,
    )


def test_node_modules_and_builds_stay_out_of_the_repository() -> None:
    ignored = (REPO / ".gitignore").read_text().splitlines()

    assert {"/clients/typescript/node_modules/", "/clients/typescript/dist/"} <= set(ignored)
    assert os.path.exists(PACKAGE / "package-lock.json")


def _typecheck(package: Path, folder: Path, source: str) -> subprocess.CompletedProcess[str]:
    """``tsc --strict`` on a user's program that imports the built package as ``@forklog/client``."""
    folder.mkdir()
    (folder / "package.json").write_text('{"private": true, "type": "module"}\n')  # ES modules: top-level await
    (folder / "walk.ts").write_text(source)
    tsconfig = json.loads((USER / "tsconfig.json").read_text())
    tsconfig["compilerOptions"] |= {
        "noEmit": True,
        "paths": {"@forklog/client": [str(package / "dist" / "index.d.ts")]},
    }
    (folder / "tsconfig.json").write_text(json.dumps(tsconfig))
    tsc = [node(), str(dev_modules() / "typescript" / "bin" / "tsc"), "-p", "."]
    return subprocess.run(tsc, cwd=folder, capture_output=True, text=True, timeout=STEP_TIMEOUT, check=False)


def test_an_event_narrows_by_its_type_without_a_cast_and_another_type_s_field_does_not_check(
    package: Path, tmp_path: Path
) -> None:
    walk = (USER / "walk.ts").read_text()
    # A member of the surface events only, and a data member turn/start's shape leaves open (so it is unknown).
    surface_member = walk.replace(NARROWED, NARROWED.replace("event.data.turn", "event.surfaceOp"))
    open_member = walk.replace(NARROWED, NARROWED.replace("event.data.turn", "event.data.step"))

    narrowed = _typecheck(package, tmp_path / "narrowed", walk)
    not_a_member = _typecheck(package, tmp_path / "surface-member", surface_member)
    not_a_number = _typecheck(package, tmp_path / "open-member", open_member)

    assert NARROWED in walk and TS_ESCAPES.findall(code_of(walk, "//")) == []
    assert narrowed.returncode == 0, narrowed.stdout
    assert "Property 'surfaceOp' does not exist on type" in not_a_member.stdout, not_a_member.stdout
    assert "Argument of type 'unknown' is not assignable to parameter of type 'number'" in not_a_number.stdout
