"""The service's metrics (spec 13), made with ``prometheus-client`` into a registry of their own per app (two apps in
one process never share or collide), and served by ``GET /metrics``.

The HTTP metrics carry OpenTelemetry's names as Prometheus writes them; forklog's own count what the service and the
storage report (:class:`~app.service.observer.SessionObserver`, :meth:`Metrics.synced`). No label holds a session id,
a key or a path: routes are their templates, methods outside HTTP's own are ``_OTHER``, and ``tenant`` is a label
only when asked for (``FORKLOG_METRICS_TENANT_LABEL``). Labelled series are looked up once and kept: an answer costs
a few dictionary lookups and locked additions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.exposition import choose_encoder

from app.service.observer import SessionObserver

__all__ = ["KNOWN_METHODS", "Metrics"]

# OpenTelemetry's http.server.request.duration buckets (seconds).
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
BATCH_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)
SYNC_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
# OpenTelemetry's rule for http.request.method: any other method is "_OTHER" (a client cannot mint series).
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"})


class Metrics(SessionObserver):
    def __init__(self, *, tenant_label: bool = False) -> None:
        # The *_created series double the output and tell a scraper nothing it needs.
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.tenant_label = tenant_label
        self.registry = CollectorRegistry()
        tenant = ("tenant",) if tenant_label else ()
        registry = self.registry
        self.request_duration = Histogram(
            "http_server_request_duration_seconds",
            "Duration of HTTP server requests.",
            ("http_request_method", "http_route", "http_response_status_code", *tenant),
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.active_requests = Gauge(
            "http_server_active_requests",
            "Number of active HTTP server requests.",
            ("http_request_method",),
            registry=registry,
        )
        self.events_appended = Counter(
            "forklog_events_appended", "Events appended and acknowledged.", tenant, registry=registry
        )
        self.bytes_appended = Counter(
            "forklog_event_bytes_appended", "Bytes of appended events as stored (JSONL).", tenant, registry=registry
        )
        self.batch_events = Histogram(
            "forklog_append_batch_events",
            "Events made durable per append sync round (files) or commit (PostgreSQL).",
            buckets=BATCH_BUCKETS,
            registry=registry,
        )
        self.sync_seconds = Histogram(
            "forklog_storage_sync_seconds",
            "Seconds of each append sync round (files: write and fsync) or commit (PostgreSQL).",
            buckets=SYNC_BUCKETS,
            registry=registry,
        )
        self.forks = Counter("forklog_forks", "Sessions forked.", tenant, registry=registry)
        self.creates = Counter(
            "forklog_sessions_created", "Sessions created (forks not included).", tenant, registry=registry
        )
        self.deletes = Counter("forklog_sessions_deleted", "Sessions deleted.", tenant, registry=registry)
        self.sessions = Gauge("forklog_sessions", "Live sessions (as of the last scrape).", registry=registry)
        self.stream_subscribers = Gauge(
            "forklog_stream_subscribers", "Open event streams (live tails).", tenant, registry=registry
        )
        self.replays = Counter(
            "forklog_idempotent_replays",
            "Requests answered again from a kept Idempotency-Key.",
            tenant,
            registry=registry,
        )
        self.problems = Counter("forklog_problems", "Problem answers, by code.", ("code", *tenant), registry=registry)
        self.spans_dropped = Counter(
            "forklog_trace_spans_dropped",
            "Trace spans dropped because the exporter's queue was full (a slow or unreachable collector).",
            registry=registry,
        )
        self._children: dict[tuple[Any, ...], Any] = {}

    def _child(self, metric: Any, *labels: str) -> Any:
        """``metric.labels(*labels)``, kept: prometheus-client's own lookup takes a lock and builds a key."""
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def _by_tenant(self, metric: Any, tenant: str) -> Any:
        return self._child(metric, tenant) if self.tenant_label else metric

    # -- HTTP ------------------------------------------------------------------------------------------------------

    def active(self, method: str) -> Gauge:
        gauge: Gauge = self._child(self.active_requests, method)
        return gauge

    def answered(self, method: str, route: str, status: int, tenant: str, seconds: float) -> None:
        labels = (method, route, str(status), tenant) if self.tenant_label else (method, route, str(status))
        self._child(self.request_duration, *labels).observe(seconds)

    def problem(self, code: str, tenant: str) -> None:
        labels = (code, tenant) if self.tenant_label else (code,)
        self._child(self.problems, *labels).inc()

    # -- the service (SessionObserver) -------------------------------------------------------------------------------

    def appended(self, tenant: str, events: int, size: int) -> None:
        self._by_tenant(self.events_appended, tenant).inc(events)
        self._by_tenant(self.bytes_appended, tenant).inc(size)

    def created(self, tenant: str) -> None:
        self._by_tenant(self.creates, tenant).inc()

    def forked(self, tenant: str) -> None:
        self._by_tenant(self.forks, tenant).inc()

    def deleted(self, tenant: str) -> None:
        self._by_tenant(self.deletes, tenant).inc()

    def replayed(self, tenant: str) -> None:
        self._by_tenant(self.replays, tenant).inc()

    def streams(self, tenant: str, change: int) -> None:
        self._by_tenant(self.stream_subscribers, tenant).inc(change)

    # -- the storage -----------------------------------------------------------------------------------------------

    def synced(self, events: int, seconds: float) -> None:
        """One append round or commit (from the file backend's writer thread, too)."""
        self.batch_events.observe(events)
        self.sync_seconds.observe(seconds)

    def span_dropped(self) -> None:
        self.spans_dropped.inc()

    # -- the scrape ------------------------------------------------------------------------------------------------

    def exposition(self, accept: str | None, *, live_sessions: int | None) -> tuple[bytes, str]:
        """The scrape's body and content type (OpenMetrics when the scraper asks for it, else Prometheus text)."""
        if live_sessions is not None:
            self.sessions.set(live_sessions)
        encode: Callable[[CollectorRegistry], bytes]
        encode, content_type = choose_encoder(accept or "")
        return encode(self.registry), content_type
