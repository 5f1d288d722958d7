"""``export``, ``import`` and ``copy`` carry a session's ``archived`` (spec 17): export writes it into the header
line it writes (a member DSH ignores), import reads it back, and copy keeps it from store to store."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import orjson
import pytest

from app.backends.files import FileBackend
from app.backends.open import StoreSettings
from app.backends.postgres import PostgresBackend
from app.domain.clock import wall_clock_ms
from app.domain.session import SessionKey
from app.service.transfer.copy import copy_store
from app.service.transfer.export import export_session
from app.service.transfer.import_ import import_session, read_log
from tests.service.transfer.stores import fill

SRC, KID = SessionKey("acme", "src"), SessionKey("acme", "kid")


def archive_src(data_dir: Path) -> None:
    """The data directory of ``fill``, with acme's "src" archived."""

    async def run() -> None:
        await fill(data_dir)
        backend = FileBackend(data_dir, clock=wall_clock_ms, sync=False)
        await backend.open()
        found = await backend.find(SRC)
        assert found is not None
        await backend.set_archived(SRC, found.header.instance, True)
        await backend.close()

    asyncio.run(run())


def exported(data_dir: Path, key: SessionKey) -> bytes:
    out = io.BytesIO()
    asyncio.run(export_session(StoreSettings(data_dir), key, out, salvage=False))
    return out.getvalue()


def test_an_export_of_an_archived_session_says_so_in_its_header_only(tmp_path: Path) -> None:
    archive_src(tmp_path)
    stored = (tmp_path / "tenants" / "acme" / "sessions" / "src.jsonl").read_bytes()

    written = exported(tmp_path, SRC)

    header, _, body = written.partition(b"\n")
    stored_header, _, stored_body = stored.partition(b"\n")
    assert body == stored_body  # every event line as stored
    assert orjson.loads(header) == {**orjson.loads(stored_header), "archived": True}
    assert list(orjson.loads(header))[-2:] == ["archived", "instance"]
    assert exported(tmp_path, KID) == (tmp_path / "tenants" / "acme" / "sessions" / "kid.jsonl").read_bytes()


def test_an_import_of_an_exported_archived_session_is_archived_after_a_restart(tmp_path: Path) -> None:
    archive_src(tmp_path / "from")
    header, log = read_log(exported(tmp_path / "from", SRC), "again")
    plain, _ = read_log(exported(tmp_path / "from", KID), None)

    imported = asyncio.run(import_session(StoreSettings(tmp_path / "to"), "team", header, log))

    assert imported.header.archived and not plain.archived

    async def reopened() -> bool:
        backend = FileBackend(tmp_path / "to", clock=wall_clock_ms, sync=False)
        await backend.open()
        found = await backend.find(SessionKey("team", "again"))
        await backend.close()
        return found is not None and found.header.archived

    assert asyncio.run(reopened())


def test_a_header_archived_member_other_than_true_is_ignored(tmp_path: Path) -> None:
    archive_src(tmp_path)
    header, _, body = exported(tmp_path, SRC).partition(b"\n")
    for value in (b"false", b'"yes"', b"1", b"null"):
        changed = header.replace(b'"archived":true', b'"archived":' + value)
        assert not read_log(changed + b"\n" + body, None)[0].archived


def test_a_copy_keeps_archived_between_data_directories(tmp_path: Path) -> None:
    archive_src(tmp_path / "from")

    asyncio.run(copy_store(str(tmp_path / "from"), str(tmp_path / "to"), skip_existing=False))

    async def archived_in_copy() -> dict[str, bool]:
        backend = FileBackend(tmp_path / "to", clock=wall_clock_ms, sync=False)
        await backend.open()
        found = {key.id: (await backend.find(key)) for key in (SRC, KID)}
        await backend.close()
        return {name: session is not None and session.header.archived for name, session in found.items()}

    assert asyncio.run(archived_in_copy()) == {"src": True, "kid": False}


def test_a_copy_keeps_archived_into_postgresql_and_back(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    database = request.getfixturevalue("forklog_db")
    archive_src(tmp_path / "from")

    asyncio.run(copy_store(str(tmp_path / "from"), database, skip_existing=False))

    async def in_database() -> dict[str, bool]:
        backend = PostgresBackend(database, clock=wall_clock_ms)
        await backend.open()
        found = {key.id: (await backend.find(key)) for key in (SRC, KID)}
        await backend.close()
        return {name: session is not None and session.header.archived for name, session in found.items()}

    assert asyncio.run(in_database()) == {"src": True, "kid": False}
    asyncio.run(copy_store(database, str(tmp_path / "back"), skip_existing=False))
    assert exported(tmp_path / "back", SRC) == exported(tmp_path / "from", SRC)
