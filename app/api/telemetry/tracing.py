"""Traces with the OpenTelemetry SDK (spec 13), made only when the standard ``OTEL_*`` variables select an exporter.

:func:`provider_from_environment` reads them as the SDK documents them: ``OTEL_SDK_DISABLED``,
``OTEL_TRACES_EXPORTER`` (``otlp``, ``console`` or ``none``; unset, an ``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` selects ``otlp``), ``OTEL_EXPORTER_OTLP_*`` (OTLP over HTTP with protobuf),
``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_TRACES_SAMPLER`` and ``OTEL_BSP_*``. Without them there
is no provider, no span and no export; a request then only notes the trace id of a ``traceparent`` it carries.

Spans leave through a :class:`BatchSpanProcessor`: a request only puts its span in a bounded queue, the export runs in
the processor's thread, and a span that finds the queue full (a slow or unreachable collector) is dropped and counted
(``forklog_trace_spans_dropped_total``). The provider is this app's own, never the process-wide one.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

__all__ = ["Tracing", "incoming_trace_id", "provider_from_environment"]

logger = logging.getLogger("forklog.tracing")

SHUTDOWN_SECONDS = 2.0  # a shutdown waits this long for the last spans to leave, never longer
_TRACEPARENT = re.compile(rb"[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}")
_NO_TRACE = "0" * 32


def incoming_trace_id(traceparent: bytes | None) -> str | None:
    """The trace id of a well-formed W3C ``traceparent`` header (for the access log when no span is made)."""
    if traceparent is None:
        return None
    match = _TRACEPARENT.fullmatch(traceparent.strip())
    if match is None or match[1] == _NO_TRACE.encode():
        return None
    return match[1].decode("ascii")


def _true(value: str | None) -> bool:
    return (value or "").strip().lower() == "true"


def _exporter(name: str, environ: Mapping[str, str]) -> SpanExporter | None:
    if name == "console":
        return ConsoleSpanExporter()
    if name != "otlp":
        logger.warning("OTEL_TRACES_EXPORTER %r is not one forklog ships (otlp, console, none): ignored", name)
        return None
    protocol = environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    if protocol and protocol.strip() != "http/protobuf":
        logger.warning("OTLP protocol %r is not supported (only http/protobuf): no traces are exported", protocol)
        return None
    # Imported only when traces are exported: a service without OTEL_* never loads the exporter.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()  # it reads OTEL_EXPORTER_OTLP_* itself


def provider_from_environment(environ: Mapping[str, str] | None = None) -> TracerProvider | None:
    """A tracer provider exporting as the ``OTEL_*`` variables say, or None when they select no exporter."""
    environ = os.environ if environ is None else environ
    if _true(environ.get("OTEL_SDK_DISABLED")):
        return None
    names = [name.strip().lower() for name in environ.get("OTEL_TRACES_EXPORTER", "").split(",") if name.strip()]
    if not names and (environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")):
        names = ["otlp"]
    exporters = [exporter for name in names if name != "none" for exporter in [_exporter(name, environ)] if exporter]
    if not exporters:
        return None
    attributes = {} if environ.get("OTEL_SERVICE_NAME") else {"service.name": "forklog"}
    # shutdown_on_exit=False: the app shuts it down with a bound; the SDK's exit hook could wait on a dead collector.
    provider = TracerProvider(resource=Resource.create(attributes), shutdown_on_exit=False)
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


class _DropWhenFull(SpanProcessor):
    """A :class:`BatchSpanProcessor` that counts the spans its full queue drops (and spares the log a warning for
    each of them)."""

    def __init__(self, inner: SpanProcessor, dropped: Callable[[], None]) -> None:
        self._inner = inner
        self._dropped = dropped
        batching = getattr(inner, "_batch_processor", None)
        self._queue = getattr(batching, "_queue", None)
        self._capacity = getattr(batching, "_max_queue_size", None)

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self._inner.on_start(span, parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        if self._queue is not None and self._capacity is not None and len(self._queue) >= self._capacity:
            self._dropped()
            return
        self._inner.on_end(span)

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


def _count_drops(provider: TracerProvider, dropped: Callable[[], None]) -> None:
    """Wrap the provider's batch processors so that their drops are counted."""
    multi = getattr(provider, "_active_span_processor", None)
    processors = getattr(multi, "_span_processors", None)
    if multi is None or processors is None:
        return
    multi._span_processors = tuple(
        _DropWhenFull(processor, dropped) if isinstance(processor, BatchSpanProcessor) else processor
        for processor in processors
    )


class Tracing:
    """This app's tracer: server spans for requests, child spans for durable writes."""

    def __init__(self, provider: TracerProvider, *, dropped: Callable[[], None] | None = None) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer("forklog")
        self.propagator = TraceContextTextMapPropagator()
        if dropped is not None:
            _count_drops(provider, dropped)

    def server_span(self, name: str, carrier: dict[str, str], attributes: dict[str, str | int]) -> trace.Span:
        """A request's span, continuing the trace of its ``traceparent`` (in ``carrier``) if it has one."""
        parent = self.propagator.extract(carrier) if carrier else None
        return self.tracer.start_span(name, context=parent, kind=SpanKind.SERVER, attributes=attributes)

    def child_span(self, name: str, events: int) -> AbstractContextManager[object]:
        return self.tracer.start_as_current_span(
            name, kind=SpanKind.INTERNAL, attributes={"forklog.storage.events": events}
        )

    def shutdown(self) -> None:
        """Export what is queued and stop, within :data:`SHUTDOWN_SECONDS` even if the collector never answers."""
        stopping = threading.Thread(target=self.provider.shutdown, name="forklog-trace-shutdown", daemon=True)
        stopping.start()
        stopping.join(SHUTDOWN_SECONDS)
