"""Safe by default (spec 9): without a keys file the service listens only on a loopback address, unless told
otherwise in so many words (``FORKLOG_ALLOW_UNAUTHENTICATED=true``)."""

from __future__ import annotations

import ipaddress

from app.api.settings import Settings
from app.domain.errors import ConfigurationError

__all__ = ["ExposureRefused", "check_exposure", "is_loopback_host"]


class ExposureRefused(ConfigurationError):
    """The settings would serve every session to anyone who reaches the port; the message says what to do."""


def is_loopback_host(host: str) -> bool:
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_exposure(settings: Settings) -> None:
    if settings.keys_file is not None or settings.allow_unauthenticated or is_loopback_host(settings.host):
        return
    raise ExposureRefused(
        f"refusing to listen on {settings.host} without a keys file: anyone who reaches the port could read, fork "
        "and delete every session. Make a key and start with it:\n"
        "  python -m app keys new --tenant default --scope read --scope write --keys-file keys.jsonl\n"
        f"  python -m app --host {settings.host} --keys-file keys.jsonl\n"
        "(or set FORKLOG_ALLOW_UNAUTHENTICATED=true to serve without keys, e.g. behind a proxy that checks them)"
    )
