"""The search engine on PostgreSQL (spec 12): each session's words as a ``tsvector`` with a GIN index.

One row of ``forklog_search`` per session holds the words of its searchable text exactly as the service cuts them
(:func:`app.domain.search.words`: runs of letters and digits, in lower case), each one lexeme of its own after its
tenant's tag (:func:`app.backends.search.engine.tagged`): the vector is made with ``array_to_tsvector``, not by a text
search configuration, so PostgreSQL's parser, stemmers and stop words never see the text, and a query's words are
lexemes of a ``tsquery`` written out quoted (the last as a prefix, ``:*``) after the caller's tag. What the rule
calls a word is a lexeme here, whatever its script, digits or punctuation around it: the candidates are a superset
of the matches among the sessions a row covers. Diacritics do not fold.

The tag confines every plan to the caller's tenant: the GIN index is looked up in the range of that tenant's
lexemes only (a prefix never expands to another tenant's words), and another tenant's row that a plan checks holds
none of them; no search works in proportion to another tenant's words. Schema version 7 emptied the rows an older
forklog wrote without tags; the replicas fill them anew (sessions without a row are searched directly meanwhile).

Two limits of ``tsvector`` are kept on the safe side: a word longer than ``WORD_CHARACTERS`` is kept as its first
``WORD_CHARACTERS`` characters after the tag (a query word that long is searched as that prefix), and a row whose
words pass ``VECTOR_BYTES`` keeps none (``words`` NULL): that session is a candidate of every search of its tenant.

The table is shared by every replica, and any of them may write a row: a row is only written over if it still
covers what its writer read (``instance``, ``count``), and a row is dropped only when its incarnation is gone.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

from app.backends.errors import Access
from app.backends.postgres.pool import Connection
from app.backends.search.engine import IndexedSession, IndexRow, SessionWalk, tagged, untagged
from app.domain.session import SessionKey

__all__ = ["VECTOR_BYTES", "WORD_CHARACTERS", "PostgresSearch", "query_text"]

# At most 4 bytes a character (the tag's TAG_CHARACTERS are 1 each): a lexeme stays under tsvector's 2 KiB, a row's
# lexemes under its 1 MiB.
WORD_CHARACTERS = 500
VECTOR_BYTES = 1_000_000

_STALE = """
SELECT s.tenant, s.id FROM forklog_sessions s
    LEFT JOIN forklog_search x ON x.tenant = s.tenant AND x.id = s.id
WHERE x.id IS NULL OR x.instance <> s.instance OR x.count <> s.count
UNION ALL
SELECT x.tenant, x.id FROM forklog_search x
WHERE NOT EXISTS (SELECT 1 FROM forklog_sessions s WHERE s.tenant = x.tenant AND s.id = x.id)
"""

_COVERED = """
SELECT x.tenant, x.id, x.instance, x.count
FROM forklog_search x JOIN unnest($1::text[], $2::text[]) AS g (tenant, id) ON x.tenant = g.tenant AND x.id = g.id
"""

# NULL words (a row past VECTOR_BYTES) keep none: such a row is read as no row.
_WORDS_OF = """
SELECT instance, count, tsvector_to_array(words) AS words FROM forklog_search
WHERE tenant = $1 AND id = $2 AND words IS NOT NULL
"""

# A gone incarnation's row only: a session made again under the id meanwhile keeps the row its writer made.
_DROP = """
DELETE FROM forklog_search x USING unnest($1::text[], $2::text[]) AS g (tenant, id)
WHERE x.tenant = g.tenant AND x.id = g.id
    AND NOT EXISTS (
        SELECT 1 FROM forklog_sessions s WHERE s.tenant = x.tenant AND s.id = x.id AND s.instance = x.instance
    )
"""

_INSERT = f"""
INSERT INTO forklog_search (tenant, id, instance, count, size, words)
SELECT g.tenant, g.id, g.instance, g.count, g.size,
    CASE WHEN g.size > {VECTOR_BYTES} THEN NULL ELSE array_to_tsvector(string_to_array(g.words, ' ')) END
FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::text[])
    AS g (tenant, id, instance, count, size, words)
ON CONFLICT (tenant, id) DO NOTHING
RETURNING tenant, id
"""

_UPDATE = f"""
UPDATE forklog_search x SET
    instance = g.instance,
    count = g.count,
    size = CASE WHEN g.anew THEN g.size ELSE x.size + g.size END,
    words = CASE
        WHEN (CASE WHEN g.anew THEN g.size ELSE x.size + g.size END) > {VECTOR_BYTES} THEN NULL
        WHEN g.anew THEN array_to_tsvector(string_to_array(g.words, ' '))
        ELSE x.words || array_to_tsvector(string_to_array(g.words, ' '))
    END
FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::text[], $7::boolean[],
        $8::text[], $9::bigint[])
    AS g (tenant, id, instance, count, size, words, anew, was_instance, was_count)
