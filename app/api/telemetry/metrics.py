"""The service's metrics (spec 13), kept by this app (two apps in one process never share or collide) and written in
the Prometheus text format by ``prometheus-client`` when ``GET /metrics`` asks.

The HTTP metrics carry OpenTelemetry's names as Prometheus writes them; forklog's own count what the service and the
storage report (:class:`~app.service.observer.SessionObserver`, :meth:`Metrics.synced`). No label holds a session id,
a key or a path: routes are their templates, methods outside HTTP's own are ``_OTHER``, and ``tenant`` is a label
only when asked for (``FORKLOG_METRICS_TENANT_LABEL``).

Why not prometheus-client's own metric objects on the hot path: each of their updates takes a lock and checks the
metric, several microseconds an append once there are a dozen of them, against spec 13's 3%. Here an answer adds to
plain numbers (each is written by one thread only: the event loop, the storage's sync rounds included); a scrape
turns them into prometheus-client's metric families (a custom collector) and its exposition. Beside them, the
process's own standard metrics (``process_*``, ``python_gc_*``), as prometheus-client's default registry has them.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, GCCollector, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.utils import floatToGoString

from app.service.observer import SessionObserver

__all__ = ["KNOWN_METHODS", "NO_TENANT", "Histogram", "Metrics"]

# OpenTelemetry's http.server.request.duration buckets (seconds).
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
BATCH_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)
SYNC_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
# OpenTelemetry's rule for http.request.method: any other method is "_OTHER" (a client cannot mint series).
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"})
HTTP_LABELS = ("http_request_method", "http_route", "http_response_status_code")
# The tenant label of a request that has no tenant (spec 13: refused before its key was read, or made without one
# while keys are required): a tenant is named like an id, starting with a letter or digit, so none is named this.
NO_TENANT = "-"


class Histogram:
    """Counts per bucket (not yet cumulative) and a sum: what one labelled histogram series holds."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf's own
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def buckets(self) -> list[tuple[str, float]]:
        cumulative: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += count
            cumulative.append((floatToGoString(bound), running))  # type: ignore[no-untyped-call]
        return cumulative


