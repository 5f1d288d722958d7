"""The app's state: what Starlette's State does (names set, read, removed, refused when absent), with each name found
without a failed lookup first."""

from __future__ import annotations

import pytest

from app.api.fast_path.app_state import AppState


def test_a_name_set_is_read_both_ways_and_removed_both_ways() -> None:
    state = AppState()
    state.service = "the service"
    assert state.service == "the service"
    assert state._state == {"service": "the service"}  # where Starlette's own readers look
    assert "service" in vars(state)  # found by the ordinary lookup: no AttributeError made first
    del state.service
    with pytest.raises(AttributeError):
        _ = state.service
    assert state._state == {}


def test_an_absent_name_is_refused_as_starlette_refuses_it() -> None:
    with pytest.raises(AttributeError):
        _ = AppState().keys
