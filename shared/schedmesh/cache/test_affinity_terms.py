"""PodInfo's parsed affinity terms: equal terms of different pods are one object (the affinity
index compares its keys by identity first), hashes are remembered, and nothing of that changes
what a term is (equality, pickling, which pods it matches)."""
from __future__ import annotations

import pickle

import pytest

from schedmesh.api.labels import LabelSelector
from schedmesh.api.types import (Affinity, ObjectMeta, Pod, PodAffinity, PodAffinityTerm,
                                 WeightedPodAffinityTerm)
from schedmesh.cache import node_info
from schedmesh.cache.node_info import AffinityTerm, PodInfo, WeightedAffinityTerm


def _replica(name: str, namespace: str = "default", app: str = "web", weight: int = 10) -> Pod:
    """A workload's replica: its terms are equal to, not the same objects as, another replica's."""
    term = lambda: PodAffinityTerm("kubernetes.io/hostname", LabelSelector.of({"app": app}))  # noqa: E731
    aff = Affinity(pod_affinity=PodAffinity(required=[term()], preferred=[WeightedPodAffinityTerm(weight, term())]),
                   pod_anti_affinity=PodAffinity(required=[term()], preferred=[WeightedPodAffinityTerm(weight, term())]))
    return Pod(meta=ObjectMeta(name=name, namespace=namespace, uid=f"uid-{name}", labels={"app": app}), affinity=aff)


def _terms(pi: PodInfo) -> list:
    return [*pi.required_affinity_terms, *pi.required_anti_affinity_terms,
            *pi.preferred_affinity_terms, *pi.preferred_anti_affinity_terms]


def test_equal_terms_of_two_replicas_are_one_object():
    a, b = PodInfo(_replica("a")), PodInfo(_replica("b"))
    assert all(x is y for x, y in zip(_terms(a), _terms(b)))
    assert a.preferred_affinity_terms[0].term is a.required_affinity_terms[0]


@pytest.mark.parametrize("other", [
    _replica("c", namespace="other"),  # the term's namespaces default to the pod's own
    _replica("d", app="db"),           # another selector
    _replica("e", weight=20),          # another weight (preferred terms only)
])
def test_terms_that_differ_stay_apart(other):
    a, o = _terms(PodInfo(_replica("a"))), _terms(PodInfo(other))
    differ = [x is not y and x != y for x, y in zip(a, o)]
    if other.meta.name == "e":
        assert differ == [False, False, True, True]
    else:
        assert all(differ)


def test_a_weighted_term_remembers_its_hash_and_pickles_without_it():
    w = PodInfo(_replica("a")).preferred_affinity_terms[0]
    assert hash(w) == hash((w.term, w.weight)) and w._hash is not None
    back = pickle.loads(pickle.dumps(w))
    assert back == w and back._hash is None and hash(back) == hash(w)
    t = pickle.loads(pickle.dumps(w.term))
    assert isinstance(t, AffinityTerm) and t == w.term and isinstance(back, WeightedAffinityTerm)


def test_the_table_of_shared_terms_is_bounded(monkeypatch):
    monkeypatch.setattr(node_info, "_INTERNED", {})
    monkeypatch.setattr(node_info, "_INTERNED_LIMIT", 4)
    infos = [PodInfo(_replica(f"p{i}", app=f"app-{i}")) for i in range(6)]  # 2 distinct terms each
    assert len(node_info._INTERNED) <= 4
    again = PodInfo(_replica("q", app="app-5"))
    assert all(x is y for x, y in zip(_terms(again), _terms(infos[5])))
    assert all(x == y for x, y in zip(_terms(PodInfo(_replica("r", app="app-0"))), _terms(infos[0])))
