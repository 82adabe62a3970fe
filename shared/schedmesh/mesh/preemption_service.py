"""The preemption service: kube-scheduler's PostFilter (DefaultPreemption) as its own process.

A queue-manager calls Preempt when a pod fails Filter and its profile has PostFilter plugins.
The service decides on its replica of the cluster brought to the caller's view (the offsets the
caller's cycle saw, its assumed pods, its nominated pods: the queue-manager's ClusterView), with
the same Evaluator `schedmesh explain` runs, then acts the decision out as kube's
prepareCandidate does, through Kafka, in one pods record and one events record:

* each victim not already terminating gets the DisruptionTarget condition (PreemptionByScheduler)
  and a graceful deletion (its kubelet agent ends it), and a `Preempted` event;
* lower-priority pods nominated to the chosen node lose their nomination;
* the preemptor gets status.nominatedNodeName.

The answer (PostFilter's status, message and result) goes back to the queue-manager, which
records the nomination in its queue and holds the preemptor back until its victims are going
(kube's asynchronous preemption).
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import threading
import time
from typing import Callable, Mapping, Optional, Sequence

import grpc
from opentelemetry import trace

from schedmesh.api import convert
from schedmesh.api.types import Pod, PodCondition
from schedmesh.bus import EventProducer, watcher_options
from schedmesh.framework.interface import Code, CycleState, NodeToStatus, Status
from schedmesh.framework.runtime import Framework, build_frameworks
from schedmesh.plugins.pod_topology_spread import SELECTOR_SOURCES_SERVICE, WorkloadSelectorSources
from schedmesh.mesh import records
from schedmesh.mesh.cluster_cache import STATE_TOPICS, TOPIC_EVENTS, ClusterCache
from schedmesh.mesh.controllers.podcontrol import EXPECTATIONS_TIMEOUT
from schedmesh.mesh.runtime import CacheFollower, ServiceProcess
from schedmesh.mesh.shard import RequestNominator
from schedmesh.preemption.default_policy import DISRUPTION_TARGET, REASON_PREEMPTION_BY_SCHEDULER
from schedmesh.preemption.evaluator import PreemptionDecision
from schedmesh.preemption.executor import SERVICE_KEY as EXECUTOR_SERVICE
from schedmesh.scheduling.cycle import Diagnosis
from schedmesh.telemetry import k8s_attributes, metrics, set_node
from schedmesh.v1 import events_pb2, preemption_pb2, preemption_pb2_grpc
from schedmesh.v1 import scheduling_pb2 as spb

log = logging.getLogger("schedmesh.preemption")
tracer = trace.get_tracer("schedmesh.preemption")

EVENT_REASON_PREEMPTED = "Preempted"


def preempted_message(preemptor: Pod, node: str) -> str:
    """The victim's event, as kube's PreemptPod records it."""
    return f"Preempted by pod {preemptor.uid} on node {node}"


def disruption_target_message(preemptor: Pod) -> str:
    return f"{preemptor.scheduler_name}: preempting to accommodate a higher priority pod"


# ---- the request, both ends ------------------------------------------------------------------
def preempt_request(pod: Pod, scheduler_name: str, view: spb.ClusterView, diagnosis: Diagnosis,
                    traceparent: str = "") -> preemption_pb2.PreemptRequest:
    """What a queue-manager sends: the pod, its cycle's view and its Filter statuses (grouped)."""
    req = preemption_pb2.PreemptRequest(pod=convert.pod_to_proto(pod), scheduler_name=scheduler_name, view=view,
                                        traceparent=traceparent)
    nts = diagnosis.node_to_status
    groups: dict[int, tuple[Status, list[str]]] = {}  # statuses are shared objects: group by identity
    for node, st in nts.items():
        groups.setdefault(id(st), (st, []))[1].append(node)
    for st, nodes in groups.values():
        req.node_statuses.add(code=int(st.code), plugin=st.plugin, reasons=list(st.reasons), nodes=nodes)
    req.absent_code, req.absent_plugin = int(nts.absent.code), nts.absent.plugin
    req.absent_reasons.extend(nts.absent.reasons)
    return req


