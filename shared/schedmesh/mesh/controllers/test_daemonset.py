"""The DaemonSet controller over a cache fed by records: a DaemonSet applied gets a pending pod per
eligible node (admitted, not sent again while on its way back), a node added gets one, a node
tainted NoExecute loses its pod while a NoSchedule taint keeps it, a template change replaces
pods maxUnavailable at a time, and a DaemonSet deleted has its pods deleted."""
from __future__ import annotations

import dataclasses
import itertools

from schedmesh.api.load import load_text
from schedmesh.api.types import NO_EXECUTE, NO_SCHEDULE, DaemonSet, PodCondition, PriorityClass, Taint
from schedmesh.eviction.testkit import T0, node
from schedmesh.mesh.controllers.daemonset import DaemonSetController
from schedmesh.mesh.controllers.testkit import FedCache, pod_changes
from schedmesh.mesh.records import daemon_set_record, node_record, node_update, pod_record, priority_class_record
from schedmesh.workloads.daemonset import CONTROLLER_REVISION_HASH_LABEL, target_node


def agent(cpu: str = "100m", strategy: str = "") -> DaemonSet:
    (ds,) = load_text(f"""
apiVersion: apps/v1
kind: DaemonSet
metadata: {{name: agent, namespace: infra}}
spec:
  selector: {{matchLabels: {{app: agent}}}}
{strategy}  template:
    metadata: {{labels: {{app: agent}}}}
    spec:
      priorityClassName: node-agents
      containers: [{{name: c, image: agent, resources: {{requests: {{cpu: {cpu}}}}}}}]
""").daemon_sets
    return ds


def changes(fed: FedCache, recs) -> tuple[dict[str, str], list[str], list[str]]:
    """Apply the controller's records back; returns (pods created -> their node, pods deleted at
    once, pods marked for deletion), by name."""
    created, deleted, marked = pod_changes(fed, recs)
    return ({r.pod.metadata.name: r.pod.affinity.node_affinity.required.terms[0].match_fields[0].values[0]
             for r in created}, sorted(deleted), sorted(marked))


def mesh(*nodes, ds: DaemonSet | None = None) -> tuple[FedCache, DaemonSetController]:
    fed = FedCache()
    fed.apply([priority_class_record(PriorityClass("node-agents", 1000))])
    fed.add(*nodes)
    if ds is not None:
        fed.apply([daemon_set_record(ds)])
    uids = (f"uid-{i}" for i in itertools.count())
    return fed, DaemonSetController(fed.cache, source="cm", new_uid=lambda: next(uids))


def bind_all(fed: FedCache, ready: bool = True) -> None:
    """The scheduler and the kubelet agent's part: every pending pod bound to its node, Ready."""
    fed.add(*[dataclasses.replace(p, node_name=target_node(p), phase="Running",
                                  conditions=[PodCondition("Ready", "True" if ready else "False")])
              for p in fed.cache.pods.values() if not p.node_name])


def test_created_once_per_node_admitted_and_not_sent_again_on_its_way():
    fed, dsc = mesh(node("n1"), node("n2"), ds=agent())
    recs = dsc.sync(T0)
    assert dsc.sync(T0 + 0.5) == []  # on its way back from the broker: not sent again
    created, _, _ = changes(fed, recs)
    assert sorted(created.values()) == ["n1", "n2"]
    pods = list(fed.cache.pods.values())
    assert all(p.name.startswith("agent-") and len(p.name) == 11 and not p.node_name for p in pods)
    p = pods[0]
    assert (p.namespace, p.priority, p.meta.creation_timestamp is not None, p.meta.resource_version != "") == (
        "infra", 1000, True, True)
    assert p.labels[CONTROLLER_REVISION_HASH_LABEL] == agent().template_hash
    assert [(r.kind, r.name, r.controller) for r in p.meta.owner_references] == [("DaemonSet", "agent", True)]
    assert dsc.sync(T0 + 1) == []  # every node has its pod
    bind_all(fed)
    assert dsc.sync(T0 + 2) == []


def test_a_node_added_gets_a_pod_and_one_removed_loses_it():
    fed, dsc = mesh(node("n1"), ds=agent())
    changes(fed, dsc.sync(T0))
    bind_all(fed)
    fed.add(node("n2"))
    created, _, _ = changes(fed, dsc.sync(T0 + 1))
    assert list(created.values()) == ["n2"]
    fed.apply([node_record(node("n1"), deleted=True)])
    _, deleted, marked = changes(fed, dsc.sync(T0 + 2))
    assert len(deleted) == 1 and marked == []  # bound to a node that is gone: removed at once


