"""`schedmesh bench`: scheduling throughput and latency through the mesh, end to end.

The workloads are scheduler_perf's (schedmesh.bench.workloads). Nodes come from the kubelet
agent's node pool (a mesh started by the bench) or are applied as Node manifests
(--use-running); the workload's namespaces are applied, then its init pods pre-bound
(spec.nodeName); a workload's unschedulable pods (Unschedulable) are applied next and the bench
waits until each has failed once (its FailedScheduling event), so that the measured stream meets
them churning in the queue, not arriving; the measured pods are submitted through
Scheduler.Apply in batches (two Applies in flight by default: scheduler_perf creates its pods
from 30 concurrent clients, and one Apply at a time left the scheduler waiting for pods while
the next was admitted), and their bindings are observed on the schedmesh.pods topic. Latency
per pod = time its bound PodRecord was consumed - time its Apply request was sent. Prints one
JSON object on stdout (with --repeat, the median of that many runs, each in a new mesh, and
every run's figures: median_run); progress goes to stderr.
"""
from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Callable, Optional

from schedmesh.bench.workloads import HOSTNAME_LABEL, WORKLOAD_NAMES, ZONE_LABEL, build
from schedmesh.mesh import cpu_affinity


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workload", default="SchedulingBasic", choices=WORKLOAD_NAMES)
    p.add_argument("--nodes", type=int, default=None, help="default: the workload's (5,000 for scheduler_perf's)")
    p.add_argument("--init-pods", type=int, default=None,
                   help="default: the workload's (MixedSchedulingBasePod: this many of each of its five kinds)")
    p.add_argument("--pods", type=int, default=None, help="measured pods; default: the workload's")
    p.add_argument("--unschedulable-pods", type=int, default=None,
                   help="pods that fit nowhere, applied before the measured ones (Unschedulable only; default 1,000)")
    p.add_argument("--filter-workers", type=int, default=0,
                   help="filter shard processes (default 0, as `schedmesh up`: the queue-manager filters)")
    p.add_argument("--score-workers", type=int, default=0,
                   help="score shard processes (default 0, as `schedmesh up`: the queue-manager scores)")
    p.add_argument("--tie-break", choices=("random", "name"), default="random")
    p.add_argument("--cpu-pinning", choices=cpu_affinity.PINNING_CHOICES, default=None,
                   help="as `schedmesh up`: auto puts the queue-manager on a CPU of its own (default: "
                        "$SCHEDMESH_CPU_PINNING, else auto)")
    p.add_argument("--rate", type=float, default=0.0,
                   help="offer pods at this steady rate (pods/s) instead of all at once")
    p.add_argument("--config", default=None, help="KubeSchedulerConfiguration for the bench's mesh")
    p.add_argument("--use-running", action="store_true",
                   help="use the mesh of `schedmesh up` in this directory (nodes are applied as Node manifests)")
    p.add_argument("--batch", type=int, default=500, help="pods per Apply request")
    p.add_argument("--apply-concurrency", type=_at_least_one, default=2,
                   help="Apply requests in flight at once when pods are offered all at once (default 2: the next "
                        "Apply is admitted and published while the previous one's pods are scheduled; "
                        "scheduler_perf creates its pods from 30 concurrent clients)")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for all pods to be bound")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--keep-logs", action="store_true", help="keep the bench mesh's logs even on success")
    p.add_argument("--repeat", type=int, default=1,
                   help="measure this many times, each in a new mesh, and report the median run with every "
                        "run's figures (the host's speed moves between runs minutes apart)")
    p.add_argument("--alternate-shards", type=_shard_counts, default=None, metavar="N,N,...",
                   help="measure with each of these shard counts (N filter + N score workers), --repeat rounds "
                        "of one run each, in an order rotated every round, and print one JSON object per count "
                        "(its median run, and its throughput relative to each smaller count's in the same "
                        "round): on a host whose speed moves, only runs made side by side compare")


