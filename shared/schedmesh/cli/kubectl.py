"""kubectl's shapes over the Scheduler API: `get`, `describe`, `delete`, `get events`, `get services`.

Objects print as the API server's v1 JSON (schedmesh.api.to_json), lists as a v1 List; tables
use kubectl's columns, its three-space tabwriter padding and its age format. schedmesh's own
facts about a pod ride along as annotations (ANNOTATION_*), so `-o json` stays a valid v1 Pod.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from fractions import Fraction
from typing import Any, Callable, Iterable, Optional

from schedmesh.local.supervisor import MeshError

ANNOTATION_QUEUE = "schedmesh.io/queue"
ANNOTATION_TRACE_ID = "schedmesh.io/trace-id"
ANNOTATION_UNSCHEDULABLE = "schedmesh.io/unschedulable-message"
DEFAULT_SCHEDULER = "default-scheduler"
WATCH_POLL_SECONDS = 1.0
POD_NAMES = ("pods", "pod", "po")
NODE_NAMES = ("nodes", "node", "no")
EVENT_NAMES = ("events", "event", "ev")
SERVICE_NAMES = ("services", "service", "svc")


def _err(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ------------------------------------------------------------------ kubectl's formatting
def human_duration(seconds: float) -> str:
    """apimachinery's duration.HumanDuration (what kubectl prints as AGE): 5s, 3m2s, 2d3h."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y{days}d" if days else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def age(ts: Optional[float], now: Optional[float] = None) -> str:
    """kubectl's translateTimestampSince: <unknown> for an unset time."""
    if not ts:
        return "<unknown>"
    return human_duration((now or time.time()) - ts)


def table(rows: list[list[str]]) -> str:
    """kubectl's tabwriter: columns padded to the widest cell plus three spaces."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("   ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def _q(q: Fraction) -> str:
    from schedmesh.api.to_json import quantity_string
    return quantity_string(q)


# ------------------------------------------------------------------ objects
def pod_of(view):
    from schedmesh.api.convert import pod_from_proto
    return pod_from_proto(view.pod)


def pod_json(view) -> dict[str, Any]:
    """A v1 Pod; schedmesh's queue, trace id and unschedulable message as annotations."""
    from schedmesh.api.to_json import pod_to_json
    d = pod_to_json(pod_of(view))
    extra = {ANNOTATION_QUEUE: view.queue, ANNOTATION_TRACE_ID: view.trace_id, ANNOTATION_UNSCHEDULABLE: view.message}
    extra = {k: v for k, v in extra.items() if v}
    if extra:
        d["metadata"]["annotations"] = {**d["metadata"].get("annotations", {}), **extra}
    return d


def node_json(view) -> dict[str, Any]:
    from schedmesh.api.convert import node_from_proto
    from schedmesh.api.to_json import node_to_json
    return node_to_json(node_from_proto(view.node))


