"""`schedmesh up/down/apply/get/describe/delete/demo`: run the local mesh and talk to its Scheduler API."""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from typing import Optional
from pathlib import Path

from schedmesh.local.client import Client
from schedmesh.local.launch import KAFKA_ENV, start_mesh, stop_mesh
from schedmesh.mesh import cpu_affinity
from schedmesh.local.supervisor import APPLIED_DIR, EMBEDDED_BROKER_LOSES, MeshError, MeshState, state_path, stopped_note

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
    p.add_argument("--cpu-pinning", choices=cpu_affinity.PINNING_CHOICES, default=None,
                   help="auto: the queue-manager on a CPU of its own, every other process on the others (Linux, "
                        "2 CPUs or more); off: left to the OS (default: $SCHEDMESH_CPU_PINNING, else auto)")
    p.add_argument("--pool", default=None, help="node pool YAML for the kubelet agent (default: the demo pool)")
    p.add_argument("--config", default=None, help="KubeSchedulerConfiguration file (profiles, plugin weights)")
    p.add_argument("--detach", action="store_true", help="leave the mesh running in the background")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for every service to be SERVING")
    p.add_argument("--restore", action="store_true",
                   help="apply again what was applied before the last `down` (kept in .schedmesh/applied/)")
    p.add_argument("--insecure", action="store_true",
                   help="plaintext gRPC on 127.0.0.1 instead of mutual TLS (no certificates; any local process "
                        "can then call the binder and the shards)")
    p.add_argument("--kafka", metavar="BOOTSTRAP", default=os.environ.get(KAFKA_ENV, ""),
                   help=f"use the Kafka broker at BOOTSTRAP (host:port[,host:port...], plaintext; default "
                        f"${KAFKA_ENV}) instead of starting the embedded one: `up` neither supervises nor stops it, "
                        "and durability is then the broker's (its topics keep what was applied; no --restore). "
                        "One mesh per broker: the topic names are fixed")


def print_summary(state: MeshState) -> None:
    shards = (f"{state.filter_shards} filter + {state.score_shards} score shards"
              if state.filter_shards or state.score_shards else "filter and score in the queue-manager")
    print(f"schedmesh mesh is up ({shards})")
    print(f"  {'SERVICE':<18} {'ADDRESS':<18} PID")
    for p in state.procs:
        print(f"  {p.name:<18} 127.0.0.1:{p.port:<8} {p.pid}")
    print(f"  scheduler API: {state.scheduler}   broker: {state.bootstrap}"
          + (" (external: --kafka)" if state.external_kafka else ""))
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
    if state.external_kafka:
        print(f"  Kafka: plaintext to {state.bootstrap} (`up` configures no Kafka TLS): whoever reaches the broker "
              "can read and write the topics")
        print(f"  broker: external, not supervised; this mesh started from what its topics held; "
              f"{stopped_note(state)}")
    else:
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
    from schedmesh.local.supervisor import set_aside_applied
    kafka = (args.kafka or "").strip()
    if kafka and args.restore:
        raise MeshError(f"--restore applies again what a mesh on the embedded broker kept in "
                        f".schedmesh/{APPLIED_DIR}/; with --kafka the broker's topics keep what was applied: "
                        "leave out --restore")
    if not kafka:  # with --kafka the store is not used: left as it is for a later embedded `up --restore`
        said = set_aside_applied(Path.cwd(), args.restore)
        if said:
            print(said)
    def start(detach: bool):
        return start_mesh(str(args.pool or DEFAULT_POOL), args.filter_workers, args.score_workers, args.config,
                          detach, args.timeout, tie_break=args.tie_break, tls=not args.insecure, kafka=kafka,
                          cpu_pinning=args.cpu_pinning)
    if args.detach:
        state, _ = start(True)
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
    state, sup = start(False)
    for sig in signals:
        signal.signal(sig, lambda signum, frame: sup.request_stop())
    sup.wake_on_child_exit()
    try:
        print_summary(state)
        print("running in the foreground: a service that dies is restarted; Ctrl-C (or `schedmesh down`) "
              "stops the mesh", flush=True)
        sup.supervise()
    finally:
        _err("stopping the mesh ...")
        sup.stop_all(log=_err)
        state_path().unlink(missing_ok=True)
    _err(f"mesh stopped; {stopped_note(state)}")
    return 0


def run_down(args: argparse.Namespace) -> int:
    state = stop_mesh()
    print(f"mesh stopped; {stopped_note(state)}")
    return 0


