"""DSH's published store under node: installed by npm into a temporary folder (never into the repository).

The folder is ``$BENCH_DSH_DIR`` or ``<tmp>/forklog-bench-dsh-<hash of bench/node/package.json>``, reused by later
runs while its install is complete. Without node or npm (or when the install fails) the DSH rows say "skipped".
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import orjson

from bench.util import log

NODE_DIR = Path(__file__).resolve().parent / "node"
PACKAGE_JSON = NODE_DIR / "package.json"
SCRIPT = NODE_DIR / "dsh_fork.mjs"
MARKER = Path("node_modules") / "@deepseek-ai" / "dsh-session" / "package.json"


def install_dir() -> Path:
    configured = os.environ.get("BENCH_DSH_DIR")
    if configured:
        return Path(configured)
    digest = hashlib.sha256(PACKAGE_JSON.read_bytes()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"forklog-bench-dsh-{digest}"


def ensure_installed() -> Path | str:
    """The folder holding the installed store, or why the DSH rows are skipped."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        return "skipped: node/npm not found"
    folder = install_dir()
    if (folder / MARKER).exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(PACKAGE_JSON, folder / "package.json")
    log(f"dsh: npm install into {folder} (once; reused by later runs)")
    result = subprocess.run(
        ["npm", "install", "--legacy-peer-deps", "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=folder,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0 or not (folder / MARKER).exists():
        log(f"dsh: npm install failed:\n{result.stderr[-2000:]}")
        return "skipped: npm install of the DSH store failed"
    return folder


def time_fork(folder: Path, session_file: Path, runs: int) -> dict[str, Any] | str:
    """``{events, load_ms, create_ms, fork_ms: [...]}`` from node, or why it could not run."""
    heap = os.environ.get("BENCH_NODE_HEAP_MB", "16384")
    argv = ["node", f"--max-old-space-size={heap}", str(SCRIPT), str(folder), str(session_file), str(runs)]
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        log(f"dsh: node failed on {session_file.name}:\n{result.stderr[-2000:]}")
        return "skipped: node failed (see the log above)"
    parsed: dict[str, Any] = orjson.loads(result.stdout.strip().splitlines()[-1])
    return parsed