def v1_list(items: list[dict[str, Any]]) -> dict[str, Any]:
    """What `kubectl get -o json` prints for several objects."""
    return {"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}}


def dump(obj: dict[str, Any], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(obj, indent=4)
    import yaml
    return yaml.safe_dump(obj, sort_keys=False).rstrip("\n")


def pod_status(pod) -> str:
    """kubectl's STATUS column (printPod): the reason a pod is in, else its phase."""
    if pod.meta.deletion_timestamp:
        return "Unknown" if pod.status_reason == "NodeLost" else "Terminating"
    if pod.status_reason:
        return pod.status_reason
    for c in pod.conditions:  # kube-scheduler's PodScheduled=False reason: SchedulingGated
        if c.type == "PodScheduled" and c.status == "False" and c.reason == "SchedulingGated":
            return "SchedulingGated"
    if pod.scheduling_gates:
        return "SchedulingGated"
    return pod.phase or "Pending"


def pod_ready(pod) -> str:
    """READY: ready containers / containers. schedmesh's simulated containers are ready exactly
    while the pod runs (there are no probes), unless the kubelet reports Ready=False."""
    total = len(pod.containers)
    ready_cond = next((c for c in pod.conditions if c.type == "Ready"), None)
    ready = pod.phase == "Running" and (ready_cond is None or ready_cond.status == "True")
    return f"{total if ready else 0}/{total}"


def pod_table(views, wide: bool, all_namespaces: bool, header: bool = True) -> list[list[str]]:
    head = ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "NODE"]
    if all_namespaces:
        head.insert(0, "NAMESPACE")
    if wide:
        # kubectl's wide columns (IP: simulated pods have none), then schedmesh's
        head = head[:-1] + ["IP", "NODE", "NOMINATED NODE", "READINESS GATES", "QUEUE", "TRACE ID"]
    rows = [head] if header else []
    now = time.time()
    for v in views:
        p = pod_of(v)
        # RESTARTS: the simulated containers never restart
        r = [p.name, pod_ready(p), pod_status(p), "0", age(p.meta.creation_timestamp, now)]
        if all_namespaces:
            r.insert(0, p.namespace)
        if wide:
            r += ["<none>", p.node_name or "<none>", p.nominated_node_name or "<none>", "<none>",
                  v.queue or "<none>", v.trace_id or "<none>"]
        else:
            r.append(p.node_name or "<none>")
        rows.append(r)
    return rows


def node_status(node, ready: bool) -> str:
    s = "Ready" if ready else "NotReady"
    if not any(c.type == "Ready" for c in node.conditions) and not ready:
        s = "Unknown"
    return s + (",SchedulingDisabled" if node.unschedulable else "")


def node_roles(node) -> str:
    """kubectl's ROLES: node-role.kubernetes.io/<role> labels and kubernetes.io/role."""
    roles = sorted({k.split("/", 1)[1] for k in node.labels if k.startswith("node-role.kubernetes.io/")
                    and k.split("/", 1)[1]} | ({node.labels["kubernetes.io/role"]}
                                               if node.labels.get("kubernetes.io/role") else set()))
    return ",".join(roles) or "<none>"


def node_table(views, wide: bool, header: bool = True) -> list[list[str]]:
    from schedmesh.api.convert import node_from_proto
    head = ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    if wide:
        head += ["ZONE", "PODS", "CPU REQ", "MEMORY REQ", "TAINTS"]
    rows = [head] if header else []
    now = time.time()
    for v in views:
        n = node_from_proto(v.node)
        # VERSION: the kubelet version a real node reports; the agent simulates none
        r = [n.name, node_status(n, v.ready), node_roles(n), age(n.meta.creation_timestamp, now), "<none>"]
        if wide:
            r += [n.labels.get("topology.kubernetes.io/zone", "<none>"),
                  f"{v.pods}/{_q(n.allocatable['pods']) if 'pods' in n.allocatable else '?'}",
                  f"{v.requested_milli_cpu}m", f"{v.requested_memory // 2**20}Mi",
                  ",".join(str(t) for t in n.taints) or "<none>"]
        rows.append(r)
    return rows


# ------------------------------------------------------------------ get
def add_get_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("resource", choices=[*POD_NAMES, *NODE_NAMES, *EVENT_NAMES, *SERVICE_NAMES],
                   help="pods, nodes, events or services (the mesh's own processes)")
    p.add_argument("name", nargs="?", help="one object's name (pods, nodes)")
    p.add_argument("-n", "--namespace", default=None,
                   help="namespace (default: all namespaces, so scripts see every pod; -A says so explicitly)")
    p.add_argument("-A", "--all-namespaces", action="store_true", help="list across all namespaces")
    p.add_argument("-l", "--selector", default="", help="label selector (k=v, k!=v, k in (a,b), k notin (a), k, !k)")
    p.add_argument("-o", "--output", choices=["wide", "json", "yaml", "name"], default=None)
    p.add_argument("-w", "--watch", action="store_true",
                   help="after listing, print changes (polling every second) until interrupted")


def _namespace(args) -> str:
    """"" for all namespaces. Unlike kubectl (whose default is `default`), no -n means every
    namespace: schedmesh has no per-user default namespace, and tools reading `get pods -o json`
    (e.g. the golden mesh check) expect every pod."""
    if getattr(args, "all_namespaces", False):
        return ""
    return args.namespace or ""


def _selected(objs: Iterable, labels_of: Callable, selector: str) -> list:
    if not selector:
        return list(objs)
    from schedmesh.api.labels import parse_selector
    sel = parse_selector(selector)
    return [o for o in objs if sel.matches(labels_of(o))]


class Lister:
    """Reads pods or nodes and prints them as `get` was asked to."""

    def __init__(self, client, args) -> None:
        self.c, self.args = client, args
        self.kind = "pod" if args.resource in POD_NAMES else "node"

    def fetch(self) -> list:
        ns = _namespace(self.args) if self.kind == "pod" else ""
        if self.kind == "pod":
            views = self.c.list_pods(ns)
            meta = lambda v: v.pod.metadata  # noqa: E731
        else:
            views = self.c.list_nodes()
            meta = lambda v: v.node.metadata  # noqa: E731
        if self.args.name:
            views = [v for v in views if meta(v).name == self.args.name]
        views = _selected(views, lambda v: meta(v).labels, self.args.selector)
        return sorted(views, key=lambda v: (meta(v).namespace, meta(v).name))

    def name_of(self, v) -> str:
        m = v.pod.metadata if self.kind == "pod" else v.node.metadata
        return f"{m.namespace}/{m.name}"

    def as_json(self, v) -> dict:
        return pod_json(v) if self.kind == "pod" else node_json(v)

    def rows(self, views, header: bool) -> list[list[str]]:
        wide = self.args.output == "wide"
        if self.kind == "pod":
            return pod_table(views, wide, not _namespace(self.args), header)
        return node_table(views, wide, header)

    def print(self, views, first: bool) -> None:
        out = self.args.output
        if out in ("json", "yaml"):
            if self.args.watch and not first or self.args.name:  # watch prints each object, as kubectl does
                for v in views:
                    print(dump(self.as_json(v), out) + ("\n---" if out == "yaml" and self.args.watch else ""))
            else:
                print(dump(v1_list([self.as_json(v) for v in views]), out))
        elif out == "name":
            for v in views:
                print(f"{self.kind}/{self.name_of(v).split('/', 1)[1]}")
        elif views:
            print(table(self.rows(views, header=first)) if first else
                  "\n".join(table(self.rows(views, header=True)).splitlines()[1:]))
        sys.stdout.flush()

    def not_found(self) -> None:
        plural = f"{self.kind}s"
        if self.args.name:
            ns = f" in namespace {_namespace(self.args)}" if self.kind == "pod" else ""
            raise MeshError(f'{plural} "{self.args.name}" not found{ns}')
        ns = _namespace(self.args)
        _err(f"No resources found in {ns} namespace." if self.kind == "pod" and ns else "No resources found")


def run_get(args: argparse.Namespace) -> int:
    from schedmesh.cli.mesh import _client
    if args.resource in SERVICE_NAMES:
        return run_get_services(args)
    if args.resource in EVENT_NAMES:
        return run_get_events(args)
    c = _client()
    try:
        lister = Lister(c, args)
        views = lister.fetch()
        if views or args.output in ("json", "yaml") and not args.name:
            lister.print(views, first=True)
        else:
            lister.not_found()
        if args.watch:
            watch(lister, views)
    except KeyboardInterrupt:
        return 0
    finally:
        c.close()
    return 0


def watch(lister: Lister, views) -> None:
    """kubectl get -w: after the listing, each object that changes (or appears) is printed again.
    A deleted object is printed once more with its last state, as a watch's DELETED event carries."""
    seen = {lister.name_of(v): v.SerializeToString(deterministic=True) for v in views}
    last = {lister.name_of(v): v for v in views}
    header_printed = bool(views)
    while True:
        time.sleep(WATCH_POLL_SECONDS)
        now = lister.fetch()
        changed = []
        current = {}
        for v in now:
            key, blob = lister.name_of(v), v.SerializeToString(deterministic=True)
            current[key] = v
            if seen.get(key) != blob:
                changed.append(v)
                seen[key] = blob
        gone = [last[k] for k in last if k not in current]
        for k in [k for k in seen if k not in current]:
            del seen[k]
        last = current
        if changed or gone:
            lister.print([*changed, *gone], first=not header_printed)
            header_printed = True


# ------------------------------------------------------------------ get events
def run_get_events(args: argparse.Namespace) -> int:
    from schedmesh.cli.mesh import _client
    ns = _namespace(args)
    c = _client()
    try:
        events = c.list_events(ns)
    finally:
        c.close()
    if args.name:
        events = [e for e in events if e.pod.split("/", 1)[-1] == args.name]
    events.sort(key=lambda e: e.timestamp)
    if args.output in ("json", "yaml"):
        print(dump(v1_list([event_json(e) for e in events]), args.output))
        return 0
    if args.output == "name":
        for e in events:
            print(f"event/{event_name(e)}")
        return 0
    if not events:
        _err(f"No resources found in {ns} namespace." if ns else "No resources found")
        return 0
    head = ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    if not ns:
        head.insert(0, "NAMESPACE")
    rows = [head]
    now = time.time()
    for e in events:
        namespace, _, name = e.pod.partition("/")
        r = [age(e.timestamp, now), e.type, e.reason, f"pod/{name}", e.message.replace("\n", " ")]
        if not ns:
            r.insert(0, namespace)
        rows.append(r)
    print(table(rows))
    return 0


def event_name(e) -> str:
    """kube's event names: the object's name and a unique suffix (here the time in hex nanoseconds)."""
    return f"{e.pod.split('/', 1)[-1]}.{int(e.timestamp * 1e9):x}"


def event_json(e) -> dict[str, Any]:
    """A core/v1 Event as kube-scheduler's recorder creates it."""
    from schedmesh.api.to_json import rfc3339
    namespace, _, name = e.pod.partition("/")
    out: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": event_name(e), "namespace": namespace, "creationTimestamp": rfc3339(e.timestamp)},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": name, "uid": e.pod_uid},
        "reason": e.reason, "message": e.message, "type": e.type,
        "source": {"component": e.source} if e.source else {},
        "firstTimestamp": rfc3339(e.timestamp), "lastTimestamp": rfc3339(e.timestamp), "count": 1,
    }
    if e.trace_id:
        out["metadata"]["annotations"] = {ANNOTATION_TRACE_ID: e.trace_id}
    return out


