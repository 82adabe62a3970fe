"""Log formats (klog text, JSON lines), trace correlation and verbosity."""
from __future__ import annotations

import io
import json
import logging
import os
import re
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from schedmesh.api.types import ObjectMeta, Pod
from schedmesh.telemetry.logs import (
    JsonFormatter,
    KlogFormatter,
    TraceContextFilter,
    current_pod,
    in_pod_context,
    levels_from_env,
    pod_context,
    pod_key,
    setup_logging,
    v,
    v_of,
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
    ({"SCHEDMESH_VERBOSITY": "0"}, (logging.INFO, logging.INFO)),
    ({"SCHEDMESH_VERBOSITY": "2"}, (logging.INFO - 2, logging.INFO)),
    ({"SCHEDMESH_VERBOSITY": "4", "SCHEDMESH_LOG_LEVEL": "ERROR"}, (logging.DEBUG, logging.INFO)),
    ({"SCHEDMESH_VERBOSITY": "6"}, (logging.DEBUG - 2, logging.DEBUG)),
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


def test_v_levels_order_and_round_trip() -> None:
    levels = [v(n) for n in range(11)]
    assert levels[0] == logging.INFO and levels[4] == logging.DEBUG
    assert levels == sorted(levels, reverse=True) and len(set(levels)) == 11  # V(n+1) is finer than V(n)
    assert [v_of(level) for level in levels] == list(range(11))


@pytest.mark.parametrize("verbosity, shown", [("0", []), ("1", []), ("2", ["v2"]), ("3", ["v2", "v3"]),
                                              ("4", ["v2", "v3", "debug"]), ("5", ["v2", "v3", "debug", "v5"])])
def test_verbosity_shows_the_v_levels_up_to_it(verbosity: str, shown: list[str]) -> None:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level, logging.getLogger("schedmesh").level)
    try:
        out = io.StringIO()
        setup_logging("svc", stream=out, env={"SCHEDMESH_LOG_FORMAT": "json", "SCHEDMESH_VERBOSITY": verbosity})
        log = logging.getLogger("schedmesh.test-verbosity")
        log.log(v(2), "v2")
        log.log(v(3), "v3")
        log.debug("debug")
        log.log(v(5), "v5")
        lines = [json.loads(line) for line in out.getvalue().splitlines()]
        assert [line["msg"] for line in lines] == shown
        want = {"v2": (2, "info"), "v3": (3, "info"), "debug": (4, "debug"), "v5": (5, "debug")}
        assert all((line["v"], line["level"]) == want[line["msg"]] for line in lines)
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        logging.getLogger("schedmesh").setLevel(saved[2])


def test_klog_structured_values_follow_the_pod() -> None:
    logger, out = _logger(KlogFormatter())
    logger.log(v(2), "Successfully bound pod to node",
               extra={"pod": _pod(), "kv": {"node": "n1", "evaluatedNodes": 12, "feasibleNodes": 3}})
    assert out.getvalue().rstrip("\n").endswith(
        '] Successfully bound pod to node pod="default/web-1" node="n1" evaluatedNodes=12 feasibleNodes=3')


def test_json_structured_values_are_keys_and_cannot_override_the_fields() -> None:
    logger, out = _logger(JsonFormatter())
    logger.info("no fit", extra={"kv": {"err": "0/3 nodes", "msg": "clobber", "feasibleNodes": 0}})
    line = json.loads(out.getvalue())
    assert line["msg"] == "no fit" and line["err"] == "0/3 nodes" and line["feasibleNodes"] == 0


def test_pod_context_tags_every_line_inside_with_the_pod_and_the_spans_trace() -> None:
    logger, out = _logger(JsonFormatter())
    tracer = TracerProvider().get_tracer("t")
    root = tracer.start_span("schedule_pod")
    root.end()  # the binding cycle re-enters a root span that may have ended
    logger.info("before")
    with pod_context(_pod(), root):
        assert current_pod() == "default/web-1"
        logger.info("inside")
        logger.info("about another pod", extra={"pod": "default/other"})  # extra wins
        with tracer.start_as_current_span("child") as child:
            logger.info("in a child span")
    logger.info("after")
    lines = {line["msg"]: line for line in map(json.loads, out.getvalue().splitlines())}
    tid = f"{root.get_span_context().trace_id:032x}"
    assert "pod" not in lines["before"] and "trace_id" not in lines["before"]
    assert (lines["inside"]["pod"], lines["inside"]["trace_id"]) == ("default/web-1", tid)
    assert (lines["about another pod"]["pod"], lines["about another pod"]["trace_id"]) == ("default/other", tid)
    assert lines["in a child span"]["trace_id"] == tid and child.parent.span_id == root.get_span_context().span_id
    assert lines["in a child span"]["span_id"] == f"{child.get_span_context().span_id:016x}"
    assert "pod" not in lines["after"] and "trace_id" not in lines["after"] and current_pod() == ""


def test_pod_context_without_a_span_and_across_threads() -> None:
    logger, out = _logger(JsonFormatter())
    tracer = TracerProvider().get_tracer("t")
    span = tracer.start_span("preempt")
    seen: list[str] = []

    def work(n: int) -> None:
        seen.append(threading.current_thread().name)
        logger.info("in the pool %d", n)

    with pod_context("default/a"):
        logger.info("no span")
        with ThreadPoolExecutor(1) as pool:
            pool.submit(work, 1).result()  # a pool thread does not inherit the context
            pool.submit(in_pod_context("default/b", span, work), 2).result()
    span.end()
    lines = {line["msg"]: line for line in map(json.loads, out.getvalue().splitlines())}
    assert lines["no span"]["pod"] == "default/a" and "trace_id" not in lines["no span"]
    assert "pod" not in lines["in the pool 1"]
    assert lines["in the pool 2"]["pod"] == "default/b"
    assert lines["in the pool 2"]["trace_id"] == f"{span.get_span_context().trace_id:032x}"
    assert seen[0] != threading.current_thread().name


def test_pod_context_records_an_escaping_exception_on_its_span_as_use_span_does() -> None:
    tracer = TracerProvider().get_tracer("t")
    root = tracer.start_span("schedule_pod")
    with pytest.raises(ValueError):
        with pod_context(_pod(), root):
            with pod_context("default/inner"):  # nested: the inner one ends, the outer one is back
                assert current_pod() == "default/inner"
            assert current_pod() == "default/web-1"
            raise ValueError("no fit")
    assert current_pod() == "" and not trace.get_current_span().get_span_context().is_valid
    root.end()
    assert root.status.status_code is trace.StatusCode.ERROR and root.status.description == "ValueError: no fit"
    assert [e.name for e in root.events] == ["exception"]
    # a span that was not made current by this context keeps its status when nothing escapes
    other = tracer.start_span("bind")
    with pod_context(_pod(), other):
        pass
    other.end()
    assert other.status.status_code is trace.StatusCode.UNSET and not other.events