def test_a_node_tainted_no_execute_loses_its_pod_no_schedule_keeps_it():
    fed, dsc = mesh(node("n1"), node("n2"), ds=agent())
    changes(fed, dsc.sync(T0))
    bind_all(fed)
    on = {p.node_name: p.name for p in fed.cache.pods.values()}
    fed.apply([node_update("n1", add_taints=[Taint("maintenance", NO_SCHEDULE)])])
    assert changes(fed, dsc.sync(T0 + 1)) == ({}, [], [])  # shouldContinueRunning
    fed.apply([node_update("n2", add_taints=[Taint("maintenance", NO_EXECUTE)])])
    assert changes(fed, dsc.sync(T0 + 2)) == ({}, [], [on["n2"]])  # graceful: its agent ends it
    # a new node tainted NoSchedule gets no pod; untainted, it does
    fed.add(node("n3", taints=[Taint("maintenance", NO_SCHEDULE)]))
    assert changes(fed, dsc.sync(T0 + 3)) == ({}, [], [])
    fed.apply([node_update("n3", remove_taints=[Taint("maintenance", NO_SCHEDULE)])])
    assert list(changes(fed, dsc.sync(T0 + 4))[0].values()) == ["n3"]


def test_a_template_change_replaces_pods_max_unavailable_at_a_time():
    fed, dsc = mesh(node("n1"), node("n2"), node("n3"), ds=agent())
    changes(fed, dsc.sync(T0))
    bind_all(fed)
    old = {p.name for p in fed.cache.pods.values()}
    fed.apply([daemon_set_record(dataclasses.replace(agent("200m"), template_generation=2))])
    created, deleted, marked = changes(fed, dsc.sync(T0 + 1))
    assert (created, deleted, len(marked)) == ({}, [], 1) and set(marked) <= old  # maxUnavailable 1
    # its agent ends it; the next sync makes the new pod, and waits for it to be Ready
    (gone,) = [p for p in fed.cache.pods.values() if p.meta.deletion_timestamp]
    fed.apply([pod_record(gone, deleted=True)])
    created, _, _ = changes(fed, dsc.sync(T0 + 2))
    assert list(created.values()) == [gone.node_name]
    new = fed.cache.get_pod("infra", next(iter(created)))
    assert new.containers[0].requests["cpu"] * 1000 == 200 and new.labels["pod-template-generation"] == "2"
    bind_all(fed, ready=False)
    assert changes(fed, dsc.sync(T0 + 3)) == ({}, [], [])  # the new pod is not available yet
    bind_all(fed)
    fed.add(dataclasses.replace(new, node_name=gone.node_name, phase="Running",
                                conditions=[PodCondition("Ready", "True")]))
    assert len(changes(fed, dsc.sync(T0 + 4))[2]) == 1  # the next one


def test_on_delete_leaves_outdated_pods():
    fed, dsc = mesh(node("n1"), ds=agent(strategy="  updateStrategy: {type: OnDelete}\n"))
    changes(fed, dsc.sync(T0))
    bind_all(fed)
    fed.apply([daemon_set_record(agent("200m", strategy="  updateStrategy: {type: OnDelete}\n"))])
    assert changes(fed, dsc.sync(T0 + 1)) == ({}, [], [])


def test_failed_and_extra_pods_are_deleted():
    fed, dsc = mesh(node("n1"), ds=agent())
    changes(fed, dsc.sync(T0))
    bind_all(fed)
    (p,) = fed.cache.pods.values()
    fed.add(dataclasses.replace(p, phase="Failed"))
    _, deleted, _ = changes(fed, dsc.sync(T0 + 1))
    assert deleted == [p.name]
    created, _, _ = changes(fed, dsc.sync(T0 + 2))
    assert list(created.values()) == ["n1"]


def test_a_deleted_daemon_set_s_pods_are_deleted():
    fed, dsc = mesh(node("n1"), node("n2"), ds=agent())
    changes(fed, dsc.sync(T0))
    bind_all(fed)
    (first,) = [p for p in fed.cache.pods.values() if p.node_name == "n1"]
    fed.add(dataclasses.replace(first, node_name="", phase="Pending"))  # (unbound: deleted at once)
    fed.apply([daemon_set_record(agent(), deleted=True)])
    created, deleted, marked = changes(fed, dsc.sync(T0 + 1))
    assert created == {} and len(deleted) + len(marked) == 2
    assert dsc.sync(T0 + 2) == []  # the marked one is ending
    assert "infra/agent" not in fed.cache.daemon_sets


def test_nothing_to_do_without_daemon_sets():
    fed, dsc = mesh(node("n1"))
    assert dsc.sync(T0) == []


