"""Command-line flags for every setting, made from the settings model itself (one description per setting)."""

from __future__ import annotations

import argparse
import typing
from typing import Any

from pydantic_settings import BaseSettings

__all__ = ["add_setting_flags", "given_settings"]


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_setting_flags(
    parser: argparse.ArgumentParser, model: type[BaseSettings], names: list[str] | None = None
) -> None:
    """A flag per field of ``model`` (or of those ``names``): ``--data-dir`` for ``data_dir``, and so on; each help
    line names the environment variable and the default."""
    prefix = str(model.model_config.get("env_prefix", ""))
    for name, field in model.model_fields.items():
        if names is not None and name not in names:
            continue
        env = f"{prefix}{name}".upper()
        default = field.get_default(call_default_factory=True)
        shown = ",".join(default) if isinstance(default, list) else default
        help_text = f"{field.description} ({env}; default {shown if shown not in ('', [], None) else 'none'})"
        annotation = field.annotation
        if annotation is bool:
            parser.add_argument(
                _flag(name), dest=name, action=argparse.BooleanOptionalAction, default=None, help=help_text
            )
            continue
        # Values are checked by the settings model, like the environment's, so that both fail with one message.
        if typing.get_origin(annotation) is typing.Literal:
            help_text += f"; one of {', '.join(str(choice) for choice in typing.get_args(annotation))}"
        parser.add_argument(_flag(name), dest=name, default=None, help=help_text, metavar=name.upper())


def given_settings(arguments: argparse.Namespace, model: type[BaseSettings]) -> dict[str, Any]:
    """The settings given as flags (the others come from the environment or their defaults)."""
    given = vars(arguments)
    return {name: given[name] for name in model.model_fields if given.get(name) is not None}
