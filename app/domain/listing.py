"""What a list of sessions asks for (spec 12): its order, its direction and the header fields it filters by.

A page continues after a *key*: the order's value (``createdAt`` or ``updatedAt``) and then the id, so that a session
that does not change while a client pages appears exactly once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from app.domain.session import Session, SessionHeader

__all__ = ["CREATED", "DEFAULT_QUERY", "UPDATED", "ListQuery", "Order", "OrderKey", "PageRequest"]

Order = Literal["created", "updated"]
CREATED: Order = "created"
UPDATED: Order = "updated"

# Where a page stands: the order's value, then the id.
OrderKey = tuple[int, str]


@dataclass(frozen=True, slots=True)
class ListQuery:
    """A list's order (by ``createdAt`` or ``updatedAt``, then id), its direction and its filters (a header field
    that must equal the value given; None: any). ``parent`` lists that session's children only; ``archived`` takes
    only the archived sessions (True), only the others (False) or both (None: what every walk of the store asks)."""

    order: Order = CREATED
    descending: bool = False
    parent: str | None = None
    cwd: str | None = None
    origin: str | None = None
    agent_preset: str | None = None
    archived: bool | None = None

    def matches(self, header: SessionHeader) -> bool:
        return (
            (self.archived is None or header.archived == self.archived)
            and (self.parent is None or header.parent_session == self.parent)
            and (self.cwd is None or header.cwd == self.cwd)
            and (self.origin is None or header.origin == self.origin)
            and (self.agent_preset is None or header.agent_preset == self.agent_preset)
        )

    def key_of(self, session: Session) -> OrderKey:
        """Where ``session`` stands in this order."""
        value = session.header.created_at if self.order == CREATED else session.updated_at
        return value, session.id

    def follows(self, key: OrderKey, after: OrderKey) -> bool:
        """Whether ``key`` comes after ``after`` in this order and direction."""
        return key < after if self.descending else key > after


DEFAULT_QUERY = ListQuery()


@dataclass(frozen=True, slots=True)
class PageRequest:
    """One page of a list: at most ``limit`` sessions after the key ``after`` (None: from the start) in the query's
    order and direction, those its filters take."""

    limit: int
    after: OrderKey | None = None
    query: ListQuery = DEFAULT_QUERY

    def following(self, last: Session, limit: int | None = None) -> PageRequest:
        """The next page, after ``last`` (of up to ``limit`` sessions, by default as many as this one)."""
        return replace(self, after=self.query.key_of(last), limit=self.limit if limit is None else limit)
