"""Static facts of the container files (no Docker engine is needed), and their healthcheck run against a real server.

The image itself is not built here; these checks keep the Dockerfile and compose file honest about what the README
says of them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.api.ui import PAGE_DIR, VENDOR_DIR
from tests.e2e.server import REPO, Server, free_port, run_app

pytestmark = pytest.mark.e2e


def instructions() -> list[tuple[str, str]]:
    """The Dockerfile's instructions as (KEYWORD, arguments), continuation lines joined, comments dropped."""
    text = (REPO / "Dockerfile").read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    found = []
    for line in joined.splitlines():
        if line.strip():
            keyword, _, arguments = line.strip().partition(" ")
            found.append((keyword.upper(), " ".join(arguments.split())))
    return found


def arguments(keyword: str) -> list[str]:
    return [args for key, args in instructions() if key == keyword]


def healthcheck_command() -> list[str]:
    (healthcheck,) = arguments("HEALTHCHECK")
    command: list[str] = json.loads(healthcheck.partition("CMD ")[2])
    return command


def env() -> dict[str, str]:
    values = {}
    for args in arguments("ENV"):
        values.update(dict(pair.split("=", 1) for pair in args.split()))
    return values


def test_the_image_is_python_3_11_slim_with_the_project_installed() -> None:
    assert arguments("FROM") == ["python:3.11-slim"]
    copied = " ".join(arguments("COPY"))
    assert "pyproject.toml" in copied
    assert "app" in copied.split()
    assert any(re.search(r"\bpip install\b", args) for args in arguments("RUN"))
    assert json.loads(arguments("CMD")[-1]) == ["python", "-m", "app"]


def test_the_service_runs_as_a_non_root_user() -> None:
    users = arguments("USER")
    assert users, "the Dockerfile must switch to a non-root USER"
    uid = users[-1].split(":")[0]
    assert uid not in ("root", "0")
    assert any(f"--uid {uid}" in args for args in arguments("RUN")), "the USER's uid is created with useradd"


def test_the_data_directory_is_a_volume_and_the_service_listens_on_all_addresses() -> None:
    assert env()["FORKLOG_DATA_DIR"] == "/data"
    assert env()["FORKLOG_HOST"] == "0.0.0.0"
    assert any("/data" in args for args in arguments("VOLUME"))
    assert any("chown" in args and "/data" in args for args in arguments("RUN")), "the non-root user owns /data"
    assert "8000" in arguments("EXPOSE")


def test_the_healthcheck_asks_healthz_without_curl() -> None:
    command = healthcheck_command()
    assert command[:2] == ["python", "-c"]
    assert "/healthz" in command[2]
    assert "curl" not in " ".join(command)


def run_healthcheck(port: int) -> subprocess.CompletedProcess[str]:
    _, flag, code = healthcheck_command()
    return subprocess.run(
        [sys.executable, flag, code],
        env={**os.environ, "FORKLOG_PORT": str(port)},
        capture_output=True,
        text=True,
        timeout=15,
        check=False,
    )


def test_the_healthcheck_command_passes_on_a_live_server_and_fails_without_one(server: Server) -> None:
    assert run_healthcheck(server.port).returncode == 0
    assert run_healthcheck(free_port()).returncode != 0


