"""The DaemonSet controller's decisions (kube v1.35, pkg/controller/daemon): which nodes run a
daemon pod, the pod made for a node, and what one sync creates and deletes.

* `NodeEligibility` is NodeShouldRunDaemonPod: a node whose name differs from the template's
  spec.nodeName, or that the template's nodeSelector and required node affinity do not match,
  runs no daemon pod. Otherwise its NoSchedule and NoExecute taints are checked against the
  template's tolerations plus those the controller adds (AddOrUpdateDaemonPodTolerations): all
  tolerated, it should run one (shouldRun); an untolerated NoSchedule taint only stops a new pod,
  a pod already there keeps running (shouldContinueRunning); an untolerated NoExecute taint
  stops both. The matching is the scheduler's own (NodeAffinity's and TaintToleration's helpers).
* `daemon_pod` is CreatePodTemplate plus ReplaceDaemonSetPodNodeNameNodeAffinity: the template
  with the daemon tolerations, the labels controller-revision-hash and pod-template-generation,
  a controller reference to the DaemonSet, and its required node affinity replaced by the one
  term `metadata.name In [node]`. The default scheduler then places it, on that node or nowhere.
* `sync_plan` is manage (podsShouldBeOnNode for every node, unscheduled pods of nodes that are
  gone) and, when that has nothing to do (kube's expectations satisfied), rollingUpdate without
  surge: outdated pods deleted at most maxUnavailable at a time (an integer or a percentage of
  the nodes that should run one, rounded up; at least 1), unavailable outdated pods at once. A
  failed pod's deletion is backed off per node (kube's failedPodsBackoff: 1 s doubling to 15 min).

Not modelled: surge (maxSurge is read but a pod is replaced by deleting it first), ControllerRevision
history (the template's hash alone tells current from outdated), minReadySeconds (a pod is
available once Ready), adopting orphans and releasing pods the selector no longer matches (a
DaemonSet's pods are those naming it as their controller), burstReplicas and slow-start batches.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional, Sequence

from schedmesh.api.evolve import evolve
from schedmesh.api.load import pod_name_candidates
from schedmesh.api.types import (NO_EXECUTE, ROLLING_UPDATE, Affinity, DaemonSet, Node, NodeAffinity, NodeSelector,
                                 NodeSelectorRequirement, NodeSelectorTerm, ObjectMeta, OwnerReference, Pod, Taint,
                                 Toleration)
from schedmesh.eviction.disruption import is_pod_ready, scaled_value
from schedmesh.eviction.taint_eviction import daemonset_tolerations
from schedmesh.plugins.node_affinity.matcher import OBJECT_NAME_FIELD, OP_IN, required_node_affinity
from schedmesh.plugins.taint_toleration.tolerations import do_not_schedule_taints_filter, find_matching_untolerated_taint

# apps/v1's DefaultDaemonSetUniqueLabelKey (ControllerRevisionHashLabelKey) and
# DaemonSetTemplateGenerationKey: what tells a daemon pod's template from the current one.
CONTROLLER_REVISION_HASH_LABEL = "controller-revision-hash"
TEMPLATE_GENERATION_LABEL = "pod-template-generation"

# failedPodsBackoff: flowcontrol.NewBackOff(1*time.Second, 15*time.Minute)
FAILED_POD_BACKOFF_INITIAL = 1.0
FAILED_POD_BACKOFF_MAX = 15 * 60.0


def daemon_tolerations(ds: DaemonSet) -> list[Toleration]:
    """The template's tolerations with those the controller adds to every daemon pod."""
    return daemonset_tolerations(ds.template.tolerations, ds.template.host_network)


def _no_execute(taint: Taint) -> bool:
    return taint.effect == NO_EXECUTE


