"""A key works only while its line is in the keys file (spec 9), also for the requests that outlive their check.

The :class:`~app.api.edge.auth.Authenticator` checks a key when a request begins; a stream or a long-poll then lasts for
minutes. Such a request asks :meth:`KeysInForce.allows` again after each read of the log and before sending what
it read (a long-poll before it answers), and that call looks at the file itself (one ``stat``) rather than at what
the last poll read: an event stored after the key's line was removed never reaches the stream, however recent the
removal. An idle stream or a waiting long-poll has nothing to send, so every reload of the file wakes every waiter
(``on_change``) to ask again: a removed key's stream ends, and its long-poll answers 401 (403 when the line stays
but lost the scope), within :data:`~app.api.edge.keys_file.POLL_SECONDS`.

Every read of the file happens on the event loop, so a poll and a frame's look can never interleave (one could
otherwise take the file's new identity for seen while the other still reads it). The file is a few lines; its read
costs less than a frame.
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import Request
from fastapi.responses import Response

from app.api.edge.auth import challenge
from app.api.edge.keys_file import POLL_SECONDS, KeysFile
from app.api.routing.calling import key_in_force
from app.api.wire.problems import problem_response
from app.backends.background import Periodic
from app.domain.access import ApiKey, KeyRing, Scope
from app.domain.errors import ErrorCode

__all__ = ["KeysInForce", "revoked_answer", "still_allowed"]


class KeysInForce:
    """The keys file's keys as they are now; ``on_change`` is called after each reload that changed them."""

    def __init__(self, file: KeysFile, *, on_change: Callable[[], None]) -> None:
        self.file = file
        self._on_change = on_change
        # Looks at the file every POLL_SECONDS while the app runs (started and stopped by its lifespan).
        self.watcher = Periodic("forklog-keys-watch", POLL_SECONDS, self._look)

    @property
    def ring(self) -> KeyRing:
        """The keys the last look at the file found (what every request begins with)."""
        return self.file.keys

    def current(self) -> KeyRing:
        """The keys in force this instant: the file is read again first if it changed."""
        if self.file.reload_if_changed():
            self._on_change()
        return self.file.keys

    def allows(self, key: ApiKey, scope: Scope) -> bool:
        """Whether ``key``, found when its request began, is still in the file, for the same tenant, with ``scope``."""
        line = self.current().line_of(key)
        return line is not None and line.tenant == key.tenant and line.allows(scope)

    async def _look(self) -> None:
        self.current()


def _always() -> bool:
    return True


def still_allowed(request: Request, scope: Scope) -> Callable[[], bool]:
    """Whether the request's key still has ``scope``: asked again and again while the request lasts (always True
    without a keys file, or on a route called without a key)."""
    keys: KeysInForce | None = request.app.state.keys
    key = key_in_force(request)
    if keys is None or key is None:
        return _always
    return lambda: keys.allows(key, scope)


def revoked_answer(request: Request, scope: Scope) -> Response:
    """The answer to a request whose key was removed from the file while it waited (``401``, as for a key never
    in the file), or whose line lost ``scope`` (``403``, as a new request with the key would get)."""
    keys: KeysInForce = request.app.state.keys
    key = key_in_force(request)
    assert key is not None  # only a request that began with a key can lose it
    line = keys.current().line_of(key)
    if line is not None and line.tenant == key.tenant:
        detail = f"key {key.id!r} lost the {scope.value!r} scope this request needs while it waited"
        return problem_response(request, ErrorCode.FORBIDDEN, detail)
    detail = "the key was removed from the keys file while this request waited; use a key in force"
    answer = problem_response(request, ErrorCode.UNAUTHENTICATED, detail)
    answer.headers["WWW-Authenticate"] = challenge(invalid=True)
    return answer
