"""``export``: a session's DSH log (its header line, then every event line) written out (spec 10), raw ``.jsonl``
or DSH's ``.jsonl.zstd`` (spec 16: :mod:`app.service.transfer.dsh_log`).

It writes every event the session holds, whatever the last one is (an open turn, a log-only event after its
``turn/end``): the same lines ``GET /sessions/{id}/events`` serves. The store is only read: nothing of it changes.
A damaged session of a data directory may be salvaged instead: what its file holds before its damage.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import BinaryIO

from app.backends.base import DataDirChecks
from app.backends.errors import SessionCorrupt
from app.backends.open import OpenFor, StoreSettings, open_store
from app.domain.session import SessionKey
from app.service.errors import TransferFailed
from app.service.transfer.dsh_log import LogEncoding, log_with_header
from app.service.transfer.opened import opened

__all__ = ["Salvage", "export_session"]


@dataclass(frozen=True, slots=True)
class Salvage:
    """What a salvage wrote: the whole events before the damage, and why the rest was left out (None: nothing was)."""

    events: int
    left_out: str | None


async def export_session(
    store: StoreSettings, key: SessionKey, out: BinaryIO, *, salvage: bool, encoding: LogEncoding = "none"
) -> Salvage | None:
    """Write the log of ``key`` to ``out``, encoded as ``encoding``; None, or with ``salvage`` for a damaged session
    of a data directory what was salvaged. TransferFailed when there is no such session or it is damaged (and not
    salvaged); a storage error (:class:`~app.backends.errors.NothingToSalvage` among them) when the store cannot be
    read."""
    store_read = open_store(store, OpenFor.READ)
    async with opened(store_read.reader) as reader:
        try:
            session = await reader.find(key)
        except SessionCorrupt as damaged:
            if salvage and store_read.data_dir is not None:
                return await _salvage(store_read.data_dir, key, out, encoding)
            raise TransferFailed(
                f"session {key.id!r} is damaged ({damaged.facts.get('reason')}); --salvage writes what it holds "
                "before the damage"
            ) from None
        if session is None:
            raise TransferFailed(f"there is no session {key.id!r} (tenant {key.tenant!r})")
        # Every event, the last one whatever it is (not a snapshot's seed, which must end at a turn/end).
        lines = reader.chunks(key, session.header.instance, session.head.count)
        async for piece in log_with_header(session.header, lines, encoding):
            out.write(piece)
        out.flush()
        return None


async def _salvage(data_dir: DataDirChecks, key: SessionKey, out: BinaryIO, encoding: LogEncoding) -> Salvage:
    salvaged = data_dir.salvage(key)

    async def lines() -> AsyncIterator[bytes]:
        yield salvaged.log.lines()

    async for piece in log_with_header(salvaged.header, lines(), encoding):
        out.write(piece)
    out.flush()
    return Salvage(len(salvaged.log), salvaged.left_out)
