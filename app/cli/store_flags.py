"""The flags that name a store (``--data-dir``, and ``--database-url`` where the settings have it), for the
commands that work on the store the settings name: verify, export, import."""

from __future__ import annotations

import argparse
import sys

from pydantic import ValidationError

from app.api.settings import Settings
from app.cli.settings_flags import add_setting_flags, given_settings

__all__ = ["STORE_SETTINGS", "add_store_flags", "store_settings"]

STORE_SETTINGS: list[str] = [name for name in ("data_dir", "database_url") if name in Settings.model_fields]


def add_store_flags(parser: argparse.ArgumentParser) -> None:
    add_setting_flags(parser, Settings, STORE_SETTINGS)


def store_settings(arguments: argparse.Namespace) -> Settings:
    """The settings (the store's from the flags, the rest from the environment), or an exit naming what is wrong."""
    try:
        return Settings(**given_settings(arguments, Settings))
    except ValidationError as exc:
        sys.exit(f"forklog: invalid settings:\n{exc}")