class NodeEligibility:
    """NodeShouldRunDaemonPod for one DaemonSet, over as many nodes as asked: (shouldRun,
    shouldContinueRunning) for a node. The template's required node affinity is compiled once."""

    def __init__(self, ds: DaemonSet) -> None:
        self.node_name = ds.template.node_name
        self.affinity = required_node_affinity(ds.template)
        self.tolerations = daemon_tolerations(ds)

    def __call__(self, node: Node) -> tuple[bool, bool]:
        if self.node_name and self.node_name != node.name:
            return False, False
        if not self.affinity.match(node):  # a term that does not parse matches nothing, as in kube
            return False, False
        if find_matching_untolerated_taint(node.taints, self.tolerations, do_not_schedule_taints_filter) is None:
            return True, True
        # Only NoSchedule taints untolerated: a daemon pod already there stays.
        return False, find_matching_untolerated_taint(node.taints, self.tolerations, _no_execute) is None


def should_run(ds: DaemonSet, node: Node) -> tuple[bool, bool]:
    """(shouldRun, shouldContinueRunning) of `ds` on `node`."""
    return NodeEligibility(ds)(node)


# ---- the pods -------------------------------------------------------------------------------

def _pinned_to(affinity: Optional[Affinity], node_name: str) -> Affinity:
    """ReplaceDaemonSetPodNodeNameNodeAffinity: the required node affinity becomes the single term
    matchFields metadata.name In [node]; the preferred terms and pod (anti-)affinity stay."""
    required = NodeSelector([NodeSelectorTerm(match_fields=[NodeSelectorRequirement(OBJECT_NAME_FIELD, OP_IN,
                                                                                   [node_name])])])
    if affinity is None:
        return Affinity(node_affinity=NodeAffinity(required=required))
    if affinity.node_affinity is None:
        return dataclasses.replace(affinity, node_affinity=NodeAffinity(required=required))
    return dataclasses.replace(affinity, node_affinity=dataclasses.replace(affinity.node_affinity, required=required))


def daemon_pod(ds: DaemonSet, node_name: str, name: str, uid: str) -> Pod:
    """The pod the controller creates for `node_name` (unscheduled, unless the template names a
    node; no creation time: the caller's clock gives it)."""
    t = ds.template
    labels = {**t.meta.labels, TEMPLATE_GENERATION_LABEL: str(ds.template_generation),
              CONTROLLER_REVISION_HASH_LABEL: ds.template_hash}
    meta = ObjectMeta(name=name, namespace=ds.namespace, uid=uid, labels=labels, annotations=dict(t.meta.annotations),
                      owner_references=[OwnerReference("DaemonSet", ds.name, ds.meta.uid, "apps/v1", True)])
    return evolve(t, meta=meta, tolerations=daemon_tolerations(ds), affinity=_pinned_to(t.affinity, node_name))


def daemon_pod_name(ds: DaemonSet, node_name: str, taken: Callable[[str], bool]) -> str:
    """"<daemonset>-<5 characters>", the same for the same DaemonSet, template and node unless taken."""
    for name in pod_name_candidates(ds.name, f"DaemonSet/{ds.namespace}/{ds.name}/{ds.template_hash}/{node_name}"):
        if not taken(name):
            return name
    raise AssertionError("pod_name_candidates never ends")


def controlled_by(ds: DaemonSet, pod: Pod) -> bool:
    """Whether `pod` names `ds` as its controller (by kind and name: a DaemonSet written without a
    uid gets one here that pods recorded from a real cluster would not carry)."""
    return pod.namespace == ds.namespace and any(
        r.controller and r.kind == "DaemonSet" and r.name == ds.name for r in pod.meta.owner_references)


def target_node(pod: Pod) -> Optional[str]:
    """GetTargetNodeName: spec.nodeName, else the node its matchFields `metadata.name In [node]`
    names; None when neither says (such a pod is not counted on any node)."""
    if pod.node_name:
        return pod.node_name
    na = pod.affinity.node_affinity if pod.affinity is not None else None
    if na is None or na.required is None:
        return None
    for term in na.required.terms:
        for r in term.match_fields:
            if r.key == OBJECT_NAME_FIELD and r.operator == OP_IN:
                return r.values[0] if len(r.values) == 1 else None
    return None


def is_updated(ds: DaemonSet, pod: Pod) -> bool:
    """IsPodUpdated: the pod carries the current template's hash or generation."""
    labels = pod.meta.labels
    return (labels.get(CONTROLLER_REVISION_HASH_LABEL) == ds.template_hash
            or labels.get(TEMPLATE_GENERATION_LABEL) == str(ds.template_generation))


