"""Which of the media types a route can answer a request's ``Accept`` header prefers (RFC 9110 section 12.5.1).

Each media range may carry a weight (``;q=``); the most specific range that matches an offered type gives its weight
(``type/subtype`` before ``type/*`` before ``*/*``). The offered type of the highest weight wins, the first offered
on a tie; with no ``Accept`` (or nothing acceptable, or a header that does not parse) the first offered type is
answered, as a server may do rather than refuse with 406.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["preferred"]


def _weight(parameters: list[str]) -> float:
    for parameter in parameters:
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "q":
            try:
                weight = float(value.strip())
            except ValueError:
                return 0.0
            return weight if 0.0 <= weight <= 1.0 else 0.0
    return 1.0


def _ranges(accept: str) -> dict[str, float]:
    ranges: dict[str, float] = {}
    for item in accept.split(","):
        media_range, *parameters = item.split(";")
        media_range = media_range.strip().lower()
        if media_range.count("/") == 1:
            ranges.setdefault(media_range, _weight(parameters))
    return ranges


def _weight_of(media_type: str, ranges: dict[str, float]) -> float:
    major = media_type.split("/")[0]
    for media_range in (media_type, f"{major}/*", "*/*"):
        if media_range in ranges:
            return ranges[media_range]
    return 0.0


def preferred(accept: str | None, offered: Sequence[str]) -> str:
    """The type of ``offered`` that ``accept`` prefers (``offered[0]`` when it prefers none)."""
    if not accept:
        return offered[0]
    ranges = _ranges(accept)
    best, best_weight = offered[0], 0.0
    for media_type in offered:
        weight = _weight_of(media_type, ranges)
        if weight > best_weight:
            best, best_weight = media_type, weight
    return best
