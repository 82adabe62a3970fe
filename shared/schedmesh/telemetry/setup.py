"""Tracer provider set-up from the standard ``OTEL_*`` environment variables.

``setup_tracing(service_name)`` decides from the environment:

* ``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none``: tracing off.
* ``OTEL_TRACES_EXPORTER``: comma-separated ``otlp`` and/or ``console``.
  When it is unset, ``otlp`` is used if ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or
  ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set, otherwise tracing is off. (The OTel default
  is ``otlp`` to localhost; schedmesh deliberately does nothing unless asked, so a
  developer's processes do not try to reach a collector that is not there.)
* ``otlp`` is OTLP over gRPC (``opentelemetry-exporter-otlp-proto-grpc``), which itself
  reads the endpoint, ``OTEL_EXPORTER_OTLP_INSECURE``, headers, timeout and
  compression variables. An ``http://`` endpoint means plaintext: write
  ``OTEL_EXPORTER_OTLP_ENDPOINT=http://jaeger:4317``. ``OTEL_EXPORTER_OTLP_PROTOCOL``
  other than ``grpc`` is not supported (the HTTP exporter is not a dependency); a
  warning is logged and gRPC is used.
* Resource: ``service.name`` (the ``service_name`` argument), ``service.namespace=schedmesh``
  and ``service.instance.id`` (``SCHEDMESH_INSTANCE_ID``, else ``<service_name>@<hostname>``).
  ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES`` override any of them.
* The sampler (``OTEL_TRACES_SAMPLER``) and batch settings (``OTEL_BSP_*``) are read by the SDK.

Spans go through a :class:`BatchSpanProcessor`; :func:`shutdown_tracing` flushes it.
The global tracer provider can be set once per process (an OpenTelemetry rule): a
second ``setup_tracing`` returns the provider already installed.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.sdk.resources import (
    SERVICE_INSTANCE_ID,
    SERVICE_NAME,
    SERVICE_NAMESPACE,
    OTELResourceDetector,
    Resource,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

log = logging.getLogger(__name__)

_lock = threading.Lock()
_installed: TracerProvider | None = None
_global_was_set = False


def _env(name: str) -> str | None:
    value = os.environ.get(name)
    if value is None or not value.strip():
        return None
    return value.strip()


def tracing_configured() -> bool:
    """True when the environment asks for at least one span exporter."""
    return bool(_exporter_names())


def _exporter_names() -> list[str]:
    if (_env("OTEL_SDK_DISABLED") or "").lower() == "true":
        return []
    raw = _env("OTEL_TRACES_EXPORTER")
    if raw is None:
        endpoint = _env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or _env("OTEL_EXPORTER_OTLP_ENDPOINT")
        return ["otlp"] if endpoint else []
    names = [part.strip().lower() for part in raw.split(",") if part.strip()]
    return [] if "none" in names else names


def _otlp_exporter() -> SpanExporter:
    protocol = _env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or _env("OTEL_EXPORTER_OTLP_PROTOCOL")
    if protocol and protocol.lower() != "grpc":
        log.warning("OTLP protocol %r is not supported by schedmesh; using grpc", protocol)
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def _exporters_from_env() -> list[SpanExporter]:
    exporters: list[SpanExporter] = []
    for name in _exporter_names():
        if name == "otlp":
            exporters.append(_otlp_exporter())
        elif name == "console":
            exporters.append(ConsoleSpanExporter())
        else:
            log.warning("unsupported OTEL_TRACES_EXPORTER entry %r ignored", name)
    return exporters


def service_resource(service_name: str, instance_id: str | None = None) -> Resource:
    """service.name, service.namespace=schedmesh and service.instance.id, under whatever
    OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES set (those win)."""
    instance_id = instance_id or _env("SCHEDMESH_INSTANCE_ID") or f"{service_name}@{socket.gethostname()}"
    defaults = {SERVICE_NAME: service_name, SERVICE_NAMESPACE: "schedmesh", SERVICE_INSTANCE_ID: instance_id}
    from_env = OTELResourceDetector().detect().attributes
    return Resource.create({k: v for k, v in defaults.items() if k not in from_env})


def make_tracer_provider(service_name: str, exporters: Sequence[SpanExporter]) -> TracerProvider:
    """An SDK provider for ``service_name`` with one BatchSpanProcessor per exporter.

    Does not touch the global provider: tests and tools that need a private provider
    use this and pass it to the interceptors / bus explicitly.
    """
    # With nothing to export to, spans are not recorded (ALWAYS_OFF): trace ids are still made
    # and propagated (a parent's id is kept), logs and `describe` still carry them, and an
    # attempt's six spans cost half as much CPU (about 45 us per pod in the queue-manager).
    sampler = None if exporters else ALWAYS_OFF
    provider = TracerProvider(resource=service_resource(service_name), sampler=sampler)
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def setup_tracing(
    service_name: str,
    *,
    exporters: Sequence[SpanExporter] = (),
    set_global: bool = True,
) -> TracerProvider | None:
    """Configure tracing from ``OTEL_*`` variables; None (a no-op) only with OTEL_SDK_DISABLED=true.

    ``exporters`` are added to those from the environment (useful in tests). With
    ``set_global`` the provider becomes the process-wide one used by
    ``opentelemetry.trace.get_tracer``.
    """
    global _installed, _global_was_set
    with _lock:
        if set_global and _installed is not None:
            log.warning("setup_tracing called twice; keeping the provider already installed")
            return _installed
        all_exporters = [*_exporters_from_env(), *exporters]
        if not all_exporters and (_env("OTEL_SDK_DISABLED") or "").lower() == "true":
            log.debug("tracing disabled; spans are no-ops")
            return None
        # Without an exporter, spans are still created (not recorded) and propagated: every
        # attempt has a trace id to show; none are sent.
        provider = make_tracer_provider(service_name, all_exporters)
        if set_global:
            if _global_was_set:
                # OpenTelemetry refuses to replace the global provider after a shutdown.
                log.warning("global tracer provider already set once; new one not installed")
                return provider
            trace.set_tracer_provider(provider)
            _installed = provider
            _global_was_set = True
        return provider


def shutdown_tracing(timeout_s: float = 5.0) -> None:
    """Flush pending spans and shut the installed provider down (safe to call always)."""
    global _installed
    with _lock:
        provider, _installed = _installed, None
    if provider is None:
        return
    provider.force_flush(timeout_millis=int(timeout_s * 1000))
    provider.shutdown()
