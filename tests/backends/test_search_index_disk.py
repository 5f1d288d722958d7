"""The files' search index on a full disk: the write is refused and tried again later, the index is kept (a full
disk is not a damaged index; dropping the file would hand its space back to the next append, once)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.backends.errors import ChangeRefused
from app.backends.search_index import SearchIndex
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
