"""A tenant's usage is read once its quotas are in force, and only when no change of its is in flight: a change
begun before the quotas came (and so not reserved) is counted by the reading, never lost and never counted twice."""

from __future__ import annotations

import asyncio

from app.backends.base import Usage
from app.domain.errors import ErrorCode, SessionError
from app.domain.limits import TenantLimits
from app.domain.session import SessionKey
from app.service.quotas import QuotaLedger


class Store:
    """What a tenant holds: what the changes wrote, read by the ledger when it loads the usage."""

    def __init__(self) -> None:
        self.bytes = 0
        self.readings = 0

    def usage(self, tenant: str) -> Usage:
        self.readings += 1
        return Usage(1, self.bytes)

    def log_bytes(self, key: SessionKey, count: int) -> int:
        return 0


def test_quotas_that_come_mid_flight_are_read_after_the_change_in_flight() -> None:
    async def run() -> None:
        store = Store()
        limits = {"t": TenantLimits()}
        ledger = QuotaLedger(store, lambda tenant: limits[tenant])

        await ledger.enter("t")  # no quotas yet: nothing is reserved, nothing counted
        unreserved = ledger.reserve("t", 0, 600)
        limits["t"] = TenantLimits(max_bytes=1000)  # the keys file is read again meanwhile
        second = asyncio.ensure_future(ledger.enter("t"))
        for _ in range(5):
            await asyncio.sleep(0)
        assert not second.done() and store.readings == 0  # the change in flight is not on disk yet

        store.bytes += 600  # the first change is written
        ledger.commit(unreserved, 0, 600)
        ledger.leave("t")
        await asyncio.wait_for(second, 5)
        assert store.readings == 1

        try:
            ledger.reserve("t", 0, 500)  # 600 + 500 > 1000: the first change's bytes are counted once
        except SessionError as refusal:
            assert refusal.code is ErrorCode.QUOTA_EXCEEDED
        else:
            raise AssertionError("500 more bytes were allowed past the quota")
        fits = ledger.reserve("t", 0, 400)
        ledger.commit(fits, 0, 400)
        ledger.leave("t")

    asyncio.run(run())


def test_changes_without_quotas_never_read_the_usage() -> None:
    async def run() -> None:
        store = Store()
        ledger = QuotaLedger(store, lambda tenant: TenantLimits())
        for _ in range(3):
            await ledger.enter("t")
            ledger.commit(ledger.reserve("t", 0, 100), 0, 100)
            ledger.leave("t")
        assert store.readings == 0

    asyncio.run(run())