def node_to_status_of(req: preemption_pb2.PreemptRequest) -> NodeToStatus:
    nts = NodeToStatus()
    for g in req.node_statuses:
        st = Status(Code(g.code), tuple(g.reasons), g.plugin)
        nts.update((n, st) for n in g.nodes)
    nts.absent = Status(Code(req.absent_code), tuple(req.absent_reasons), req.absent_plugin)
    return nts


class PreemptionsInFlight:
    """The queue-manager's side of kube's asynchronous preemption (Evaluator.preempting and
    lastVictimsPendingPreemption): a preemptor is "running preemption" from the moment it is sent
    to the service until the last victim the service deleted is terminating or gone, and
    DefaultPreemption's PreEnqueue holds it back meanwhile. Put in the queue-manager's framework
    services as "preemption_executor"."""

    _ANSWER_PENDING = ("", 0.0)

    def __init__(self, pods: Mapping[str, Pod], clock: Callable[[], float] = time.monotonic) -> None:
        self._pods = pods  # the queue-manager's cache (uid -> pod); read without its lock (PreEnqueue
        # runs under the queue's lock, and event handlers take the two the other way round)
        self._lock = threading.Lock()
        self._clock = clock
        # preemptor uid -> (its last victim's uid, when the service answered); ("", 0) while
        # unanswered. A victim's deletion not seen within EXPECTATIONS_TIMEOUT (lost with a memory
        # broker that restarted) ends the wait, or the preemptor would be held back for good; its
        # next attempt preempts again if it must.
        self._last_victim: dict[str, tuple[str, float]] = {}

    def started(self, preemptor_uid: str) -> None:
        with self._lock:
            self._last_victim[preemptor_uid] = self._ANSWER_PENDING

    def answered(self, preemptor_uid: str, deleting_uids: Sequence[str]) -> None:
        with self._lock:
            if deleting_uids:
                self._last_victim[preemptor_uid] = (deleting_uids[-1], self._clock())
            else:
                self._last_victim.pop(preemptor_uid, None)

    def is_pod_running_preemption(self, pod_uid: str) -> bool:
        with self._lock:
            if pod_uid not in self._last_victim:
                return False
            last, answered_at = self._last_victim[pod_uid]
            if last == self._ANSWER_PENDING[0]:
                return True
            victim = self._pods.get(last)
            if victim is not None and victim.meta.deletion_timestamp is None:
                waited = self._clock() - answered_at
                if waited < EXPECTATIONS_TIMEOUT:
                    return True
                log.warning("preemption by pod %s: the deletion of victim %s (%s) not seen %.0f s after it was "
                            "made; scheduling the preemptor again", pod_uid, victim.key, last, waited)
            del self._last_victim[pod_uid]  # the last victim is going: preemption is over
            return False

    def prepare_candidate(self, preemptor: Pod, decision: PreemptionDecision, plugin_name: str) -> Optional[Status]:
        """The queue-manager's own PostFilter only computes (its message, when the service is
        unreachable): it acts on nothing."""
        return None


class _DecisionCapture:
    """The "preemption_executor" DefaultPreemption hands its decision to: kept for the service to
    act on once the evaluation (under the cache lock) is over. The service never gates pods
    (PreEnqueue is the queue-manager's: it knows which preemptions it is waiting for)."""

    def __init__(self) -> None:
        self.decision: Optional[PreemptionDecision] = None

    def prepare_candidate(self, preemptor: Pod, decision: PreemptionDecision, plugin_name: str) -> Optional[Status]:
        self.decision = decision
        return None  # asynchronous: the records are published after the evaluation

    def is_pod_running_preemption(self, pod_uid: str) -> bool:
        return False