# ------------------------------------------------------------------ get services
def run_get_services(args: argparse.Namespace) -> int:
    """Each process of the mesh: address, gRPC health, /metrics URL. A local mesh is described by its
    mesh.json; a remote one (--server) by the scheduler's own answer (GetServices)."""
    from schedmesh.cli import connection
    target = connection.resolve()
    remote = target.state is None
    services = remote_services(target) if remote else local_services(target)
    note = remote_services_note(target.server) if remote else ""
    if args.output in ("json", "yaml"):
        print(dump({"services": services, **({"note": note} if note else {})}, args.output))
        return 0
    rows = [["NAME", "ADDRESS", "HEALTH", "METRICS", "PID", "RESTARTS"]]
    for s in services:
        rows.append([s["name"], s["address"], s["health"], s.get("metrics") or "<none>",
                     str(s.get("pid") or "<none>"), str(s.get("restarts", 0))])
    print(table(rows))
    if note:  # on stderr, as kubectl's warnings: the table stays what scripts parse
        print(f"note: {note}", file=sys.stderr)
    return 0


def remote_services_note(server: str) -> str:
    """What a remote listing's columns mean: where each was seen from."""
    return (f"ADDRESS and METRICS are as the scheduler at {server} reaches each service (names of the mesh's "
            f"network); HEALTH was checked from this machine's network, so a service this machine cannot "
            f"reach shows UNREACHABLE even when it serves")


