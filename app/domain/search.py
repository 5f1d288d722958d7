"""What a search matches (spec 12), exactly: the rule an index only narrows down, never decides.

The *words* of a text are its runs of Unicode letters and digits (``str.isalnum``: letters and numbers), compared
in lower case. A session matches a query when every word of the query is a word of its searchable text, the last
word also as the start of one. The searchable text is the title, ``cwd`` and the ``text`` blocks of every
``user/message`` and ``assistant/message``. Diacritics do not fold: ``é`` and ``e`` are different letters.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from app.domain.summary import TITLE_TYPE, message_text, title_of

__all__ = ["SNIPPET_CHARACTERS", "Match", "Query", "SearchText", "words"]

SNIPPET_CHARACTERS = 200
_WORD = re.compile(r"[^\W_]+")


def words(text: str) -> list[str]:
    """The words of ``text``, in lower case, in order."""
    return [word.lower() for word in _WORD.findall(text)]


@dataclass(slots=True)
class SearchText:
    """A session's searchable text: its title, its cwd, and the text of each message event (by seq)."""

    title: str | None = None
    title_seq: int | None = None
    cwd: str | None = None
    messages: list[tuple[int, str]] = field(default_factory=list)

    def add(self, event: dict[str, Any]) -> None:
        """Take in the next stored event."""
        kind = event.get("type")
        data = event.get("data")
        if kind == "user/message":
            self.messages.append((event["seq"], message_text(data)))
        elif kind == "assistant/message":
            self.messages.append((event["seq"], message_text(data.get("message") if isinstance(data, dict) else None)))
        elif kind == TITLE_TYPE:
            self.title, self.title_seq = title_of(data), event["seq"]

    def add_all(self, events: Iterable[dict[str, Any]]) -> SearchText:
        for event in events:
            self.add(event)
        return self

    def all_words(self) -> set[str]:
        found = set(words(self.title or "")) | set(words(self.cwd or ""))
        for _, text in self.messages:
            found.update(words(text))
        return found


@dataclass(frozen=True, slots=True)
class Match:
    """Where a session matched: the seq of the first message event holding the query's first word (the title's
    event when only the title holds it, None when only the cwd does) and at most 200 characters around it."""

    seq: int | None
    snippet: str


@dataclass(frozen=True, slots=True)
class Query:
    """A search query's words: all but the last must be words of the text, the last the start of one."""

    words: tuple[str, ...]

    @classmethod
    def of(cls, q: str) -> Query:
        return cls(tuple(words(q)))

    def holds(self, present: set[str]) -> bool:
        """Whether a text whose words are ``present`` matches."""
        if not self.words:
            return True
        *whole, last = self.words
        if any(word not in present for word in whole):
            return False
        return last in present or any(word.startswith(last) for word in present)

    def _first_holds(self, text: str) -> re.Match[str] | None:
        """Where the query's first word stands in ``text`` as a word (as a start of one if it is also the last)."""
        first = self.words[0]
        prefix = len(self.words) == 1
        for found in _WORD.finditer(text):
            word = found.group().lower()
            if word == first or (prefix and word.startswith(first)):
                return found
        return None

    def match(self, text: SearchText) -> Match | None:
        """The match in a session's searchable text, or None if it does not match."""
        if not self.holds(text.all_words()):
            return None
        if not self.words:
            return Match(None, "")
        for seq, message in text.messages:
            found = self._first_holds(message)
            if found is not None:
                return Match(seq, _snippet(message, found.start(), found.end()))
        places: tuple[tuple[int | None, str | None], ...] = ((text.title_seq, text.title), (None, text.cwd))
        for place, value in places:
            held = self._first_holds(value or "")
            if held is not None and value is not None:
                return Match(place, _snippet(value, held.start(), held.end()))
        return Match(None, "")  # the first word is the start of no word: held only with another's help (never)


def _snippet(text: str, start: int, end: int) -> str:
    """At most ``SNIPPET_CHARACTERS`` characters of ``text`` around ``text[start:end]``, whitespace runs made one
    space (about a third before it)."""
    before = max(0, start - (SNIPPET_CHARACTERS - (end - start)) // 3)
    piece = text[before : before + SNIPPET_CHARACTERS]
    return " ".join(piece.split()) if len(piece.split()) else piece