# ================================================================== the Scheduler API client
def _client() -> Client:
    """A client of the Scheduler API the CLI's flags, environment or config name (connection.resolve)."""
    from schedmesh.cli import connection
    return Client(target=connection.resolve())


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
            for w in resp.warnings:
                print(f"Warning: {w}", file=sys.stderr)
            for line in resp.applied:
                print(line)
    finally:
        c.close()
    return 0


# ================================================================== demo
def add_demo_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for every pod to be decided")
    p.add_argument("--keep", action="store_true", help="leave the mesh running afterwards")


def _decided(v) -> bool:
    return bool(v.pod.node_name) or bool(v.message) or v.queue in ("unschedulable",)


def _pods_by_name(c: Client) -> dict:
    return {v.pod.metadata.name: v.pod for v in c.list_pods()}


def _wait_for(c: Client, done, what: str, timeout: float, missed: list[str]) -> dict:
    """Poll the pods until `done(pods by name)`; when it does not happen in time, say so and add
    `what` to `missed` (the demo goes on, and fails at its end)."""
    deadline = time.time() + timeout
    while True:
        pods = _pods_by_name(c)
        if done(pods):
            return pods
        if time.time() > deadline:
            _err(f"schedmesh demo: {what} did not happen within {timeout:.0f}s")
            missed.append(what)
            return pods
        time.sleep(0.3)


def _gone(p) -> bool:
    return p is None or bool(p.metadata.deletion_timestamp) or p.phase in ("Failed", "Succeeded")


def _act_two(c: Client, timeout: float, missed: list[str]) -> None:
    """The acting half on the edge node: a preemption, then a node-pressure eviction."""
    from schedmesh.v1 import queue_pb2

    def apply(name: str) -> None:
        print(f"\n== schedmesh apply -f acting/{name}")
        text = (DEMO_DIR / "acting" / name).read_text()
        for line in c.call("Apply", queue_pb2.ApplyRequest(manifest=text, source=f"acting/{name}")).applied:
            print(f"  {line}")

    def events(reason: str, at_least: int = 1, wait: float = 15.0) -> list:
        """The events of `reason`, once `at_least` of them are read (they follow their acts on a
        topic of their own), or what there is after `wait` seconds."""
        deadline = time.time() + wait
        while True:
            got = [e for e in c.list_events() if e.reason == reason]
            if len(got) >= at_least or time.time() > deadline:
                return got
            time.sleep(0.2)

    apply("1-batch.yaml")
    _wait_for(c, lambda ps: all(ps.get(n) is not None and ps[n].node_name for n in ("batch-a", "batch-b")),
              "binding the batch pods", timeout, missed)
    apply("2-urgent.yaml")
    pods = _wait_for(c, lambda ps: ps.get("urgent-fix") is not None and bool(ps["urgent-fix"].node_name)
                     and any(_gone(ps.get(n)) for n in ("batch-a", "batch-b")), "the preemption", timeout, missed)
    urgent = pods.get("urgent-fix")
    victims = [n for n in ("batch-a", "batch-b") if _gone(pods.get(n))]
    print(f"\n== preemption: urgent-fix (priority {urgent.priority if urgent else '?'}) bound to "
          f"{urgent.node_name if urgent and urgent.node_name else '<pending>'}; preempted: {', '.join(victims) or 'none'}")
    preempted = events("Preempted", len(victims))
    for e in preempted:
        print(f"  {e.type} Preempted {e.pod}: {e.message}")
    if len(preempted) < len(victims):
        missed.append("a Preempted event for each victim")
    apply("3-memory-hog.yaml")
    pods = _wait_for(c, lambda ps: ps.get("memory-hog") is not None and ps["memory-hog"].phase == "Failed",
                     "the node-pressure eviction", timeout, missed)
    hog = pods.get("memory-hog")
    if hog is not None:
        print(f"\n== node-pressure eviction: memory-hog {hog.phase} ({hog.status_reason}): {hog.status_message}")
    evicted = events("Evicted")
    for e in evicted:
        print(f"  {e.type} Evicted {e.pod}: {e.message}")
    if not evicted:
        missed.append("the Evicted event")


