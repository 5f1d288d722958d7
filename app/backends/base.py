"""The storage seam: the one interface between forklog's operations (``app.service``) and where sessions live.

A backend stores sessions and their logs, byte for byte, and nothing more: every rule of spec 1-2 is checked by the
service before it calls a change, and the service serializes the changes of one session within its process. A
backend shared by several processes (PostgreSQL) must also refuse an append staged on a head that another process
has moved (:class:`~app.backends.errors.StaleHead`) and a create of an id that another process took
(:class:`~app.domain.errors.SessionAlreadyExists`).

Implementations: :class:`app.backends.memory.MemoryBackend` (this process's memory), the JSONL files of
:class:`app.backends.files.FileBackend`, and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from app.backends.observer import StorageObserver
from app.domain.fast_init import fast_init
from app.domain.limits import TenantLimits
from app.domain.listing import PageRequest
from app.domain.log import SessionLog
from app.domain.session import Session, SessionHeader, SessionKey
from app.domain.staging import LogTip, StagedEvents

if TYPE_CHECKING:
    from app.backends.search.engine import SearchEngine

__all__ = [
    "Backend",
    "Capabilities",
    "ChangeListener",
    "CorruptEntry",
    "CountsLocally",
    "DataDirChecks",
    "EnforcesQuotas",
    "IdempotencyRecord",
    "IdempotencyRecorder",
    "LimitsOf",
    "Reader",
    "Readiness",
    "Remember",
    "Salvaged",
    "Seed",
    "SeedLog",
    "SeedPrefix",
    "Tip",
    "Usage",
    "Verification",
    "Writer",
    "each_session",
]


@dataclass(frozen=True, slots=True)
class SeedLog:
    """A new session's events, checked: the backend stores them as they are."""

    log: SessionLog


@dataclass(frozen=True, slots=True)
class SeedPrefix:
    """A fork's events: the first ``count`` events of the session ``source`` (incarnation ``instance``).

    ``count`` is 0 or one past a ``turn/end``. The backend may share them with the source instead of copying;
    either way a later change of one session never shows in the other.
    """

    source: SessionKey
    instance: str
    count: int
    # Events to store after the seed in the same atomic step (spec 12, a fork's ``events``), staged by the service
    # on :meth:`Backend.seed_tip` of the same seed: the backend stores the child with them, as they are, or not at all.
    then: StagedEvents | None = None

    def __post_init__(self) -> None:
        if self.then is not None and self.then.base_count != self.count:
            raise ValueError("a fork's events were staged on another seed than its own")


Seed = SeedLog | SeedPrefix


@fast_init
@dataclass(frozen=True, slots=True)
class Tip:
    """What an append is checked against: the session, its log's rules and events, and whether that view may be
    behind another process's appends (then a refusal is confirmed on a fresh tip before it is answered)."""

    session: Session
    log: LogTip
    may_be_stale: bool = False


@dataclass(frozen=True, slots=True)
class CorruptEntry:
    """A stored session kept out of service, as ``/readyz`` lists it."""

    id: str
    path: str
    reason: str
    tenant: str


@dataclass(frozen=True, slots=True)
class Readiness:
    sessions: int
    corrupt: list[CorruptEntry] = field(default_factory=list)


# Called with the key of a session another process changed (appended to, created or deleted).
ChangeListener = Callable[[SessionKey], None]


@dataclass(frozen=True, slots=True)
class IdempotencyRecord:
    """An idempotent request's answer (spec 8), kept with the change it made, for at least 24 hours.

    The change is that of session ``session`` (incarnation ``instance``): a create or fork made it with
    ``end_seq`` events; an append added its events ``first_seq`` .. ``end_seq - 1``. A backend keeps the record
    durably with the change, in the same transaction (or sync round): never one without the other.
    """

    tenant: str
    key: str  # the Idempotency-Key
    fingerprint: str  # a digest of the request's method, path and body bytes
    status: int
    location: str | None
    body: bytes
    created_at: int  # epoch ms
    session: str
    instance: str
    first_seq: int
    end_seq: int


# Builds a create's (or fork's) record from the session it made (whose createdAt the backend assigns).
Remember = Callable[[Session], IdempotencyRecord]


