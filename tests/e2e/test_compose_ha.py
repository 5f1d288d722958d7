"""The compose file's ``ha`` profile (spec 6, An HA manager), checked statically (there is no Docker engine here):
etcd, two Patroni nodes and forklog on the multi-host URL, running the commands and the configuration that
tests/e2e/test_patroni.py runs (tests/support/patroni.py)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.support.patroni import DEPLOYED_CONFIG, POST_BOOTSTRAP, REPO, etcd_command

yaml = pytest.importorskip("yaml", reason="PyYAML reads docker-compose.yml")

PROFILE = "ha"
NODES = ("patroni1", "patroni2")


def compose() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((REPO / "docker-compose.yml").read_text(encoding="utf-8"))
    return document


def ha_services() -> dict[str, Any]:
    return {name: service for name, service in compose()["services"].items() if PROFILE in service.get("profiles", [])}


def flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_the_ha_profile_runs_etcd_two_patroni_nodes_and_forklog() -> None:
    services = ha_services()
    assert set(services) == {"etcd", *NODES, "forklog-ha"}
    assert all(service["profiles"] == [PROFILE] for service in services.values()), "nothing else starts them"
    assert services["forklog-ha"]["build"] == "."
    assert services["forklog-ha"]["ports"] == ["8002:8000"], "beside the default service's 8000"
    for name in ("etcd", *NODES):
        assert services[name]["build"] == "./deploy/patroni"
    volumes = compose()["volumes"]
    for name in ("etcd", *NODES):
        (mount,) = services[name]["volumes"]
        assert mount.split(":")[0] in volumes, f"{name} keeps its data in a named volume"


def test_its_etcd_command_is_the_one_the_tests_run() -> None:
    command = ha_services()["etcd"]["command"]
    rebuilt = etcd_command(
        command[0],
        name=flag(command, "--name"),
        data_dir=flag(command, "--data-dir"),
        client=flag(command, "--listen-client-urls"),
        advertise=flag(command, "--advertise-client-urls"),
        peer=flag(command, "--listen-peer-urls"),
        advertise_peer=flag(command, "--initial-advertise-peer-urls"),
    )
    assert command == rebuilt
    assert flag(command, "--advertise-client-urls") == "http://etcd:2379"
    (mount,) = ha_services()["etcd"]["volumes"]
    assert mount.split(":")[1] == flag(command, "--data-dir")


def test_its_patroni_nodes_run_the_configuration_the_tests_run() -> None:
    services = ha_services()
    config = yaml.safe_load(DEPLOYED_CONFIG.read_text())
    dockerfile = (REPO / "deploy" / "patroni" / "Dockerfile").read_text()
    assert re.search(r"COPY patroni\.yml post-bootstrap\.sh /etc/patroni/", dockerfile)
    for package in ("etcd-server", "patroni", "postgresql-15"):
        assert package in dockerfile, f"the image installs Debian's {package}, as .ci/run does for the tests"
    ci = (REPO / ".ci" / "run").read_text()
    assert "missing+=(patroni)" in ci and "missing+=(etcd-server)" in ci
    assert config["bootstrap"]["dcs"]["synchronous_mode"] is True
    assert config["bootstrap"]["dcs"]["postgresql"]["parameters"]["synchronous_commit"] == "on"
    assert config["etcd3"]["hosts"] == "etcd:2379"
    assert config["bootstrap"]["post_bootstrap"] == f"/etc/patroni/{POST_BOOTSTRAP.name}"
    api_port = config["restapi"]["listen"].rsplit(":", 1)[1]
    pg_port = config["postgresql"]["listen"].rsplit(":", 1)[1]
    for name in NODES:
        node = services[name]
        assert node["command"] == ["patroni", "/etc/patroni/patroni.yml"]
        environment = node["environment"]
        assert environment["PATRONI_NAME"] == name
        assert environment["PATRONI_RESTAPI_CONNECT_ADDRESS"] == f"{name}:{api_port}"
        assert environment["PATRONI_POSTGRESQL_CONNECT_ADDRESS"] == f"{name}:{pg_port}"
        assert "PATRONI_SUPERUSER_PASSWORD" in environment and "PATRONI_REPLICATION_PASSWORD" in environment
        assert f"127.0.0.1:{api_port}/health" in " ".join(node["healthcheck"]["test"])
        (mount,) = node["volumes"]
        assert mount.split(":")[1] == config["postgresql"]["data_dir"]
        assert node["depends_on"]["etcd"]["condition"] == "service_healthy"
    assert "127.0.0.1:2379/health" in " ".join(services["etcd"]["healthcheck"]["test"])


def test_forklog_names_both_nodes_and_takes_the_read_write_one() -> None:
    services = ha_services()
    forklog = services["forklog-ha"]
    url = forklog["environment"]["FORKLOG_DATABASE_URL"]
    config = yaml.safe_load(DEPLOYED_CONFIG.read_text())
    pg_port = config["postgresql"]["listen"].rsplit(":", 1)[1]
    assert re.fullmatch(
        rf"postgresql://forklog:[^@]+@patroni1:{pg_port},patroni2:{pg_port}/forklog\?target_session_attrs=read-write",
        url,
    ), url
    script = POST_BOOTSTRAP.read_text()
    assert "CREATE ROLE forklog LOGIN" in script and "CREATE DATABASE forklog OWNER forklog" in script
    assert {name: forklog["depends_on"][name]["condition"] for name in NODES} == dict.fromkeys(NODES, "service_healthy")
    header = (REPO / "docker-compose.yml").read_text(encoding="utf-8")
    assert "docker compose --profile ha up --build forklog-ha" in header
