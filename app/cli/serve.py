"""``python -m app serve`` (the default command): the service."""

from __future__ import annotations

import argparse
import logging
import sys

from pydantic import ValidationError

from app.api.app import create_app
from app.api.exposure import ExposureRefused
from app.api.http_server import serve
from app.api.keys_file import KeysFileError
from app.api.settings import Settings
from app.backends.errors import StorageError
from app.backends.postgres import refusal_of
from app.cli.settings_flags import add_setting_flags, given_settings

__all__ = ["add_arguments", "load_settings", "run"]

DESCRIPTION = "Serve forklog's HTTP API. Every flag overrides its FORKLOG_* environment variable."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_setting_flags(parser, Settings)


def load_settings(arguments: argparse.Namespace) -> Settings:
    """The settings, or an exit naming the setting that is wrong (before anything is touched)."""
    try:
        return Settings(**given_settings(arguments, Settings))
    except ValidationError as exc:
        sys.exit(f"forklog: invalid settings:\n{exc}")


def run(arguments: argparse.Namespace) -> int:
    settings = load_settings(arguments)
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if settings.database_url is not None:
        # A reachable database with a newer schema stops the start here; an unreachable one is waited for.
        refusal = refusal_of(settings.database_url.get_secret_value())
        if refusal is not None:
            sys.exit(f"forklog: {refusal}")
    try:
        app = create_app(settings)
    except (StorageError, ExposureRefused, KeysFileError) as exc:
        sys.exit(f"forklog: {exc}")
    serve(app, settings)
    return 0