def test_the_build_context_holds_what_the_dockerfile_copies_and_nothing_local() -> None:
    ignored = {
        line.strip()
        for line in (REPO / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    }
    for needed in ("pyproject.toml", "README.md", "app"):
        assert (REPO / needed).exists()
        assert needed not in ignored
    assert {".git", ".venv", "data"} <= ignored


def compose() -> Any:
    yaml = pytest.importorskip("yaml", reason="PyYAML reads docker-compose.yml")
    return yaml.safe_load((REPO / "docker-compose.yml").read_text(encoding="utf-8"))


def default_services(document: Any) -> dict[str, Any]:
    """The services ``docker compose up`` starts (those in no profile)."""
    return {name: service for name, service in document["services"].items() if not service.get("profiles")}


def test_compose_builds_the_image_publishes_8000_and_keeps_data_in_a_named_volume() -> None:
    document = compose()
    (service,) = default_services(document).values()
    assert service["build"] == "."
    assert "8000:8000" in service["ports"]
    mounts = [mount.split(":") for mount in service["volumes"]]
    named = [source for source, target, *_ in mounts if target == "/data"]
    assert named, "a volume is mounted at /data"
    assert named[0] in document["volumes"], "the /data volume is a named volume declared at the top level"


def image_environment(**changes: str) -> dict[str, str]:
    """This machine's environment with the image's FORKLOG_* settings (``changes`` on top)."""
    kept = {name: value for name, value in os.environ.items() if not name.startswith("FORKLOG_")}
    return {**kept, **env(), **changes}


def test_the_image_needs_a_keys_file_and_starts_with_one(tmp_path: Path) -> None:
    """The image listens on every address: without its keys file it refuses to start, saying how to make one; with
    a key made by `keys new` it serves, and only to that key."""
    assert "FORKLOG_ALLOW_UNAUTHENTICATED" not in env()
    data, port = str(tmp_path / "data"), str(free_port())
    missing = subprocess.run(
        [sys.executable, "-m", "app"],
        cwd=REPO,
        env=image_environment(FORKLOG_DATA_DIR=data, FORKLOG_PORT=port, FORKLOG_KEYS_FILE=str(tmp_path / "absent")),
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert missing.returncode != 0 and "keys new" in missing.stderr
    keys = tmp_path / "keys.jsonl"
    made = run_app("keys", "new", "--tenant", "default", "--scope", "read", "--keys-file", str(keys))
    key = made.stdout.strip()
    server = Server(tmp_path / "data", tmp_path / "server.log", args=("--host", "0.0.0.0", "--keys-file", str(keys)))
    server.start()
    try:
        assert server.get("/sessions").status_code == 401
        answer = httpx.get(f"{server.base}/sessions", headers={"Authorization": f"Bearer {key}"}, timeout=10)
        assert answer.status_code == 200
    finally:
        server.stop()


def test_compose_mounts_the_keys_file_as_a_secret_where_the_image_reads_it() -> None:
    document = compose()
    forklogs = [service for service in document["services"].values() if service.get("build") == "."]
    assert len(forklogs) == 4, "the service, the two replicas of the postgres profile, and the ha profile's"
    for service in forklogs:
        (secret,) = service["secrets"]
        assert env()["FORKLOG_KEYS_FILE"] == f"/run/secrets/{secret}"
        assert document["secrets"][secret] == {"file": "./keys.jsonl"}
        assert "FORKLOG_ALLOW_UNAUTHENTICATED" not in service.get("environment", {})
    ignored = (REPO / ".gitignore").read_text() + (REPO / ".dockerignore").read_text()
    assert "keys.jsonl" in ignored, "a keys file is never committed nor sent to a build"


def test_the_postgres_profile_runs_two_replicas_on_postgresql_behind_one_proxy_port() -> None:
    document = compose()
    profiled = {
        name: service for name, service in document["services"].items() if "postgres" in service.get("profiles", [])
    }
    database = next(service for service in profiled.values() if str(service.get("image", "")).startswith("postgres:"))
    assert int(database["image"].split(":")[1].split("-")[0]) >= 15
    replicas = [service for service in profiled.values() if "FORKLOG_DATABASE_URL" in service.get("environment", {})]
    assert len(replicas) == 2
    for replica in replicas:
        assert replica["build"] == "."
        assert replica["environment"]["FORKLOG_DATABASE_URL"].startswith("postgresql://")
        assert "ports" not in replica, "replicas are reached through the proxy only"
    (proxy,) = [service for service in profiled.values() if "ports" in service]
    assert proxy["image"].split(":")[0] in ("nginx", "haproxy")
    (published,) = proxy["ports"]
    config_mount = next(mount for mount in proxy["volumes"] if mount.startswith("./"))
    config = (REPO / config_mount.split(":")[0]).read_text(encoding="utf-8")
    assert published.split(":")[1] in config  # the proxy listens where it is published
    upstreams = re.findall(r"server\s+([\w.-]+):8000", config)
    names = [name for name, service in profiled.items() if service in replicas]
    assert sorted(upstreams) == sorted(names)
    assert "forklog-pg" in document["volumes"] or any(
        mount.split(":")[0] in document["volumes"] for mount in database["volumes"]
    )


def test_the_image_copies_what_the_postgres_backend_needs() -> None:
    dependencies = (REPO / "pyproject.toml").read_text(encoding="utf-8").split("[project.optional-dependencies]")[0]
    assert '"asyncpg' in dependencies, "the driver is a dependency of the service, not only of the tests"


def test_the_wheel_carries_the_session_browser_and_the_docs_assets(tmp_path: Path) -> None:
    # What the Dockerfile copies, built as its `pip install` builds it: the page and the vendored scripts are
    # package data, so an installed forklog serves /ui/ and /docs/assets/ too.
    source = tmp_path / "source"
    shutil.copytree(REPO / "app", source / "app", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(tmp_path / "dist"), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("forklog-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    files = [path for folder in (PAGE_DIR, VENDOR_DIR) for path in folder.rglob("*") if path.is_file()]
    assert files
    missing = {str(path.relative_to(REPO)) for path in files} - names
    assert missing == set(), "every file of the page and of the docs assets is in the wheel"


def test_the_postgres_profile_runs_a_synchronous_standby_the_replicas_fail_over_to() -> None:
    document = compose()
    services = document["services"]
    (standby_name,) = [name for name, service in services.items() if "pg_basebackup" in str(service.get("entrypoint"))]
    standby = services[standby_name]
    script = str(standby["entrypoint"])
    assert "-R" in script.split() or " -R " in script, "the standby is made with pg_basebackup -R"
    name = re.search(r"application_name=(\w+)", script)
    assert name is not None, "the standby names itself, so that the primary can wait for it"
    primary_init = next(mount for mount in services["postgres"]["volumes"] if "initdb.d" in mount)
    init = (REPO / primary_init.split(":")[0]).read_text(encoding="utf-8")
    assert f"synchronous_standby_names = '{name[1]}'" in init, "the primary waits for the standby at every commit"
    assert "host replication" in init
    for replica in ("forklog-a", "forklog-b"):
        url = services[replica]["environment"]["FORKLOG_DATABASE_URL"]
        assert f"@postgres:5432,{standby_name}:5432/" in url
        assert url.endswith("target_session_attrs=read-write")
    header = (REPO / "docker-compose.yml").read_text(encoding="utf-8")
    assert f"exec -u postgres {standby_name} pg_ctl promote" in header, "the failover step is documented"
