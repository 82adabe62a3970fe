"""`schedmesh up/down/apply/get/describe/delete/demo`: run the local mesh and talk to its Scheduler API."""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Callable, Optional

from schedmesh.cli.supervisor import (EMBEDDED_BROKER_LOSES, NOT_RUNNING, SUPERVISOR_LOG, MeshError, MeshState,
                                      RestartPolicy, Supervisor, free_port, load_state, new_log_dir, pid_alive,
                                      process_start_ticks, start_detached, state_path, stop_mesh_processes,
                                      supervisor_alive)

DEMO_DIR = Path(__file__).resolve().parent / "demo"
DEFAULT_POOL = DEMO_DIR / "pool.yaml"
JAEGER_UI = "http://localhost:16686"


def _err(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ================================================================== up / down
def add_up_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--filter-workers", type=int, default=0,
                   help="filter shard processes (default 0: the queue-manager filters in its own process)")
    p.add_argument("--score-workers", type=int, default=0,
                   help="score shard processes (default 0: the queue-manager scores in its own process)")
    p.add_argument("--tie-break", choices=("random", "name"), default="random",
                   help="among equal top totals: uniform random (kube's intent) or the smallest node name")
    p.add_argument("--pool", default=None, help="node pool YAML for the kubelet agent (default: the demo pool)")
    p.add_argument("--config", default=None, help="KubeSchedulerConfiguration file (profiles, plugin weights)")
    p.add_argument("--detach", action="store_true", help="leave the mesh running in the background")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for every service to be SERVING")
    p.add_argument("--insecure", action="store_true",
                   help="plaintext gRPC on 127.0.0.1 instead of mutual TLS (no certificates; any local process "
                        "can then call the binder and the shards)")


def start_mesh(filter_workers: int = 0, score_workers: int = 0, pool: Optional[str] = None,
               config: Optional[str] = None, detach: bool = True, timeout: float = 120.0,
               base: Optional[Path] = None, quiet: bool = False,
               tie_break: str = "random", tls: bool = True) -> tuple[MeshState, Optional[Supervisor]]:
    """Start the broker and every service under supervision, wait until all are healthy and write
    the state file.

    detach=False: this process supervises; the returned Supervisor's `supervise()` keeps the
    services running until a signal sets `stopping`, then `stop_all()` stops them.
    detach=True: a supervisor process of its own does all that and outlives this one (its pid
    is in the state file; `stop_mesh` stops it); the returned Supervisor is None."""
    if filter_workers < 0 or score_workers < 0:
        raise MeshError("--filter-workers and --score-workers must not be negative")
    base = (base or Path.cwd()).resolve()
    path = state_path(base)
    if path.exists():
        try:
            old = MeshState.load(path)
            if supervisor_alive(old) or any(pid_alive(p.pid, p.module) for p in old.procs):
                raise MeshError(f"a mesh is already running here (scheduler {old.scheduler or 'starting'}); "
                                "stop it with `schedmesh down`")
        except (ValueError, TypeError, KeyError) as e:
            if isinstance(e, MeshError):
                raise
        path.unlink(missing_ok=True)
    pool_path = Path(pool or DEFAULT_POOL).resolve()
    if not pool_path.is_file():
        raise MeshError(f"--pool: no such file: {pool}")
    config_path = str(Path(config).resolve()) if config else None
    if config and not Path(config_path).is_file():
        raise MeshError(f"--config: no such file: {config}")
    missing = [m for m in ("binder", "kubelet_agent", "queue_manager", "filter_worker", "score_worker")
               if not _service_exists(m)]
    if missing:
        raise MeshError(f"services not available in this installation: {', '.join('services.' + m for m in missing)}")

    log_dir, previous = new_log_dir(base)
    say = (lambda s: None) if quiet else _err
    launch = dict(base=str(base), log_dir=str(log_dir), previous_logs=str(previous or ""),
                  filter_workers=filter_workers, score_workers=score_workers, pool=str(pool_path),
                  config=config_path, timeout=timeout, tie_break=tie_break, tls=tls)
    if detach:
        return start_detached(launch, base, log_dir, say), None
    sup = Supervisor(log_dir, policy=RestartPolicy.from_env(start_timeout=timeout),
                     say=lambda s: _err(f"schedmesh: {s}"))
    try:
        state = launch_services(sup, say=say, detached=False, **launch)
    except BaseException:
        sup.stop_all(grace=5)
        path.unlink(missing_ok=True)
        raise
    return state, sup


