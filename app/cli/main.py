"""``python -m app`` (or ``forklog``): the service by default, or one of the subcommands of spec 10.

``python -m app --port 9000`` is ``python -m app serve --port 9000``.

Only the command that runs is imported: the service starts reading its files before it imports its web stack
(:mod:`app.cli.serve`), and the other commands' stores and progress bars would come first.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

__all__ = ["COMMANDS", "main"]


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    module_name: str

    @property
    def module(self) -> ModuleType:
        return importlib.import_module(self.module_name)

    @property
    def summary(self) -> str:
        return str(getattr(self.module, "DESCRIPTION", "")).split(". ")[0]


COMMANDS: dict[str, Command] = {
    command.name: command
    for command in (
        Command("serve", "app.cli.serve"),
        Command("verify", "app.cli.verify"),
        Command("export", "app.cli.export"),
        Command("import", "app.cli.import_"),
        Command("copy", "app.cli.copy"),
        Command("keys", "app.cli.keys"),
    )
}


def parser_for(command: Command) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"forklog {command.name}", description=getattr(command.module, "DESCRIPTION", None)
    )
    add_arguments: Callable[[argparse.ArgumentParser], None] = command.module.add_arguments
    add_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> None:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments and arguments[0] in ("-h", "--help") and len(arguments) == 1:
        names = ", ".join(COMMANDS)
        print(f"usage: forklog [COMMAND] [options]\n\ncommands: {names} (default: serve); forklog COMMAND --help")
        for command in COMMANDS.values():
            print(f"  {command.name:8} {command.summary}")
        sys.exit(0)
    name = arguments.pop(0) if arguments and arguments[0] in COMMANDS else "serve"
    command = COMMANDS[name]
    run: Callable[[argparse.Namespace], int] = command.module.run
    sys.exit(run(parser_for(command).parse_args(arguments)))
