"""The service's one settings object: FORKLOG_* environment variables, overridden by command-line flags."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from app.backends.database_url import DatabaseTarget, InvalidDatabaseUrl, standby_urls
from app.backends.open import StoreSettings
from app.domain.limits import BadLimit, RateLimit, TenantLimits, parse_duration_ms, parse_rate_text

__all__ = ["LogLevel", "Settings"]

LogLevel = Literal["critical", "error", "warning", "info", "debug"]
BackendName = Literal["files", "memory", "postgres"]

# Comma-separated in the environment (FORKLOG_CORS_ORIGINS=https://a.example,https://b.example), a list in code.
CommaList = Annotated[list[str], NoDecode]


class Settings(BaseSettings):
    # hide_input_in_errors: a bad value is named, never echoed (FORKLOG_DATABASE_URL may hold a password).
    model_config = SettingsConfigDict(env_prefix="FORKLOG_", extra="forbid", frozen=True, hide_input_in_errors=True)

    backend: BackendName = Field(
        "files",
        description="files (JSONL in data_dir, the default), memory (nothing kept across restarts) or postgres "
        "(implied by database_url)",
    )
    database_url: SecretStr | None = Field(
        None, description="a postgresql:// URL: serve from that PostgreSQL database instead of data_dir"
    )
    read_database_url: SecretStr | None = Field(
        None,
        description="a postgresql:// URL of hot standbys of database_url (host1:5432,host2:5432 for several): they "
        "serve the reads that have replayed every change acknowledged before them",
    )
    read_lag_max: float = Field(
        1.0,
        description="how long a read waits for a standby to replay what it must see (seconds, or an ISO 8601 "
        "duration such as PT0.5S) before it is served by the primary",
    )
    database_direct_url: SecretStr | None = Field(
        None,
        description="when database_url names a connection pooler (PgBouncer): a postgresql:// URL of the same "
        "database without it, for what needs a session of its own (notifications)",
    )
    database_pool_size: int = Field(
        10, ge=1, le=10_000, description="connections this process keeps to the database at most (its pool's size)"
    )
    data_dir: Path = Field(Path("./data"), description="where the session files live")
    host: str = Field("127.0.0.1", min_length=1, description="the address to listen on")
    port: int = Field(8000, ge=1, le=65535, description="the port to listen on")
    max_body_bytes: int = Field(16 * 1024 * 1024, ge=1024, description="larger request bodies get 413")
    max_header_bytes: int = Field(
        64 * 1024, ge=1024, le=16 * 1024 * 1024, description="a larger request line and headers in all get 431"
    )
    read_timeout: float = Field(
        30.0, gt=0, le=3600, description="seconds a request's headers may take in all, and its body pause (then 408)"
    )
    shutdown_grace: int = Field(
        10, ge=0, le=3600, description="seconds a shutdown waits for requests in flight before cancelling them"
    )
    log_level: LogLevel = Field("info", description="the lowest level logged")
    fsync: bool = Field(True, description="sync every change to disk before answering; turn off only in tests")
    compression: Literal["zstd", "none"] | None = Field(
        None,
        description="how a new data directory stores its sessions: zstd (DSH's .jsonl.zstd, the default for a new "
        "one) or none (raw .jsonl); a directory keeps the one it was made with, and a start asking for the other "
        "is refused",
    )
    allowed_hosts: CommaList = Field(
        default_factory=list, description="Host names served besides loopback addresses and localhost"
    )
    cors_origins: CommaList = Field(
        default_factory=list, description="origins (scheme://host[:port]) whose pages may call the API"
    )
    keys_file: Path | None = Field(
        None, description="the access keys (JSON lines; `keys new` makes them); without it no key is asked for"
    )
    allow_unauthenticated: bool = Field(
        False, description="serve a non-loopback host without a keys file: anyone reaching the port is let in"
    )
    metrics: bool = Field(True, description="count requests and storage work and serve them at GET /metrics")
    metrics_tenant_label: bool = Field(
        False, description="add a tenant label to the per-tenant metrics (one series per tenant and value)"
    )
    # Spec 14: the tenant default's limits when there is no keys file (with one, its tenant lines set them).
    max_sessions: int | None = Field(
        None, ge=0, description="without a keys file: live sessions at most (a create or fork beyond gets 429)"
    )
    max_bytes: int | None = Field(
        None, ge=0, description="without a keys file: bytes of all session logs at most (beyond: 429)"
    )
    retention: str | None = Field(
        None, description="without a keys file: an ISO 8601 duration (P30D, PT12H): sessions idle longer are deleted"
    )
    share_rate: str = Field(
        "10:50",
        description="perSecond:burst: each client address's token bucket for reading share links (/shared/...)",
    )

    @field_validator("share_rate")
    @classmethod
    def _check_share_rate(cls, value: str) -> str:
        parse_rate_text(value)  # BadLimit is a ValueError: the settings' message names it
        return value

    @property
    def share_rate_limit(self) -> RateLimit:
        return parse_rate_text(self.share_rate)

    interrupt_after: str | None = Field(
        None,
        description="an ISO 8601 duration (PT30M, P1D): an open turn without an event for that long is interrupted "
        "by the service (DSH's closers, as POST /sessions/{id}/interrupt appends them)",
    )

    @field_validator("retention", "interrupt_after")
    @classmethod
    def _check_retention(cls, value: str | None) -> str | None:
        if value is not None:
            parse_duration_ms(value)  # BadLimit is a ValueError: the settings' message names it
        return value

    @field_validator("read_lag_max", mode="before")
    @classmethod
    def _parse_read_lag_max(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().upper().startswith("P"):
            return parse_duration_ms(value.strip().upper()) / 1000  # BadLimit is a ValueError
        return value

    @field_validator("read_lag_max")
    @classmethod
    def _check_read_lag_max(cls, value: float) -> float:
        if not 0 <= value <= 3600:
            raise BadLimit("must be from 0 to 3600 seconds")
        return value

    @field_validator("read_database_url")
    @classmethod
    def _check_read_database_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            try:
                standby_urls(value.get_secret_value())
            except InvalidDatabaseUrl as exc:
                raise ValueError(str(exc)) from None
        return value

    @property
    def store(self) -> StoreSettings:
        """The store these settings name (:func:`~app.backends.open.open_store` opens it)."""
        place = self.data_dir if self.database_url is None else self.database_url.get_secret_value()
        direct = None if self.database_direct_url is None else self.database_direct_url.get_secret_value()
        read = self.read_database_url.get_secret_value() if self.read_database_url is not None else None
        return StoreSettings(
            place,
            memory=self.backend == "memory",
            fsync=self.fsync,
            direct_url=direct,
            pool_size=self.database_pool_size,
            compression=self.compression,
            read_place=read,
            read_lag_max=self.read_lag_max,
        )

    @property
    def interrupt_after_ms(self) -> int | None:
        return parse_duration_ms(self.interrupt_after) if self.interrupt_after is not None else None

    def tenant_limits(self) -> TenantLimits:
        """The tenant default's limits these settings give (spec 14)."""
        retention = parse_duration_ms(self.retention) if self.retention is not None else None
        return TenantLimits(self.max_sessions, self.max_bytes, retention)

    @field_validator("database_url", "database_direct_url")
    @classmethod
    def _check_database_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None:
            return value
        url = value.get_secret_value()
        if not url.startswith("postgresql://"):
            raise ValueError("must be a postgresql:// URL (postgresql://user:password@host:5432/dbname)")
        try:
            DatabaseTarget.parse(url)  # one host or several (host1:5432,host2:5432), as libpq writes them
        except InvalidDatabaseUrl as exc:
            raise ValueError(str(exc)) from None
        return value

    @model_validator(mode="after")
    def _database_url_selects_postgres(self) -> Settings:
        if self.database_url is not None and self.backend == "files":
            object.__setattr__(self, "backend", "postgres")  # the URL implies it (the model is frozen)
        elif self.database_url is not None and self.backend != "postgres":
            raise ValueError(f"backend {self.backend!r} does not use database_url; leave one of them out")
        elif self.database_url is None and self.backend == "postgres":
            raise ValueError("backend 'postgres' needs database_url (FORKLOG_DATABASE_URL)")
        if self.read_database_url is not None and self.database_url is None:
            raise ValueError("read_database_url names standbys of database_url (FORKLOG_DATABASE_URL): give it too")
        if self.database_direct_url is not None and self.database_url is None:
            raise ValueError("database_direct_url is used only with database_url (FORKLOG_DATABASE_URL)")
        return self

    @field_validator("allowed_hosts", "cors_origins", mode="before")
    @classmethod
    def _split_commas(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @field_validator("allowed_hosts")
    @classmethod
    def _lower_hosts(cls, value: list[str]) -> list[str]:
        for host in value:
            if "/" in host or host.count("*") > (1 if host.startswith("*.") else 0):
                raise ValueError(f"{host!r} is not a host name (a name, or *.example.com)")
        return [host.lower() for host in value]

    @field_validator("cors_origins")
    @classmethod
    def _check_origins(cls, value: list[str]) -> list[str]:
        for origin in value:
            scheme, _, rest = origin.partition("://")
            if scheme.lower() not in ("http", "https") or not rest or "/" in rest:
                raise ValueError(f"{origin!r} is not an origin such as https://app.example.com")
        return [origin.lower() for origin in value]