def launch_services(sup: Supervisor, base: str, log_dir: str, pool: str, config: Optional[str],
                    filter_workers: int, score_workers: int, timeout: float, tie_break: str = "random",
                    previous_logs: str = "", detached: bool = False,
                    say: Callable[[str], None] = lambda s: None, tls: bool = True) -> MeshState:
    """Start the broker and every service under `sup`, in dependency order, each healthy before what
    needs it; the state file is written from the first process on (so `down` can stop a mesh that
    is still starting) and kept current by `sup`. Runs in `up` (foreground) or in the detached
    supervisor process."""
    state = MeshState(log_dir=log_dir, started=time.time(), detached=detached, filter_shards=filter_workers,
                      score_shards=score_workers, status="starting", supervisor_pid=os.getpid(),
                      supervisor_started=process_start_ticks(os.getpid()), previous_logs=previous_logs,
                      supervisor_log=str(Path(log_dir) / SUPERVISOR_LOG) if detached else "")
    # Mutual TLS between the services and a token for the Scheduler API (schedmesh.security).
    from schedmesh.security import identity as ids
    from schedmesh.security import local as local_security
    security = local_security.prepare(state_path(Path(base)).parent, tls)
    if security.note:
        say(security.note)
    sup.health_tls = security.admin
    state.tls, state.token_file = tls, str(security.token_file)
    if security.admin is not None:
        state.ca, state.client_cert, state.client_key = security.admin.ca, security.admin.cert, security.admin.key
    sup.attach_state(state, state_path(Path(base)))
    bport = free_port()
    broker = sup.start("broker", "schedmesh.broker", ["--log-file", str(Path(log_dir) / "tansu.log")], bport,
                       health=False, ready_text="broker ready on")
    say(f"starting broker on 127.0.0.1:{bport} ...")
    sup.wait_ready(broker, timeout)
    bootstrap = f"127.0.0.1:{bport}"
    state.bootstrap = bootstrap
    common = ["--bootstrap", bootstrap]
    cfg = ["--config", config] if config else []
    workers = []
    for kind, n in (("filter", filter_workers), ("score", score_workers)):
        for i in range(n):
            workers.append(sup.start(f"{kind}-worker-{i}", f"services.{kind}_worker",
                                     [*common, "--shard", str(i), "--shards", str(n), *cfg], free_port(),
                                     env=security.service_env(f"{kind}-worker")))
    binder = sup.start("binder", "services.binder", common, free_port(), env=security.service_env(ids.BINDER))
    # The one local agent also runs the pods of the nodes users apply (no other kubelet would).
    agent = sup.start("kubelet-agent", "services.kubelet_agent",
                      [*common, "--pool", pool, "--serve-applied-nodes", "queue-manager"], free_port(),
                      env=security.service_env(ids.KUBELET_AGENT))
    # DefaultPreemption's PostFilter, acted out; the same configuration as the queue-manager's.
    preemption = sup.start("preemption", "services.preemption", [*common, "--tie-break", tie_break, *cfg],
                           free_port(), env=security.service_env(ids.PREEMPTION))
    say(f"starting {filter_workers} filter + {score_workers} score workers, binder, kubelet agent, preemption ..."
        if workers else "starting binder, kubelet agent, preemption ...")
    # PDB status, node lifecycle, taint eviction and the Eviction API (the queue-manager forwards to it)
    controllers = sup.start("controller-manager", "services.controller_manager", common, free_port(),
                            env=security.service_env(ids.CONTROLLER_MANAGER))
    for info in (*workers, binder, agent, preemption, controllers):
        sup.wait_ready(info, timeout)
    # no workers: empty lists, the queue-manager filters and scores in its own process
    fw = ",".join(f"127.0.0.1:{w.port}" for w in workers if w.name.startswith("filter"))
    sw = ",".join(f"127.0.0.1:{w.port}" for w in workers if w.name.startswith("score"))
    qm = sup.start("queue-manager", "services.queue_manager",
                   [*common, "--filter-workers", fw, "--score-workers", sw, "--binder",
                    f"127.0.0.1:{binder.port}", "--preemption", f"127.0.0.1:{preemption.port}",
                    "--tie-break", tie_break, *cfg], free_port(),
                   env={**security.service_env(ids.QUEUE_MANAGER),
                        "SCHEDMESH_CONTROLLER_MANAGER": f"127.0.0.1:{controllers.port}"})
    say("starting queue-manager ...")
    sup.wait_ready(qm, timeout)
    state.scheduler = f"127.0.0.1:{qm.port}"
    state.status = "running"
    sup.record()
    return state


