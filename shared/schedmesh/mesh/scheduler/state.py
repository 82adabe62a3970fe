"""What the scheduler keeps about pods between its cycles: the assumed pods on their way to the
binder and the notes shown by `get`/`describe` (last FailedScheduling message, trace id, events)."""
from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Optional, Sequence


from schedmesh.api.types import Pod
from schedmesh.framework.interface import CycleState, Status
from schedmesh.framework.runtime import Framework
from schedmesh.queue.queued_pod_info import QueuedPodInfo

IN_FLIGHT = "in-flight"
BOUND = "bound"
MAX_EVENTS_PER_POD = 100
#: Notes about a pod the cache does not hold are dropped once its last event is this old (kube's
#: --event-ttl): events may come before the pod's record, and after its deletion.
NOTES_TTL_SECONDS = 3600.0
#: Deleted pods whose notes (their events) are kept meanwhile, the most recent ones: a cluster
#: that deletes pods fast keeps at most this many, whatever their age.
MAX_DELETED_NOTES = 10_000



@dataclass
class QueueManagerConfig:
    filter_workers: Sequence[str]
    score_workers: Sequence[str]
    binder: str
    client_id: str = "queue-manager"
    preemption: Optional[str] = None  # host:port of the preemption service (None: PostFilter only computes)
    preemption_timeout: float = 30.0
    profiles: Optional[list] = None  # schedmesh.framework.profile.Profile list; default profile when None
    percentage_of_nodes_to_score: Optional[int] = None
    pod_initial_backoff_seconds: float = 1.0
    pod_max_backoff_seconds: float = 10.0
    shard_timeout: float = 10.0
    # Node-local pods asked of the shards in one request (schedmesh.mesh.batch); 1: pod by pod.
    # With runs on streams, 1,024 against 512 (SchedulingBasic, 12,000 pods, alternated): 4 + 4
    # 2,276-2,293 pods/s against 2,095-2,129, 2 + 2 +6 and +8 %, a shard's CPU a pod a sixth
    # less, the queue-manager's 7 % less (fewer runs to prepare); 2,048 gained nothing more.
    shard_batch_size: int = 1024
    bind_timeout: float = 10.0
    # A binding whose outcome is unknown (binder unreachable, or its publication unacknowledged:
    # it may be in the log) is sent again, to the same node, for this long before it is refused.
    bind_retry_seconds: float = 60.0
    max_bind_batch: int = 512
    # While activeQ holds pods (their bindings are moments away), a BindBatch waits this long for
    # them: one binder record per batch, read by every service, so fewer and fuller batches cost
    # the whole mesh less (an Apply of 10 pods at a steady rate went out in 2-3 batches). 30 ms
    # rather than 10: all pods at once (SchedulingBasic, 5,000 nodes, 5,000 pods, two A B B A
    # rounds) 647, 575, 558, 549 -> 683, 629, 612, 773 pods/s, the binder 0.38-0.45 -> 0.25-0.31
    # ms of CPU per pod; `--rate 500` within noise. A lone pod is still bound at once.
    bind_linger_seconds: float = 0.03
    tie_break: str = "random"
    # Refuse names a Kubernetes API server refuses (e.g. "p0-fields_missing"); off by default so
    # that recorded scenarios apply unchanged: such names are accepted with a warning.
    strict_names: bool = False
    # Refuse pods naming a RuntimeClass that does not exist, as kube-apiserver does; off by default
    # for the same reason: recorded pods carry a runtimeClassName (and its overhead) but no class.
    strict_admission: bool = False
    # HTTP extenders of the KubeSchedulerConfiguration (schedmesh.framework.extender.HTTPExtender),
    # in kube's order: their filter and prioritize verbs in the cycle, their bind verb in binding.
    extenders: list = field(default_factory=list)

    def use_scheduler_config(self, path: str) -> None:
        """Take profiles, percentageOfNodesToScore, backoffs and extenders from a
        KubeSchedulerConfiguration file (the one loader every service and explain use)."""
        from schedmesh.framework.config import load_scheduler_config
        sc = load_scheduler_config(path)
        self.profiles = sc.profiles
        self.percentage_of_nodes_to_score = sc.percentage_of_nodes_to_score
        self.pod_initial_backoff_seconds = float(sc.pod_initial_backoff_seconds)
        self.pod_max_backoff_seconds = float(sc.pod_max_backoff_seconds)
        self.extenders = sc.build_extenders()


class WriteGate:
    """The API's writes (Apply, Delete) run together; the broker-restart re-publication runs
    alone: it waits for the writes in flight and holds new ones until it has published. A write
    published meanwhile could otherwise be overtaken by the re-publication's older copy (a node
    deleted during it published again after its tombstone). On the event loop only."""

    def __init__(self) -> None:
        self._writes = 0
        self._open = asyncio.Event()
        self._open.set()
        self._idle = asyncio.Event()
        self._idle.set()

    @asynccontextmanager
    async def write(self) -> AsyncIterator[None]:
        await self._open.wait()
        self._writes += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._writes -= 1
            if not self._writes:
                self._idle.set()

    @asynccontextmanager
    async def alone(self) -> AsyncIterator[None]:
        self._open.clear()
        try:
            await self._idle.wait()
            yield
        finally:
            self._open.set()


def trace_id_of(span) -> str:
    ctx = span.get_span_context()
    return format(ctx.trace_id, "032x") if ctx.is_valid else ""


@dataclass
class AssumedPod:
    pod: Pod
    node: str
    fw: Framework
    state: CycleState
    qpi: QueuedPodInfo
    cycle: int
    span: Any = None
    trace_id: str = ""
    traceparent: str = ""
    # When the attempt began (time.perf_counter()): a pod held by Permit has its attempt counted
    # when the wait ends, as kube counts it at the end of the binding cycle.
    started: float = 0.0
    # Set when a pod held by Permit was answered: Success (allowed) or why it was rejected.
    permit: Optional[Status] = None
    # The pod encoded once for the shards' views (every attempt meanwhile sends it again).
    proto: Any = None
    # The extender or Bind plugin that bound the pod ahead of the binder service ("": none).
    bound_by: str = ""
    # When its Bind plugins started (time.perf_counter(); 0: they did not run, e.g. an extender
    # bound it): Bind's extension point metric is observed once the binder answered.
    bind_started: float = 0.0
    # The scheduling cycle's counts, for kube's "Successfully bound pod to node" line.
    evaluated_nodes: int = 0
    feasible_nodes: int = 0


@dataclass
class PodNotes:
    message: str = ""  # last FailedScheduling message
    trace_id: str = ""
    events: list = field(default_factory=list)  # events_pb2.Event
