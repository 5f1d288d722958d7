"""The id rule (spec 2.1) and the ids forklog mints: session ids and instances.

An id is 1-128 characters of ``[A-Za-z0-9._-]`` starting with a letter or a digit. The rule admits no separator
and no leading dot, so a checked id is also a safe file name.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from app.domain.errors import InvalidId

__all__ = ["ID_PATTERN", "check_id", "derived_instance", "is_valid_id", "new_instance", "new_session_id"]

ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
# The stable instance of a log written without one (a DSH log) is a UUID5 in this namespace.
_INSTANCE_NAMESPACE = uuid.UUID("6f1e0c52-5d0b-4a4e-9a63-3f0d2f1c9b7e")


def is_valid_id(value: Any) -> bool:
    return isinstance(value, str) and ID_PATTERN.fullmatch(value) is not None


def check_id(value: Any, field: str = "id") -> str:
    """``value`` if it is a valid id, else :class:`InvalidId` naming ``field``."""
    if not is_valid_id(value):
        raise InvalidId(field, f"{field} must be 1-128 characters of [A-Za-z0-9._-], starting with a letter or digit")
    return str(value)


def new_session_id() -> str:
    return f"session-{uuid.uuid4()}"


def new_instance() -> str:
    """An opaque token for a new incarnation of a session (32 hex digits)."""
    return uuid.uuid4().hex


def derived_instance(session_id: str, created_at: int) -> str:
    """The stable instance of a log written without one (a DSH log)."""
    return uuid.uuid5(_INSTANCE_NAMESPACE, f"{session_id}:{created_at}").hex