class Reader(Protocol):
    """The reading half of a store: what a command that only reads one needs (``export``, ``copy``'s source).

    Every :class:`Backend` is one; so is a data directory opened to be read (nothing of it changes). All methods may
    raise :class:`~app.backends.errors.StorageUnavailable`.
    """

    name: str

    async def open(self) -> None:
        """Recover (or connect to) the store; may take long. Nothing else is called before it returns."""

    async def close(self) -> None:
        """Release the store (at a clean shutdown: after the last change)."""

    async def tenants(self) -> list[str]:
        """Every tenant that has at least one live session, sorted."""

    async def find(self, key: SessionKey) -> Session | None:
        """The live session, or None; :class:`~app.backends.errors.SessionCorrupt` for a damaged one."""

    async def page(self, tenant: str, request: PageRequest) -> list[Session]:
        """Up to ``request.limit`` live sessions of ``tenant`` after the key ``request.after``, in its query's order
        (by default creation order: createdAt, id), those its filters take (``parent``: its children only)."""

    async def read(self, key: SessionKey, start: int, stop: int) -> bytes:
        """The stored JSONL lines of events ``start`` .. ``stop - 1`` (fewer if the log is shorter)."""

    def chunks(self, key: SessionKey, instance: str, stop: int) -> AsyncIterator[bytes]:
        """The JSONL lines of events ``0`` .. ``stop - 1`` of that incarnation, a piece at a time (a snapshot's
        seed, an exported log: the last of them may be any event); the events are those of the moment of the call,
        whatever happens to the session meanwhile."""


class Writer(Protocol):
    """The changing half of a store: it stores what the service staged and checked, and applies no rule itself."""

    async def create(
        self, key: SessionKey, instance: str, lineage: Mapping[str, Any], seed: Seed, remember: Remember | None = None
    ) -> Session:
        """Make a new live session; the backend assigns ``createdAt``. ``lineage`` holds
        :class:`~app.domain.session.SessionHeader` fields by attribute name. Raises
        :class:`~app.domain.errors.SessionAlreadyExists` if the id is live, ``SessionCorrupt`` if it is damaged. With
        ``remember``, its record is kept with the session (:class:`~app.backends.errors.IdempotencyKeyTaken` if that
        tenant's key is kept already; then nothing is made)."""

    async def append(self, key: SessionKey, staged: StagedEvents, remember: Sequence[IdempotencyRecord] = ()) -> None:
        """Store a checked batch after the log's last event, atomically (all of it, or none); ``staged.base_count``
        must be the log's length, else :class:`~app.backends.errors.StaleHead`. The ``remember`` records are kept
        with it (``IdempotencyKeyTaken`` refuses the whole batch)."""

    async def delete(self, key: SessionKey) -> None:
        """Remove the live session; a session forked from it keeps its events."""

    async def restore(self, key: SessionKey, header: SessionHeader, log: SessionLog) -> Session:
        """Make a live session with exactly this header (its ``createdAt``, ``instance`` and ``archived`` kept) and
        events: an import or a copy from another store. The ``createdAt`` of later creates still follows it. Raises
        ``SessionAlreadyExists`` if the id is live."""

    async def set_archived(
        self, key: SessionKey, instance: str, archived: bool, expected_count: int | None = None
    ) -> Session | None:
        """Archive (or unarchive) the live incarnation ``instance`` of ``key``, durably, writing nothing into its log
        (spec 17); the session as it is then. None, and nothing changed, when that incarnation is not live or (with
        ``expected_count``) its log has another length: the caller reads the session again to say why. A delete
        removes what this kept; a new incarnation of the id is never archived by it."""


class IdempotencyRecorder(Protocol):
    """The idempotency records (spec 8) a store keeps with its changes: read back by a retry, swept after a day."""

    async def recall(self, tenant: str, idempotency_key: str) -> IdempotencyRecord | None:
        """The record kept for ``tenant``'s ``idempotency_key``, or None."""

    async def forget(self, before: int) -> None:
        """Drop the records made before ``before`` (epoch ms); their changes stay."""


class Backend(Reader, Writer, IdempotencyRecorder, Protocol):
    """Where sessions live: a :class:`Reader` that a service also changes (its :class:`Writer`) and that keeps the
    idempotency records of those changes (its :class:`IdempotencyRecorder`). All methods may raise
    :class:`~app.backends.errors.StorageUnavailable`. What a backend provides beyond these it names in its
    :attr:`capabilities`, as objects, never as methods the service probes for."""

    # Told of the durable writes (metrics, traces): the API layer sets it before the store opens.
    observer: StorageObserver

    # -- lifecycle (open and close: the Reader's) ------------------------------------------------------------------

    async def readiness(self, tenant: str | None = None) -> Readiness:
        """How many sessions are live, and which stored ones are kept out of service: over every tenant, or only
        ``tenant``'s (cheap: a count the store keeps or an indexed one, never a pass over the sessions)."""

    def listen(self, listener: ChangeListener) -> None:
        """Call ``listener`` when another process changes a session (never for this process's own changes)."""

    # -- reads (besides the Reader's) ------------------------------------------------------------------------------

    async def is_turn_end(self, key: SessionKey, seq: int) -> bool:
        """Whether the stored event ``seq`` is a ``turn/end``."""

    async def history(self, key: SessionKey, at_seq: int | None) -> list[Any]:
        """The model history (spec 1.3) after event ``at_seq`` (a ``turn/end``), or after the last event."""

    async def tip(self, key: SessionKey, wanted: Iterable[int] = (), *, refresh: bool = False) -> Tip | None:
        """The session's tip for checking an append, or None if it is not live; ``wanted`` are seqs whose events
        the check may look up (a ``tool/result`` replace compares with the result it replaces). A backend that may
        answer from a cache reads the store afresh with ``refresh``."""

    async def seed_tip(
        self, source: SessionKey, instance: str, count: int, wanted: Iterable[int] = ()
    ) -> LogTip | None:
        """What a fork's events are staged on: the rules' state after the first ``count`` events (0 or one past a
        ``turn/end``) of the incarnation ``instance`` of ``source``, surface nodes included, and those of its events
        whose seqs are in ``wanted`` (below ``count``: the events a ``tool/result`` replace compares with); None if
        that incarnation is not live. The prefix never changes while it is: the batch stays valid for a
        :meth:`create` with a :class:`SeedPrefix` of the same seed (which checks the incarnation again)."""

    @property
    def capabilities(self) -> Capabilities:
        """What this backend provides beyond the seam's methods (quotas, search, a sweep lease, a background open)."""