class Metrics(SessionObserver):
    def __init__(self, *, tenant_label: bool = False) -> None:
        self.tenant_label = tenant_label
        self.durations: dict[tuple[str, ...], Histogram] = {}  # (method, route, status[, tenant])
        self.active_requests: dict[str, int] = {}
        self.problems: dict[tuple[str, ...], int] = {}  # (code[, tenant])
        # Per tenant ("" for all when there is no tenant label).
        self.events_appended: dict[str, int] = {}
        self.bytes_appended: dict[str, int] = {}
        self.creates: dict[str, int] = {}
        self.forks: dict[str, int] = {}
        self.deletes: dict[str, int] = {}
        self.expired_sessions: dict[str, int] = {}
        self.replays: dict[str, int] = {}
        self.stream_subscribers: dict[str, int] = {}
        self.standby_reads: dict[str, int] = {}  # by the server that served them: standby, primary
        self.batch_events = Histogram(BATCH_BUCKETS)
        self.sync_seconds = Histogram(SYNC_BUCKETS)
        self.sessions = 0
        self.spans_dropped = 0
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)
        # What prometheus-client's default registry would show of the process (its CPU, memory and descriptors, and
        # the collector's runs per generation): read at a scrape only.
        ProcessCollector(registry=self.registry)
        GCCollector(registry=self.registry)

    # -- HTTP ------------------------------------------------------------------------------------------------------

    def started(self, method: str) -> None:
        self.active_requests[method] = self.active_requests.get(method, 0) + 1

    def answered(self, method: str, route: str, status: int, tenant: str, seconds: float) -> None:
        self.active_requests[method] -= 1
        key = (method, route, str(status), tenant) if self.tenant_label else (method, route, str(status))
        series = self.durations.get(key)
        if series is None:
            series = self.durations[key] = Histogram(DURATION_BUCKETS)
        series.observe(seconds)

    def problem(self, code: str, tenant: str) -> None:
        key = (code, tenant) if self.tenant_label else (code,)
        self.problems[key] = self.problems.get(key, 0) + 1

    # -- the service (SessionObserver) -------------------------------------------------------------------------------

    def _add(self, counts: dict[str, int], tenant: str, amount: int = 1) -> None:
        slot = tenant if self.tenant_label else ""
        counts[slot] = counts.get(slot, 0) + amount

    def appended(self, tenant: str, events: int, size: int) -> None:
        self._add(self.events_appended, tenant, events)
        self._add(self.bytes_appended, tenant, size)

    def created(self, tenant: str) -> None:
        self._add(self.creates, tenant)

    def forked(self, tenant: str) -> None:
        self._add(self.forks, tenant)

    def deleted(self, tenant: str) -> None:
        self._add(self.deletes, tenant)

    def expired(self, tenant: str) -> None:
        self._add(self.expired_sessions, tenant)

    def replayed(self, tenant: str) -> None:
        self._add(self.replays, tenant)

    def streams(self, tenant: str, change: int) -> None:
        self._add(self.stream_subscribers, tenant, change)

    # -- the storage -----------------------------------------------------------------------------------------------

    def synced(self, events: int, seconds: float) -> None:
        """One append round or commit (the file backend tells it from the event loop)."""
        self.batch_events.observe(events)
        self.sync_seconds.observe(seconds)

    def standby_read(self, server: str) -> None:
        """A read that a standby may serve ran on ``server`` (may be called from any thread: a lost count is
        harmless)."""
        self.standby_reads[server] = self.standby_reads.get(server, 0) + 1

    def span_dropped(self) -> None:
        self.spans_dropped += 1

    # -- the scrape ------------------------------------------------------------------------------------------------

    def exposition(self, accept: str | None, *, live_sessions: int | None) -> tuple[bytes, str]:
        """The scrape's body and content type (OpenMetrics when the scraper asks for it, else Prometheus text)."""
        if live_sessions is not None:
            self.sessions = live_sessions
        encode, content_type = choose_encoder(accept or "")
        body: bytes = encode(self.registry)
        return body, content_type

    def collect(self) -> Iterator[Metric]:
        """prometheus-client's families of every metric (the registry's collector protocol)."""
        tenant = ["tenant"] if self.tenant_label else []
        duration = HistogramMetricFamily(
            "http_server_request_duration_seconds", "Duration of HTTP server requests.", labels=[*HTTP_LABELS, *tenant]
        )
        for labels, series in list(self.durations.items()):
            duration.add_metric(list(labels), series.buckets(), series.total)
        yield duration
        active = GaugeMetricFamily(
            "http_server_active_requests", "Number of active HTTP server requests.", labels=["http_request_method"]
        )
        for method, count in list(self.active_requests.items()):
            active.add_metric([method], count)
        yield active
        yield self._counter("forklog_events_appended", "Events appended and acknowledged.", self.events_appended)
        yield self._counter(
            "forklog_event_bytes_appended", "Bytes of appended events as stored (JSONL lines).", self.bytes_appended
        )
        yield self._histogram(
            "forklog_append_batch_events",
            "Events made durable per append sync round (files) or commit (PostgreSQL).",
            self.batch_events,
        )
        yield self._histogram(
            "forklog_storage_sync_seconds",
            "Seconds of each append sync round (files: write and fsync) or commit (PostgreSQL).",
            self.sync_seconds,
        )
        yield self._counter("forklog_forks", "Sessions forked.", self.forks)
        yield self._counter("forklog_sessions_created", "Sessions created (forks not included).", self.creates)
        yield self._counter("forklog_sessions_deleted", "Sessions deleted.", self.deletes)
        yield self._counter(
            "forklog_sessions_expired", "Sessions deleted for their tenant's retention.", self.expired_sessions
        )
        yield GaugeMetricFamily("forklog_sessions", "Live sessions (as of the last scrape).", value=self.sessions)
        yield self._by_tenant(
            GaugeMetricFamily, "forklog_stream_subscribers", "Open event streams (live tails).", self.stream_subscribers
        )
        yield self._counter(
            "forklog_idempotent_replays", "Requests answered again from a kept Idempotency-Key.", self.replays
        )
        standby_reads = CounterMetricFamily(
            "forklog_standby_reads",
            "Reads that a hot standby may serve (FORKLOG_READ_DATABASE_URL), by the server that served them.",
            labels=["server"],
        )
        for server, count in list(self.standby_reads.items()):
            standby_reads.add_metric([server], count)
        yield standby_reads
        problems = CounterMetricFamily("forklog_problems", "Problem answers, by code.", labels=["code", *tenant])
        for labels, count in list(self.problems.items()):
            problems.add_metric(list(labels), count)
        yield problems
        yield CounterMetricFamily(
            "forklog_trace_spans_dropped",
            "Trace spans dropped because the exporter's queue was full (a slow or unreachable collector).",
            value=self.spans_dropped,
        )

    def _counter(self, name: str, documentation: str, counts: dict[str, int]) -> Metric:
        return self._by_tenant(CounterMetricFamily, name, documentation, counts)

    def _by_tenant(self, family: Any, name: str, documentation: str, counts: dict[str, int]) -> Metric:
        if not self.tenant_label:
            metric: Metric = family(name, documentation, value=counts.get("", 0))
            return metric
        metric = family(name, documentation, labels=["tenant"])
        for tenant, count in list(counts.items()):
            metric.add_metric([tenant], count)  # type: ignore[attr-defined]
        return metric

    @staticmethod
    def _histogram(name: str, documentation: str, series: Histogram) -> Metric:
        family = HistogramMetricFamily(name, documentation)
        family.add_metric([], series.buckets(), series.total)
        return family
