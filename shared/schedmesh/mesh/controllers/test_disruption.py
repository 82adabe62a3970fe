"""The disruption controller over a cache fed by records: the status it publishes for integer
and percentage budgets, no republication of a status that came back, a re-applied PDB gets its
status again, a status never re-creates a deleted PDB, and spent budgets count before they
come back."""
from __future__ import annotations

from schedmesh.eviction.testkit import T0, pdb, pod
from schedmesh.mesh.controllers.disruption import DisruptionController
from schedmesh.mesh.controllers.testkit import FedCache, bound
from schedmesh.mesh.records import pdb_record
from schedmesh.v1 import events_pb2


def web(n: int, ready: bool = True):
    return [bound(pod(f"web-{i}", labels={"app": "web"}, ready=ready), "n1") for i in range(n)]


def published(recs):
    out = []
    for topic, _k, v in recs:
        assert topic == "schedmesh.pdbs"
        rec = events_pb2.PodDisruptionBudgetRecord.FromString(v)
        assert rec.status_only
        out.append(rec.pdb)
    return out


def test_min_available_integer_status_published_once():
    fed = FedCache()
    fed.add(pdb("web", match_labels={"app": "web"}, min_available="2"), *web(3))
    dc = DisruptionController(fed.cache)
    recs = dc.sync(T0)
    (p,) = published(recs)
    assert (p.expected_pods, p.current_healthy, p.desired_healthy, p.disruptions_allowed) == (3, 3, 2, 1)
    assert dc.sync(T0 + 0.1, force=True) == []  # on its way back: not sent twice
    fed.apply(recs)
    assert fed.cache.pdbs["default/web"].disruptions_allowed == 1
    assert dc.sync(T0 + 5, force=True) == []  # came back: nothing to do


def test_percentages_and_max_unavailable():
    fed = FedCache()
    fed.add(pdb("half", match_labels={"app": "web"}, max_unavailable="50%"),
            pdb("most", match_labels={"app": "web"}, min_available="60%"), *web(4))
    got = {p.metadata.name: p for p in published(DisruptionController(fed.cache).sync(T0))}
    assert (got["half"].expected_pods, got["half"].desired_healthy, got["half"].disruptions_allowed) == (4, 2, 2)
    # 60% of 4 rounds up to 3
    assert (got["most"].desired_healthy, got["most"].disruptions_allowed) == (3, 1)


def test_unready_pods_do_not_count():
    fed = FedCache()
    fed.add(pdb("web", match_labels={"app": "web"}, min_available="2"), *web(2),
            bound(pod("web-x", labels={"app": "web"}, ready=False), "n1"))
    (p,) = published(DisruptionController(fed.cache).sync(T0))
    assert (p.expected_pods, p.current_healthy, p.disruptions_allowed) == (3, 2, 0)


def test_reapplied_pdb_gets_its_status_back():
    fed = FedCache()
    fed.add(pdb("web", match_labels={"app": "web"}, min_available="1"), *web(3))
    dc = DisruptionController(fed.cache)
    fed.apply(dc.sync(T0))
    assert fed.cache.pdbs["default/web"].disruptions_allowed == 2
    fed.add(pdb("web", match_labels={"app": "web"}, min_available="1"))  # kubectl apply again: status 0
    assert fed.cache.pdbs["default/web"].disruptions_allowed == 0
    (p,) = published(dc.sync(T0 + 3))
    assert p.disruptions_allowed == 2


def test_status_never_recreates_a_deleted_pdb():
    fed = FedCache()
    budget = pdb("web", match_labels={"app": "web"}, min_available="1")
    fed.add(budget, *web(2))
    recs = DisruptionController(fed.cache).sync(T0)
    fed.apply([pdb_record(budget, deleted=True)])
    fed.apply(recs)  # the status write arrives after the deletion
    assert "default/web" not in fed.cache.pdbs


def test_spent_budget_counts_before_it_comes_back_and_expires():
    fed = FedCache()
    budget = pdb("web", match_labels={"app": "web"}, min_available="2")
    fed.add(budget, *web(3))
    dc = DisruptionController(fed.cache)
    fed.apply(dc.sync(T0))
    with fed.cache.lock:
        status = dc.status_of(fed.cache.pdbs["default/web"], T0)
    assert status.disruptions_allowed == 1
    from dataclasses import replace
    spent = replace(status, disruptions_allowed=0, disrupted_pods={"web-0": T0})
    dc.spend(fed.cache.pdbs["default/web"], spent, T0)  # not applied back yet
    with fed.cache.lock:
        again = dc.status_of(fed.cache.pdbs["default/web"], T0 + 1)
    assert (again.current_healthy, again.disruptions_allowed) == (2, 0)
    assert again.disrupted_pods == {"web-0": T0}
    # kube's DeletionTimeout: an evicted pod that is still there after 2 minutes counts again
    with fed.cache.lock:
        later = dc.status_of(fed.cache.pdbs["default/web"], T0 + 121)
    assert (later.current_healthy, later.disruptions_allowed, dict(later.disrupted_pods)) == (3, 1, {})


def test_a_pass_computes_only_the_budgets_whose_pods_or_record_changed():
    """Each PDB counts its namespace's pods (140 ms for ten PDBs over 15,000 pods): another pod's
    change leaves a PDB alone; a pod it selects, its own record or a deleted pod of its namespace
    does not (kube counts ended pods in expectedPods, and an ended pod's deletion reaches no
    listener)."""
    import dataclasses

    from schedmesh.mesh.records import pod_record
    fed = FedCache()
    fed.add(pdb("web", match_labels={"app": "web"}, min_available="2"), *web(3))
    dc = DisruptionController(fed.cache)
    fed.apply(dc.sync(T0))
    dc.sync(T0 + 1)  # its status came back: looked at once
    computed = []
    real = dc.status_of
    dc.status_of = lambda p, now, pods=None: (computed.append(p.name), real(p, now, pods))[1]
    fed.add(bound(pod("db-0", labels={"app": "db"}), "n1"))
    dc.sync(T0 + 2)
    assert computed == []
    fed.add(bound(pod("web-3", labels={"app": "web"}), "n1"))
    recs = dc.sync(T0 + 3)
    (p,) = published(recs)
    assert computed == ["web"] and p.expected_pods == 4
    fed.apply(recs)
    ended = dataclasses.replace(fed.cache.get_pod("default", "web-3"), phase="Failed")
    fed.add(ended)
    dc.sync(T0 + 4)
    computed.clear()
    fed.apply([pod_record(ended, deleted=True)])
    dc.sync(T0 + 5)
    assert computed == ["web"]