def _shard_counts(text: str) -> list[int]:
    try:
        counts = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: want shard counts separated by commas, e.g. 0,1,2,4") from None
    if len(counts) < 2 or min(counts) < 0 or len(set(counts)) != len(counts):
        raise argparse.ArgumentTypeError(f"{text!r}: want two or more different shard counts, none negative")
    return counts


def _at_least_one(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n} is less than 1")
    return n


def submit_all(apply: Callable[[list[dict]], None], docs: list[dict], batch: int, concurrency: int,
               submitted: dict[str, float], progress: Callable[[], None] = lambda: None) -> None:
    """`docs` through `apply`, `batch` at a time, in order, with at most `concurrency` calls in
    flight; each pod's submission time (when its Apply was sent) into `submitted`. An Apply that
    fails fails the whole submission."""
    with concurrent.futures.ThreadPoolExecutor(concurrency, thread_name_prefix="bench-apply") as pool:
        in_flight: list[concurrent.futures.Future] = []
        for i in range(0, len(docs), batch):
            while len(in_flight) >= concurrency:
                in_flight.pop(0).result()
                progress()
            chunk = docs[i:i + batch]
            t = time.time()
            for d in chunk:
                submitted[d["metadata"]["name"]] = t
            in_flight.append(pool.submit(apply, chunk))
        for f in in_flight:
            f.result()
            progress()


def _percentile(sorted_vals: list[float], q: float) -> float:
    if not sorted_vals:
        return 0.0
    k = min(len(sorted_vals) - 1, max(0, int(round(q / 100 * (len(sorted_vals) - 1)))))
    return sorted_vals[k]


def record_time(record) -> float:
    """When a consumed record (schedmesh.bus.Record) was published, in time.time()'s seconds,
    from its Kafka timestamp; the time it is read when the broker gives none."""
    return record.timestamp_ms / 1000 if record.timestamp_ms > 0 else time.time()


class _BindWatcher:
    """Follows schedmesh.pods and schedmesh.events in a background thread; records when each
    watched pod was first bound, and when it first failed to schedule (FailedScheduling).

    Times are the records' own timestamps (when the binder or the queue-manager published
    them), not when this watcher read them: it may then fetch as seldom as any watcher of the
    mesh does. Polling every 10 ms to time the reads was a third of the broker's requests at
    `--rate 250` and the bench's own CPU (its mesh and this watcher share one clock)."""

    def __init__(self, bootstrap: str, prefix: str, failures: bool = True) -> None:
        # failures=False: schedmesh.events is not followed (only the unschedulable pods' first
        # FailedScheduling is looked for there, and every event record would be parsed for it)
        self.bootstrap, self.prefix, self.failures = bootstrap, prefix, failures
        self.bound: dict[str, float] = {}
        self.nodes: dict[str, str] = {}
        self.names: dict[str, str] = {}  # uid -> name of the bench's pods
        self.failed: dict[str, float] = {}  # name -> first FailedScheduling event
        self.started: set[str] = set()  # names of the watched pods whose kubelet reported a phase
        self.ready = threading.Event()
        self.error: Optional[BaseException] = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()
        if not self.ready.wait(60):
            raise RuntimeError(f"could not follow schedmesh.pods on {self.bootstrap}: {self.error}")
        if self.error:
            raise RuntimeError(f"could not follow schedmesh.pods on {self.bootstrap}: {self.error}")

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:  # started (a bench may fail before it watches)
            self._thread.join(10)

    def _run(self) -> None:
        try:
            asyncio.run(self._follow())
        except BaseException as e:  # reported by start() / the main loop
            self.error = e
            self.ready.set()

    async def _follow(self) -> None:
        from schedmesh.bus.consumer import EventConsumer, watcher_options
        from schedmesh.bus.topics import EVENTS as TOPIC_EVENTS, PODS as TOPIC_PODS
        from schedmesh.mesh.records import expand
        from schedmesh.v1 import events_pb2
        topics = [TOPIC_PODS, TOPIC_EVENTS] if self.failures else [TOPIC_PODS]
        consumer = EventConsumer(self.bootstrap, topics, from_beginning=False,
                                 client_id=f"bench-{self.prefix}", **watcher_options())
        await consumer.start()
        self.ready.set()
        try:
            rec = events_pb2.PodRecord()
            event = events_pb2.Event()
            while not self._stop.is_set():
                for r in await consumer.getmany(timeout=0.2):
                    if not r.value:
                        continue
                    now = record_time(r)
                    if r.topic == TOPIC_EVENTS:
                        event.ParseFromString(r.value)
                        for e in expand(event):
                            name = e.pod.partition("/")[2]
                            if e.reason == "FailedScheduling" and name.startswith(self.prefix):
                                self.failed.setdefault(name, now)
                        continue
                    rec.ParseFromString(r.value)
                    for item in expand(rec):
                        if item.HasField("update"):  # a delta: the pod's name is known from its record
                            name = self.names.get(item.update.uid, "")
                            node = item.update.node_name
                            if item.update.phase and name:
                                self.started.add(name)
                        else:
                            name, node = item.pod.metadata.name, item.pod.node_name
                            if name.startswith(self.prefix):
                                self.names[item.pod.metadata.uid] = name
                        if item.deleted or not node or not name.startswith(self.prefix) or name in self.bound:
                            continue
                        self.bound[name] = now
                        self.nodes[name] = node
        finally:
            await consumer.stop()


