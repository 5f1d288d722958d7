"""The replica's tip cache: newest use kept, bounded by entries and by surface nodes, never moved backwards."""

from __future__ import annotations

from app.backends.postgres.tips import CachedTip, TipCache
from app.domain.log_state import LogState
from app.domain.session import LogHead, Session, SessionHeader, SessionKey


def entry(session_id: str, *, log: int = 1, count: int = 0, nodes: int = 0) -> CachedTip:
    key = SessionKey("default", session_id)
    session = Session(key, SessionHeader(id=session_id, created_at=1, instance="i"), LogHead(count), 1)
    return CachedTip(session, log, LogState(count=count, nodes=list(range(nodes))))


def key(session_id: str) -> SessionKey:
    return SessionKey("default", session_id)


def test_the_least_recently_used_entry_goes_first() -> None:
    cache = TipCache(size=2)
    cache.put(key("a"), entry("a"))
    cache.put(key("b"), entry("b"))
    assert cache.get(key("a")) is not None  # now the most recent
    cache.put(key("c"), entry("c"))
    assert cache.get(key("b")) is None
    assert cache.get(key("a")) is not None and cache.get(key("c")) is not None


def test_long_surfaces_are_bounded_by_their_nodes() -> None:
    cache = TipCache(size=100, max_nodes=1000)
    for name in ("a", "b", "c"):
        cache.put(key(name), entry(name, nodes=400))
    assert cache.get(key("a")) is None
    assert cache.get(key("b")) is not None and cache.get(key("c")) is not None
    huge = entry("huge", nodes=5000)
    cache.put(key("huge"), huge)
    assert cache.get(key("huge")) is huge  # the newest is kept even when it alone is over the bound


def test_an_entry_is_never_replaced_by_an_older_view_of_the_same_log() -> None:
    cache = TipCache()
    newer = entry("s", count=10)
    cache.put(key("s"), newer)
    cache.put(key("s"), entry("s", count=5))
    assert cache.get(key("s")) is newer
    recreated = entry("s", log=2, count=0)
    cache.put(key("s"), recreated)  # another incarnation: its own log
    assert cache.get(key("s")) is recreated
    cache.drop(key("s"))
    assert cache.get(key("s")) is None