WHERE x.tenant = g.tenant AND x.id = g.id AND x.instance = g.was_instance AND x.count = g.was_count
RETURNING x.tenant, x.id
"""

# Two statements, not one OR: the GIN index finds the first, the partial index of rows without words the second.
_CANDIDATES = """
SELECT id FROM forklog_search WHERE tenant = $1 AND words @@ $2::tsquery
UNION
SELECT id FROM forklog_search WHERE tenant = $1 AND words IS NULL
"""


def _lexeme(word: str) -> str:
    return word[:WORD_CHARACTERS]


def query_text(tenant: str, words: tuple[str, ...]) -> str:
    """The ``tsquery`` of ``tenant``'s query of ``words``, each a quoted lexeme as the index stores it: every word
    whole, the last (and any cut to ``WORD_CHARACTERS``) as a prefix."""
    terms = []
    for number, (word, lexeme) in enumerate(zip(words, tagged(tenant, map(_lexeme, words)), strict=True)):
        prefix = number == len(words) - 1 or len(word) > WORD_CHARACTERS
        quoted = "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"
        terms.append(quoted + (":*" if prefix else ""))
    return " & ".join(terms)


def _shared_columns(rows: list[IndexRow]) -> list[list[Any]]:
    """The columns an insert and an update both write, an array each (one statement writes every row)."""
    words = [_words_param(row.key.tenant, row.words) for row in rows]
    return [
        [row.key.tenant for row in rows],
        [row.key.id for row in rows],
        [row.covers[0] for row in rows],
        [row.covers[1] for row in rows],
        [size for _, size in words],
        [text for text, _ in words],
    ]


def _words_param(tenant: str, words: frozenset[str]) -> tuple[str, int]:
    """``tenant``'s words as one space-separated text of lexemes (a word holds no space) and the bytes they take."""
    lexemes = set(tagged(tenant, {_lexeme(word) for word in words}))
    return " ".join(sorted(lexemes)), sum(len(lexeme.encode()) for lexeme in lexemes)


class PostgresSearch:
    """The :class:`~app.backends.search.engine.SearchEngine` in the database that ``connection`` reaches."""

    # Each dirty session costs a round two reads and its share of a write, which compete with the appends for the
    # pool and this process's CPU: a round a second takes the appends of that second to a session at once.
    round_seconds = 1.0

    def __init__(self, connection: Callable[[Access], AbstractAsyncContextManager[Connection]]) -> None:
        self._connection = connection

    async def open(self) -> None:
        """Nothing to do: the table is the schema's (a start never rebuilds it)."""

    async def reset(self) -> None:
        """Nothing to drop: other replicas search the shared rows (what fails is tried again)."""

    async def close(self) -> None:
        """Nothing to close: the backend's pool is closed with it."""

    async def stale(self, every: SessionWalk) -> set[SessionKey]:
        async with self._connection(Access.READ) as conn:
            rows = await conn.fetch(_STALE)
        return {SessionKey(row["tenant"], row["id"]) for row in rows}

    async def covered(self, keys: Collection[SessionKey]) -> dict[SessionKey, IndexedSession]:
        if not keys:
            return {}
        async with self._connection(Access.READ) as conn:
            rows = await conn.fetch(_COVERED, [key.tenant for key in keys], [key.id for key in keys])
        return {SessionKey(row["tenant"], row["id"]): (row["instance"], row["count"]) for row in rows}

    async def words_of(self, key: SessionKey) -> tuple[IndexedSession, frozenset[str]] | None:
        async with self._connection(Access.READ) as conn:
            row = await conn.fetchrow(_WORDS_OF, key.tenant, key.id)
        if row is None:
            return None
        return (row["instance"], row["count"]), untagged(row["words"])

    async def write(self, rows: Sequence[IndexRow], dropped: Collection[SessionKey]) -> set[SessionKey]:
        new = [row for row in rows if row.was is None]
        known = [row for row in rows if row.was is not None]
        written: set[SessionKey] = set()
        async with self._connection(Access.CHANGE) as conn, conn.transaction():
            if dropped:
                await conn.execute(_DROP, [key.tenant for key in dropped], [key.id for key in dropped])
            if new:
                found = await conn.fetch(_INSERT, *_shared_columns(new))
                written.update(SessionKey(row["tenant"], row["id"]) for row in found)
            if known:
                found = await conn.fetch(
                    _UPDATE,
                    *_shared_columns(known),
                    [row.anew for row in known],
                    [row.was[0] for row in known if row.was is not None],
                    [row.was[1] for row in known if row.was is not None],
                )
                written.update(SessionKey(row["tenant"], row["id"]) for row in found)
        return {row.key for row in rows} - written

    async def candidates(self, tenant: str, words: tuple[str, ...]) -> set[str]:
        async with self._connection(Access.READ) as conn:
            rows = await conn.fetch(_CANDIDATES, tenant, query_text(tenant, words))
        return {row["id"] for row in rows}