def test_pods_of_a_daemon_set_deleted_while_the_controller_was_down_are_collected():
    """A controller-manager started after its DaemonSet was deleted never saw it go: the pods it
    made (their controller's uid is the one schedmesh gives that DaemonSet) are deleted once
    orphaned for ORPHAN_GRACE; a pod recorded from a real cluster (another uid) is left alone."""
    from schedmesh.api.types import OwnerReference
    from schedmesh.mesh.controllers.daemonset import ORPHAN_GRACE

    fed, dsc = mesh(node("n1"), node("n2"), ds=agent())
    changes(fed, dsc.sync(T0))
    bind_all(fed)
    made = sorted(p.name for p in fed.cache.pods.values())
    some = next(iter(fed.cache.pods.values()))
    recorded = dataclasses.replace(some, meta=dataclasses.replace(
        some.meta, name="agent-recorded", uid="uid-recorded",
        owner_references=[OwnerReference("DaemonSet", "agent", "a-real-cluster-uid", "apps/v1", True)]))
    fed.add(recorded)
    fed.apply([daemon_set_record(agent(), deleted=True)])
    restarted = DaemonSetController(fed.cache, source="cm")  # a new process: never saw the DaemonSet
    assert restarted.sync(T0 + 1) == []  # found orphaned: not yet
    assert restarted.sync(T0 + ORPHAN_GRACE / 2) == []
    created, deleted, marked = changes(fed, restarted.sync(T0 + 1 + ORPHAN_GRACE))
    assert created == {} and deleted == [] and marked == made  # bound to live nodes: ended by their kubelets
    assert restarted.sync(T0 + 2 + ORPHAN_GRACE) == []  # marked: not sent again
    assert "uid-recorded" in fed.cache.pods and fed.cache.pods["uid-recorded"].meta.deletion_timestamp is None


def test_its_pods_get_the_defaults_of_their_namespaces_limit_ranges():
    """The controller creates pods through the same admission as Apply: LimitRanger first."""
    from schedmesh.mesh.records import limit_range_record
    (lr,) = load_text("""
apiVersion: v1
kind: LimitRange
metadata: {name: defaults, namespace: infra}
spec:
  limits:
  - {type: Container, default: {cpu: 200m, memory: 128Mi}}
""").limit_ranges
    fed, dsc = mesh(node("n1"), ds=agent(cpu="100m"))
    fed.apply([limit_range_record(lr)])
    changes(fed, dsc.sync(T0))
    (p,) = fed.cache.pods.values()
    c = p.containers[0]
    assert (c.requests["cpu"] * 1000, c.limits["cpu"] * 1000, c.requests["memory"], c.limits["memory"]) == (
        100, 200, 128 * 2**20, 128 * 2**20)
    assert p.meta.annotations["kubernetes.io/limit-ranger"] == (
        "LimitRanger plugin set: memory request for container c; cpu, memory limit for container c")


def test_a_pass_syncs_the_daemon_set_only_when_its_pods_nodes_or_record_changed():
    """Its sync walks every node (50-125 ms at 5,000): another pod's change, a scheduled pod's
    binding or status, leaves it alone; its own pod's, a node's or its record's change does not."""
    from schedmesh.api.types import ObjectMeta, Pod
    fed, dsc = mesh(node("n1"), node("n2"), ds=agent())
    changes(fed, dsc.sync(T0))
    bind_all(fed)
    synced = []
    real = dsc._sync_owner
    dsc._sync_owner = lambda key, *a: (synced.append(key), real(key, *a))[1]
    dsc.sync(T0 + 1)  # the binds (its own pods) are looked at once
    synced.clear()
    other = Pod(meta=ObjectMeta(name="web", namespace="default", uid="web-1"))
    fed.add(other)
    fed.add(dataclasses.replace(other, node_name="n1", phase="Running"))
    assert dsc.sync(T0 + 2) == [] and synced == []
    mine = next(p for p in fed.cache.pods.values() if p.uid != other.uid)
    fed.add(dataclasses.replace(mine, conditions=[PodCondition("Ready", "False")]))
    dsc.sync(T0 + 3)
    assert synced == ["infra/agent"]
    synced.clear()
    fed.add(node("n3"))
    created, _, _ = changes(fed, dsc.sync(T0 + 4))
    assert synced == ["infra/agent"] and list(created.values()) == ["n3"]
    synced.clear()
    fed.add(dataclasses.replace(other, phase="Running", node_name="n1", conditions=[PodCondition("Ready", "True")]))
    dsc.sync(T0 + 5 + 30)  # the resync period: every owner
    assert synced == ["infra/agent"]
