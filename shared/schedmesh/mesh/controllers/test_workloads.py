"""The workload controller over a cache fed by records: the pods an Apply made are awaited (a
record read before them makes nothing twice), a Deployment's pod deleted, drained or evicted is
replaced under a new generated name (admitted, not sent again while on its way), re-applying
with fewer or more replicas deletes or makes pods, a StatefulSet's ordinal is made again under
its name once the old pod is gone, a Job stops past its backoffLimit, a workload deleted has its
pods deleted, and a controller-manager that was down repairs a shortfall after the grace."""
from __future__ import annotations

import dataclasses
import itertools
import re

from schedmesh.api.load import Manifests, admit_all, load_text
from schedmesh.api.types import PodCondition, PriorityClass, WorkloadSelector
from schedmesh.eviction.testkit import T0, node
from schedmesh.mesh.controllers.testkit import FedCache, pod_changes
from schedmesh.mesh.controllers.workloads import APPLY_GRACE, WorkloadController
from schedmesh.mesh.records import pod_record, priority_class_record, workload_record

GENERATED = "[bcdfghjklmnpqrstvwxz2456789]{5}"


def deployment(replicas: int = 3, kind: str = "Deployment", extra: str = "") -> Manifests:
    api = "batch/v1" if kind == "Job" else "apps/v1"
    restart = "restartPolicy: Never, " if kind == "Job" else ""
    selector = "" if kind == "Job" else "  selector: {matchLabels: {app: web}}\n"
    count = f"  parallelism: {replicas}\n" if kind == "Job" else f"  replicas: {replicas}\n"
    return load_text(f"""
apiVersion: {api}
kind: {kind}
metadata: {{name: web, namespace: shop}}
spec:
{count}{extra}{selector}  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      {{{restart}priorityClassName: important, containers: [{{name: c, resources: {{requests: {{cpu: 100m}}}}}}]}}
""")


def applied(m: Manifests, at: float = T0) -> tuple[WorkloadSelector, list]:
    """What the queue-manager's Apply publishes: the record (its creation time set) and the pods, admitted."""
    (w,) = m.workloads
    w = dataclasses.replace(w, spec=dataclasses.replace(w.spec, created_at=at))
    admit_all(m, [PriorityClass("important", 1000)])
    for i, p in enumerate(m.pods):
        p.meta.creation_timestamp = at + i * 1e-6
    return w, m.pods


def mesh(*nodes) -> tuple[FedCache, WorkloadController]:
    fed = FedCache()
    fed.apply([priority_class_record(PriorityClass("important", 1000))])
    fed.add(*nodes)
    uids = (f"uid-{i}" for i in itertools.count())
    return fed, WorkloadController(fed.cache, source="cm", new_uid=lambda: next(uids))


def changes(fed: FedCache, recs) -> tuple[list[str], list[str], list[str]]:
    """Apply the controller's records back; (pods created, deleted at once, marked for deletion) by name."""
    created, deleted, marked = pod_changes(fed, recs)
    return sorted(r.pod.metadata.name for r in created), sorted(deleted), sorted(marked)


def run_all(fed: FedCache, node_name: str = "n1") -> None:
    """The scheduler and the kubelet agent's part: every pending pod bound and Running, Ready."""
    fed.add(*[dataclasses.replace(p, node_name=node_name, phase="Running", conditions=[PodCondition("Ready", "True")])
              for p in fed.cache.pods.values() if not p.node_name and p.phase == "Pending"])


def live(fed: FedCache) -> list[str]:
    return sorted(p.name for p in fed.cache.pods.values() if p.phase not in ("Failed", "Succeeded")
                  and p.meta.deletion_timestamp is None)


