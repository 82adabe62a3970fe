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
a string).

Verbosity, from the environment:

* ``SCHEDMESH_VERBOSITY=N`` (kube's ``-v=N``): 0-3 INFO; 4-5 DEBUG for schedmesh's own
  loggers (kube's debug level is 4); 6 and up DEBUG for every library too (aiokafka, grpc).
* ``SCHEDMESH_LOG_LEVEL`` (DEBUG, INFO, WARNING, ERROR, CRITICAL) sets the level of every
  logger; used when SCHEDMESH_VERBOSITY is not set. Default INFO.
"""
from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Any, Optional, TextIO

from opentelemetry import trace

_LETTERS = {logging.DEBUG: "I", logging.INFO: "I", logging.WARNING: "W", logging.ERROR: "E", logging.CRITICAL: "F"}
# klog's V-level that a record's Python level stands for (JSON "v"); DEBUG is kube's -v=4.
_DEBUG_V = 4


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
    """Adds ``trace_id`` / ``span_id`` (hex, "" outside a span) and ``pod`` ("" unless
    passed in ``extra``) to every record. Attached to handlers, so it sees records of every
    logger."""

    def filter(self, record: logging.LogRecord) -> bool:
        ctx = trace.get_current_span().get_span_context()
        if ctx.is_valid:
            record.trace_id = format(ctx.trace_id, "032x")
            record.span_id = format(ctx.span_id, "016x")
        else:
            record.trace_id = record.span_id = ""
        record.pod = pod_key(getattr(record, "pod", None))
        return True


def _kv(record: logging.LogRecord) -> list[tuple[str, str]]:
    return [(k, v) for k in ("pod", "trace_id", "span_id") if (v := getattr(record, k, ""))]


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
            line += " " + " ".join(f"{k}={json.dumps(v)}" for k, v in pairs)
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line += "\n" + record.exc_text
        if record.stack_info:
            line += "\n" + self.formatStack(record.stack_info)
        return line


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
            "level": record.levelname.lower(),
        }
        if record.levelno < logging.WARNING:
            out["v"] = _DEBUG_V if record.levelno < logging.INFO else 0
        out["logger"] = record.name
        if self.service:
            out["service"] = self.service
        out["pid"] = record.process
        out.update(_kv(record))
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
            v = int(verbosity)
        except ValueError:
            v = 0
        if v >= 6:
            return logging.DEBUG, logging.DEBUG
        return (logging.DEBUG if v >= _DEBUG_V else logging.INFO), logging.INFO
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
