"""``python -m app keys new``: make an access key (spec 9).

The key (256 random bits) is printed once on stdout and never stored: its keys file line holds its SHA-256. The line
is appended to ``--keys-file`` (default: ``FORKLOG_KEYS_FILE``; the file is made with mode 0600), or printed on
stderr when neither names a file. A running service takes the new key within seconds, without a restart. Runs at
once never write one id twice: each checks and appends holding a lock on the file.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from pathlib import Path

from app.api.edge.keys_file import KeysFileError, append_key
from app.domain.access import ApiKey, Scope, digest_of, key_line, new_secret
from app.domain.ids import is_valid_id

__all__ = ["DESCRIPTION", "add_arguments", "run"]

DESCRIPTION = (
    "Make access keys. `keys new` prints a new key once on stdout and appends its line (only its hash) to the keys "
    "file."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    new = actions.add_parser("new", help="make a key", description=__doc__.split("\n\n")[1])
    new.add_argument("--tenant", required=True, help="the tenant whose sessions the key reaches")
    new.add_argument(
        "--scope",
        dest="scopes",
        action="append",
        required=True,
        choices=[scope.value for scope in Scope],
        help="read (every GET and snapshots), write (create, append, fork, delete), share (make and revoke "
        "read-only share links), admin (/readyz lists corrupt sessions; may share too); repeat for several",
    )
    new.add_argument("--id", dest="key_id", help="the key's name in the file and the access log (default: random)")
    new.add_argument("--keys-file", type=Path, help="the file to append to (FORKLOG_KEYS_FILE; default: print it)")


def run(arguments: argparse.Namespace) -> int:
    if not is_valid_id(arguments.tenant):
        sys.exit("forklog keys: --tenant must be 1-128 characters of [A-Za-z0-9._-], starting with a letter or digit")
    key_id = arguments.key_id or f"key-{secrets.token_hex(4)}"
    if not 1 <= len(key_id) <= 128:
        sys.exit("forklog keys: --id must be 1-128 characters")
    secret = new_secret()
    key = ApiKey(key_id, arguments.tenant, frozenset(Scope(scope) for scope in arguments.scopes), digest_of(secret))
    target = arguments.keys_file or (
        Path(os.environ["FORKLOG_KEYS_FILE"]) if os.environ.get("FORKLOG_KEYS_FILE") else None
    )
    if target is None:
        sys.stderr.write(key_line(key).decode())
    else:
        try:
            append_key(target, key)
        except (KeysFileError, OSError) as exc:
            sys.exit(f"forklog keys: {exc}")
        print(f"forklog keys: key {key_id!r} for tenant {key.tenant!r} added to {target}", file=sys.stderr)
    print(secret)
    return 0
