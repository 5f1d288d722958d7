"""The packs' rules, without a database: where a run of events is cut, when a body is compressed, and how a range is
cut back out of packs (app.backends.postgres.packs)."""

from __future__ import annotations

import os
from typing import Any

from app.backends.postgres.packs import COMPRESS_FROM, MAX_BYTES, MAX_EVENTS, Packs, assemble, events_in, pack_runs


def lines(count: int, size: int = 20) -> list[bytes]:
    return [(f'{{"seq":{i},"t":"' + "x" * size + '"}').encode() + b"\n" for i in range(count)]


def parts(packs: Packs) -> list[dict[str, Any]]:
    return [
        {"seq": seq, "n": n, "z": z, "body": body}
        for seq, n, z, body in zip(packs.seqs, packs.counts, packs.compressed, packs.bodies, strict=True)
    ]


def test_a_run_is_cut_after_each_turn_end_and_at_the_limits() -> None:
    run = lines(MAX_EVENTS + 50)
    packs = pack_runs(100, run, turn_ends=[104, 100 + MAX_EVENTS + 49])
    assert packs.seqs == [100, 105, 105 + MAX_EVENTS]
    assert packs.counts == [5, MAX_EVENTS, MAX_EVENTS + 50 - 5 - MAX_EVENTS]
    assert packs.sizes == [sum(map(len, run[:5])), sum(map(len, run[5 : 5 + MAX_EVENTS])), sum(map(len, run[-45:]))]
    big = [b"a" * (MAX_BYTES // 2) + b"\n", b"b" * (MAX_BYTES // 2) + b"\n", b"c" * (2 * MAX_BYTES) + b"\n"]
    assert pack_runs(0, big, []).counts == [1, 1, 1]  # never over 1 MiB, but a longer line is a pack of its own


def test_a_body_is_compressed_from_1_kib_when_that_is_smaller() -> None:
    small = pack_runs(0, lines(3), [])
    assert small.sizes[0] < COMPRESS_FROM and small.compressed == [False] and small.bodies[0] == b"".join(lines(3))
    large = pack_runs(0, lines(200), [])
    assert large.compressed == [True] and len(large.bodies[0]) < large.sizes[0] / 5
    noise = [os.urandom(700) + b"\n" for _ in range(3)]
    assert pack_runs(0, noise, []).compressed == [False]  # a frame no smaller than the text is not kept


def test_any_range_reads_back_the_same_lines() -> None:
    run = lines(3000)
    packed = parts(pack_runs(10, run, turn_ends=[500, 1700]))
    whole = b"".join(run)
    for start, stop in ((10, 3010), (11, 12), (500, 502), (509, 1800), (3009, 3010)):
        body, count = assemble(packed, start, stop)
        assert count == stop - start and body == b"".join(run[start - 10 : stop - 10])
    assert assemble(packed, 10, 3010)[0] == whole
    assert [part["seq"] for part in packed] == [10, 501, 501 + MAX_EVENTS, 1701, 1701 + MAX_EVENTS]
    missing = [part for part in packed if part["seq"] != 501]  # the pack of 501.. was lost: reads stop short
    assert assemble(missing, 10, 3010)[1] == 501 - 10
    found = events_in(packed, [10, 600, 3009])
    assert {seq: line + b"\n" for seq, line in found.items()} == {10: run[0], 600: run[590], 3009: run[2999]}
