"""The running event loop, for code that needs it on every append.

In Python 3.11, ``asyncio.get_running_loop()`` makes a ``getpid`` system call each time (to notice a forked child
using its parent's loop); `strace` counted three of them an append, against none for a FastAPI route. A
:class:`RunningLoop` asks asyncio once and then checks its copy without a system call: the loop it holds is the one
running here when it still runs and was taken in this thread (a thread runs one loop at a time). A store used from
another loop later (a test's second ``asyncio.run``) is noticed the same way and asks asyncio again.
"""

from __future__ import annotations

import asyncio
import threading

__all__ = ["RunningLoop"]


class RunningLoop:
    __slots__ = ("_loop", "_thread")

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = 0

    def get(self) -> asyncio.AbstractEventLoop:
        """The running event loop (RuntimeError when none runs, as asyncio.get_running_loop)."""
        loop = self._loop
        if loop is not None and loop.is_running() and self._thread == threading.get_ident():
            return loop
        loop = self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()
        return loop