def _oldest_first(pod: Pod) -> tuple:
    """podByCreationTimestampAndPhase: scheduled pods first, then by creation time, then name."""
    return not pod.node_name, pod.meta.creation_timestamp or 0.0, pod.meta.name


class FailedPodBackoff:
    """flowcontrol.Backoff as failedPodsBackoff uses it, keyed by DaemonSet and node: each failed
    pod deleted doubles the wait before the next one on that node may be (1 s up to 15 min); an
    entry untouched for twice the maximum starts again from 1 s."""

    def __init__(self, initial: float = FAILED_POD_BACKOFF_INITIAL, maximum: float = FAILED_POD_BACKOFF_MAX) -> None:
        self.initial, self.maximum = initial, maximum
        self._entries: dict[tuple[str, str], tuple[float, float]] = {}  # key -> (backoff, last update)

    def waiting_until(self, key: tuple[str, str], now: float) -> Optional[float]:
        """IsInBackOffSinceUpdate: when the wait ends, or None when not waiting."""
        entry = self._entries.get(key)
        if entry is None or now - entry[1] >= entry[0]:
            return None
        return entry[1] + entry[0]

    def next(self, key: tuple[str, str], now: float) -> None:
        entry = self._entries.get(key)
        if entry is None or now - entry[1] > 2 * self.maximum:
            self._entries[key] = (self.initial, now)
        else:
            self._entries[key] = (min(entry[0] * 2, self.maximum), now)

    def keep_only(self, daemon_sets: Iterable[str]) -> None:
        """Drop the entries of DaemonSets (by key) not among these: deleted ones."""
        live = set(daemon_sets)
        for key in [k for k in self._entries if k[0] not in live]:
            del self._entries[key]


def backoff_key(ds: DaemonSet, node_name: str) -> tuple[str, str]:
    return ds.key, node_name


# ---- one sync ---------------------------------------------------------------------------------

@dataclass
class DaemonSetPlan:
    """What one sync of a DaemonSet does: the nodes to create a daemon pod for (in the nodes'
    order), the pods to delete (each with why, for logs), and when a backed-off deletion of a
    failed pod may be tried again (None: nothing waits)."""

    create_on: list[str] = field(default_factory=list)
    delete: list[tuple[Pod, str]] = field(default_factory=list)
    retry_at: Optional[float] = None

    def __bool__(self) -> bool:
        return bool(self.create_on or self.delete)


def pods_by_node(pods: Iterable[Pod]) -> dict[str, list[Pod]]:
    """getNodesToDaemonPods: a DaemonSet's pods by the node each is for."""
    out: dict[str, list[Pod]] = {}
    for p in pods:
        node = target_node(p)
        if node is not None:
            out.setdefault(node, []).append(p)
    return out


def sync_plan(ds: DaemonSet, nodes: Sequence[Node], pods: Iterable[Pod], now: float = 0.0,
              backoff: Optional[FailedPodBackoff] = None) -> DaemonSetPlan:
    """One sync of `ds` over the cluster's `nodes`, given its own pods (`controlled_by`; terminal
    ones included, terminating ones too). Without `backoff`, failed pods are deleted at once."""
    plan = DaemonSetPlan()
    by_node = pods_by_node(pods)
    eligible = NodeEligibility(ds)
    wanted: list[str] = []
    for node in nodes:
        run, keep = eligible(node)
        if run:
            wanted.append(node.name)
        on_node = by_node.get(node.name, [])
        if run and not on_node:
            plan.create_on.append(node.name)
        elif keep:
            _prune(ds, node.name, on_node, plan, now, backoff)
        elif on_node:
            plan.delete += [(p, "its node no longer runs it") for p in on_node if p.meta.deletion_timestamp is None]
    names = {n.name for n in nodes}
    for node_name, on_node in by_node.items():
        if node_name not in names:  # unscheduled: kube's getUnscheduledPodsWithoutNode; bound: PodGC's part
            plan.delete += [(p, f"its node {node_name} is gone") for p in on_node if p.meta.deletion_timestamp is None]
    if not plan and ds.update_strategy == ROLLING_UPDATE:
        plan.delete += [(p, "outdated") for p in rolling_update(ds, wanted, by_node)]
    return plan


