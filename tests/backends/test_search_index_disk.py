"""The files' search index on a full disk: the write is refused and tried again later, the index is kept (a full
disk is not a damaged index; dropping the file would hand its space back to the next append, once). Its matches stay
within the caller's tenant, and a file of an older layout is rebuilt."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from app.backends.errors import ChangeRefused
from app.backends.search.sqlite_index import SearchIndex, match_text
from app.domain.session import SessionKey


def test_a_full_disk_refuses_the_write_and_keeps_the_index(tmp_path: Path) -> None:
    path = tmp_path / "search.sqlite3"
    index = SearchIndex(path)
    index.open()
    kept = SessionKey("default", "kept")
    index.write([(kept, ("i1", 1), {"harbour"}, True)], [])
    db = index._connection()  # the test makes the database full
    db.execute(f"PRAGMA max_page_count = {db.execute('PRAGMA page_count').fetchone()[0]}")

    words = {f"word{number}" * 40 for number in range(2000)}
    with pytest.raises(ChangeRefused):
        index.write([(SessionKey("default", "big"), ("i2", 1), words, True)], [])

    assert path.exists()
    assert index.candidates("default", ("harbour",)) == {"kept"}
    index.close()


def test_another_tenants_words_are_not_what_a_search_matches(tmp_path: Path) -> None:
    """Spec 9: FTS5 itself matches only the caller's tenant's words (no other tenant's are found, then dropped)."""
    path = tmp_path / "search.sqlite3"
    index = SearchIndex(path)
    index.open()
    secrets = {f"acmesecret{number:06d}" for number in range(100)}
    index.write([(SessionKey("a", "vault"), ("i1", 1), secrets, True)], [])

    db = sqlite3.connect(path)
    matched = db.execute("SELECT count(*) FROM docs WHERE docs MATCH ?", (match_text("b", ("acmesec",)),)).fetchone()
    db.close()

    assert matched == (0,)
    assert index.candidates("a", ("acmesec",)) == {"vault"}
    assert index.candidates("b", ("acmesec",)) == set()
    index.close()


def test_an_index_an_older_forklog_wrote_is_rebuilt_at_start(tmp_path: Path) -> None:
    """Its words carry no tenant's tag, so they would never match: nothing it holds is trusted, every session is
    indexed anew."""
    path = tmp_path / "search.sqlite3"
    older = sqlite3.connect(path)
    older.executescript(
        """
        CREATE TABLE indexed (
            tenant TEXT NOT NULL, id TEXT NOT NULL, instance TEXT NOT NULL, count INTEGER NOT NULL,
            doc INTEGER NOT NULL, PRIMARY KEY (tenant, id)
        );
        CREATE INDEX indexed_doc ON indexed (doc);
        CREATE VIRTUAL TABLE docs USING fts5(words, tokenize = "unicode61 remove_diacritics 0");
        INSERT INTO docs (rowid, words) VALUES (1, 'harbour lights');
        INSERT INTO indexed VALUES ('default', 'kept', 'i1', 1, 1);
        """
    )
    older.commit()
    older.close()
    kept = SessionKey("default", "kept")

    index = SearchIndex(path)
    assert index.open() == {}
    index.write([(kept, ("i1", 1), {"harbour", "lights"}, True)], [])
    index.close()

    again = SearchIndex(path)
    assert again.open() == {kept: ("i1", 1)}  # the new layout is kept across a restart
    assert again.candidates("default", ("harbour", "lig")) == {"kept"}
    again.close()