def _health(address: str, target, tls: bool) -> str:
    """grpc.health.v1 overall status of the server at `address`, or why it could not be asked."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from dataclasses import replace
    ch = replace(target, server=address, token="").channel() if tls or address == target.server else None
    if ch is None:
        from schedmesh.security.credentials import channel
        ch = channel(address, None)
    try:
        resp = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""), timeout=5,
                                                    metadata=target.metadata())
        return health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)
    except grpc.RpcError as e:
        return "UNREACHABLE" if e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED) \
            else e.code().name
    finally:
        ch.close()


def local_services(target) -> list[dict[str, Any]]:
    from schedmesh.local.supervisor import pid_alive
    out = []
    state = target.state
    for p in state.procs:
        address = f"127.0.0.1:{p.port}"
        if p.health:
            health = _health(address, target, state.tls)
        else:  # the broker speaks Kafka, not gRPC: a live process listening is what can be said
            health = "SERVING" if pid_alive(p.pid, p.module) else "NOT_RUNNING"
        metrics_port = getattr(p, "metrics_port", 0)
        out.append({"name": p.name, "address": address, "health": health,
                    "metrics": f"http://127.0.0.1:{metrics_port}/metrics" if metrics_port else "",
                    "pid": p.pid, "restarts": p.restarts})
    if getattr(state, "external_kafka", False):  # `up --kafka`: no process of the mesh; a Kafka answer says it works
        from schedmesh.local.launch import kafka_addresses
        from schedmesh.local.supervisor import kafka_answers
        up = any(kafka_answers(port, 2.0, host) for host, port in kafka_addresses(state.bootstrap))
        out.append({"name": "broker (--kafka)", "address": state.bootstrap,
                    "health": "SERVING" if up else "UNREACHABLE", "metrics": "", "pid": 0, "restarts": 0})
    return out


def remote_services(target) -> list[dict[str, Any]]:
    """A remote mesh: its scheduler lists the services it knows with their addresses and /metrics
    as it is configured with them; each is health-checked from here (this machine's network)."""
    import grpc
    from schedmesh.v1 import queue_pb2, queue_pb2_grpc
    ch = target.channel()
    try:
        resp = queue_pb2_grpc.SchedulerStub(ch).GetServices(queue_pb2.GetRequest(), timeout=10,
                                                            metadata=target.metadata())
    except grpc.RpcError as e:
        raise MeshError(f"cannot list the services of {target.server} ({target.origin}): "
                        f"{e.details() or e.code().name}") from None
    finally:
        ch.close()
    from schedmesh.security.credentials import target_host
    host = target_host(target.server)
    out = []
    for s in resp.services:
        address = s.address or target.server  # "": the scheduler itself, at the address reached
        metrics = s.metrics_url.replace("//0.0.0.0:", f"//{host}:").replace("//[::]:", f"//{host}:")
        out.append({"name": s.name, "address": address,
                    "health": _health(address, target, bool(target.certificate_authority)),
                    "metrics": metrics, "pid": 0, "restarts": 0})
    return out


# ------------------------------------------------------------------ describe
def add_describe_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("resource", choices=[*POD_NAMES, *NODE_NAMES])
    p.add_argument("name")
    p.add_argument("-n", "--namespace", default="default")


def run_describe(args: argparse.Namespace) -> int:
    from schedmesh.cli.mesh import _client
    from schedmesh.v1 import queue_pb2
    c = _client()
    try:
        if args.resource in POD_NAMES:
            d = c.call("DescribePod", queue_pb2.DescribeRequest(namespace=args.namespace, name=args.name))
            print(describe_pod(d))
            return 0
        nodes = [v for v in c.list_nodes() if v.node.metadata.name == args.name]
        if not nodes:
            raise MeshError(f'nodes "{args.name}" not found')
        pods = [v for v in c.list_pods() if v.pod.node_name == args.name]
        print(describe_node(nodes[0], pods))
    finally:
        c.close()
    return 0


def _when(ts: Optional[float]) -> str:
    """kubectl describe's time format (RFC 1123Z)."""
    return time.strftime("%a, %d %b %Y %H:%M:%S +0000", time.gmtime(ts)) if ts else "<unset>"


class _Sheet:
    """kubectl describe's aligned `Key:  value` lines; multi-line values indent under the value column."""

    def __init__(self, width: int) -> None:
        self.width, self.lines = width, []

    def kv(self, key: str, value: str, indent: int = 0) -> None:
        pad = " " * indent
        first, *more = (value or "<none>").split("\n")
        self.lines.append(f"{pad}{key + ':':<{self.width - indent}}{first}".rstrip())
        self.lines += [" " * self.width + m for m in more]

    def line(self, text: str) -> None:
        self.lines.append(text)

    def text(self) -> str:
        return "\n".join(self.lines)


def _labels(d) -> str:
    return "\n".join(f"{k}={v}" for k, v in sorted(d.items())) or "<none>"


def _events_section(sheet: _Sheet, events) -> None:
    if not events:
        sheet.line("Events:              <none>")
        return
    sheet.line("Events:")
    now = time.time()
    rows = [["Type", "Reason", "Age", "From", "Message"], ["----", "------", "----", "----", "-------"]]
    for e in sorted(events, key=lambda e: e.timestamp):
        rows.append([e.type, e.reason, age(e.timestamp, now), e.source, e.message.replace("\n", " ")])
    sheet.lines += ["  " + line for line in table(rows).splitlines()]


def describe_pod(d) -> str:
    from schedmesh.eviction.qos import qos_class
    view = d.pod
    p = pod_of(view)
    s = _Sheet(21)
    s.kv("Name", p.name)
    s.kv("Namespace", p.namespace)
    s.kv("Priority", str(p.priority))
    if p.priority_class_name:
        s.kv("Priority Class Name", p.priority_class_name)
    s.kv("Scheduler", p.scheduler_name or DEFAULT_SCHEDULER)
    s.kv("Node", p.node_name or "<none>")
    if p.start_time:
        s.kv("Start Time", _when(p.start_time))
    s.kv("Labels", _labels(p.labels))
    s.kv("Annotations", _labels(p.meta.annotations))
    s.kv("Status", pod_status(p) if p.meta.deletion_timestamp else (p.phase or "Pending"))
    if p.status_reason:
        s.kv("Reason", p.status_reason)
    if p.status_message:
        s.kv("Message", p.status_message)
    if p.nominated_node_name:
        s.kv("Nominated Node Name", p.nominated_node_name)
    if p.meta.owner_references:
        s.kv("Controlled By", ", ".join(f"{o.kind}/{o.name}" for o in p.meta.owner_references))
    s.kv("Queue", view.queue or "<none>")
    s.kv("Trace ID", view.trace_id or "<none>")
    for title, ctrs in (("Init Containers", p.init_containers), ("Containers", p.containers)):
        if not ctrs and title == "Init Containers":
            continue
        s.line(f"{title}:")
        for c in ctrs:
            s.line(f"  {c.name}:")
            s.kv("Image", c.image or "<none>", indent=4)
            for port in c.ports:
                s.kv("Port", f"{port.container_port}/{port.protocol or 'TCP'}", indent=4)
                if port.host_port:
                    s.kv("Host Port", f"{port.host_port}/{port.protocol or 'TCP'}", indent=4)
            for title2, rl in (("Limits", c.limits), ("Requests", c.requests)):
                if rl:
                    s.line(f"    {title2}:")
                    width = max(len(k) for k in rl) + 3
                    for k, q in sorted(rl.items()):
                        s.line(f"      {k + ':':<{width}}{_q(q)}")
    if p.conditions:
        s.line("Conditions:")
        rows = [["Type", "Status"], *([c.type, c.status] for c in p.conditions)]
        s.lines += ["  " + line for line in table(rows).splitlines()]
    s.kv("QoS Class", qos_class(p))
    s.kv("Node-Selectors", _labels(p.node_selector))
    tolerations = []
    for t in p.tolerations:
        key = t.key
        if t.value:
            key += f"={t.value}"
        if t.effect:
            key += f":{t.effect}"
        text = (key or "") + (f" op={t.operator}" if t.operator == "Exists" else "")
        if t.toleration_seconds is not None:
            text += f" for {t.toleration_seconds}s"
        tolerations.append(text.strip())
    s.kv("Tolerations", "\n".join(tolerations) or "<none>")
    if p.topology_spread_constraints:
        s.kv("Topology Spread Constraints", "\n".join(
            f"{c.topology_key}:{c.when_unsatisfiable} when max skew {c.max_skew} is exceeded"
            for c in p.topology_spread_constraints))
    if p.scheduling_gates:
        s.line("Scheduling Gates:")
        s.lines += [f"  {g}" for g in p.scheduling_gates]
    if view.message:
        s.kv("Unschedulable", view.message)
    _events_section(s, d.events)
    return s.text()


def pod_limits(pod) -> dict[str, Fraction]:
    """kube's resourcehelper.PodLimits: containers' limits summed, each init container's as a
    floor, pod-level limits override, overhead added."""
    out: dict[str, Fraction] = {}
    for c in pod.containers:
        for k, q in c.limits.items():
            out[k] = out.get(k, Fraction(0)) + q
    for c in pod.init_containers:
        for k, q in c.limits.items():
            out[k] = max(out.get(k, Fraction(0)), q)
    for k, q in (pod.resource_limits or {}).items():
        out[k] = q
    if out:
        for k, q in pod.overhead.items():
            if k in out:
                out[k] += q
    return out


def _fraction_of(q: Fraction, total: Optional[Fraction]) -> str:
    """kubectl's `350m (17%)`: the percentage truncated toward zero."""
    pct = int(q * 100 / total) if total else 0
    return f"{_q(q)} ({pct}%)"


def describe_node(view, pod_views) -> str:
    from schedmesh.api.convert import node_from_proto
    from schedmesh.api.resources import pod_requests
    from schedmesh.mesh.cluster_cache import is_terminal
    n = node_from_proto(view.node)
    s = _Sheet(20)
    s.kv("Name", n.name)
    s.kv("Roles", node_roles(n))
    s.kv("Labels", _labels(n.labels))
    s.kv("Annotations", _labels(n.meta.annotations))
    s.kv("CreationTimestamp", _when(n.meta.creation_timestamp))
    s.kv("Taints", "\n".join(str(t) for t in n.taints) or "<none>")
    s.kv("Unschedulable", "true" if n.unschedulable else "false")
    s.line("Conditions:")
    rows = [["Type", "Status", "LastHeartbeatTime", "LastTransitionTime", "Reason", "Message"],
            ["----", "------", "-----------------", "------------------", "------", "-------"]]
    for c in n.conditions:
        rows.append([c.type, c.status, _when(c.last_heartbeat_time), "<unset>", c.reason or "", c.message or ""])
    s.lines += ["  " + line for line in table(rows).splitlines()]
    for title, rl in (("Capacity", n.capacity), ("Allocatable", n.allocatable)):
        s.line(f"{title}:")
        width = max((len(k) for k in rl), default=0) + 2
        s.lines += [f"  {k + ':':<{width}}{_q(q)}" for k, q in sorted(rl.items())]
    pods = [pod_of(v) for v in pod_views]
    pods = [p for p in pods if not is_terminal(p)]
    pods.sort(key=lambda p: (p.namespace, p.name))
    alloc = n.allocatable
    s.line(f"Non-terminated Pods:  ({len(pods)} in total)")
    rows = [["Namespace", "Name", "CPU Requests", "CPU Limits", "Memory Requests", "Memory Limits", "Age"],
            ["---------", "----", "------------", "----------", "---------------", "-------------", "---"]]
    total_req: dict[str, Fraction] = {}
    total_lim: dict[str, Fraction] = {}
    now = time.time()
    for p in pods:
        req, lim = pod_requests(p), pod_limits(p)
        for k, q in req.items():
            total_req[k] = total_req.get(k, Fraction(0)) + q
        for k, q in lim.items():
            total_lim[k] = total_lim.get(k, Fraction(0)) + q
        rows.append([p.namespace, p.name,
                     _fraction_of(req.get("cpu", Fraction(0)), alloc.get("cpu")),
                     _fraction_of(lim.get("cpu", Fraction(0)), alloc.get("cpu")),
                     _fraction_of(req.get("memory", Fraction(0)), alloc.get("memory")),
                     _fraction_of(lim.get("memory", Fraction(0)), alloc.get("memory")),
                     age(p.meta.creation_timestamp, now)])
    if pods:
        s.lines += ["  " + line for line in table(rows).splitlines()]
    s.line("Allocated resources:")
    s.line("  (Total limits may be over 100 percent, i.e., overcommitted.)")
    names = ["cpu", "memory", "ephemeral-storage",
             *sorted((set(total_req) | set(total_lim) | set(alloc)) - {"cpu", "memory", "ephemeral-storage", "pods"})]
    rows = [["Resource", "Requests", "Limits"], ["--------", "--------", "------"]]
    for k in names:
        rows.append([k, _fraction_of(total_req.get(k, Fraction(0)), alloc.get(k)),
                     _fraction_of(total_lim.get(k, Fraction(0)), alloc.get(k))])
    s.lines += ["  " + line for line in table(rows).splitlines()]
    _events_section(s, [])  # node events are not recorded by the mesh (only pods' events are)
    return s.text()


# ------------------------------------------------------------------ delete
def add_delete_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("kind", nargs="?", choices=["pod", "pods", "po", "node", "nodes", "no", "priorityclass",
                                               "priorityclasses", "pc", "runtimeclass", "runtimeclasses", "pdb",
                                               "poddisruptionbudget", "service", "services", "svc", "daemonset",
                                               "daemonsets", "ds", "limitrange", "limitranges", "limits",
                                               "deployment", "deployments", "deploy", "replicaset", "replicasets",
                                               "rs", "statefulset", "statefulsets", "sts", "replicationcontroller",
                                               "replicationcontrollers", "rc", "job", "jobs"])
    p.add_argument("name", nargs="*")
    p.add_argument("-n", "--namespace", default="default")
    p.add_argument("-f", "--filename", action="append", metavar="FILE",
                   help="delete every object of this manifest (YAML/JSON, '-' reads stdin); repeatable")


_KINDS = {"pods": "pod", "po": "pod", "nodes": "node", "no": "node", "priorityclasses": "priorityclass",
          "pc": "priorityclass", "runtimeclasses": "runtimeclass", "poddisruptionbudget": "pdb", "services": "service",
          "svc": "service", "daemonsets": "daemonset", "ds": "daemonset", "limitranges": "limitrange",
          "limits": "limitrange", "deployments": "deployment", "deploy": "deployment", "replicasets": "replicaset",
          "rs": "replicaset", "statefulsets": "statefulset", "sts": "statefulset",
          "replicationcontrollers": "replicationcontroller", "rc": "replicationcontroller", "jobs": "job"}
_WORKLOAD_KINDS = ("deployment", "replicaset", "statefulset", "replicationcontroller", "job")


def manifest_objects(files: list[str]) -> tuple[list[tuple[str, str, str]], list[str]]:
    """(kind, namespace, name) of every object in the manifests, in file order (a workload's
    pods left to it: deleting a Deployment, ReplicaSet, StatefulSet, ReplicationController or
    Job deletes the pods it owns, its replacements included), and a line for each object of a
    kind apply skips (never applied, so nothing to delete)."""
    from schedmesh.workloads.replicas import controlled_by
    from schedmesh.api.load import load_text, read_manifest
    out = []
    skipped: list[str] = []
    for f in files:
        m = load_text(read_manifest(f), "<stdin>" if f == "-" else f)
        if m.namespaces:
            raise MeshError(f"{f}: deleting a Namespace is not supported (namespaces "
                            f"{', '.join(ns.name for ns in m.namespaces)}); remove it from the file")
        out += [("daemonset", d.namespace, d.name) for d in m.daemon_sets]  # its controller deletes its pods
        controllers = [w for w in m.workloads if w.spec is not None]
        out += [("deployment", w.namespace, w.spec.deployment) if w.spec.deployment
                else (w.kind.lower(), w.namespace, w.name) for w in controllers]  # with the pods they own
        out += [("pod", p.namespace, p.name) for p in m.pods if not any(controlled_by(w, p) for w in controllers)]
        out += [("pdb", p.namespace, p.name) for p in m.pdbs]
        out += [("service", w.namespace, w.name) for w in m.workloads if w.kind == "Service"]
        out += [("node", "", n.name) for n in m.nodes]
        out += [("priorityclass", "", c.name) for c in m.priority_classes]
        out += [("runtimeclass", "", c.name) for c in m.runtime_classes]
        out += [("limitrange", r.namespace, r.name) for r in m.limit_ranges]
        skipped += [s.line() for s in m.skipped]
    return out, skipped


def run_delete(args: argparse.Namespace) -> int:
    from schedmesh.cli.mesh import _client
    from schedmesh.v1 import queue_pb2
    if args.filename:
        if args.kind or args.name:
            raise MeshError("delete: give either -f FILE or KIND NAME, not both")
        targets, skipped = manifest_objects(args.filename)
    else:
        skipped = []
        if not args.kind or not args.name:
            raise MeshError("delete: give KIND NAME... (pod, node, priorityclass, runtimeclass, pdb, service, "
                            "daemonset, limitrange, deployment, replicaset, statefulset, replicationcontroller, "
                            "job) or -f FILE")
        kind = _KINDS.get(args.kind, args.kind)
        ns = args.namespace if kind in ("pod", "pdb", "service", "daemonset", "limitrange", *_WORKLOAD_KINDS) else ""
        targets = [(kind, ns, name) for name in args.name]
    failed = 0
    if targets:  # a manifest of skipped kinds only needs no mesh
        c = _client()
        try:
            for kind, ns, name in targets:
                try:
                    resp = c.call("Delete", queue_pb2.DeleteRequest(kind=kind, namespace=ns, name=name))
                    print(resp.result or f'{kind} "{name}" deleted')
                except MeshError as e:  # kubectl goes on with the rest and fails at the end
                    _err(f"Error from server: {e}")
                    failed += 1
        finally:
            c.close()
    for line in skipped:
        print(line)
    return 1 if failed else 0


# ------------------------------------------------------------------ config
def add_config_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="config_command", required=True)
    g = sub.add_parser("get-contexts", help="list the config file's contexts")
    c = sub.add_parser("current-context", help="print the current context")
    u = sub.add_parser("use-context", help="make a context the current one")
    u.add_argument("context_name")
    s = sub.add_parser("set-context", help="create or change a context (only the given keys change)")
    s.add_argument("context_name")
    for each in (g, c, u, s):
        each.add_argument("--config-file", default=argparse.SUPPRESS, metavar="FILE",
                          help="the config file (default: $SCHEDMESH_CONFIG, else ~/.schedmesh/config)")
    s.add_argument("--current", action="store_true", help="also make it the current context")
    from schedmesh.cli.connection import CONTEXT_KEYS
    for key in CONTEXT_KEYS:
        s.add_argument(f"--{key}", dest=f"set_{key.replace('-', '_')}", default=None)


