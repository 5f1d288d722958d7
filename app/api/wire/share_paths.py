"""A share's token is a secret in its path (``/shared/{token}``, the page's ``/ui/shared/{token}``): whatever writes
a path for someone else to read (the access log, a trace, a problem body) writes it without the token."""

from __future__ import annotations

import re

__all__ = ["HIDDEN", "public_path", "without_share_tokens"]

HIDDEN = "…"
# A token's segment after /shared/ (in a path, or in a text that quotes one: up to a separator, a space or a quote).
_TOKEN = re.compile(r"(/shared/)[^/\s;'\"?#]+")


def public_path(path: str) -> str:
    """``path`` with a share token's segment written ``…`` (``/shared/…/events``); other paths as they are."""
    if "/shared/" not in path:
        return path
    return _TOKEN.sub(rf"\g<1>{HIDDEN}", path)


def without_share_tokens(text: str) -> str:
    """A text that may quote a path (a problem's detail), with any share token in it written ``…``."""
    return public_path(text)
