"""FORKLOG_DATABASE_URL may name several hosts as libpq does (spec 6, Failover); forklog only writes to a primary."""

from __future__ import annotations

import pytest
from pydantic import SecretStr, ValidationError

from app.api.settings import Settings
from app.backends.database_url import DatabaseTarget, InvalidDatabaseUrl, redact, standby_urls

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


# -- FORKLOG_READ_DATABASE_URL (spec 6, Read replicas) ----------------------------------------------------------------

READ = "postgresql://reader:s3cret@standby1:5432,[::1]/forklog?target_session_attrs=standby&sslmode=disable"


def test_a_read_url_names_each_standby_as_a_url_of_its_own() -> None:
    assert standby_urls(READ) == (
        "postgresql://reader:s3cret@standby1:5432/forklog?sslmode=disable",
        "postgresql://reader:s3cret@[::1]:5432/forklog?sslmode=disable",
    )


def test_the_settings_hand_the_read_url_and_the_lag_allowed_to_the_store() -> None:
    settings = Settings(database_url=SecretStr(MULTI), read_database_url=SecretStr(READ), read_lag_max="PT0.25S")

    assert (settings.store.read_place, settings.store.read_lag_max) == (READ, 0.25)
    assert Settings(database_url=SecretStr(MULTI)).store.read_lag_max == 1.0  # the default: 1 s
    assert Settings(database_url=SecretStr(MULTI), read_lag_max="2.5").read_lag_max == 2.5  # seconds


@pytest.mark.parametrize(
    ("given", "named"),
    [
        ({"read_database_url": SecretStr("mysql://standby/forklog")}, "postgresql://"),
        ({"read_database_url": SecretStr("postgresql://u@a:5432,:5433/db")}, "empty host"),
        ({"read_lag_max": "soon"}, "read_lag_max"),
        ({"read_lag_max": "-1"}, "from 0 to 3600"),
    ],
)
def test_a_bad_read_setting_is_refused_naming_it(given: dict[str, object], named: str) -> None:
    with pytest.raises(ValidationError) as refused:
        Settings(database_url=SecretStr(MULTI), **given)  # type: ignore[arg-type]

    assert named in str(refused.value)
    assert "s3cret" not in str(refused.value)


def test_a_read_url_without_a_database_url_is_refused() -> None:
    with pytest.raises(ValidationError, match="FORKLOG_DATABASE_URL"):
        Settings(read_database_url=SecretStr(READ))