def run_config(args: argparse.Namespace) -> int:
    from schedmesh.cli import connection
    path = connection.config_path(args)
    doc = connection.load_config(path)
    names = [c["name"] for c in doc["contexts"]]
    cmd = args.config_command
    if cmd == "get-contexts":
        rows = [["CURRENT", "NAME", "SERVER", "AUTH"]]
        for c in doc["contexts"]:
            ctx = c.get("context") or {}
            auth = ", ".join(k for k in ("client-certificate", "token", "token-file") if ctx.get(k)) or "<none>"
            rows.append(["*" if c["name"] == doc.get("current-context") else "", c["name"], ctx.get("server", ""), auth])
        print(table(rows))
    elif cmd == "current-context":
        if not doc.get("current-context"):
            raise MeshError(f"{path}: current-context is not set")
        print(doc["current-context"])
    elif cmd == "use-context":
        if args.context_name not in names:
            raise MeshError(f"{path}: no context named {args.context_name!r} (contexts: {', '.join(names) or 'none'})")
        doc["current-context"] = args.context_name
        connection.save_config(path, doc)
        print(f'Switched to context "{args.context_name}".')
    elif cmd == "set-context":
        entry = next((c for c in doc["contexts"] if c["name"] == args.context_name), None)
        created = entry is None
        if created:
            entry = {"name": args.context_name, "context": {}}
            doc["contexts"].append(entry)
        ctx = entry.setdefault("context", {})
        for key in connection.CONTEXT_KEYS:
            value = getattr(args, f"set_{key.replace('-', '_')}")
            if value is not None:
                ctx[key] = value
        if not ctx.get("server"):
            raise MeshError(f"context {args.context_name!r} needs --server HOST:PORT")
        if args.current:
            doc["current-context"] = args.context_name
        connection.save_config(path, doc)
        print(f'Context "{args.context_name}" {"created" if created else "modified"}.')
    return 0


