"""A share's token is a secret in its path (``/shared/{token}``, the page's ``/ui/shared/{token}``): whatever writes
a path for someone else to read (the access log, a trace, a problem body) writes it without the token."""

from __future__ import annotations

import re
from urllib.parse import quote

__all__ = ["HIDDEN", "public_path", "without_share_tokens"]

HIDDEN = "…"
_IN_PATH = re.compile(r"(/shared/)[^/]+")
# In a text that quotes a path: up to a separator, a space or a quote (a real token holds none of them).
_IN_TEXT = re.compile(r"(/shared/)[^/\s;'\"?#]+")


def public_path(path: str) -> str:
    """``path`` with a share token's segment written ``…`` (``/shared/…/events``); other paths as they are."""
    if "/shared/" not in path:
        return path
    return _IN_PATH.sub(rf"\g<1>{HIDDEN}", path)


def without_share_tokens(text: str, path: str = "") -> str:
    """A text that may quote a path (a problem's detail), with any share token in it written ``…``: the token of
    ``path`` (the request's, decoded) wherever it appears, as sent or percent-encoded, and any other that follows
    ``/shared/``."""
    if "/shared/" in path:
        for token in {match.group(0)[len("/shared/") :] for match in _IN_PATH.finditer(path)}:
            text = text.replace(token, HIDDEN).replace(quote(token, safe=""), HIDDEN)
    if "/shared/" not in text:
        return text
    return _IN_TEXT.sub(rf"\g<1>{HIDDEN}", text)