class PreemptionEvaluator:
    """The decision path: one request at a time, on the replica brought to the caller's view."""

    def __init__(self, cache: ClusterCache, frameworks: dict[str, Framework], extenders: Sequence = (),
                 all_candidates: bool = False, source: str = "preemption", wait_timeout: float = 5.0) -> None:
        self.cache, self.frameworks, self.source = cache, frameworks, source
        self.wait_timeout = wait_timeout
        self._capture = _DecisionCapture()
        self._lock = threading.Lock()  # one view overlaid at a time
        for fw in frameworks.values():
            fw.set_snapshot_source(lambda: cache.snapshot)
            fw.services.update(extenders=list(extenders), namespaces=cache.snapshot.namespace_labels)
            fw.services[EXECUTOR_SERVICE] = self._capture
            # tie-break "name": every potential node from offset 0, as explain and the goldens;
            # otherwise kube's random offset and minCandidateNodes* sample.
            fw.services["preemption_all_candidates"] = all_candidates

    def decide(self, req: preemption_pb2.PreemptRequest, now: Optional[float] = None
               ) -> tuple[preemption_pb2.PreemptResponse, list]:
        """The answer and the records that act it out (empty unless a node was chosen)."""
        fw = self.frameworks.get(req.scheduler_name)
        if fw is None:
            raise KeyError(f"no profile with schedulerName {req.scheduler_name!r}")
        offsets = dict(req.view.offsets)
        with self._lock:
            if not self.cache.wait_for(offsets, self.wait_timeout):
                raise TimeoutError(f"the preemption service has not caught up with the event stream "
                                   f"(wants {offsets}, has {self.cache.offsets})")
            self.cache.set_assumed(req.view.client_id,
                                   [(convert.pod_from_proto(a.pod), a.node_name) for a in req.view.assumed])
            pod = convert.pod_from_proto(req.pod)
            with self.cache.lock:
                # kube's Preempt starts from the latest version of the pod (its nominatedNodeName
                # decides whether it may preempt again while its victims terminate).
                pod = self.cache.pods.get(pod.uid) or pod
                fw.services["pdbs"] = self.cache.pdb_list()
                fw.services["nominator"] = RequestNominator(req.view.nominated)
                self._capture.decision = None
                state = CycleState()
                fw.run_pre_filter(state, pod, self.cache.snapshot)  # the dry run's filters read its state
                result, status = fw.run_post_filter(state, pod, node_to_status_of(req))
                decision = self._capture.decision if status.is_success() else None
                resp = preemption_pb2.PreemptResponse(code=int(status.code), message=status.message())
                if result is not None:
                    resp.has_result, resp.nominated_node_name = True, result.nominated_node_name
                recs: list = []
                if decision is not None:
                    recs = self._act(pod, decision, resp, time.time() if now is None else now,
                                     waiting=frozenset(req.view.waiting_uids))
        metrics.observe_preemption(len(decision.victims) if decision is not None else None)
        return resp, recs

    def _act(self, preemptor: Pod, d: PreemptionDecision, resp: preemption_pb2.PreemptResponse, now: float,
             waiting: frozenset = frozenset()) -> list:
        """kube's prepareCandidate as records: victims' DisruptionTarget and graceful deletion (a
        victim already terminating needs neither; one the caller's Permit holds is rejected there
        instead, by the caller), cleared nominations, the preemptor's nomination."""
        updates: list[events_pb2.PodRecord] = []
        events: list[events_pb2.Event] = []
        condition = PodCondition(DISRUPTION_TARGET, "True", REASON_PREEMPTION_BY_SCHEDULER,
                                 disruption_target_message(preemptor))
        for v in d.victims:
            resp.victims.append(v.key)
            if v.meta.deletion_timestamp is not None:
                continue
            if v.uid in waiting:
                resp.reject_waiting_uids.append(v.uid)
                events.append(events_pb2.Event(pod_uid=v.uid, pod=v.key, type="Normal", reason=EVENT_REASON_PREEMPTED,
                                               message=preempted_message(preemptor, d.node_name),
                                               source=self.source, timestamp=now))
                continue
            resp.deleting_uids.append(v.uid)
            updates.append(records.deletion_update(v, now, source=self.source, condition=condition))
            events.append(events_pb2.Event(pod_uid=v.uid, pod=v.key, type="Normal", reason=EVENT_REASON_PREEMPTED,
                                           message=preempted_message(preemptor, d.node_name), source=self.source,
                                           timestamp=now))
        for p in d.nominated_pods_to_clear:
            if p.uid and p.uid != preemptor.uid:
                resp.cleared_nominations.append(p.key)
                updates.append(records.nomination_update(p, "", source=self.source))
        updates.append(records.nomination_update(preemptor, d.node_name, source=self.source))
        out = [records.pod_batch_record(updates, source=self.source)]
        if events:
            out.append(records.event_batch_record(events))
        return out


