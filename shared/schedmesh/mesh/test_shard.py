"""The shard's overlay of the caller's assumed pods: a pod sent again unchanged is not decoded
again, a changed one is, and the overlay is the view's whatever was decoded before."""
from __future__ import annotations

import dataclasses

from schedmesh.api import convert
from schedmesh.api.types import ObjectMeta, Pod
from schedmesh.framework.profile import default_profile
from schedmesh.framework.runtime import build_frameworks
from schedmesh.mesh.cluster_cache import ClusterCache
from schedmesh.mesh.shard import NodeShard
from schedmesh.v1 import scheduling_pb2 as spb


def view(*assumed: tuple[Pod, str]) -> spb.ClusterView:
    v = spb.ClusterView(client_id="qm")
    for pod, node in assumed:
        v.assumed.add(pod=convert.pod_to_proto(pod), node_name=node)
    return v


def test_assumed_pods_are_decoded_once_while_unchanged():
    shard = NodeShard(ClusterCache(), build_frameworks([default_profile()]), 0, 1)
    a = Pod(meta=ObjectMeta(name="a", namespace="default", uid="uid-a", labels={"app": "x", "tier": "web"}))
    b = Pod(meta=ObjectMeta(name="b", namespace="default", uid="uid-b"))
    first = shard._assumed_pods(view((a, "n1"), (b, "n2")))
    again = shard._assumed_pods(view((a, "n1"), (b, "n3")))
    assert again[0][0] is first[0][0] and again[1][0] is first[1][0]  # the same pods, not decoded again
    assert [n for _, n in again] == ["n1", "n3"]
    relabelled = dataclasses.replace(a, meta=dataclasses.replace(a.meta, labels={"app": "y"}))
    (changed,) = shard._assumed_pods(view((relabelled, "n1")))
    assert changed[0] is not first[0][0] and changed[0].meta.labels == {"app": "y"}
    (back,) = shard._assumed_pods(view((a, "n1")))  # only the previous view is remembered
    assert back[0] is not first[0][0] and back[0].meta.labels == a.meta.labels
