"""``python -m app serve`` (the default command): the service.

A service on files begins reading them (its ``begin_opening`` capability) as soon as its settings are
checked, and imports its web stack only after that, inside :func:`run`: a start that checks files no checkpoint
covers keeps the other cores busy while this one imports (about half a second of it).
"""

from __future__ import annotations

import argparse
import logging
import sys

from pydantic import ValidationError

from app.api.edge.exposure import check_exposure
from app.api.edge.keys_file import read_keys_file
from app.api.settings import Settings
from app.api.store import open_backend
from app.backends.errors import StorageError
from app.backends.open import start_refusal
from app.cli.settings_flags import add_setting_flags, given_settings
from app.domain.errors import ConfigurationError

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
    # A reachable database with a newer schema stops the start here; an unreachable one is waited for.
    refusal = start_refusal(settings.store)
    if refusal is not None:
        sys.exit(f"forklog: {refusal}")
    try:
        # What the service refuses before its store is touched (create_app checks them again).
        check_exposure(settings)
        if settings.keys_file is not None:
            read_keys_file(settings.keys_file)
        store = open_backend(settings)
    except (StorageError, ConfigurationError) as exc:
        sys.exit(f"forklog: {exc}")
    if (begin_opening := store.capabilities.begin_opening) is not None:
        begin_opening()
    # The web stack, imported and built while the store opens.
    from app.api.app import create_app
    from app.api.fast_path.http_server import serve

    try:
        app = create_app(settings, backend=store)
    except (StorageError, ConfigurationError) as exc:
        sys.exit(f"forklog: {exc}")
    serve(app, settings)
    return 0
