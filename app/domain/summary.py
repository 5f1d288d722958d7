"""What a sidebar shows of a session besides its header (spec 12): its title and the preview of its first message.

Both come from single events, so a log keeps them as it grows (see ``LogState``): the ``title`` is ``data.title``
of the last ``session/title`` event (DSH's own title event), the ``preview`` the text of the first
``user/message``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PREVIEW_CHARACTERS", "TITLE_TYPE", "message_text", "preview_of", "title_of"]

TITLE_TYPE = "session/title"
PREVIEW_CHARACTERS = 200


def title_of(data: Any) -> str | None:
    """A ``session/title`` event's title: its ``data.title`` when that is a string (anything else titles nothing)."""
    title = data.get("title") if isinstance(data, dict) else None
    return title if isinstance(title, str) else None


def message_text(message: Any) -> str:
    """The ``text`` content blocks of a message, joined by a space."""
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return ""
    return " ".join(
        block["text"]
        for block in content
        if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str)
    )


def preview_of(data: Any) -> str:
    """A ``user/message``'s preview: its text with every run of whitespace made one space, trimmed, and cut after
    ``PREVIEW_CHARACTERS`` characters (code points: never inside one)."""
    return " ".join(message_text(data).split())[:PREVIEW_CHARACTERS]
