"""FORKLOG_DATABASE_URL may name several hosts as libpq does (spec 6, Failover); forklog only writes to a primary."""

from __future__ import annotations

import pytest
from pydantic import SecretStr, ValidationError

from app.api.settings import Settings
from app.backends.database_url import DatabaseTarget, InvalidDatabaseUrl, redact

MULTI = "postgresql://forklog:s3cret@db1:5432,db2:5433/forklog?target_session_attrs=read-write"


def test_a_multi_host_url_names_every_host_in_order() -> None:
    target = DatabaseTarget.parse(MULTI)

    assert target.hosts == (("db1", 5432), ("db2", 5433))
    assert target.target_session_attrs == "read-write"


def test_the_settings_accept_a_multi_host_url() -> None:
    settings = Settings(database_url=SecretStr(MULTI))

    assert settings.database_url is not None


@pytest.mark.parametrize("attrs", ["any", "prefer-standby", "standby", "read-only"])
def test_a_writer_that_could_pick_a_standby_is_refused_with_a_clear_message(attrs: str) -> None:
    url = MULTI.replace("read-write", attrs)

    with pytest.raises(ValidationError, match="target_session_attrs=read-write"):
        Settings(database_url=SecretStr(url))


def test_several_hosts_without_target_session_attrs_use_the_primary() -> None:
    assert DatabaseTarget.parse("postgresql://u:p@db1,db2/forklog").target_session_attrs == "read-write"


@pytest.mark.parametrize(
    "url",
    [
        pytest.param("postgresql://u:p@db1:54x2,db2/forklog", id="port-not-a-number"),
        pytest.param("postgresql://u:p@db1:99999/forklog", id="port-out-of-range"),
        pytest.param("postgresql://u:p@db1,,db2/forklog", id="empty-host"),
    ],
)
def test_a_malformed_host_list_is_refused(url: str) -> None:
    with pytest.raises(InvalidDatabaseUrl):
        DatabaseTarget.parse(url)


def test_redact_hides_the_password_of_a_multi_host_url_and_keeps_every_host() -> None:
    shown = redact(MULTI)

    assert "s3cret" not in shown
    assert shown == "postgresql://forklog:***@db1:5432,db2:5433/forklog?target_session_attrs=read-write"