def _prune(ds: DaemonSet, node_name: str, on_node: list[Pod], plan: DaemonSetPlan, now: float,
           backoff: Optional[FailedPodBackoff]) -> None:
    """podsShouldBeOnNode where the node keeps its daemon pod: failed and succeeded pods go (a
    failed one unless backed off), and of several running ones all but the oldest."""
    running = []
    for p in on_node:
        if p.meta.deletion_timestamp is not None:
            continue
        if p.phase == "Failed":
            if backoff is not None:
                key = backoff_key(ds, node_name)
                until = backoff.waiting_until(key, now)
                if until is not None:
                    plan.retry_at = until if plan.retry_at is None else min(plan.retry_at, until)
                    continue
                backoff.next(key, now)
            plan.delete.append((p, "failed"))
        elif p.phase == "Succeeded":
            plan.delete.append((p, "succeeded"))
        else:
            running.append(p)
    running.sort(key=_oldest_first)
    plan.delete += [(p, "more than one on its node") for p in running[1:]]


def max_unavailable(ds: DaemonSet, desired: int) -> int:
    """UnavailableCount, and updatedDesiredNodeCounts' fallback to 1 when it comes to 0."""
    n = scaled_value(ds.max_unavailable, desired, True)
    return 1 if desired > 0 and n == 0 else n


def _updated_and_outdated(ds: DaemonSet, pods: list[Pod]) -> Optional[tuple[Optional[Pod], Optional[Pod]]]:
    """findUpdatedPodsOnNode: the node's one current and one outdated live pod, None for more."""
    new = old = None
    for p in pods:
        if p.meta.deletion_timestamp is not None:
            continue
        if is_updated(ds, p):
            if new is not None:
                return None
            new = p
        else:
            if old is not None:
                return None
            old = p
    return new, old


def rolling_update(ds: DaemonSet, wanted: Sequence[str], by_node: dict[str, list[Pod]]) -> list[Pod]:
    """rollingUpdate without surge: the outdated pods to delete now. Every node that should run a
    pod and has none, or has one being replaced, counts as unavailable; an outdated pod that is
    not available is replaced at once; available ones while fewer than maxUnavailable are
    unavailable. Nodes are taken in name order (kube's map order is random)."""
    entries = dict(by_node)
    for name in wanted:
        entries.setdefault(name, [])
    limit = max_unavailable(ds, len(wanted))
    unavailable = 0
    replace_now: list[Pod] = []
    candidates: list[Pod] = []
    for node_name in sorted(entries):
        found = _updated_and_outdated(ds, entries[node_name])
        if found is None:  # the sync's manage part removes the extra ones first
            unavailable += 1
            continue
        new, old = found
        if (new is None) == (old is None):
            unavailable += 1
        elif new is not None:
            if not is_pod_ready(new):
                unavailable += 1
        elif not is_pod_ready(old):
            replace_now.append(old)
            unavailable += 1
        elif unavailable < limit:
            candidates.append(old)
    room = min(max(limit - unavailable, 0), len(candidates))
    return replace_now + candidates[:room]


def missing_daemon_pods(ds: DaemonSet, nodes: Sequence[Node], pods: Iterable[Pod],
                        taken: Callable[[str, str], bool], uid_for: Callable[[str, str], str]) -> list[Pod]:
    """The pods the controller would create now for `nodes` given the cluster's `pods` (its own
    among them): one per node that should run one and has none. `taken(namespace, name)` says a
    pod name is in use; `uid_for(namespace, name)` gives a new pod's uid."""
    made = []
    for node_name in sync_plan(ds, nodes, [p for p in pods if controlled_by(ds, p)]).create_on:
        name = daemon_pod_name(ds, node_name, lambda n: taken(ds.namespace, n) or any(m.name == n for m in made))
        made.append(daemon_pod(ds, node_name, name, uid_for(ds.namespace, name)))
    return made