def run_demo(args: argparse.Namespace) -> int:
    from schedmesh.cli.kubectl import describe_pod, node_table, table
    from schedmesh.v1 import queue_pb2
    from schedmesh.local.supervisor import set_aside_applied
    print("== schedmesh demo: bringing the mesh up (2 filter + 2 score workers)", flush=True)
    # As `up` does: a demo run before left its objects in the store, and the mesh would otherwise
    # publish them again at start (the demo's pods "unchanged", its acts never happening).
    said = set_aside_applied(Path.cwd(), False)
    if said:
        print(said, flush=True)
    state, _sup = start_mesh(str(DEFAULT_POOL), 2, 2, None, detach=True)
    c: Optional[Client] = None
    missed: list[str] = []  # what did not happen in time: the demo says so and fails (`make run` too)
    try:  # from here on, whatever happens (`schedmesh demo | head` closes the output), the mesh goes down
        print_summary(state)
        c = Client(state)
        nodes = c.list_nodes()
        deadline = time.time() + 30
        while not nodes and time.time() < deadline:
            time.sleep(0.3)
            nodes = c.list_nodes()
        zone = {v.node.metadata.name: v.node.metadata.labels.get("topology.kubernetes.io/zone", "-")
                for v in nodes}
        print(f"\n== {len(zone)} nodes registered by the kubelet agent")
        print(table(node_table(nodes, wide=True)))
        files = sorted(DEMO_DIR.glob("[0-9]*.yaml"))
        print("\n== schedmesh apply " + " ".join(f"-f {f.name}" for f in files))
        # one request: the PriorityClass is admitted together with the pod that uses it
        text = "\n---\n".join(f.read_text() for f in files)
        for line in c.call("Apply", queue_pb2.ApplyRequest(manifest=text, source="demo")).applied:
            print(f"  {line}")
        deadline = time.time() + args.timeout
        t0 = time.time()
        while True:
            pods = c.list_pods()
            undecided = [v for v in pods if not _decided(v)]
            if pods and not undecided:
                break
            if time.time() > deadline:
                _err(f"schedmesh demo: {len(undecided)} pods still undecided after {args.timeout:.0f}s: "
                     + ", ".join(v.pod.metadata.name for v in undecided[:10]))
                missed.append("deciding every pod")
                break
            time.sleep(0.3)
        print(f"\n== placements ({time.time() - t0:.1f}s)")
        rows = [["NAMESPACE", "POD", "NODE", "ZONE", "PRIORITY", "TRACE ID"]]
        pods.sort(key=lambda v: (v.pod.metadata.namespace, v.pod.metadata.name))
        for v in pods:
            p = v.pod
            rows.append([p.metadata.namespace, p.metadata.name, p.node_name or "<pending>",
                         zone.get(p.node_name, "-"), str(p.priority), v.trace_id or "-"])
        print(table(rows))
        unsched = [v for v in pods if not v.pod.node_name]
        for v in unsched:
            d = c.call("DescribePod", queue_pb2.DescribeRequest(namespace=v.pod.metadata.namespace,
                                                                name=v.pod.metadata.name))
            print(f"\n== schedmesh describe pod {v.pod.metadata.name} -n {v.pod.metadata.namespace}")
            print(describe_pod(d))
        _act_two(c, args.timeout, missed)
        if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
            print(f"\ntraces: search the trace ids above in {JAEGER_UI}")
    finally:
        if c is not None:
            c.close()
        if not args.keep:
            try:
                print("\n== bringing the mesh down", flush=True)
            except OSError:  # the output is gone (a closed pipe): the mesh goes down all the same
                pass
            stop_mesh(quiet=True)
            print("mesh stopped")
        else:
            print("\nthe mesh is still running: `schedmesh down` stops it")
    if missed:
        _err(f"schedmesh demo: did not happen in time: {', '.join(missed)}")
        return 1
    return 0


# ================================================================== registration
def register(sub) -> None:
    from schedmesh.cli import connection, kubectl
    for name, helptext, add, run in (
        ("up", "start the local mesh (broker + every service as its own process)", add_up_arguments, run_up),
        ("down", "stop a detached mesh", lambda p: None, run_down),
        ("apply", "send manifests to the scheduler", add_apply_arguments, run_apply),
        ("demo", "bring the mesh up, schedule a demo workload, show placements, bring it down",
         add_demo_arguments, run_demo),
    ):
        p = sub.add_parser(name, help=helptext)
        add(p)
        if name == "apply":
            connection.add_arguments(p, suppress_defaults=True)
        p.set_defaults(func=run)
    kubectl.register(sub)