class PreemptionServicer(preemption_pb2_grpc.PreemptionServicer):
    def __init__(self, evaluator: PreemptionEvaluator, producer: EventProducer) -> None:
        self.evaluator, self.producer = evaluator, producer

    async def Preempt(self, request, context):
        with tracer.start_as_current_span("preempt", attributes=k8s_attributes(request.pod)) as span:
            try:
                resp, recs = await asyncio.to_thread(self.evaluator.decide, request)
            except TimeoutError as e:
                await context.abort(grpc.StatusCode.UNAVAILABLE, str(e))
            except KeyError as e:
                await context.abort(grpc.StatusCode.NOT_FOUND, str(e.args[0]))
            set_node(span, resp.nominated_node_name)
            span.set_attribute("victims", len(resp.victims))
            if recs:
                # Acted out before answering: the caller holds the preemptor back until the
                # victims it is told about are terminating.
                await records.publish(self.producer, recs)
                log.info("preempted %d pod(s) on %s for %s: %s", len(resp.deleting_uids), resp.nominated_node_name,
                         request.pod.metadata.name, ", ".join(resp.victims), extra={"pod": request.pod})
            return resp


async def serve(port: int, bootstrap: str, name: str, config: Optional[str], tie_break: str) -> None:
    proc = ServiceProcess(name, port)
    cache = ClusterCache()
    if config:
        from schedmesh.framework.config import load_scheduler_config
        sc = load_scheduler_config(config)
        profiles, extenders = sc.profiles, sc.build_extenders()
    else:
        from schedmesh.framework.profile import default_profile
        profiles, extenders = [default_profile()], []
    frameworks = build_frameworks(profiles,
                                  services={SELECTOR_SOURCES_SERVICE: WorkloadSelectorSources(cache.workloads)})
    evaluator = PreemptionEvaluator(cache, frameworks, extenders, all_candidates=tie_break == "name", source=name)
    producer = EventProducer(bootstrap, topics=(*STATE_TOPICS, TOPIC_EVENTS), client_id=f"{name}-producer")
    preemption_pb2_grpc.add_PreemptionServicer_to_server(PreemptionServicer(evaluator, producer), proc.server)
    await proc.start()
    await producer.start()
    follower = CacheFollower(bootstrap, cache, client_id=name, **watcher_options())
    await follower.start()
    proc.spawn(follower.follow(), "follow")
    await proc.set_serving(True)
    log.info("preemption service serving (%s candidates)", "all" if tie_break == "name" else "sampled")

    async def cleanup() -> None:
        await follower.stop()
        await producer.flush()
        await producer.stop()

    await proc.wait_and_stop(cleanup)


def main() -> None:
    p = argparse.ArgumentParser(prog="preemption", description="schedmesh preemption service: DefaultPreemption's "
                                "PostFilter on a replica of the cluster, acted out through Kafka")
    p.add_argument("--port", type=int, default=int(os.environ.get("SCHEDMESH_PORT", "0")))
    p.add_argument("--bootstrap", default=os.environ.get("SCHEDMESH_KAFKA", "127.0.0.1:9092"))
    p.add_argument("--name", default=os.environ.get("SCHEDMESH_NAME", "preemption"),
                   help="client id and the `source` of the records it writes")
    p.add_argument("--config", default=os.environ.get("SCHEDMESH_CONFIG"),
                   help="KubeSchedulerConfiguration file (the queue-manager's: profiles, DefaultPreemption args, "
                        "extenders)")
    p.add_argument("--tie-break", choices=("random", "name"), default="random",
                   help="name: dry-run every potential node from the first (reproducible, as explain); "
                        "random: kube's random offset and candidate sample")
    a = p.parse_args()
    asyncio.run(serve(a.port, a.bootstrap, a.name, a.config, a.tie_break))
