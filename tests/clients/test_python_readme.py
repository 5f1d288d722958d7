"""clients/python/README.md's walk (the project README's curl walk, on the client) runs as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.e2e.server import REPO, Server

pytestmark = pytest.mark.e2e

README = REPO / "clients" / "python" / "README.md"


def test_the_readme_walk_runs_and_prints_what_its_comments_say(server: Server) -> None:
    block = re.search(r"<!-- python-walk -->\n```python\n(.*?)```", README.read_text(), re.S)
    assert block is not None

    done = subprocess.run(
        [sys.executable, "-c", block.group(1)],
        env={**os.environ, "BASE": server.base, "PYTHONPATH": str(REPO / "clients" / "python")},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "1. demo /work 0",
        "2. [0, 1, 2, 3, 4, 5] 5",
        "3. demo 6",
        "4. ['user', 'assistant'] 6",
        "5. 409 NOT_AT_TURN_BOUNDARY 2 5",
        "5b. 6",
        "6. 7 7",
        "7. 6 turn/start",
        "7. 7 turn/end",
    ]
