"""What the PostgreSQL backend stores, read straight from its tables (the packs decompressed), and the layout of an
older forklog (every event one row of ``forklog_events``, schema before the packs) made from today's."""

from __future__ import annotations

import asyncpg
import zstandard

from app.backends.postgres.schema import MIGRATIONS

__all__ = ["PACKED_VERSION", "STORED_EVENTS", "stored_text", "unpack_everything"]

# The schema version that added the packs, found by what it makes (the lead renumbers migrations when merging).
PACKED_VERSION = next(number for number, sql in enumerate(MIGRATIONS, 1) if "forklog_packs (" in sql)
STORED_EVENTS = (
    "SELECT (SELECT count(*) FROM forklog_events) + (SELECT coalesce(sum(count), 0) FROM forklog_packs)::bigint"
)


async def stored_text(conn: asyncpg.Connection, log: int | None = None) -> bytes:
    """Every stored line of ``log`` (or of every log, by log then seq), each ending in a newline, as the tables
    hold them: the packs' bodies decompressed, and the small rows (the only rows before the packs' schema)."""
    where = "" if log is None else f"WHERE log = {int(log)}"
    parts: list[tuple[int, int, bytes]] = []
    packed = await conn.fetchval("SELECT to_regclass('forklog_packs') IS NOT NULL")
    for row in await conn.fetch(f"SELECT log, seq, compressed, body FROM forklog_packs {where}") if packed else []:
        body = bytes(row["body"])
        parts.append((row["log"], row["seq"], zstandard.decompress(body) if row["compressed"] else body))
    for row in await conn.fetch(f"SELECT log, seq, line FROM forklog_events {where}"):
        parts.append((row["log"], row["seq"], row["line"].encode() + b"\n"))
    return b"".join(text for _, _, text in sorted(parts))


async def unpack_everything(conn: asyncpg.Connection) -> None:
    """Make the tables what the forklog before the packs left: each packed event back in its own row, the packs'
    tables gone, the schema version the one before them."""
    async with conn.transaction():
        for row in await conn.fetch("SELECT log, seq, compressed, body FROM forklog_packs"):
            body = bytes(row["body"])
            text = zstandard.decompress(body) if row["compressed"] else body
            lines = text.decode().split("\n")[:-1]
            await conn.copy_records_to_table(
                "forklog_events",
                records=[(row["log"], row["seq"] + offset, line) for offset, line in enumerate(lines)],
                columns=("log", "seq", "line"),
            )
        await conn.execute("DROP TABLE forklog_packs, forklog_pack_queue")
        await conn.execute(
            "ALTER TABLE forklog_events RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold)"
        )
        await conn.execute("UPDATE forklog_schema SET version = $1", PACKED_VERSION - 1)
