"""Log lines in kube's formats, correlated with traces.

Text (default), klog's header then the message, then key="value" pairs::

    I1123 10:00:00.123456   12345 queue_manager.py:123] pod bound pod="default/web-1" trace_id="4bf9..." span_id="00f0..."

(level letter I/W/E/F, month and day, time to the microsecond, pid right-aligned in 7
columns, source file and line.) JSON lines (``SCHEDMESH_LOG_FORMAT=json``), after kube's
JSON logging format: ``{"ts": 1732356000.123456, "caller": "queue_manager.py:123", "msg":
"pod bound", "v": 0, "level": "info", "logger": ..., "service": ..., "pid": ...,
"pod": ..., "trace_id": ..., "span_id": ...}`` (``"err"`` holds an exception's traceback).

Every record logged inside an active OpenTelemetry span carries that span's ``trace_id``
and ``span_id``; a record logged with ``extra={"pod": pod}`` carries the pod's
``namespace/name`` (a Pod, PodInfo-like object with ``.pod``, protobuf or manifest dict, or
a string). A scheduling attempt runs inside :func:`pod_context` (kube's
``klog.LoggerWithValues(logger, "pod", ...)``): every record logged there, from any module
and without ``extra``, carries the attempt's pod and the trace of the span it was given;
an explicit ``extra={"pod": other}`` still wins (a line about another pod that the attempt
moved).

Structured values (klog's key/value pairs): ``extra={"kv": {"node": "n1",
"evaluatedNodes": 12}}`` prints ``node="n1" evaluatedNodes=12`` after the pod in text and
adds the keys to the JSON object.

Verbosity, from the environment:

* ``SCHEDMESH_VERBOSITY=N`` (kube's ``-v=N``): schedmesh's own loggers show the lines
  logged at ``log.log(v(n), ...)`` for n <= N (``log.info`` is V(0), ``log.debug`` is V(4),
  kube's debug level); 6 and up is also DEBUG for every library (aiokafka, grpc).
* ``SCHEDMESH_LOG_LEVEL`` (DEBUG, INFO, WARNING, ERROR, CRITICAL) sets the level of every
  logger; used when SCHEDMESH_VERBOSITY is not set. Default INFO (V(0)).
"""
from __future__ import annotations

import contextvars
import functools
import json
import logging
import os
import sys
import time
from typing import Any, Callable, Optional, TextIO, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace

_LETTERS = {logging.DEBUG: "I", logging.INFO: "I", logging.WARNING: "W", logging.ERROR: "E", logging.CRITICAL: "F"}
# klog's V-level that a record's Python level stands for (JSON "v"); DEBUG is kube's -v=4.
_DEBUG_V = 4
_MAX_V = 10
_T = TypeVar("_T")


def v(level: int) -> int:
    """The Python level of kube's ``V(level)``: ``log.log(v(2), ...)`` is ``klog.V(2).InfoS``.

    V(0) is INFO, V(1)-V(3) lie between INFO and DEBUG, V(4) is DEBUG (kube's debug level),
    V(5)-V(10) lie below DEBUG."""
    level = max(0, min(int(level), _MAX_V))
    if level < _DEBUG_V:
        return logging.INFO - level
    return logging.DEBUG - (level - _DEBUG_V)


def v_of(levelno: int) -> int:
    """The V-level a Python level below WARNING stands for (inverse of :func:`v`)."""
    if levelno >= logging.INFO:
        return 0
    if levelno > logging.DEBUG:
        return min(logging.INFO - levelno, _DEBUG_V - 1)
    return min(_DEBUG_V + (logging.DEBUG - levelno), _MAX_V)


class _PodContext:
    """The pod of a pod_context (its key made only when a line is logged) and its span."""
    __slots__ = ("_pod", "_key", "span")

    def __init__(self, pod: Any, span: Optional[trace.Span]) -> None:
        self._pod, self._key, self.span = pod, None, span

    @property
    def pod(self) -> str:
        if self._key is None:
            self._key = pod_key(self._pod)
        return self._key


_POD_CONTEXT: contextvars.ContextVar[Optional[_PodContext]] = contextvars.ContextVar(
    "schedmesh_pod_context", default=None)


