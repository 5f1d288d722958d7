"""The app's ``state``, read on every request without making an exception first.

Starlette's ``State`` keeps its names in a dict and finds them through ``__getattr__``, which Python calls only after
the ordinary lookup has failed with a formatted ``AttributeError``: callgrind counted two an append (the service and
the settings), and the keys and metrics routes read it too. :class:`AppState` is that ``State``, whose names are also
plain attributes, so the ordinary lookup finds them.
"""

from __future__ import annotations

from typing import Any

from starlette.datastructures import State

__all__ = ["AppState"]


class AppState(State):
    def __setattr__(self, key: Any, value: Any) -> None:
        super().__setattr__(key, value)
        self.__dict__[key] = value

    def __delattr__(self, key: Any) -> None:
        super().__delattr__(key)
        del self.__dict__[key]