# ------------------------------------------------------------------ completion, version
def run_completion(args: argparse.Namespace) -> int:
    """The shell code that completes `schedmesh` (argcomplete)."""
    import argcomplete
    print(argcomplete.shellcode(["schedmesh"], shell=args.shell))
    return 0


def version() -> str:
    from importlib import metadata
    try:
        return metadata.version("schedmesh")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


# ------------------------------------------------------------------ registration
def register(sub) -> None:
    from schedmesh.cli import connection
    for name, helptext, add, run in (
        ("get", "list pods, nodes, events or the mesh's services (kubectl get)", add_get_arguments, run_get),
        ("describe", "show a pod or node with its events (kubectl describe)", add_describe_arguments, run_describe),
        ("delete", "delete objects by kind and name or every object of a manifest (-f)",
         add_delete_arguments, run_delete),
    ):
        p = sub.add_parser(name, help=helptext)
        add(p)
        connection.add_arguments(p, suppress_defaults=True)
        p.set_defaults(func=run)
    p = sub.add_parser("config", help="the contexts of the CLI's config file (kubectl config)")
    add_config_arguments(p)
    p.set_defaults(func=run_config)
    p = sub.add_parser("completion", help="print shell completion code: eval \"$(schedmesh completion bash)\"")
    p.add_argument("shell", choices=["bash", "zsh", "fish", "tcsh"])
    p.set_defaults(func=run_completion)
