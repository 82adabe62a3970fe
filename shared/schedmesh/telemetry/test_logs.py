"""Log formats (klog text, JSON lines), trace correlation and verbosity."""
from __future__ import annotations

import io
import json
import logging
import os
import re

import pytest
from opentelemetry.sdk.trace import TracerProvider

from schedmesh.api.types import ObjectMeta, Pod
from schedmesh.telemetry.logs import (
    JsonFormatter,
    KlogFormatter,
    TraceContextFilter,
    levels_from_env,
    pod_key,
    setup_logging,
)

KLOG_HEADER = re.compile(r"^([IWEF])(\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2})\.(\d{6}) +(\d+) ([\w.]+):(\d+)\] (.*)$")


def _logger(formatter: logging.Formatter) -> tuple[logging.Logger, io.StringIO]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter)
    handler.addFilter(TraceContextFilter())
    logger = logging.getLogger(f"schedmesh.test-logs.{id(out)}")
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    return logger, out


def _pod() -> Pod:
    return Pod(meta=ObjectMeta(name="web-1", namespace="default", uid="u-1"))


def test_klog_text_line_outside_a_span() -> None:
    logger, out = _logger(KlogFormatter())
    logger.warning("node %s is gone", "n1")
    line = out.getvalue().rstrip("\n")
    m = KLOG_HEADER.match(line)
    assert m, line
    assert m.group(1) == "W" and int(m.group(8)) == os.getpid()
    assert m.group(9) == "test_logs.py"
    # the pid is right-aligned in 7 columns after one space, as klog prints it
    assert line[21:29] == f" {os.getpid():7d}"
    assert m.group(11) == "node n1 is gone"  # no trace ids outside a span


def test_klog_text_carries_trace_span_and_pod() -> None:
    logger, out = _logger(KlogFormatter())
    tracer = TracerProvider().get_tracer("t")
    with tracer.start_as_current_span("attempt") as span:
        logger.info("bound", extra={"pod": _pod()})
    ctx = span.get_span_context()
    line = out.getvalue().rstrip("\n")
    assert KLOG_HEADER.match(line).group(1) == "I"
    assert line.endswith(f'] bound pod="default/web-1" trace_id="{ctx.trace_id:032x}" span_id="{ctx.span_id:016x}"')


def test_exception_traceback_follows_the_line() -> None:
    logger, out = _logger(KlogFormatter())
    try:
        raise ValueError("bad record")
    except ValueError:
        logger.exception("cannot apply")
    first, *rest = out.getvalue().splitlines()
    assert first.startswith("E") and first.endswith("] cannot apply")
    assert rest[0].startswith("Traceback") and rest[-1] == "ValueError: bad record"


def test_json_lines_parse_and_carry_correlation() -> None:
    logger, out = _logger(JsonFormatter("binder-0"))
    tracer = TracerProvider().get_tracer("t")
    with tracer.start_as_current_span("bind") as span:
        logger.debug("checking", extra={"pod": "ns/p"})
    logger.error("refused")
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    ctx = span.get_span_context()
    assert first["msg"] == "checking" and first["v"] == 4 and first["level"] == "debug"
    assert first["caller"].startswith("test_logs.py:") and first["service"] == "binder-0"
    assert first["pod"] == "ns/p"
    assert (first["trace_id"], first["span_id"]) == (f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}")
    assert isinstance(first["ts"], float) and first["pid"] == os.getpid()
    assert second["level"] == "error" and "v" not in second and "trace_id" not in second


def test_pod_key_of_the_shapes_code_passes() -> None:
    class Entry:  # a queue entry wrapping its pod
        pod = _pod()

    assert pod_key(_pod()) == "default/web-1"
    assert pod_key(Entry()) == "default/web-1"
    assert pod_key({"metadata": {"namespace": "a", "name": "b"}}) == "a/b"
    assert pod_key("x/y") == "x/y"
    assert pod_key(None) == ""


@pytest.mark.parametrize("env, expected", [
    ({}, (logging.INFO, logging.INFO)),
    ({"SCHEDMESH_LOG_LEVEL": "warning"}, (logging.WARNING, logging.WARNING)),
    ({"SCHEDMESH_LOG_LEVEL": "nonsense"}, (logging.INFO, logging.INFO)),
    ({"SCHEDMESH_VERBOSITY": "2"}, (logging.INFO, logging.INFO)),
    ({"SCHEDMESH_VERBOSITY": "4", "SCHEDMESH_LOG_LEVEL": "ERROR"}, (logging.DEBUG, logging.INFO)),
    ({"SCHEDMESH_VERBOSITY": "6"}, (logging.DEBUG, logging.DEBUG)),
])
def test_verbosity_mapping(env: dict, expected: tuple[int, int]) -> None:
    assert levels_from_env(env) == expected


def test_setup_logging_replaces_its_own_handler() -> None:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level, logging.getLogger("schedmesh").level)
    try:
        out = io.StringIO()
        setup_logging("svc", stream=io.StringIO(), env={})
        handler = setup_logging("svc", stream=out, env={"SCHEDMESH_LOG_FORMAT": "json", "SCHEDMESH_VERBOSITY": "4"})
        assert sum(h.__class__ is handler.__class__ for h in root.handlers) == 1
        logging.getLogger("schedmesh.mesh.test").debug("hello")
        logging.getLogger("aiokafka.test").debug("library noise")  # root stays at INFO for v=4
        [line] = out.getvalue().splitlines()
        assert json.loads(line)["msg"] == "hello" and json.loads(line)["service"] == "svc"
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        logging.getLogger("schedmesh").setLevel(saved[2])