def _service_exists(name: str) -> bool:
    import importlib.util
    try:
        return importlib.util.find_spec(f"services.{name}") is not None
    except (ImportError, ValueError):
        return False


def print_summary(state: MeshState) -> None:
    shards = (f"{state.filter_shards} filter + {state.score_shards} score shards"
              if state.filter_shards or state.score_shards else "filter and score in the queue-manager")
    print(f"schedmesh mesh is up ({shards})")
    print(f"  {'SERVICE':<18} {'ADDRESS':<18} PID")
    for p in state.procs:
        print(f"  {p.name:<18} 127.0.0.1:{p.port:<8} {p.pid}")
    print(f"  scheduler API: {state.scheduler}   broker: {state.bootstrap}")
    where = f", log {state.supervisor_log}" if state.supervisor_log else ""
    print(f"  supervisor: pid {state.supervisor_pid}{where}; restarts a service that exits or stays unhealthy")
    print(f"  logs: {state.log_dir}" + (f" (earlier runs' logs are kept: {state.previous_logs})"
                                        if state.previous_logs else ""))
    from schedmesh.security.local import EMBEDDED_KAFKA_PLAINTEXT, PLAINTEXT_WARNING
    if state.tls:
        print(f"  security: mutual TLS between all services and for the CLI (CA {state.ca}); "
              f"Scheduler API token in {state.token_file}")
    else:
        print(f"  security: {PLAINTEXT_WARNING} (token in {state.token_file})")
    print(f"  {EMBEDDED_KAFKA_PLAINTEXT}")
    print("  broker: embedded, memory only: if it restarts its topics come back empty and the services "
          f"re-publish what they own; {EMBEDDED_BROKER_LOSES}")
    otlp = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if otlp:
        print(f"  traces: OTLP to {otlp} (Jaeger UI: {JAEGER_UI})")
    else:
        print("  traces: off (set OTEL_EXPORTER_OTLP_ENDPOINT, e.g. to a Jaeger at http://localhost:4317)")
    sys.stdout.flush()


def run_up(args: argparse.Namespace) -> int:
    if args.detach:
        state, _ = start_mesh(args.filter_workers, args.score_workers, args.pool, args.config, True,
                              args.timeout, tie_break=args.tie_break, tls=not args.insecure)
        print_summary(state)
        print("detached: the supervisor keeps every service running; `schedmesh down` stops it all")
        return 0
    # The services run in sessions of their own: on Ctrl-C, SIGTERM (`down`) or a closed terminal this
    # process must stop them, also when started with SIGINT ignored (a background job of a script).
    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def interrupt(signum, frame):
        raise KeyboardInterrupt  # while starting: start_mesh stops what it started

    for sig in signals:
        signal.signal(sig, interrupt)
    state, sup = start_mesh(args.filter_workers, args.score_workers, args.pool, args.config, False,
                            args.timeout, tie_break=args.tie_break, tls=not args.insecure)
    for sig in signals:
        signal.signal(sig, lambda signum, frame: sup.stopping.set())
    try:
        print_summary(state)
        print("running in the foreground: a service that dies is restarted; Ctrl-C (or `schedmesh down`) "
              "stops the mesh", flush=True)
        sup.supervise()
    finally:
        _err("stopping the mesh ...")
        sup.stop_all(log=_err)
        state_path().unlink(missing_ok=True)
    _err(f"mesh stopped; {EMBEDDED_BROKER_LOSES}")
    return 0


