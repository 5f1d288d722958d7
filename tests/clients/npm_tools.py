"""The TypeScript client's npm tools: its committed lock installed once (``npm ci``) into a cache folder.

The folder is ``$FORKLOG_E2E_CACHE`` (else ``~/.cache/forklog-e2e``), named after the lock's hash, never inside
the repository. Without node or npm the tests that need them are skipped with the reason; under ``CI=true`` they
fail instead.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import NoReturn

import pytest

from tests.e2e.server import REPO

PACKAGE = REPO / "clients" / "typescript"
CI = os.environ.get("CI") == "true"
STEP_TIMEOUT = 300.0


def unavailable(reason: str) -> NoReturn:
    if CI:
        pytest.fail(f"{reason}; CI=true needs every client test", pytrace=False)
    pytest.skip(reason)


def node() -> str:
    found = shutil.which("node")
    if found is None or shutil.which("npm") is None:
        unavailable("node and npm are needed for the TypeScript client's tests (Debian: nodejs, npm)")
    return found


def npm() -> str:
    node()
    return shutil.which("npm") or "npm"


def step(command: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = STEP_TIMEOUT) -> str:
    done = subprocess.run(
        command,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"$ {' '.join(command)}  (in {cwd})\n{done.stdout}\n{done.stderr}", pytrace=False)
    return done.stdout


def cache_folder() -> Path:
    return Path(os.environ.get("FORKLOG_E2E_CACHE", Path.home() / ".cache" / "forklog-e2e"))


def dev_modules() -> Path:
    """``node_modules`` of clients/typescript's lock (TypeScript, openapi-typescript), installed once per lock."""
    lock = (PACKAGE / "package-lock.json").read_bytes()
    folder = cache_folder() / f"ts-client-{hashlib.sha256(lock).hexdigest()[:16]}"
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / ".lock").open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # one install, whatever runs beside this one
        done = folder / "node_modules" / ".forklog-installed"
        if not done.exists():
            shutil.copy(PACKAGE / "package.json", folder / "package.json")
            (folder / "package-lock.json").write_bytes(lock)
            step([npm(), "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"], folder)
            done.touch()
    return folder / "node_modules"


def copy_package(into: Path) -> Path:
    """The package's sources (no node_modules, no dist) in a folder of its own: builds never write to the repo."""
    target = into / "typescript"
    shutil.copytree(PACKAGE, target, ignore=shutil.ignore_patterns("node_modules", "dist"))
    return target


def build(into: Path) -> Path:
    """The package built (``tsc``, strict) in a copy, with the cached tools linked in as its node_modules."""
    package = copy_package(into)
    modules = dev_modules()
    (package / "node_modules").symlink_to(modules)
    step([node(), str(modules / "typescript" / "bin" / "tsc"), "-p", "tsconfig.json"], package)
    return package
