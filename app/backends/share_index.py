"""The share links (spec 18) of a store that holds them in this process's memory (memory, and the files, which also
journal them): by the SHA-256 of their token, and by session."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from app.domain.session import SessionKey
from app.domain.sharing import ShareRecord

__all__ = ["ShareIndex"]


class ShareIndex:
    def __init__(self, shares: Iterable[ShareRecord] = ()) -> None:
        self._by_digest: dict[str, ShareRecord] = {}
        self._by_session: dict[SessionKey, dict[str, ShareRecord]] = {}
        for share in shares:
            self.add(share)

    def __iter__(self) -> Iterator[ShareRecord]:
        return iter(list(self._by_digest.values()))

    def __len__(self) -> int:
        return len(self._by_digest)

    def add(self, share: ShareRecord) -> None:
        self._by_digest[share.digest] = share
        self._by_session.setdefault(SessionKey(share.tenant, share.session_id), {})[share.id] = share

    def by_digest(self, digest: str) -> ShareRecord | None:
        return self._by_digest.get(digest)

    def of_session(self, key: SessionKey) -> list[ShareRecord]:
        return sorted(self._by_session.get(key, {}).values(), key=lambda share: (share.created_at, share.id))

    def find(self, key: SessionKey, share_id: str) -> ShareRecord | None:
        return self._by_session.get(key, {}).get(share_id)

    def remove(self, key: SessionKey, share_id: str) -> ShareRecord | None:
        shares = self._by_session.get(key)
        share = shares.pop(share_id, None) if shares is not None else None
        if share is None:
            return None
        if not shares:
            del self._by_session[key]
        self._by_digest.pop(share.digest, None)
        return share

    def drop_session(self, key: SessionKey) -> list[ShareRecord]:
        """Drop every share of the session (it is deleted); those dropped."""
        dropped = list(self._by_session.pop(key, {}).values())
        for share in dropped:
            self._by_digest.pop(share.digest, None)
        return dropped
