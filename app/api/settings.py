"""The service's one settings object: FORKLOG_* environment variables, overridden by command-line flags."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

LogLevel = Literal["critical", "error", "warning", "info", "debug"]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FORKLOG_", extra="forbid", frozen=True)

    data_dir: Path = Field(Path("./data"), description="where the session files live")
    host: str = Field("127.0.0.1", min_length=1, description="the address to listen on")
    port: int = Field(8000, ge=1, le=65535, description="the port to listen on")
    max_body_bytes: int = Field(16 * 1024 * 1024, ge=1024, description="larger request bodies get 413")
    log_level: LogLevel = Field("info", description="the lowest level logged")
    fsync: bool = Field(True, description="sync every change to disk before answering; turn off only in tests")
