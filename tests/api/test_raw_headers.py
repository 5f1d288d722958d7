"""The one-pass header reads answer what Starlette's ``Headers`` answers for the same list."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from starlette.datastructures import Headers

from app.api.wire.raw_headers import all_values, first_values

NAMES = st.sampled_from([b"host", b"origin", b"content-type", b"idempotency-key", b"x-other"])
VALUES = st.binary(max_size=8)
HEADER_LISTS = st.lists(st.tuples(NAMES, VALUES), max_size=8)


@given(HEADER_LISTS)
def test_first_values_are_what_headers_get_gives(raw: list[tuple[bytes, bytes]]) -> None:
    headers = Headers(raw=raw)
    assert first_values(raw, b"host", b"origin") == (headers.get("host"), headers.get("origin"))


@given(HEADER_LISTS)
def test_all_values_are_what_headers_getlist_gives(raw: list[tuple[bytes, bytes]]) -> None:
    assert all_values(raw, b"idempotency-key") == Headers(raw=raw).getlist("idempotency-key")
