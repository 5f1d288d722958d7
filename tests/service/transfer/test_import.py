"""``import`` (app.service.transfer.import_) in-process: a DSH log's refusals by line, and an id already taken."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from app.backends.open import StoreSettings
from app.domain.errors import SessionAlreadyExists
from app.service.errors import TransferFailed
from app.service.transfer.import_ import import_session, read_log
from tests.backends.files import builders as b
from tests.service.transfer.stores import fill, session_files


def test_a_log_that_is_no_dsh_log_is_refused_naming_the_line(tmp_path: Path) -> None:
    asyncio.run(fill(tmp_path))
    header = (tmp_path / "sessions" / "src.jsonl").read_bytes().split(b"\n", 1)[0]

    with pytest.raises(TransferFailed, match=r"^the file is empty: a DSH log starts with a session header line$"):
        read_log(b"", None)
    with pytest.raises(TransferFailed, match=r"^line 1 \(the header\) is not valid JSON"):
        read_log(b"{\n", None)
    with pytest.raises(TransferFailed, match=r"^line 2 is not a storage record"):
        read_log(header + b"\n[1,\n", None)


def test_an_import_keeps_the_lineage_and_gives_a_new_instance(tmp_path: Path) -> None:
    asyncio.run(fill(tmp_path / "from"))
    data = (tmp_path / "from" / "sessions" / "kid.jsonl").read_bytes()
    header, log = read_log(data, "renamed")

    session = asyncio.run(import_session(StoreSettings(tmp_path / "to", compression="none"), "team", header, log))

    kept = (tmp_path / "to" / "tenants" / "team" / "sessions" / "renamed.jsonl").read_bytes()
    assert kept.split(b"\n", 1)[1] == data.split(b"\n", 1)[1]  # the same event lines
    assert (session.id, session.header.parent_session, session.header.seed_length) == (
        "renamed",
        "src",
        len(b.full_turn(1)),
    )
    original = read_log(data, None)[0]
    assert session.header.created_at == original.created_at and session.header.instance != original.instance


def test_an_import_into_a_taken_id_is_refused_and_leaves_the_stored_session_as_it_was(tmp_path: Path) -> None:
    asyncio.run(fill(tmp_path))
    before = session_files(tmp_path)
    header, log = read_log((tmp_path / "sessions" / "empty.jsonl").read_bytes(), "src")

    with pytest.raises(SessionAlreadyExists):
        asyncio.run(import_session(StoreSettings(tmp_path), "default", header, log))
    assert session_files(tmp_path) == before