def stop_mesh(base: Optional[Path] = None, quiet: bool = False, timeout: float = 90.0) -> None:
    """Stop the mesh whose state file is in `base`: its supervisor stops every service it runs
    (restarted ones included); whatever is left (the supervisor was killed, a service was started
    by hand on a mesh port) is stopped here."""
    state = load_state(base)
    stop_mesh_processes(state, log=(lambda s: None) if quiet else _err, timeout=timeout)
    state_path(base).unlink(missing_ok=True)


def run_down(args: argparse.Namespace) -> int:
    stop_mesh()
    print(f"mesh stopped; {EMBEDDED_BROKER_LOSES}")
    return 0


# ================================================================== the Scheduler API client
class Client:
    def __init__(self, state: Optional[MeshState] = None, timeout: float = 30.0) -> None:
        import grpc
        from schedmesh.v1 import queue_pb2_grpc
        self.state = state or load_state()
        self.timeout = timeout
        from schedmesh.security.local import mesh_client_credentials
        tls, self.metadata = mesh_client_credentials(self.state)  # the local mesh's CA, client cert, token
        from schedmesh.security.credentials import channel
        self.channel = channel(self.state.scheduler, tls, options=[
            ("grpc.max_receive_message_length", 512 * 2**20), ("grpc.max_send_message_length", 512 * 2**20)])
        self.stub = queue_pb2_grpc.SchedulerStub(self.channel)

    def call(self, method: str, request, timeout: Optional[float] = None):
        import grpc
        try:
            return getattr(self.stub, method)(request, timeout=timeout or self.timeout, metadata=self.metadata)
        except grpc.RpcError as e:
            code = e.code()
            if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED) and \
                    not any(pid_alive(p.pid, p.module) for p in self.state.procs if p.name == "queue-manager"):
                raise MeshError(f"the scheduler at {self.state.scheduler} is not running (stale "
                                ".schedmesh/mesh.json?); run `schedmesh down` then `schedmesh up`") from None
            raise MeshError(e.details() or str(code)) from None

    def close(self) -> None:
        self.channel.close()


def _client() -> Client:
    if not state_path().exists():
        raise MeshError(NOT_RUNNING)
    return Client()


# ------------------------------------------------------------------ apply
def add_apply_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-f", "--filename", action="append", required=True, metavar="FILE",
                   help="manifest file (YAML/JSON, multi-document); '-' reads stdin; repeatable")


def run_apply(args: argparse.Namespace) -> int:
    from schedmesh.v1 import queue_pb2
    from schedmesh.api.load import ManifestError, read_manifest
    texts = []
    for f in args.filename:
        try:  # the capped reader: a huge file is refused after MAX_MANIFEST_BYTES, not read whole
            texts.append(("<stdin>" if f == "-" else f, read_manifest(f)))
        except ManifestError as e:
            raise MeshError(str(e)) from None
    c = _client()
    try:
        for source, text in texts:
            resp = c.call("Apply", queue_pb2.ApplyRequest(manifest=text, source=source))
            for line in resp.applied:
                print(line)
    finally:
        c.close()
    return 0


# ------------------------------------------------------------------ get
def add_get_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("resource", choices=["pods", "pod", "po", "nodes", "node", "no"])
    p.add_argument("-n", "--namespace", default="", help="namespace (default: all)")
    p.add_argument("-o", "--output", choices=["wide", "json", "yaml"], default=None)


