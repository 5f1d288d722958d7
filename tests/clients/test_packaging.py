"""Both libraries install the documented way (spec 15), and a user's program on each type-checks strictly and runs:
``pip install ./clients/python`` into a new virtual environment, then ``mypy --strict`` on a user's walk;
``npm install ./clients/typescript`` into a new project, then ``tsc --strict`` on a user's walk (which imports the
package's ES modules and their declarations)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.clients.npm_tools import cache_folder, copy_package, dev_modules, node, npm, step
from tests.e2e.server import REPO, Server

pytestmark = pytest.mark.e2e

USER = Path(__file__).parent / "user"
WALK_LINES = ("1. ", "2. ", "3. 409 NOT_AT_TURN_BOUNDARY 1", "4. ", "5. [] 1")


def test_pip_installs_the_python_library_and_a_user_s_walk_checks_and_runs(tmp_path: Path, server: Server) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    # httpx comes from the project's environment (no download); the library is built (setuptools, from PyPI or
    # pip's cache, in pip's isolated build environment) and installed into the new environment from its folder.
    (site / "forklog-test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    library = tmp_path / "python"
    shutil.copytree(REPO / "clients" / "python", library, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    step([str(python), "-m", "pip", "install", "--quiet", "--no-deps", str(library)], tmp_path)
    shutil.copy(USER / "walk.py", tmp_path / "walk.py")

    where = step([str(python), "-c", "import forklog_client; print(forklog_client.__file__)"], tmp_path)
    step(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--python-executable",
            str(python),
            "--cache-dir",
            str(cache_folder() / "mypy-user-walk"),  # kept between runs: httpx's types are checked once
            "walk.py",
        ],
        tmp_path,
    )
    output = step([str(python), "walk.py"], tmp_path, {"BASE": server.base, "WALK_ID": "py-user", "PYTHONPATH": ""})

    assert where.startswith(str(site)), where  # the installed copy, not the repository's folder
    assert (site / "forklog_client" / "py.typed").exists()
    assert [line[: len(start)] for line, start in zip(output.splitlines(), WALK_LINES, strict=True)] == list(
        WALK_LINES
    ), output


def test_npm_installs_the_typescript_library_and_a_user_s_walk_checks_and_runs(tmp_path: Path, server: Server) -> None:
    package = copy_package(tmp_path / "clients")
    project = tmp_path / "project"
    project.mkdir()
    (project / "package.json").write_text('{"private": true, "type": "module"}\n')
    # npm installs the package's own devDependencies (TypeScript) from the cache when its prepare script builds it.
    step([npm(), "install", "--no-audit", "--no-fund", "--loglevel=error", str(package)], project)
    shutil.copy(USER / "walk.ts", project)
    readme = re.search(r"```ts\n(.*?)```", (package / "README.md").read_text(), re.S)
    assert readme is not None
    (project / "readme.ts").write_text(readme.group(1))  # the package README's example: checked, not run
    tsconfig = json.loads((USER / "tsconfig.json").read_text())
    tsconfig["include"].append("readme.ts")
    (project / "tsconfig.json").write_text(json.dumps(tsconfig))

    step([node(), str(dev_modules() / "typescript" / "bin" / "tsc"), "-p", "."], project)
    output = step([node(), "dist/walk.js"], project, {"BASE": server.base, "WALK_ID": "ts-user"})

    assert (project / "node_modules" / "@forklog" / "client" / "dist" / "index.d.ts").exists()
    assert [line[:3] for line in output.splitlines()] == ["1. ", "2. ", "3. ", "4. ", "5. "], output
    assert "NOT_AT_TURN_BOUNDARY 1" in output
