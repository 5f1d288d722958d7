"""The wall clock the service stamps events and records with, in milliseconds since the Unix epoch."""

from __future__ import annotations

import time

__all__ = ["wall_clock_ms"]


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000
