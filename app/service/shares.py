"""Read-only share links (spec 18): make, list and revoke a session's shares; read, follow and continue one by its
token.

Every token that leads nowhere (unknown, malformed, revoked, expired, or whose session is deleted, expired or made
anew) takes the same path and ends in the same :class:`ShareNotFound`: the token is hashed, the share looked up by
that digest alone and the digest compared again in constant time, whatever the token looks like. Nothing of a share
is cached: each read asks the store, so a revoke on any replica is seen by the next read everywhere. What is cached
is what cannot change while a share's session incarnation lives: the head of a frozen share's prefix.

A live share's stream asks again, every :data:`STREAM_RECHECK_SECONDS`, whether its share still leads somewhere
(another replica may have revoked it, or it expired), and ends once it does not; a revoke in this process ends
its streams at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from app.backends.base import Backend
from app.backends.errors import SessionCorrupt
from app.domain.dsh_records import loads_stored
from app.domain.errors import DomainError, ErrorCode, SessionForkError
from app.domain.session import LogHead, Session, SessionKey, head_of
from app.domain.sharing import (
    Redaction,
    ShareRecord,
    new_share_id,
    new_token,
    redact_event,
    redact_lines,
    redact_message,
    same_digest,
    token_digest,
)
from app.service.changes import ChangeFeed
from app.service.reads import Deleted, SessionReads, TailEvents, find_live
from app.service.retention import Retention, is_expired

__all__ = ["STREAM_RECHECK_SECONDS", "ShareNotFound", "SharedView", "Shares"]

# A live share's stream asks the store this often whether its share still holds (spec 18: within 1 s everywhere).
STREAM_RECHECK_SECONDS = 0.4
# Heads of frozen prefixes kept (each a few hundred bytes).
HEADS_KEPT = 4096

# Makes the continued session: (tenant, seed events, header fields by attribute name).
CreateContinued = Callable[[str, Sequence[Any], dict[str, Any]], Awaitable[Session]]


class ShareNotFound(DomainError):
    """A token that leads to no share: one answer, the same body, whatever the reason."""

    code = ErrorCode.SHARE_NOT_FOUND

    def __init__(self) -> None:
        super().__init__("no share has this token: it may be mistyped, revoked or expired; ask for a new link")


class ShareNotLive(DomainError):
    code = ErrorCode.SHARE_NOT_LIVE

    def __init__(self) -> None:
        super().__init__(
            "this share is frozen at a turn/end: read its events (GET …/events); only a live share streams"
        )


def share_not_found_for_session(share_id: str) -> DomainError:
    return DomainError(f'the session has no share "{share_id}"', code=ErrorCode.SHARE_NOT_FOUND)


@dataclass(frozen=True, slots=True)
class SharedView:
    """What a token leads to, now: its share, the live session, and the session as the share shows it (``shown``:
    its head that of the shared prefix)."""

    share: ShareRecord
    session: Session
    shown: Session

    @property
    def count(self) -> int:
        return self.shown.head.count


class Shares:
    def __init__(
        self,
        backend: Backend,
        *,
        require_ready: Callable[[], None],
        reads: SessionReads,
        changes: ChangeFeed,
        retention: Retention,
        create_continued: CreateContinued,
        clock: Callable[[], int],
    ) -> None:
        self._backend = backend
        self._require_ready = require_ready
        self._reads = reads
        self._changes = changes
        self._retention = retention
        self._create_continued = create_continued
        self._clock = clock
        self._heads: OrderedDict[tuple[str, str], LogHead] = OrderedDict()
        # The open streams of each share (by id), each ended by a revoke here at once.
        self._streams: dict[str, set[_StreamRight]] = {}

    # -- a session's shares (a key with the share scope) ------------------------------------------------------------

    async def make(
        self, key: SessionKey, up_to: str | int, expires_in_ms: int, redact: frozenset[Redaction]
    ) -> tuple[ShareRecord, str]:
        """A new share of the live session ``key``, and its token (shown once: only its digest is kept)."""
        self._require_ready()
        session = await find_live(self._backend, key)
        frozen: int | None
        if up_to == "live":
            frozen = None
        elif up_to == "head":
            head = session.head
            if head.last_turn_end_seq is None:
                raise SessionForkError(
                    ErrorCode.NOT_AT_TURN_BOUNDARY,
                    f'session "{key.id}" has no turn/end yet to share up to; share it "live", or wait for turn/end',
                    lastEventType=head.last_type,
                    openTurn=head.open_turn,
                    lastTurnEndSeq=head.last_turn_end_seq,
                )
            frozen = head.last_turn_end_seq
        else:
            assert isinstance(up_to, int)
            frozen = await self._turn_end(session, up_to)
        token = new_token()
        now = self._clock()
        share = ShareRecord(
            id=new_share_id(),
            tenant=key.tenant,
            session_id=key.id,
            instance=session.header.instance,
            digest=token_digest(token),
            up_to=frozen,
            redact=redact,
            created_at=now,
            expires_at=now + expires_in_ms,
        )
        await self._backend.add_share(share)
        return share, token

    async def _turn_end(self, session: Session, seq: int) -> int:
        """``seq``, when it is a ``turn/end`` of ``session``; else INVALID_BOUNDARY naming ``upTo``."""
        head = session.head
        if seq < head.count and (seq == head.last_turn_end_seq or await self._backend.is_turn_end(session.key, seq)):
            return seq
        where = "does not exist" if seq >= head.count else "is not a turn/end"
        reason = f"upTo {seq} {where} in session {session.id!r}"
        raise SessionForkError(ErrorCode.INVALID_BOUNDARY, f"{reason}; pick a turn/end seq", reason=reason)

    async def of_session(self, key: SessionKey) -> list[ShareRecord]:
        """The live session's shares in force, oldest first."""
        self._require_ready()
        session = await find_live(self._backend, key)
        now = self._clock()
        return [
            share
            for share in await self._backend.shares_of(key)
            if share.instance == session.header.instance and not share.expired(now)
        ]

    async def revoke(self, key: SessionKey, share_id: str) -> None:
        """Revoke the share ``share_id`` of the live session ``key``: its links lead nowhere from now on, and its open
        streams end (here at once; on other replicas at their next look, within :data:`STREAM_RECHECK_SECONDS`)."""
        self._require_ready()
        await find_live(self._backend, key)
        if not await self._backend.revoke_share(key, share_id):
            raise share_not_found_for_session(share_id)
        for right in self._streams.pop(share_id, set()):
            right.end()
        self._changes.changed(key)

    # -- a share, by its token (no key) -------------------------------------------------------------------------------

    async def open(self, token: str) -> SharedView:
        """What ``token`` leads to now, or :class:`ShareNotFound` (one path and one answer for every bad token)."""
        self._require_ready()
        digest = token_digest(token)
        share = await self._backend.share_by_digest(digest)
        if share is None or not same_digest(share.digest, digest) or share.expired(self._clock()):
            raise ShareNotFound()
        key = SessionKey(share.tenant, share.session_id)
        try:
            session = await self._backend.find(key)
        except SessionCorrupt:
            session = None
        if (
            session is None
            or session.header.instance != share.instance
            or is_expired(session, self._retention.cutoff(key.tenant))
        ):
            raise ShareNotFound()
        if share.up_to is None:
            return SharedView(share, session, session)
        return SharedView(share, session, replace(session, head=await self._frozen_head(share, session)))

    async def _frozen_head(self, share: ShareRecord, session: Session) -> LogHead:
        slot = (share.id, share.instance)
        head = self._heads.get(slot)
        if head is not None:
            self._heads.move_to_end(slot)
            return head
        assert share.up_to is not None
        tip = await self._backend.seed_tip(session.key, share.instance, share.up_to + 1)
        if tip is None:  # the incarnation went meanwhile
            raise ShareNotFound()
        head = head_of(tip.state)
        self._heads[slot] = head
        if len(self._heads) > HEADS_KEPT:
            self._heads.popitem(last=False)
        return head

    async def read(self, token: str, start: int, limit: int, *, wait_ms: int = 0) -> tuple[bytes, int]:
        """The redacted JSONL lines of up to ``limit`` shared events from ``start``, and how many are shared. A live
        share's read may wait (a long-poll) as a session's does."""
        view = await self.open(token)
        if view.share.up_to is None and wait_ms:
            lines, count = await self._reads.read(
                view.session.key, start, limit, wait_ms=wait_ms, allowed=self._still_holds(view.share)
            )
        else:
            count = view.count
            stop = min(count, start + limit)
            lines = await self._backend.read(view.session.key, start, stop) if start < stop else b""
        return redact_lines(lines, view.share.redact), count

    def _still_holds(self, share: ShareRecord) -> Callable[[], bool]:
        return lambda: not share.expired(self._clock())

    async def history(self, token: str) -> tuple[list[Any], int]:
        """The model history of the shared part, redacted, and how many events are shared."""
        view = await self.open(token)
        messages = await self._backend.history(view.session.key, view.share.up_to)
        return [redact_message(message, view.share.redact) for message in messages], view.count

    async def tail(self, token: str, *, start: int, last_event_id: int | None) -> AsyncIterator[TailEvents]:
        """A live share's events as a live tail (spec 7), redacted; it ends when the share stops leading anywhere
        (revoked, expired, its session deleted). Refusals come before the first item, when this is called."""
        view = await self.open(token)
        share = view.share
        if share.up_to is not None:
            raise ShareNotLive()
        right = _StreamRight(lambda: not share.expired(self._clock()))
        tail = await self._reads.tail(
            view.session.key,
            start=start,
            last_event_id=last_event_id,
            instance=share.instance,
            allowed=right.holds,
        )
        return self._follow(token, view, right, tail)

    async def _follow(
        self, token: str, view: SharedView, right: _StreamRight, tail: AsyncIterator[TailEvents | Deleted]
    ) -> AsyncIterator[TailEvents]:
        share = view.share
        self._streams.setdefault(share.id, set()).add(right)
        watcher = asyncio.create_task(self._watch(token, view.session.key, right))
        try:
            async for item in tail:
                if isinstance(item, Deleted) or not right.holds():
                    return
                # Asked of the store before each batch is handed on: a share revoked on another replica sends
                # nothing stored after its revoke, even before this replica's next look ends the stream.
                if not await self._still_open(token):
                    return
                yield TailEvents(item.first_seq, redact_lines(item.lines, share.redact))
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watcher
            streams = self._streams.get(share.id)
            if streams is not None:
                streams.discard(right)
                if not streams:
                    del self._streams[share.id]

    async def _still_open(self, token: str) -> bool:
        try:
            await self.open(token)
        except ShareNotFound:
            return False
        return True

    async def _watch(self, token: str, key: SessionKey, right: _StreamRight) -> None:
        """Look again at the share every so often; once it leads nowhere, end the stream (and wake it to end)."""
        while right.holds():
            await asyncio.sleep(STREAM_RECHECK_SECONDS)
            try:
                await self.open(token)
            except ShareNotFound:
                right.end()
            except Exception:  # a store that cannot answer now: the stream goes on, and the next look decides
                continue
            if not right.holds():
                self._changes.changed(key)
                return

    # -- continue one (a key with the write scope, in its own tenant) -------------------------------------------------

    async def fork(self, token: str, tenant: str) -> Session:
        """A new session of ``tenant`` holding the shared part up to its last ``turn/end``, redacted as shared, with
        no parent (``origin: "share"``)."""
        view = await self.open(token)
        share = view.share
        last = view.shown.head.last_turn_end_seq if share.up_to is None else share.up_to
        if last is None:
            head = view.shown.head
            raise SessionForkError(
                ErrorCode.NOT_AT_TURN_BOUNDARY,
                "the shared session has no turn/end yet to continue from; wait for turn/end",
                lastEventType=head.last_type,
                openTurn=head.open_turn,
                lastTurnEndSeq=head.last_turn_end_seq,
            )
        count = last + 1
        lines = await self._backend.read(view.session.key, 0, count)
        seed = [redact_event(loads_stored(line)[0], share.redact) for line in lines.splitlines()]
        if len(seed) != count:  # the log moved under the read (a delete): nothing to continue
            raise ShareNotFound()
        header = view.session.header
        lineage: dict[str, Any] = {"origin": "share", "seed_length": count}
        if header.cwd is not None and not share.redact & {Redaction.CWD, Redaction.META}:
            lineage["cwd"] = header.cwd
        if header.agent_preset is not None and Redaction.META not in share.redact:
            lineage["agent_preset"] = header.agent_preset
        return await self._create_continued(tenant, seed, lineage)


class _StreamRight:
    """Whether one open stream of a share may still send: until :meth:`end`, and while ``valid`` says so."""

    __slots__ = ("_ended", "_valid")

    def __init__(self, valid: Callable[[], bool]) -> None:
        self._valid = valid
        self._ended = False

    def end(self) -> None:
        self._ended = True

    def holds(self) -> bool:
        if self._ended:
            return False
        if not self._valid():
            self._ended = True
        return not self._ended
