"""``export``: a session's DSH log (its header line, then every event line) written out (spec 10).

It writes every event the session holds, whatever the last one is (an open turn, a log-only event after its
``turn/end``): the same lines ``GET /sessions/{id}/events`` serves. The store is only read: nothing of it changes.
A damaged session of a data directory may be salvaged instead: what its file holds before its damage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import BinaryIO

from app.backends.base import DataDirChecks
from app.backends.errors import SessionCorrupt
from app.backends.open import OpenFor, StoreSettings, open_store
from app.domain.dsh_records import encode_header, export_header
from app.domain.session import SessionKey
from app.service.errors import TransferFailed
from app.service.transfer.opened import opened

__all__ = ["Salvage", "export_session"]


@dataclass(frozen=True, slots=True)
class Salvage:
    """What a salvage wrote: the whole events before the damage, and why the rest was left out (None: nothing was)."""

    events: int
    left_out: str | None


async def export_session(store: StoreSettings, key: SessionKey, out: BinaryIO, *, salvage: bool) -> Salvage | None:
    """Write the log of ``key`` to ``out``; None, or with ``salvage`` for a damaged session of a data directory what
    was salvaged. TransferFailed when there is no such session or it is damaged (and not salvaged); a storage error
    (:class:`~app.backends.errors.NothingToSalvage` among them) when the store cannot be read."""
    store_read = open_store(store, OpenFor.READ)
    async with opened(store_read.reader) as reader:
        try:
            session = await reader.find(key)
        except SessionCorrupt as damaged:
            if salvage and store_read.data_dir is not None:
                return _salvage(store_read.data_dir, key, out)
            raise TransferFailed(
                f"session {key.id!r} is damaged ({damaged.facts.get('reason')}); --salvage writes what it holds "
                "before the damage"
            ) from None
        if session is None:
            raise TransferFailed(f"there is no session {key.id!r} (tenant {key.tenant!r})")
        out.write(export_header(session.header))
        # Every event, the last one whatever it is (not a snapshot's seed, which must end at a turn/end).
        async for piece in reader.chunks(key, session.header.instance, session.head.count):
            out.write(piece)
        out.flush()
        return None


def _salvage(data_dir: DataDirChecks, key: SessionKey, out: BinaryIO) -> Salvage:
    salvaged = data_dir.salvage(key)
    out.write(encode_header(salvaged.header))
    out.write(salvaged.log.lines())
    out.flush()
    return Salvage(len(salvaged.log), salvaged.left_out)
