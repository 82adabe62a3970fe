"""Span attribute conventions: the OpenTelemetry Kubernetes names, errors as span status.

    with tracer.start_as_current_span("schedule_pod", attributes=k8s_attributes(pod)) as span:
        ...
        set_node(span, chosen)
        ...
        except Exception as exc:
            set_error(span, exc)

Attribute names: ``k8s.pod.name``, ``k8s.namespace.name``, ``k8s.pod.uid``, ``k8s.node.name``
(OpenTelemetry semantic conventions, k8s.* resource attributes, used on spans as
kube-scheduler's own tracing does).
"""
from __future__ import annotations

import contextlib
from typing import Any, ContextManager, Optional

from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode, Tracer
from opentelemetry.util.types import AttributeValue

K8S_POD_NAME = "k8s.pod.name"
K8S_POD_UID = "k8s.pod.uid"
K8S_NAMESPACE_NAME = "k8s.namespace.name"
K8S_NODE_NAME = "k8s.node.name"


def _pod_fields(pod: Any) -> tuple[str, str, str]:
    inner = getattr(pod, "pod", None)  # queue entries wrap the pod
    if inner is not None and not isinstance(inner, str):
        pod = inner
    if isinstance(pod, str):
        namespace, _, name = pod.rpartition("/")
        return name, namespace, ""
    if isinstance(pod, dict):
        meta = pod.get("metadata") or {}
        return meta.get("name", ""), meta.get("namespace", ""), meta.get("uid", "")
    meta = getattr(pod, "metadata", None) or getattr(pod, "meta", None) or pod
    return (getattr(meta, "name", "") or "", getattr(meta, "namespace", "") or "",
            getattr(meta, "uid", "") or "")


def k8s_attributes(pod: Any = None, node: Optional[str] = None) -> dict[str, AttributeValue]:
    """The k8s.* attributes of a pod (Pod, protobuf Pod, manifest dict or "namespace/name")
    and a node name; empty values are left out."""
    attrs: dict[str, AttributeValue] = {}
    if pod is not None:
        name, namespace, uid = _pod_fields(pod)
        for key, value in ((K8S_POD_NAME, name), (K8S_NAMESPACE_NAME, namespace), (K8S_POD_UID, uid)):
            if value:
                attrs[key] = value
    if node:
        attrs[K8S_NODE_NAME] = node
    return attrs


def set_pod(span: Span, pod: Any) -> None:
    """k8s.pod.name, k8s.namespace.name (and k8s.pod.uid when known) on ``span``."""
    span.set_attributes(k8s_attributes(pod))


def set_node(span: Span, node: Optional[str]) -> None:
    """k8s.node.name on ``span`` (nothing for an empty name)."""
    if node:
        span.set_attribute(K8S_NODE_NAME, node)


def set_error(span: Span, error: BaseException | str, *, record: bool = True) -> None:
    """Mark ``span`` failed: status ERROR with the error's text; an exception is also
    recorded as a span event (``record=False`` when it was recorded already)."""
    if isinstance(error, BaseException):
        if record:
            span.record_exception(error)
        description = f"{type(error).__name__}: {error}"
    else:
        description = error
    span.set_status(Status(StatusCode.ERROR, description))


def child_span(tracer: Tracer, name: str, **kwargs: Any) -> ContextManager[Any]:
    """tracer.start_as_current_span(name, **kwargs) inside a recording span; nothing inside a
    span that is not recorded (not sampled, or no exporter: see setup.make_tracer_provider).
    Such a child would not be recorded either (the samplers follow the parent), yet making one
    cost the queue-manager about 10 us a span, seven spans an attempt."""
    if trace.get_current_span().is_recording():
        return tracer.start_as_current_span(name, **kwargs)
    return contextlib.nullcontext()


def records_under(tracer: Tracer, parent: Any) -> bool:
    """Whether `tracer` would record a span started under ``parent`` (an extracted context: a
    remote parent; None: the current context). Not when the parent was not sampled and the
    sampler follows the parent (the SDK's default ParentBased) or records nothing (no exporter:
    see setup.make_tracer_provider), nor when there is no SDK at all. Lets a per-pod span under
    a propagated trace be skipped where it would cost about 10 us and be dropped."""
    real = getattr(tracer, "_tracer", tracer)  # the API's ProxyTracer hands out the provider's
    sampler = getattr(real, "sampler", None)
    if sampler is None:  # a no-op tracer
        return False
    description = sampler.get_description()
    if description == "AlwaysOffSampler":
        return False
    if not description.startswith("ParentBased"):
        return True
    parent_span = trace.get_current_span(parent).get_span_context()
    return parent_span.trace_flags.sampled or not parent_span.is_valid  # a root: the SDK decides
