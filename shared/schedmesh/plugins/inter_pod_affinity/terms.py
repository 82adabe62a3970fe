"""Matching affinity terms against pods, with kube's namespace handling."""
from __future__ import annotations

from typing import Callable, Mapping

from schedmesh.api.types import Pod
from schedmesh.cache.node_info import AffinityTerm

NsLabelsOf = Callable[[str], Mapping[str, str]]  # namespace -> its labels

_NO_LABELS: Mapping[str, str] = {}


def no_namespace_labels(namespace: str) -> Mapping[str, str]:
    """kube passing nil namespace labels: only selectors that match an empty set match."""
    return _NO_LABELS


def incoming_term_matches(term: AffinityTerm, pod: Pod, ns_labels_of: NsLabelsOf) -> bool:
    """A term of the pod being scheduled against another pod.

    kube's PreFilter/PreScore replace a non-empty namespaceSelector of the incoming pod's terms
    by the names of the existing namespaces it selects; as every pod's namespace exists, that
    equals matching the selector against the other pod's namespace labels. An empty selector
    ({}) matches every namespace, a missing one none, in both forms.
    """
    return term.matches(pod, ns_labels_of(pod.meta.namespace))


def matches_all(terms: list[AffinityTerm], pod: Pod, ns_labels_of: NsLabelsOf) -> bool:
    """kube's podMatchesAllAffinityTerms: false without terms."""
    if not terms:
        return False
    labels = ns_labels_of(pod.meta.namespace)
    return all(t.matches(pod, labels) for t in terms)
