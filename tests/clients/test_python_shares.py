"""The Python client's share links (spec 18) against a real server: ``sessions.share``, ``shares``, ``unshare`` and
``client.shared(token)`` with ``get``, ``events``, ``history``, ``tail`` and ``fork``, blocking and async; a tail
of a live share across a dropped connection, ended by its revoke."""

from __future__ import annotations

import asyncio
import contextlib
import threading

import pytest
from forklog_client import AsyncForklog, Forklog, NotAtTurnBoundaryError, ShareNotFoundError, ShareNotLiveError

from tests.clients.proxy import Fault, FaultProxy
from tests.clients.turns import note, turn
from tests.e2e.server import Server

pytestmark = pytest.mark.e2e

STREAM = r"/events/stream$"


def test_a_share_made_read_continued_and_revoked(server: Server) -> None:
    with Forklog(server.base, timeout=10.0) as client:
        client.sessions.create(id="py-share", meta={"cwd": "/home/me"})
        with pytest.raises(NotAtTurnBoundaryError):
            client.sessions.share("py-share")
        client.sessions.append("py-share", turn(1, "first question"))
        made = client.sessions.share("py-share", expires_in="P1D", redact=["cwd"])
        assert made.up_to == 5 and made.redact == ["cwd"] and made.token and made.url
        assert [share.id for share in client.sessions.shares("py-share")] == [made.id]
        assert client.sessions.shares("py-share")[0].token is None

        assert made.token is not None
        shared = client.shared(made.token)
        session = shared.get()
        assert session.event_count == 6 and session.cwd is None and "id" not in session
        client.sessions.append("py-share", turn(2))
        assert [event.seq for event in shared.events(page_size=4)] == list(range(6))
        assert [message.role for message in shared.history().messages] == ["user", "assistant"]
        with pytest.raises(ShareNotLiveError):
            list(shared.tail())
        child = shared.fork()
        assert child.origin == "share" and child.parent_session is None and child.event_count == 6

        client.sessions.unshare("py-share", made.id)
        with pytest.raises(ShareNotFoundError):
            shared.get()
        with pytest.raises(ShareNotFoundError):  # a revoke of a share no longer there (a retry's would return)
            client.sessions.unshare("py-share", made.id)


def test_a_live_share_tail_follows_across_a_drop_and_ends_at_its_revoke(server: Server, proxy: FaultProxy) -> None:
    proxy.plan(Fault("mid_stream", STREAM, frames=4))
    with Forklog(server.base, timeout=10.0) as writer, Forklog(proxy.base, timeout=10.0) as reader:
        writer.sessions.create(id="py-share-live")
        writer.sessions.append("py-share-live", turn(1))
        made = writer.sessions.share("py-share-live", up_to="live", redact=["tools"])
        assert made.token is not None
        seen: list[int] = []
        revoked = threading.Event()

        def write_then_revoke() -> None:
            writer.sessions.append("py-share-live", [note(1), note(2)])
            while len(seen) < 8:
                threading.Event().wait(0.02)
            writer.sessions.unshare("py-share-live", made.id)
            revoked.set()
            writer.sessions.append("py-share-live", [note(3)])

        writing = threading.Thread(target=write_then_revoke)
        writing.start()
        with contextlib.closing(reader.shared(made.token).tail()) as tail:
            seen.extend(event.seq for event in tail)  # ends once the share is revoked
        writing.join()
    assert revoked.is_set()
    assert seen == list(range(8))


def test_the_async_client_shares_alike(server: Server) -> None:
    async def walk() -> None:
        async with AsyncForklog(server.base, timeout=10.0) as client:
            await client.sessions.create(id="apy-share")
            await client.sessions.append("apy-share", turn(1))
            made = await client.sessions.share("apy-share", up_to="live")
            assert made.up_to == "live" and made.token is not None
            assert [share.id for share in await client.sessions.shares("apy-share")] == [made.id]
            shared = client.shared(made.token)
            assert (await shared.get()).event_count == 6
            assert [event.seq async for event in shared.events()] == list(range(6))
            assert len((await shared.history()).messages) == 2
            seqs: list[int] = []
            async with contextlib.aclosing(shared.tail()) as tail:
                async for event in tail:
                    seqs.append(event.seq)
                    if event.seq == 5:
                        await client.sessions.unshare("apy-share", made.id)
            assert seqs == list(range(6))
            with pytest.raises(ShareNotFoundError):
                await shared.fork()

    asyncio.run(walk())
