"""Request ids (spec 13): every answer carries ``X-Request-Id``, the client's own when it sent a well-formed one, else
one made here; the access log line and every problem body carry the same id as ``requestId``.

The id rides in the request's state (:data:`REQUEST_ID_STATE`), where the access log and the problem answers find it.
"""

from __future__ import annotations

import random
import re
from collections.abc import MutableMapping
from typing import Any

__all__ = ["HEADER", "REQUEST_ID_STATE", "new_request_id", "request_id_of", "valid_request_id"]

HEADER = "X-Request-Id"
REQUEST_ID_STATE = "request_id"

_VALID = re.compile(rb"[A-Za-z0-9._:-]{1,128}")


def new_request_id() -> str:
    """128 random bits in hex: unique across replicas without any coordination.

    From ``random`` (seeded from the system's entropy at start, and again in a forked child), not ``os.urandom``: an
    id is a label, not a secret, and ``os.urandom`` lets go of the GIL for its system call, so with the writer
    thread busy every request waited to get it back (~15 µs an append under load)."""
    return format(random.getrandbits(128), "032x")


def valid_request_id(value: bytes | None) -> str | None:
    """The client's id when it is 1-128 characters of ``[A-Za-z0-9._:-]`` (anything else is replaced, never echoed:
    a header value is not trusted to be safe in a log line)."""
    if value is not None and _VALID.fullmatch(value):
        return value.decode("ascii")
    return None


def request_id_of(scope: MutableMapping[str, Any]) -> str:
    """The request's id; one is made (and kept) for a request that did not pass the gateway
    (app.api.fast_path.gateway)."""
    state = scope.setdefault("state", {})
    request_id: str | None = state.get(REQUEST_ID_STATE)
    if request_id is None:
        request_id = state[REQUEST_ID_STATE] = new_request_id()
    return request_id