def _age(ts: float, now: Optional[float] = None) -> str:
    if not ts:
        return "<unknown>"
    s = max(0, int((now or time.time()) - ts))
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m{s % 60}s" if s < 600 else f"{s // 60}m"
    if s < 172800:
        return f"{s // 3600}h{(s % 3600) // 60}m"
    return f"{s // 86400}d"


def pod_status(pod) -> str:
    if pod.metadata.deletion_timestamp:
        return "Terminating"
    if pod.scheduling_gates:
        return "SchedulingGated"
    if pod.phase:
        return pod.phase
    return "Pending"


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("   ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def _dump(msg, fmt: str) -> None:
    from google.protobuf.json_format import MessageToDict
    d = MessageToDict(msg, preserving_proto_field_name=False)
    if fmt == "json":
        print(json.dumps(d, indent=2))
    else:
        import yaml
        print(yaml.safe_dump(d, sort_keys=False), end="")


def pod_rows(pods, wide: bool) -> list[list[str]]:
    head = ["NAMESPACE", "NAME", "STATUS", "NODE", "QUEUE", "AGE"]
    if wide:
        head += ["PRIORITY", "TRACE ID", "MESSAGE"]
    rows = [head]
    now = time.time()
    for v in pods:
        p = v.pod
        r = [p.metadata.namespace, p.metadata.name, pod_status(p), p.node_name or "<none>", v.queue or "-",
             _age(p.metadata.creation_timestamp, now)]
        if wide:
            r += [str(p.priority), v.trace_id or "-", (v.message or "").replace("\n", " ")]
        rows.append(r)
    return rows


def _node_ready(v) -> str:
    s = "Ready" if v.ready else "NotReady"
    if v.node.unschedulable:
        s += ",SchedulingDisabled"
    return s


def run_get(args: argparse.Namespace) -> int:
    from schedmesh.v1 import queue_pb2
    c = _client()
    try:
        if args.resource in ("pods", "pod", "po"):
            resp = c.call("GetPods", queue_pb2.GetRequest(namespace=args.namespace))
            if args.output in ("json", "yaml"):
                _dump(resp, args.output)
            elif not resp.pods:
                _err(f"No resources found{' in ' + args.namespace + ' namespace' if args.namespace else ''}.")
            else:
                pods = sorted(resp.pods, key=lambda v: (v.pod.metadata.namespace, v.pod.metadata.name))
                print(_table(pod_rows(pods, args.output == "wide")))
        else:
            resp = c.call("GetNodes", queue_pb2.GetRequest(namespace=args.namespace))
            if args.output in ("json", "yaml"):
                _dump(resp, args.output)
            elif not resp.nodes:
                _err("No resources found.")
            else:
                print(_table(node_rows(sorted(resp.nodes, key=lambda v: v.node.metadata.name), args.output == "wide")))
    finally:
        c.close()
    return 0


def node_rows(nodes, wide: bool) -> list[list[str]]:
    from schedmesh.api.quantity import parse_quantity
    head = ["NAME", "STATUS", "ZONE", "PODS", "CPU REQ", "MEMORY REQ", "AGE"]
    if wide:
        head += ["POOL", "TAINTS"]
    rows = [head]
    now = time.time()
    for v in nodes:
        n = v.node
        alloc = n.allocatable
        try:
            cpu = float(parse_quantity(alloc.get("cpu", "0")))
            mem = float(parse_quantity(alloc.get("memory", "0")))
        except Exception:
            cpu = mem = 0.0
        cpu_pct = f" ({100 * v.requested_milli_cpu / 1000 / cpu:.0f}%)" if cpu else ""
        mem_pct = f" ({100 * v.requested_memory / mem:.0f}%)" if mem else ""
        r = [n.metadata.name, _node_ready(v), n.metadata.labels.get("topology.kubernetes.io/zone", "-"),
             f"{v.pods}/{alloc.get('pods', '?')}", f"{v.requested_milli_cpu}m{cpu_pct}",
             f"{v.requested_memory // 2**20}Mi{mem_pct}", _age(n.metadata.creation_timestamp, now)]
        if wide:
            r += [n.metadata.labels.get("schedmesh.io/pool", "-"),
                  ",".join(f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}" for t in n.taints)
                  or "<none>"]
        rows.append(r)
    return rows


# ------------------------------------------------------------------ describe
def add_describe_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("resource", choices=["pod", "pods", "po"])
    p.add_argument("name")
    p.add_argument("-n", "--namespace", default="default")


def run_describe(args: argparse.Namespace) -> int:
    from schedmesh.v1 import queue_pb2
    c = _client()
    try:
        d = c.call("DescribePod", queue_pb2.DescribeRequest(namespace=args.namespace, name=args.name))
    finally:
        c.close()
    print(describe_text(d))
    return 0


def _q(q: str) -> str:
    try:
        from schedmesh.api.quantity import parse_quantity
        from schedmesh.api.to_json import quantity_string
        return quantity_string(parse_quantity(q))
    except Exception:
        return q


def describe_text(d) -> str:
    v, p = d.pod, d.pod.pod
    m = p.metadata
    out = []

    def kv(k: str, val: str) -> None:
        out.append(f"{k + ':':<22}{val}")

    kv("Name", m.name)
    kv("Namespace", m.namespace)
    kv("Priority", str(p.priority))
    kv("Priority Class Name", p.priority_class_name or "<none>")
    kv("Scheduler", p.scheduler_name or "default-scheduler")
    kv("Node", p.node_name or "<none>")
    if p.nominated_node_name:
        kv("Nominated Node", p.nominated_node_name)
    if m.creation_timestamp:
        kv("Created", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(m.creation_timestamp)))
    kv("Labels", ", ".join(f"{k}={val}" for k, val in sorted(m.labels.items())) or "<none>")
    kv("Status", pod_status(p))
    kv("Queue", v.queue or "-")
    kv("Trace ID", v.trace_id or "-")
    if m.owner_references:
        kv("Controlled By", ", ".join(f"{o.kind}/{o.name}" for o in m.owner_references))
    out.append("Containers:")
    for ctr in p.containers:
        out.append(f"  {ctr.name}:")
        out.append(f"    Image:     {ctr.image}")
        if ctr.requests:
            out.append("    Requests:  " + ", ".join(f"{k}={_q(q)}" for k, q in sorted(ctr.requests.items())))
        if ctr.limits:
            out.append("    Limits:    " + ", ".join(f"{k}={_q(q)}" for k, q in sorted(ctr.limits.items())))
        for port in ctr.ports:
            out.append(f"    Port:      {port.container_port}/{port.protocol or 'TCP'}"
                       + (f" (host {port.host_port})" if port.host_port else ""))
    kv("Node-Selectors", ", ".join(f"{k}={val}" for k, val in sorted(p.node_selector.items())) or "<none>")
    tol = [f"{t.key or '<all>'}{'=' + t.value if t.value else ''}:{t.effect or '<all>'} op={t.operator or 'Equal'}"
           for t in p.tolerations]
    kv("Tolerations", ("\n" + " " * 22).join(tol) or "<none>")
    if p.topology_spread_constraints:
        kv("Topology Spread", ("\n" + " " * 22).join(
            f"{c.topology_key}:{c.when_unsatisfiable} maxSkew={c.max_skew}" for c in p.topology_spread_constraints))
    if p.HasField("affinity"):
        a = p.affinity
        parts = []
        if a.HasField("node_affinity"):
            parts.append("nodeAffinity")
        if a.HasField("pod_affinity"):
            parts.append("podAffinity")
        if a.HasField("pod_anti_affinity"):
            parts.append("podAntiAffinity")
        kv("Affinity", ", ".join(parts) or "<none>")
    if p.scheduling_gates:
        kv("Scheduling Gates", ", ".join(p.scheduling_gates))
    if v.message:
        kv("Message", v.message)
    out.append("Events:")
    if not d.events:
        out.append("  <none>")
    else:
        now = time.time()
        rows = [["  Type", "Reason", "Age", "From", "Message"]]
        rows.append(["  ----", "------", "----", "----", "-------"])
        for e in sorted(d.events, key=lambda e: e.timestamp):
            rows.append([f"  {e.type}", e.reason, _age(e.timestamp, now), e.source, e.message])
        out.append(_table(rows))
    return "\n".join(out)


# ------------------------------------------------------------------ delete
def add_delete_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("kind", choices=["pod", "pods", "node", "nodes", "priorityclass", "priorityclasses", "pc",
                                    "pdb", "poddisruptionbudget"])
    p.add_argument("name")
    p.add_argument("-n", "--namespace", default="default")


_KINDS = {"pods": "pod", "nodes": "node", "priorityclasses": "priorityclass", "pc": "priorityclass",
          "poddisruptionbudget": "pdb"}


def run_delete(args: argparse.Namespace) -> int:
    from schedmesh.v1 import queue_pb2
    kind = _KINDS.get(args.kind, args.kind)
    ns = args.namespace if kind in ("pod", "pdb") else ""
    c = _client()
    try:
        resp = c.call("Delete", queue_pb2.DeleteRequest(kind=kind, namespace=ns, name=args.name))
    finally:
        c.close()
    print(resp.result or f"{kind} \"{args.name}\" deleted")
    return 0


# ================================================================== demo
def add_demo_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for every pod to be decided")
    p.add_argument("--keep", action="store_true", help="leave the mesh running afterwards")


def _decided(v) -> bool:
    return bool(v.pod.node_name) or bool(v.message) or v.queue in ("unschedulable",)


def run_demo(args: argparse.Namespace) -> int:
    from schedmesh.v1 import queue_pb2
    print("== schedmesh demo: bringing the mesh up (2 filter + 2 score workers)", flush=True)
    state, _sup = start_mesh(2, 2, str(DEFAULT_POOL), None, detach=True)
    print_summary(state)
    c = Client(state)
    try:
        nodes = c.call("GetNodes", queue_pb2.GetRequest())
        deadline = time.time() + 30
        while not nodes.nodes and time.time() < deadline:
            time.sleep(0.3)
            nodes = c.call("GetNodes", queue_pb2.GetRequest())
        zone = {v.node.metadata.name: v.node.metadata.labels.get("topology.kubernetes.io/zone", "-")
                for v in nodes.nodes}
        print(f"\n== {len(zone)} nodes registered by the kubelet agent")
        print(_table(node_rows(sorted(nodes.nodes, key=lambda v: v.node.metadata.name), wide=True)))
        files = sorted(DEMO_DIR.glob("[0-9]*.yaml"))
        print("\n== schedmesh apply " + " ".join(f"-f {f.name}" for f in files))
        # one request: the PriorityClass is admitted together with the pod that uses it
        text = "\n---\n".join(f.read_text() for f in files)
        for line in c.call("Apply", queue_pb2.ApplyRequest(manifest=text, source="demo")).applied:
            print(f"  {line}")
        deadline = time.time() + args.timeout
        t0 = time.time()
        while True:
            pods = [v for v in c.call("GetPods", queue_pb2.GetRequest()).pods]
            undecided = [v for v in pods if not _decided(v)]
            if pods and not undecided:
                break
            if time.time() > deadline:
                _err(f"schedmesh demo: {len(undecided)} pods still undecided after {args.timeout:.0f}s: "
                     + ", ".join(v.pod.metadata.name for v in undecided[:10]))
                break
            time.sleep(0.3)
        print(f"\n== placements ({time.time() - t0:.1f}s)")
        rows = [["NAMESPACE", "POD", "NODE", "ZONE", "PRIORITY", "TRACE ID"]]
        pods.sort(key=lambda v: (v.pod.metadata.namespace, v.pod.metadata.name))
        for v in pods:
            p = v.pod
            rows.append([p.metadata.namespace, p.metadata.name, p.node_name or "<pending>",
                         zone.get(p.node_name, "-"), str(p.priority), v.trace_id or "-"])
        print(_table(rows))
        unsched = [v for v in pods if not v.pod.node_name]
        for v in unsched:
            d = c.call("DescribePod", queue_pb2.DescribeRequest(namespace=v.pod.metadata.namespace,
                                                                name=v.pod.metadata.name))
            print(f"\n== schedmesh describe pod {v.pod.metadata.name} -n {v.pod.metadata.namespace}")
            print(describe_text(d))
        if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
            print(f"\ntraces: search the trace ids above in {JAEGER_UI}")
    finally:
        c.close()
        if not args.keep:
            print("\n== bringing the mesh down", flush=True)
            stop_mesh(quiet=True)
            print("mesh stopped")
        else:
            print("\nthe mesh is still running: `schedmesh down` stops it")
    return 0


# ================================================================== registration
def register(sub) -> None:
    for name, helptext, add, run in (
        ("up", "start the local mesh (broker + every service as its own process)", add_up_arguments, run_up),
        ("down", "stop a detached mesh", lambda p: None, run_down),
        ("apply", "send manifests to the scheduler", add_apply_arguments, run_apply),
        ("get", "list pods or nodes", add_get_arguments, run_get),
        ("describe", "show a pod and its scheduling events", add_describe_arguments, run_describe),
        ("delete", "delete a pod, node, priorityclass or pdb", add_delete_arguments, run_delete),
        ("demo", "bring the mesh up, schedule a demo workload, show placements, bring it down",
         add_demo_arguments, run_demo),
    ):
        p = sub.add_parser(name, help=helptext)
        add(p)
        p.set_defaults(func=run)
