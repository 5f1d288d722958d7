"""A request's headers read straight from the ASGI scope's list, the way Starlette's ``Headers`` reads them.

The server gives header names in lower case (ASGI); a value is decoded as latin-1 when it is read as text. On the
hot path (every append) a ``Headers`` object and a lookup per name walked the list once per name: these read the
names wanted in one pass.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["all_values", "first_values"]

RawHeaders = Iterable[tuple[bytes, bytes]]


def first_values(headers: RawHeaders, first: bytes, second: bytes) -> tuple[str | None, str | None]:
    """The first value of each of the two names (as ``Headers.get`` gives it), None for a name not sent."""
    found_first = found_second = None
    for name, value in headers:
        if name == first:
            if found_first is None:
                found_first = value.decode("latin-1")
        elif name == second and found_second is None:
            found_second = value.decode("latin-1")
    return found_first, found_second


def all_values(headers: RawHeaders, wanted: bytes) -> list[str]:
    """Every value of the name, in order (as ``Headers.getlist`` gives them)."""
    return [value.decode("latin-1") for name, value in headers if name == wanted]
