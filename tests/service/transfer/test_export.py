"""``export`` (app.service.transfer.export) in-process: a session's lines, and a salvage's answers."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import pytest

from app.backends.errors import NothingToSalvage
from app.backends.open import StoreSettings
from app.domain.session import SessionKey
from app.service.errors import TransferFailed
from app.service.transfer.export import Salvage, export_session
from tests.service.transfer.stores import fill


def _export(data_dir: Path, session_id: str, *, salvage: bool = False) -> tuple[bytes, Salvage | None]:
    out = io.BytesIO()
    answer = asyncio.run(export_session(StoreSettings(data_dir), SessionKey("acme", session_id), out, salvage=salvage))
    return out.getvalue(), answer


def test_an_export_writes_the_session_file_forklog_keeps(tmp_path: Path) -> None:
    asyncio.run(fill(tmp_path))

    written, salvaged = _export(tmp_path, "src")

    assert written == (tmp_path / "tenants" / "acme" / "sessions" / "src.jsonl").read_bytes()
    assert salvaged is None


def test_a_damaged_session_is_refused_unless_salvaged_and_a_missing_one_is_named(tmp_path: Path) -> None:
    asyncio.run(fill(tmp_path))
    path = tmp_path / "tenants" / "acme" / "sessions" / "src.jsonl"
    lines = path.read_bytes().split(b"\n")
    path.write_bytes(b"\n".join([*lines[:3], b'{"type":"turn/st', *lines[4:]]))  # the third event is cut

    with pytest.raises(TransferFailed, match=r"^session 'src' is damaged \(line 4 .*\); --salvage writes"):
        _export(tmp_path, "src")
    written, salvaged = _export(tmp_path, "src", salvage=True)
    assert written == b"\n".join(lines[:3]) + b"\n"
    assert salvaged is not None and salvaged.events == 2
    assert salvaged.left_out is not None and salvaged.left_out.startswith("line 4 ")
    with pytest.raises(TransferFailed, match=r"^there is no session 'nobody' \(tenant 'acme'\)$"):
        _export(tmp_path, "nobody")


def test_a_salvage_of_a_file_whose_header_is_damaged_names_the_file_and_writes_nothing(tmp_path: Path) -> None:
    asyncio.run(fill(tmp_path))
    path = tmp_path / "tenants" / "acme" / "sessions" / "src.jsonl"
    path.write_bytes(b'{"type":"session",' + path.read_bytes().split(b"\n", 1)[1])

    with pytest.raises(NothingToSalvage, match=f"^nothing to salvage from {path}: header line is not valid JSON"):
        _export(tmp_path, "src", salvage=True)