def test_the_apply_s_pods_are_awaited_and_a_deleted_pod_is_replaced_once():
    fed, wc = mesh(node("n1"))
    w, pods = applied(deployment(3))
    fed.apply([workload_record(w)])  # the record read before its pods
    assert wc.sync(T0) == [] and wc.sync(T0 + APPLY_GRACE / 2) == []  # on their way: nothing made
    fed.add(*pods)
    assert wc.sync(T0 + APPLY_GRACE / 2 + 0.1) == []
    run_all(fed)
    gone = pods[1]
    fed.apply([pod_record(gone, deleted=True)])  # `schedmesh delete pod`
    created, _, _ = changes(fed, recs := wc.sync(T0 + 20))
    assert len(created) == 1 and created[0] != gone.name and re.fullmatch(f"{w.name}-{GENERATED}", created[0])
    assert wc.sync(T0 + 20.5) == []  # not sent again
    new = fed.cache.get_pod("shop", created[0])
    assert (new.priority, new.labels, new.meta.owner_references, new.node_name) == (
        1000, pods[0].labels, pods[0].meta.owner_references, "")
    assert new.meta.creation_timestamp and new.meta.resource_version and recs[0][2]
    assert {t.key for t in new.tolerations} >= {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}
    run_all(fed)
    assert wc.sync(T0 + 21) == [] and len(live(fed)) == 3


def test_a_drained_pod_is_replaced_at_once_and_an_evicted_one_stays_listed():
    fed, wc = mesh(node("n1"))
    w, pods = applied(deployment(2))
    fed.apply([workload_record(w)])
    fed.add(*pods)
    run_all(fed)
    drained = fed.cache.get_pod("shop", pods[0].name)
    fed.add(dataclasses.replace(drained, meta=dataclasses.replace(drained.meta, deletion_timestamp=T0 + 1)))
    assert len(changes(fed, wc.sync(T0 + 1))[0]) == 1  # while its kubelet agent ends it
    run_all(fed)
    evicted = fed.cache.get_pod("shop", pods[1].name)
    fed.add(dataclasses.replace(evicted, phase="Failed", status_reason="Evicted"))
    created, deleted, marked = changes(fed, wc.sync(T0 + 2))
    assert len(created) == 1 and deleted == marked == []
    assert fed.cache.get_pod("shop", pods[1].name).phase == "Failed"  # kept, as kube keeps it


def test_fewer_replicas_delete_in_kube_s_order_and_more_make_new_pods():
    fed, wc = mesh(node("n1"), node("n2"))
    w, pods = applied(deployment(3))
    fed.apply([workload_record(w)])
    fed.add(*pods)
    fed.add(*[dataclasses.replace(p, node_name="n1", phase="Running", conditions=[PodCondition("Ready", "True")])
              for p in pods[1:]])
    pending = pods[0]  # not placed (yet)
    fed.apply([workload_record(dataclasses.replace(w, spec=dataclasses.replace(w.spec, replicas=1)))])
    _, deleted, marked = changes(fed, wc.sync(T0 + 1))
    # the unscheduled one first (deleted at once), then of the bound two, the same age on kube's
    # logarithmic scale, the smaller uid (gracefully: its kubelet agent ends it)
    assert deleted == [pending.name] and marked == [min(pods[1:], key=lambda p: p.uid).name]
    fed.apply([workload_record(dataclasses.replace(w, spec=dataclasses.replace(w.spec, replicas=4)))])
    fed.apply([pod_record(fed.cache.get_pod("shop", marked[0]), deleted=True)])
    created, _, _ = changes(fed, wc.sync(T0 + 2))
    assert len(created) == 3 and len(live(fed)) == 4


def test_a_deleted_workload_s_pods_are_deleted_and_its_replacements_stop():
    fed, wc = mesh(node("n1"))
    w, pods = applied(deployment(2))
    fed.apply([workload_record(w)])
    fed.add(*pods)
    run_all(fed)
    wc.sync(T0 + 1)
    fed.apply([workload_record(w, deleted=True)])
    _, deleted, marked = changes(fed, wc.sync(T0 + 2))
    assert (deleted, marked) == ([], sorted(p.name for p in pods))
    for p in pods:
        fed.apply([pod_record(p, deleted=True)])
    assert wc.sync(T0 + 3) == [] and fed.cache.pods == {}  # nothing replaced


def test_a_shortfall_from_while_the_controller_was_down_is_repaired_after_the_grace():
    fed, _ = mesh(node("n1"))
    w, pods = applied(deployment(3))
    fed.apply([workload_record(w)])
    fed.add(*pods)
    run_all(fed)
    fed.apply([pod_record(pods[0], deleted=True)])  # while no controller-manager ran
    restarted = WorkloadController(fed.cache, source="cm")
    assert restarted.sync(T0 + 100) == []  # the Apply's pod might still be on its way
    assert restarted.sync(T0 + 100 + APPLY_GRACE / 2) == []
    created, _, _ = changes(fed, restarted.sync(T0 + 100 + APPLY_GRACE))
    assert len(created) == 1 and len(live(fed)) == 3