# -- quotas (spec 14) -----------------------------------------------------------------------------------------------


class Usage(NamedTuple):
    """What a tenant holds: its live sessions, and the sum of their ``bytes`` (each session's log as ``export``
    writes it: the header line, then every event line)."""

    sessions: int
    bytes: int


# A tenant's limits as they are now (the keys file may change them at any time).
LimitsOf = Callable[[str], TenantLimits]


class CountsLocally(Protocol):
    """A backend only this process changes (memory, files): the service keeps its tenants' usage itself, starting
    from what this reports, and checks quotas against it."""

    def usage(self, tenant: str) -> Usage:
        """The tenant's live sessions and their bytes, now."""

    def log_bytes(self, key: SessionKey, count: int) -> int:
        """The bytes of the first ``count`` event lines of the live session (0 if it is not live)."""


class EnforcesQuotas(Protocol):
    """A backend several processes share (PostgreSQL): it checks the quotas itself, in the transaction of each
    create, fork and append, so that replicas racing for a tenant's last slot cannot both take it."""

    def enforce_quotas(self, limits_of: LimitsOf) -> None:
        """Check ``limits_of(tenant)`` in every change from now on (refusing with QUOTA_EXCEEDED)."""


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a backend provides beyond the seam, each as the object that does it (None: not provided). The service
    takes what is there; it never asks a backend what it is."""

    # Memory and files: only this process changes them, so the service counts their tenants' usage itself.
    counts_locally: CountsLocally | None = None
    # PostgreSQL: shared by processes, so it checks the quotas in its own transactions.
    enforces_quotas: EnforcesQuotas | None = None
    # An engine of its own (FTS5 beside the files, PostgreSQL's in the database); else the searcher's in memory.
    search_engine: Callable[[], SearchEngine] | None = None
    # A sweep every process runs (retention) is run by one at a time.
    sweep_lease: Callable[[], AbstractAsyncContextManager[bool]] | None = None
    # Begins the work of ``open`` that needs no event loop (reading the files), in a thread, right away.
    begin_opening: Callable[[], None] | None = None


# -- a data directory read by a command (spec 10) --------------------------------------------------------------------


class Verification(Protocol):
    """What a check of every session file of a data directory found."""

    @property
    def files(self) -> int:
        """The entries of the sessions folders looked at."""

    @property
    def events(self) -> int:
        """The events of the whole sessions."""

    @property
    def bytes(self) -> int:
        """The bytes of the files looked at."""

    @property
    def corrupt(self) -> list[CorruptEntry]:
        """The damaged files, as ``/readyz`` lists them."""


@dataclass(frozen=True, slots=True)
class Salvaged:
    """What a damaged session file holds before its damage."""

    header: SessionHeader
    log: SessionLog
    left_out: str | None  # why the rest was left out (None when nothing was)


class DataDirChecks(Protocol):
    """What only a data directory opened to be read does besides reading: check every file as a start would,
    changing nothing, and salvage a damaged one."""

    def count_files(self) -> int:
        """How many entries the sessions folders hold (for a progress bar)."""

    def verify(self, progress: Callable[[int], None] | None = None) -> Verification:
        """Check every session file, keeping none in memory; ``progress(bytes)`` after each file."""

    def salvage(self, key: SessionKey) -> Salvaged:
        """What the damaged file of ``key`` holds before its damage; :class:`~app.backends.errors.NothingToSalvage`
        when it cannot be read or even its header is damaged."""


async def each_session(store: Reader, tenant: str, request: PageRequest) -> AsyncIterator[Session]:
    """Every session ``request`` takes, from its start to the list's end, a page of ``request.limit`` at a time."""
    while True:
        page = await store.page(tenant, request)
        for session in page:
            yield session
        if len(page) < request.limit:
            return
        request = request.following(page[-1])