_last_line = [0.0]


def _progress(done: int, total: int, t0: float) -> None:
    """A text bar redrawn in place on a terminal; one line every 5 s (and at the end) otherwise."""
    tty = sys.stderr.isatty()
    if not tty and done < total and time.time() - _last_line[0] < 5:
        return
    _last_line[0] = time.time()
    width = 40
    frac = done / total if total else 1.0
    el = time.time() - t0
    rate = done / el if el > 0 else 0.0
    bar = "#" * int(frac * width) + "." * (width - int(frac * width))
    sys.stderr.write(f"{chr(13) if tty else ''}[{bar}] {done}/{total} bound  {el:6.1f}s  {rate:7.1f} pods/s "
                     + ("" if tty else "\n"))
    sys.stderr.flush()


def _pool_for(nodes) -> tuple[dict, dict[str, str]]:
    """A node-pool document reproducing the workload's nodes, and workload name -> pool node name.
    A pool spreads its nodes over its zones round-robin: nodes whose zones follow that order make
    one pool, others (Mixed's gpu nodes every 20th) one pool per zone."""
    groups: dict[bool, list] = {}
    for n in nodes:
        groups.setdefault("nvidia.com/gpu" in n.allocatable, []).append(n)
    pools, rename = [], {}
    for gpu, members in groups.items():
        zones = list(dict.fromkeys(n.labels[ZONE_LABEL] for n in members if ZONE_LABEL in n.labels))
        round_robin = all(n.labels.get(ZONE_LABEL) == (zones[i % len(zones)] if zones else None)
                          for i, n in enumerate(members))
        parts = ([("gpu" if gpu else "node", members, zones)] if round_robin else
                 [(f"{'gpu' if gpu else 'node'}-{z or 'nozone'}", [n for n in members if n.labels.get(ZONE_LABEL) == z],
                   [z] if z else []) for z in dict.fromkeys(n.labels.get(ZONE_LABEL) for n in members)])
        for pname, part, part_zones in parts:
            n0 = part[0]
            entry = {"name": pname, "count": len(part), "cpu": str(n0.allocatable["cpu"]),
                     "memory": str(int(n0.allocatable["memory"])), "pods": int(n0.allocatable.get("pods", 110))}
            if part_zones:
                entry["zones"] = part_zones
            if "topology.kubernetes.io/region" in n0.labels:
                entry["region"] = n0.labels["topology.kubernetes.io/region"]
            extra = {k: v for k, v in n0.labels.items()
                     if k not in (ZONE_LABEL, HOSTNAME_LABEL, "topology.kubernetes.io/region", "kubernetes.io/os")}
            if extra:
                entry["labels"] = extra
            if gpu:
                entry["gpus"] = int(n0.allocatable["nvidia.com/gpu"])
            if n0.taints:
                entry["taints"] = [{"key": t.key, "value": t.value, "effect": t.effect} for t in n0.taints]
            pools.append(entry)
            for i, n in enumerate(part):
                rename[n.name] = f"{pname}-{i}"
    return {"pools": pools}, rename


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*/children"):
            try:
                todo += [int(c) for c in task.read_text().split()]
            except OSError:
                pass
    return out