class pod_context:  # noqa: N801 - used as a function: `with pod_context(pod, span):`
    """Every record logged inside (this thread or task) carries ``pod``; with ``span``, the
    span is made current too (as ``trace.use_span(span, end_on_exit=False)``: re-entering an
    attempt's root span in another thread, or after it ended), so the records carry its
    trace, and spans started inside are its children; an exception leaving it is recorded on
    the span as use_span records it.

    A class, not a generator: the queue-manager enters one about four times per pod
    (the attempt, and three steps of its binding), where contextlib's and use_span's
    generators cost more than the rest of those steps' bookkeeping."""
    __slots__ = ("_ctx", "_token", "_span_token")

    def __init__(self, pod: Any, span: Optional[trace.Span] = None) -> None:
        self._ctx = _PodContext(pod, span)

    def __enter__(self) -> None:
        self._token = _POD_CONTEXT.set(self._ctx)
        span = self._ctx.span
        self._span_token = None if span is None else otel_context.attach(trace.set_span_in_context(span))

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            if self._span_token is not None:
                otel_context.detach(self._span_token)
                span = self._ctx.span
                # use_span's handling: Exceptions only (not GeneratorExit and the like)
                if isinstance(exc, Exception) and isinstance(span, trace.Span) and span.is_recording():
                    span.record_exception(exc)
                    span.set_status(trace.Status(trace.StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        finally:
            _POD_CONTEXT.reset(self._token)
        return False


def in_pod_context(pod: Any, span: Optional[trace.Span], fn: Callable[..., _T]) -> Callable[..., _T]:
    """``fn`` run inside ``pod_context(pod, span)``: for work handed to another thread (a
    thread pool does not carry context variables over)."""
    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> _T:
        with pod_context(pod, span):
            return fn(*args, **kwargs)
    return run


def current_pod() -> str:
    """The pod of the innermost :func:`pod_context` ("" outside any)."""
    ctx = _POD_CONTEXT.get()
    return ctx.pod if ctx is not None else ""


def pod_key(pod: Any) -> str:
    """``namespace/name`` of a Pod-like object, as klog.KObj prints it."""
    if pod is None:
        return ""
    if isinstance(pod, str):
        return pod
    inner = getattr(pod, "pod", None)  # queue entries wrap the pod
    if inner is not None and not isinstance(inner, str):
        pod = inner
    key = getattr(pod, "key", None)
    if isinstance(key, str):
        return key
    if isinstance(pod, dict):
        meta = pod.get("metadata") or {}
        return f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    meta = getattr(pod, "metadata", None) or getattr(pod, "meta", None) or pod
    name, namespace = getattr(meta, "name", None), getattr(meta, "namespace", None)
    if isinstance(name, str):
        return f"{namespace or ''}/{name}"
    return str(pod)


class TraceContextFilter(logging.Filter):
    """Adds ``trace_id`` / ``span_id`` (hex, "" outside a span) and ``pod`` (from ``extra``,
    else the enclosing :func:`pod_context`'s, else "") to every record. Attached to
    handlers, so it sees records of every logger."""

    def filter(self, record: logging.LogRecord) -> bool:
        attempt = _POD_CONTEXT.get()
        ctx = trace.get_current_span().get_span_context()
        if not ctx.is_valid and attempt is not None and attempt.span is not None:
            ctx = attempt.span.get_span_context()
        if ctx.is_valid:
            record.trace_id = format(ctx.trace_id, "032x")
            record.span_id = format(ctx.span_id, "016x")
        else:
            record.trace_id = record.span_id = ""
        pod = getattr(record, "pod", None)
        record.pod = pod_key(pod) if pod is not None else (attempt.pod if attempt is not None else "")
        return True


# JSON fields a record's key/value pairs cannot replace ("err" they may: kube logs an error's
# text as "err"; an exception's traceback still wins).
_RESERVED = frozenset(("ts", "caller", "msg", "level", "v", "logger", "service", "pid", "pod", "trace_id",
                       "span_id", "stack"))


def _kv(record: logging.LogRecord) -> list[tuple[str, Any]]:
    """pod, the record's own key/value pairs (``extra={"kv": {...}}``), trace_id, span_id."""
    out: list[tuple[str, Any]] = []
    if pod := getattr(record, "pod", ""):
        out.append(("pod", pod))
    values = getattr(record, "kv", None)
    if isinstance(values, dict):
        out.extend((str(k), val) for k, val in values.items() if str(k) not in _RESERVED)
    out.extend((k, val) for k in ("trace_id", "span_id") if (val := getattr(record, k, "")))
    return out


def _value(val: Any) -> str:
    """klog's rendering of a value: numbers and booleans bare, everything else quoted."""
    if isinstance(val, (bool, int, float)) or val is None:
        return json.dumps(val)
    return json.dumps(val if isinstance(val, str) else str(val))


class KlogFormatter(logging.Formatter):
    """klog's text header: ``Lmmdd hh:mm:ss.uuuuuu pid file:line] message key="value"``."""

    def format(self, record: logging.LogRecord) -> str:
        t = time.localtime(record.created)
        micros = int((record.created % 1) * 1_000_000)
        letter = _LETTERS.get(record.levelno) or ("I" if record.levelno < logging.WARNING else "E")
        line = (f"{letter}{t.tm_mon:02d}{t.tm_mday:02d} {t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}"
                f".{micros:06d} {record.process:7d} {record.filename}:{record.lineno}] {record.getMessage()}")
        pairs = _kv(record)
        if pairs:
            line += " " + " ".join(f"{k}={_value(val)}" for k, val in pairs)
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line += "\n" + record.exc_text
        if record.stack_info:
            line += "\n" + self.formatStack(record.stack_info)
        return line


def _level_name(levelno: int) -> str:
    """info for V(0)-V(3), debug for V(4) and below (kube's debug level), else the level's name."""
    if levelno <= logging.DEBUG:
        return "debug"
    if levelno < logging.WARNING:
        return "info"
    return logging.getLevelName(levelno).lower()


class JsonFormatter(logging.Formatter):
    """One JSON object per line, after kube's JSON log format (ts, caller, msg, v)."""

    def __init__(self, service: str = "") -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": round(record.created, 6),
            "caller": f"{record.filename}:{record.lineno}",
            "msg": record.getMessage(),
            "level": _level_name(record.levelno),
        }
        if record.levelno < logging.WARNING:
            out["v"] = v_of(record.levelno)
        out["logger"] = record.name
        if self.service:
            out["service"] = self.service
        out["pid"] = record.process
        for key, val in _kv(record):
            out[key] = val if isinstance(val, (str, int, float, bool)) or val is None else str(val)
        if record.exc_info:
            out["err"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, ensure_ascii=False)


def levels_from_env(env: Optional[dict[str, str]] = None) -> tuple[int, int]:
    """(level of schedmesh's loggers, level of every other logger) from the environment."""
    env = os.environ if env is None else env
    verbosity = (env.get("SCHEDMESH_VERBOSITY") or "").strip()
    if verbosity:
        try:
            n = int(verbosity)
        except ValueError:
            n = 0
        return v(n), (logging.DEBUG if n >= 6 else logging.INFO)
    name = (env.get("SCHEDMESH_LOG_LEVEL") or "INFO").strip().upper()
    level = logging.getLevelName(name)
    if not isinstance(level, int):
        level = logging.INFO
    return level, level


class _SchedmeshHandler(logging.StreamHandler):
    """Marks the handler setup_logging installed, so a second call replaces it."""


def setup_logging(service: str = "", *, stream: Optional[TextIO] = None,
                  env: Optional[dict[str, str]] = None) -> logging.Handler:
    """Install one handler on the root logger (format and levels from the environment, see
    the module doc); replaces the handler of a previous call, keeps handlers of others."""
    env = os.environ if env is None else env
    own_level, other_level = levels_from_env(env)
    fmt = (env.get("SCHEDMESH_LOG_FORMAT") or "text").strip().lower()
    handler = _SchedmeshHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter(service) if fmt == "json" else KlogFormatter())
    handler.addFilter(TraceContextFilter())
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _SchedmeshHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(other_level)
    logging.getLogger("schedmesh").setLevel(own_level)
    logging.getLogger("services").setLevel(own_level)
    return handler