def test_pods_of_a_workload_deleted_while_the_controller_was_down_are_collected():
    from schedmesh.mesh.controllers.podcontrol import ORPHAN_GRACE
    fed, _ = mesh(node("n1"))
    w, pods = applied(deployment(2))
    fed.add(*pods)  # the record is gone: deleted while no controller-manager ran
    run_all(fed)
    restarted = WorkloadController(fed.cache, source="cm")
    assert restarted.sync(T0 + 1) == []
    _, _, marked = changes(fed, restarted.sync(T0 + 1 + ORPHAN_GRACE))
    assert marked == sorted(p.name for p in pods)


def test_a_stateful_set_s_ordinal_is_made_again_under_its_name_once_gone():
    fed, wc = mesh(node("n1"))
    w, pods = applied(deployment(3, kind="StatefulSet"))
    assert [p.name for p in pods] == ["web-0", "web-1", "web-2"]
    fed.apply([workload_record(w)])
    fed.add(*pods)
    run_all(fed)
    one = fed.cache.get_pod("shop", "web-1")
    fed.add(dataclasses.replace(one, meta=dataclasses.replace(one.meta, deletion_timestamp=T0 + 1)))  # drained
    assert changes(fed, wc.sync(T0 + 1)) == ([], [], [])  # its name is still held
    fed.apply([pod_record(one, deleted=True)])
    created, _, _ = changes(fed, wc.sync(T0 + 2))
    assert created == ["web-1"] and fed.cache.get_pod("shop", "web-1").uid != one.uid
    run_all(fed)
    fed.apply([workload_record(dataclasses.replace(w, spec=dataclasses.replace(w.spec, replicas=1)))])
    assert changes(fed, wc.sync(T0 + 3))[2] == ["web-2"]  # the highest ordinal first, one at a time
    assert wc.sync(T0 + 4) == []  # waits for it to be gone
    fed.apply([pod_record(fed.cache.get_pod("shop", "web-2"), deleted=True)])
    assert changes(fed, wc.sync(T0 + 5))[2] == ["web-1"]


def test_a_job_replaces_failed_pods_until_its_backoff_limit():
    fed, wc = mesh(node("n1"))
    w, pods = applied(deployment(1, kind="Job", extra="  backoffLimit: 1\n"))
    fed.apply([workload_record(w)])
    fed.add(*pods)
    run_all(fed)
    assert wc.sync(T0 + 1) == []
    first = fed.cache.get_pod("shop", pods[0].name)
    fed.add(dataclasses.replace(first, phase="Failed", status_reason="Evicted"))
    assert wc.sync(T0 + 2) == []  # the pod failure backoff: 10 s
    created, _, _ = changes(fed, wc.sync(T0 + 12))
    assert len(created) == 1
    run_all(fed)
    second = fed.cache.get_pod("shop", created[0])
    fed.apply([pod_record(second, deleted=True)])  # deleted before it finished: a failure too
    assert changes(fed, wc.sync(T0 + 13)) == ([], [], [])
    assert changes(fed, wc.sync(T0 + 100)) == ([], [], [])  # BackoffLimitExceeded: no pod again
    assert live(fed) == []


def test_pods_read_before_their_workload_are_neither_collected_nor_made_again():
    """The other order: the Apply's pods first, the record a few seconds later (another topic)."""
    from schedmesh.mesh.controllers.podcontrol import ORPHAN_GRACE
    fed, wc = mesh(node("n1"))
    w, pods = applied(deployment(2))
    fed.add(*pods)
    assert wc.sync(T0) == [] and wc.sync(T0 + ORPHAN_GRACE / 2) == []  # orphans for now: within the grace
    fed.apply([workload_record(w)])
    assert wc.sync(T0 + ORPHAN_GRACE / 2 + 0.1) == []
    assert wc.sync(T0 + 2 * ORPHAN_GRACE) == [] and len(live(fed)) == 2
