"""GET /sessions' query as the list it asks for (spec 12), and the digest that ties a cursor to that query."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from app.domain.listing import CREATED, UPDATED, ListQuery

__all__ = ["DEFAULT_LIST", "list_query_of", "query_digest"]

_ARCHIVED: dict[str, bool | None] = {"false": False, "true": True, "any": None}
# What GET /sessions lists without parameters: every session but the archived, by creation.
DEFAULT_LIST = ListQuery(archived=False)


def list_query_of(query: dict[str, Any]) -> ListQuery:
    """The list the parsed parameters ask for: ``order`` defaults to ``updated`` with ``q`` (else ``created``),
    ``direction`` to ``asc`` by created, ``desc`` by updated, and ``archived`` to false (spec 17: hidden)."""
    order = query["order"] or (UPDATED if query["q"] is not None else CREATED)
    direction = query["direction"] or ("asc" if order == CREATED else "desc")
    return ListQuery(
        order=UPDATED if order == UPDATED else CREATED,
        descending=direction == "desc",
        parent=query["parent"],
        cwd=query["cwd"],
        origin=query["origin"],
        agent_preset=query["agentPreset"],
        archived=_ARCHIVED[query["archived"] or "false"],
    )


def query_digest(listing: ListQuery, query: dict[str, Any]) -> str | None:
    """What a cursor of this query carries to be told from another query's: None for the plain list (created, asc,
    no filter, no parent, no search: its cursors are those forklog always made), else a short digest of the query."""
    if listing == DEFAULT_LIST and query["q"] is None:
        return None
    described: list[object] = [
        listing.order,
        listing.descending,
        listing.cwd,
        listing.origin,
        listing.agent_preset,
        query["q"],
        listing.parent,
    ]
    if listing.archived is not False:  # (appended: the cursors of queries made before archive kept their digest)
        described.append(listing.archived)
    return hashlib.sha256(orjson.dumps(described)).hexdigest()[:16]