def peak_rss_mib(pids: list[int]) -> float:
    """The mesh's processes (and their children, e.g. the broker's Tansu) together: the sum of
    each process's peak resident set (VmHWM), an upper bound of the peak of the sum."""
    total = 0
    for pid in {d for p in pids if p for d in _descendants(p)}:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


_CPUCLOCK_SCHED = 2  # a process's CPU-time clock id is (~pid << 3) | CPUCLOCK_SCHED


def process_cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) process `pid` has used, every thread's, ended ones included:
    its CPU-time clock to the nanosecond (Linux's clock_getcpuclockid encoding, which allows
    reading any process's), or, where that cannot be read, /proc/PID/stat in 10 ms ticks. With
    4 + 4 shards a shard uses about 70 ms in a 12,000-pod run, which ticks tell to 15 %.
    Raises OSError when the process is gone."""
    try:
        return time.clock_gettime((~pid << 3) | _CPUCLOCK_SCHED)
    except (OSError, OverflowError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def cpu_seconds(procs) -> dict[str, float]:
    """CPU seconds (user + system) each of the mesh's processes has used so far, children
    included (the broker's Tansu), by process name, and this client's own as "bench-client"."""
    out: dict[str, float] = {}
    for p in procs:
        if not p.pid:
            continue
        total = 0.0
        for pid in _descendants(p.pid):
            try:
                total += process_cpu_seconds(pid)
            except OSError:
                continue
        out[p.name] = total
    out["bench-client"] = time.process_time()
    return out


def _procs_now(base: Optional[Path], state):
    """The mesh's processes as its state file says now: a restarted service has a new pid."""
    from schedmesh.local.supervisor import MeshError, load_state
    try:
        return load_state(base).procs
    except MeshError:
        return state.procs


def _spent(before: dict[str, float], after: dict[str, float], name: str) -> float:
    spent = after[name] - before.get(name, 0.0)
    return spent if spent >= 0 else after[name]  # restarted meanwhile: the new process's own


def cpu_ms_per_pod(before: dict[str, float], after: dict[str, float], pods: int) -> dict[str, float]:
    """CPU milliseconds per scheduled pod of each process over the measured phase, and their total:
    where the time goes, in every run's JSON."""
    per = {name: round(1000 * _spent(before, after, name) / max(pods, 1), 3) for name in after}
    per["total"] = round(sum(per.values()), 3)
    return per


def shard_cpu_ms_per_pod(before: dict[str, float], after: dict[str, float], pods: int) -> dict[str, Optional[float]]:
    """A filter shard's and a score shard's CPU milliseconds per scheduled pod, the mean over the
    shards of each kind (None without), to four decimals: with 4 + 4 a shard uses about 0.006 ms
    a pod, which cpu_ms_per_pod's three decimals tell only to a sixth."""
    out: dict[str, Optional[float]] = {}
    for kind in ("filter", "score"):
        names = [n for n in after if n.startswith(f"{kind}-worker-")]
        out[kind] = (round(1000 * sum(_spent(before, after, n) for n in names) / len(names) / max(pods, 1), 4)
                     if names else None)
    return out


def _settle(watcher: _BindWatcher, names: list[str], procs, timeout: float,
            quiet_cores: float = 0.25, window: float = 0.5, quiet_limit: float = 30.0) -> float:
    """Wait until the init pods are digested before the measured phase, as scheduler_perf
    measures only the measured pods: every init pod's kubelet has reported its phase, and then
    the mesh's processes together use under `quiet_cores` over `window` seconds (the readers
    applying those statuses), for at most `quiet_limit` seconds. Without it the measured pods
    shared the machine with the digestion of 5,000 init pods. Returns the seconds waited."""
    from schedmesh.local.supervisor import MeshError
    started = time.time()
    deadline = started + timeout
    while (done := sum(1 for n in names if n in watcher.started)) < len(names):
        if watcher.error:
            raise MeshError(f"watching the mesh failed: {watcher.error}")
        if time.time() > deadline:
            raise MeshError(f"only {done}/{len(names)} init pods started within {timeout:.0f}s")
        time.sleep(0.2)
    quiet_deadline = time.time() + quiet_limit
    before = cpu_seconds(procs)
    while time.time() < quiet_deadline:
        time.sleep(window)
        after = cpu_seconds(procs)
        if sum(after.values()) - sum(before.values()) < quiet_cores * window:
            break
        before = after
    return time.time() - started


def _apply(client, items: list[dict], source: str) -> None:
    from schedmesh.v1 import queue_pb2
    client.call("Apply", queue_pb2.ApplyRequest(manifest=json.dumps({"apiVersion": "v1", "kind": "List",
                                                                      "items": items}), source=source),
                timeout=300)


def log(line: str) -> None:
    """Progress, on stderr (stdout carries the JSON)."""
    print(line, file=sys.stderr, flush=True)


def median_run(results: list[dict]) -> dict:
    """One JSON object for runs of the same bench: the median run (by pods_per_second; at an
    offered rate, where every run achieves about the rate, by latency p99), whole, so that its
    figures belong together, with `runs` (each run's throughput, latency and CPU per pod) and
    the ranges. Of an even number, the worse of the two middle runs."""
    if len(results) == 1:
        return results[0]
    if results[0].get("offered_rate"):
        ordered = sorted(results, key=lambda r: r["latency_ms"]["p99"])  # worse last
    else:
        ordered = sorted(results, key=lambda r: -r["pods_per_second"])  # worse last
    median = ordered[len(ordered) // 2]
    rates = [r["pods_per_second"] for r in results]
    p99s = [r["latency_ms"]["p99"] for r in results]
    return {**median, "repeats": len(results),
            "pods_per_second_range": [min(rates), max(rates)], "p99_ms_range": [min(p99s), max(p99s)],
            "runs": [{"pods_per_second": r["pods_per_second"], "latency_ms": r["latency_ms"],
                      "first_bound_ms": r.get("first_bound_ms"),
                      "cpu_ms_per_pod_total": r["cpu_ms_per_pod"]["total"],
                      # each process's: which of them a slow run spent more in
                      "cpu_ms_per_pod": r["cpu_ms_per_pod"],
                      "shard_cpu_ms_per_pod": r.get("shard_cpu_ms_per_pod")} for r in results]}


def round_orders(counts: list[int], rounds: int) -> list[list[int]]:
    """The order of each round of an alternated comparison: `counts` rotated by one more each
    round, so that no count always runs first (a mesh started just after another's ran on a
    warmer or a busier host)."""
    k = len(counts)
    return [counts[i % k:] + counts[:i % k] for i in range(max(1, rounds))]


def alternated(counts: list[int], rounds: int, run: Callable[[int], dict]) -> list[dict]:
    """`run(n)` for each count in each round (round_orders), then one object per count, in the
    order given: median_run of its runs (in round order) with `alternated_with` (the other
    counts) and `relative_to`: for each smaller count, this count's throughput over that one's,
    round by round."""
    by_count: dict[int, list[dict]] = {n: [] for n in counts}
    for order in round_orders(counts, rounds):
        for n in order:
            by_count[n].append(run(n))
    out = []
    for n in counts:
        relative = {str(m): [round(a["pods_per_second"] / b["pods_per_second"], 3) if b["pods_per_second"] else None
                             for a, b in zip(by_count[n], by_count[m])]
                    for m in counts if m < n}
        out.append({**median_run(by_count[n]), "alternated_with": [m for m in counts if m != n],
                    "relative_to": relative})
    return out


def main(args: argparse.Namespace) -> int:
    """Measure `--repeat` times (each run its own mesh) and print one JSON object (median_run),
    or with --alternate-shards one per shard count (alternated); non-zero when any run did not
    bind every pod it should."""
    if args.alternate_shards:
        return _main_alternated(args)
    results: list[dict] = []
    failed = False
    for i in range(max(1, args.repeat)):
        if args.repeat > 1:
            log(f"bench: run {i + 1} of {args.repeat}")
        ok, result = run_once(args)
        failed = failed or not ok
        results.append(result)
    print(json.dumps(median_run(results)))
    return 1 if failed else 0


def _main_alternated(args: argparse.Namespace) -> int:
    if args.filter_workers or args.score_workers or args.use_running:
        log("bench: --alternate-shards starts its own meshes with each shard count: it takes no --filter-workers, "
            "--score-workers or --use-running")
        return 2
    failed, done, total = False, 0, len(args.alternate_shards) * max(1, args.repeat)

    def run(n: int) -> dict:
        nonlocal failed, done
        done += 1
        log(f"bench: run {done} of {total}: {n} + {n} shards")
        ok, result = run_once(argparse.Namespace(**{**vars(args), "filter_workers": n, "score_workers": n}))
        failed = failed or not ok
        return result

    for obj in alternated(args.alternate_shards, args.repeat, run):
        print(json.dumps(obj))
    return 1 if failed else 0


def run_once(args: argparse.Namespace) -> tuple[bool, dict]:
    """One measurement in its own mesh (or the running one): whether every pod that should be
    was bound, and the run's figures."""
    from schedmesh.api.to_json import node_to_json, pod_to_json
    from schedmesh.local.client import Client
    from schedmesh.local.launch import start_mesh, stop_mesh
    from schedmesh.local.supervisor import MeshError, load_state

    workload = build(args.workload, args.nodes, args.init_pods, args.pods, args.seed, args.unschedulable_pods)
    # Stopped by SIGTERM (a timeout, a CI job cancelled): unwind, so that the bench's mesh is stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    nodes, init, unschedulable, pending = workload.nodes, workload.init, workload.unschedulable, workload.measured
    run = uuid.uuid4().hex[:6]
    prefix = f"b{run}-"

    base: Optional[Path] = None
    ok = False
    cpus: Optional[cpu_affinity.CpuPlan] = None
    if args.use_running:
        state = load_state()
        rename = {n.name: f"{prefix}{n.name}" for n in nodes}
    else:
        base = Path(tempfile.mkdtemp(prefix="schedmesh-bench-"))
        pool, rename = _pool_for(nodes)
        import yaml
        (base / "pool.yaml").write_text(yaml.safe_dump(pool))
        log(f"bench: starting a mesh ({args.filter_workers} filter + {args.score_workers} score workers, "
            f"{len(nodes)} nodes) in {base}")
        cpus = cpu_affinity.plan(args.cpu_pinning)  # as start_mesh decides it
        state, _sup = start_mesh(str(base / "pool.yaml"), args.filter_workers, args.score_workers, args.config,
                                 detach=True, base=base, quiet=True, tie_break=args.tie_break,
                                 cpu_pinning=args.cpu_pinning)
        if cpus is not None:  # this client with the mesh's other processes, off the scheduler's CPU
            cpu_affinity.pin_process(set(cpus.others))
    client: Optional[Client] = None
    watcher = _BindWatcher(state.bootstrap, prefix, failures=bool(unschedulable))
    try:
        client = Client(state, timeout=120)
        if args.use_running:
            docs = []
            for n in nodes:
                d = node_to_json(n)
                d["metadata"]["name"] = rename[n.name]
                d["metadata"]["uid"] = f"{prefix}{d['metadata'].get('uid', n.name)}"
                d["metadata"].setdefault("labels", {})["kubernetes.io/hostname"] = rename[n.name]
                docs.append(d)
            for i in range(0, len(docs), 1000):
                _apply(client, docs[i:i + 1000], "bench-nodes")
        log(f"bench: waiting for {len(nodes)} nodes ...")
        want = set(rename.values())
        deadline = time.time() + 300
        while True:
            have = {v.node.metadata.name for v in client.list_nodes()}
            if want <= have:
                break
            if time.time() > deadline:
                raise MeshError(f"only {len(want & have)}/{len(want)} nodes registered after 300s")
            time.sleep(0.5)

        def pod_doc(p) -> dict:
            d = pod_to_json(p)
            d["metadata"]["name"] = f"{prefix}{p.name}"
            d["metadata"].pop("uid", None)
            d.pop("status", None)
            if p.node_name:
                d["spec"]["nodeName"] = rename[p.node_name]
            return d

        _apply(client, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
                        for ns in workload.namespaces], "bench-namespaces")
        watcher.start()
        if init:
            log(f"bench: applying {len(init)} init pods (pre-bound)")
            docs = [pod_doc(p) for p in init]
            for i in range(0, len(docs), 1000):
                _apply(client, docs[i:i + 1000], "bench-init-pods")
            waited = _settle(watcher, [d["metadata"]["name"] for d in docs], state.procs, args.timeout)
            log(f"bench: init pods started and the mesh quiet after {waited:.1f}s")
        unschedulable_names = [f"{prefix}{p.name}" for p in unschedulable]
        if unschedulable:
            log(f"bench: applying {len(unschedulable)} unschedulable pods; waiting for each to fail once")
            docs = [pod_doc(p) for p in unschedulable]
            for i in range(0, len(docs), args.batch):
                _apply(client, docs[i:i + args.batch], "bench-unschedulable-pods")
            deadline = time.time() + args.timeout
            while sum(1 for n in unschedulable_names if n in watcher.failed) < len(unschedulable_names):
                if watcher.error:
                    raise MeshError(f"watching the mesh failed: {watcher.error}")
                if time.time() > deadline:
                    raise MeshError(f"only {sum(1 for n in unschedulable_names if n in watcher.failed)}/"
                                    f"{len(unschedulable_names)} unschedulable pods failed once within "
                                    f"{args.timeout:.0f}s")
                time.sleep(0.2)
        docs = [pod_doc(p) for p in pending]
        names = [d["metadata"]["name"] for d in docs]
        log(f"bench: submitting {len(docs)} pods in batches of {args.batch}"
            + ("" if args.rate > 0 else f", {args.apply_concurrency} Applies in flight at most"))
        submitted: dict[str, float] = {}
        procs_before = _procs_now(base, state)  # (a service restarted while the mesh started has a new pid)
        cpu_before = cpu_seconds(procs_before)
        t0 = time.time()
        if args.rate > 0:
            # One Apply every 20 ms carrying the pods due by then, sent on schedule whatever the
            # mesh's pace (Applies overlap when one is slow); latency counts from when each pod
            # was due, so a mesh that falls behind the rate shows it in its latency.
            batch = max(1, int(args.rate / 50))
            with concurrent.futures.ThreadPoolExecutor(8, thread_name_prefix="bench-apply") as pool:
                sent = []
                for i in range(0, len(docs), batch):
                    due = t0 + i / args.rate
                    time.sleep(max(0.0, due - time.time()))
                    for d in docs[i:i + batch]:
                        submitted[d["metadata"]["name"]] = due
                    sent.append(pool.submit(_apply, client, docs[i:i + batch], "bench-pods"))
                    _progress(sum(1 for n in names if n in watcher.bound), len(names), t0)
                for f in sent:
                    f.result()
        else:
            submit_all(lambda chunk: _apply(client, chunk, "bench-pods"), docs, args.batch, args.apply_concurrency,
                       submitted, lambda: _progress(sum(1 for n in names if n in watcher.bound), len(names), t0))
        deadline = t0 + args.timeout
        while True:
            done = sum(1 for n in names if n in watcher.bound)
            _progress(done, len(names), t0)
            if done >= len(names) or time.time() > deadline or watcher.error:
                break
            time.sleep(0.2)
        if sys.stderr.isatty():
            sys.stderr.write("\n")
        if watcher.error:
            raise MeshError(f"watching schedmesh.pods failed: {watcher.error}")
        procs_after = _procs_now(base, state)
        cpu_after = cpu_seconds(procs_after)
        restarts_before = {p.name: p.restarts for p in procs_before}
        restarted = sorted(p.name for p in procs_after if p.restarts > restarts_before.get(p.name, p.restarts))
        if restarted:
            log(f"bench: restarted by the supervisor while measured: {', '.join(restarted)} "
                "(their CPU before the restart is not counted)")
        bound = [n for n in names if n in watcher.bound]
        lat = sorted((watcher.bound[n] - submitted[n]) * 1000 for n in bound)
        last = max((watcher.bound[n] for n in bound), default=time.time())
        seconds = max(last - t0, 1e-9)
        if len(bound) < len(names):
            log(f"bench: {len(names) - len(bound)} pods not bound within {args.timeout:.0f}s")
        result = {
            "workload": args.workload, "nodes": len(nodes), "init_pods": len(init), "pods": len(pending),
            "unschedulable_pods": len(unschedulable),
            # Pods that fit nowhere must stay pending: any bound is a wrong decision.
            "unschedulable_bound": sum(1 for n in unschedulable_names if n in watcher.bound),
            # Unschedulable's churn costs 1 - pods_per_second / that of this run of the baseline (same sizes).
            **({"baseline_workload": "SchedulingBasic"} if unschedulable else {}),
            "scheduled": len(bound), "seconds": round(seconds, 3),
            # the first binding seen, from the first Apply sent: the pipeline's fill time (an
            # Apply read and published, its records read back, a first cycle, a binder round trip)
            "first_bound_ms": round(1000 * (min(watcher.bound[n] for n in bound) - t0), 1) if bound else None,
            "pods_per_second": round(len(bound) / seconds, 1),
            "latency_ms": {"p50": round(_percentile(lat, 50), 1), "p90": round(_percentile(lat, 90), 1),
                           "p99": round(_percentile(lat, 99), 1)},
            "filter_shards": state.filter_shards, "score_shards": state.score_shards,
            "offered_rate": args.rate or None,
            "apply_concurrency": None if args.rate else args.apply_concurrency,
            "peak_rss_mib": round(peak_rss_mib([p.pid for p in procs_after]), 1),
            "cpu_ms_per_pod": cpu_ms_per_pod(cpu_before, cpu_after, len(bound)),
            "shard_cpu_ms_per_pod": shard_cpu_ms_per_pod(cpu_before, cpu_after, len(bound)),
            # services the supervisor restarted during the measured phase (none in a sound run)
            "restarted": restarted,
            "mesh": "running" if args.use_running else "own",
            # where the mesh's processes ran (schedmesh.mesh.cpu_affinity)
            "cpu_pinning": "" if args.use_running else (cpus.describe() if cpus is not None else "off"),
        }
        ok = len(bound) == len(names) and result["unschedulable_bound"] == 0
        return ok, result
    finally:
        watcher.stop()
        if client is not None:
            client.close()
        if cpus is not None:
            cpu_affinity.unpin_process()  # the next run's mesh must not start on this run's CPUs
        if base is not None:
            log("bench: stopping the mesh")
            stop_mesh(base, quiet=True)
            if ok and not args.keep_logs:
                shutil.rmtree(base, ignore_errors=True)
            else:
                log(f"bench: logs kept in {base / '.schedmesh' / 'logs'}")
