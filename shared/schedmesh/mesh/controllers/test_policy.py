"""Taint edits as node deltas (add/replace/remove without touching other taints), the server's
taint validation, and the CLI's parsing of kubectl taint specs."""
from __future__ import annotations

import pytest

from schedmesh.api.types import NO_EXECUTE, NO_SCHEDULE, PREFER_NO_SCHEDULE, Taint
from schedmesh.cli.nodes import parse_taint_specs
from schedmesh.local.supervisor import MeshError
from schedmesh.eviction.testkit import node
from schedmesh.mesh.controllers.policy import taint_errors
from schedmesh.mesh.records import apply_node_update, edit_taints, node_update
from schedmesh.v1 import events_pb2

A = Taint("a", NO_SCHEDULE, "1")
B = Taint("b", NO_EXECUTE, time_added=5.0)


def test_edit_taints_add_replace_remove():
    assert edit_taints([A, B], add=[Taint("a", NO_SCHEDULE, "2")]) == [Taint("a", NO_SCHEDULE, "2"), B]
    assert edit_taints([A, B], add=[Taint("a", NO_EXECUTE)]) == [A, B, Taint("a", NO_EXECUTE)]
    assert edit_taints([A, B, Taint("a", NO_EXECUTE)], remove=[Taint("a", "")]) == [B]  # KEY-: every effect
    assert edit_taints([A, B], remove=[Taint("a", NO_EXECUTE)]) == [A, B]


def test_node_delta_edits_keep_other_taints():
    n = node("n1", taints=[A, B])
    _t, _k, value = node_update("n1", add_taints=[Taint("c", PREFER_NO_SCHEDULE)], remove_taints=[Taint("a", NO_SCHEDULE)])
    got = apply_node_update(n, events_pb2.NodeRecord.FromString(value).update)
    assert got.taints == [B, Taint("c", PREFER_NO_SCHEDULE)]


def test_taint_errors():
    assert taint_errors(Taint("example.com/gpu", NO_SCHEDULE, "true")) == []
    assert taint_errors(Taint("gpu", "", ""), removing=True) == []
    assert any("effect" in e for e in taint_errors(Taint("gpu", "")))
    assert any("key" in e for e in taint_errors(Taint("bad key!", NO_SCHEDULE)))
    assert any("value" in e for e in taint_errors(Taint("k", NO_SCHEDULE, "bad value!")))


def test_parse_kubectl_taint_specs():
    add, remove = parse_taint_specs(["dedicated=db:NoSchedule", "gpu:NoExecute", "old:PreferNoSchedule-", "gone-"])
    assert add == [Taint("dedicated", NO_SCHEDULE, "db"), Taint("gpu", NO_EXECUTE)]
    assert remove == [Taint("old", PREFER_NO_SCHEDULE), Taint("gone", "")]


@pytest.mark.parametrize("spec, words", [
    ("k=v:Sometimes", "invalid taint effect: Sometimes, unsupported taint effect"),
    ("k=v=w:NoSchedule", "invalid taint spec: k=v=w:NoSchedule"),
    ("a:b:c", "invalid taint spec: a:b:c"),
    ("k=v", "invalid taint spec: k=v"),
    ("bad key:NoSchedule", "invalid taint spec: bad key:NoSchedule, name part"),
])
def test_parse_errors_use_kubectl_words(spec, words):
    with pytest.raises(MeshError, match="^" + words.replace("(", r"\(")):
        parse_taint_specs([spec])


def test_an_eviction_waits_for_the_pod_its_caller_knows():
    """The queue-manager forwards its view's offsets: a pod it listed but this cache has not read
    yet is evicted once read, not refused "not found"; without offsets it is not found."""
    import asyncio
    import threading
    import time

    import grpc

    from schedmesh.api.types import ObjectMeta, Pod
    from schedmesh.bus.topics import PODS
    from schedmesh.mesh.cluster_cache import ClusterCache
    from schedmesh.mesh.controllers.disruption import DisruptionController
    from schedmesh.mesh.controllers.policy import PolicyServicer
    from schedmesh.mesh.records import pod_record
    from schedmesh.v1 import policy_pb2

    class Refused(Exception):
        pass

    class Context:
        async def abort(self, code, details, trailing_metadata=()):
            raise Refused(code, details)

    cache, published = ClusterCache(), []

    async def publish(recs):
        published.extend(recs)

    pod = Pod(meta=ObjectMeta(name="web", namespace="default", uid="u1"), node_name="n1")
    _topic, _key, value = pod_record(pod)

    async def evict(offsets):
        servicer = PolicyServicer(cache, DisruptionController(cache), publish, asyncio.Lock(), "cm")
        return await servicer.Evict(policy_pb2.EvictRequest(namespace="default", name="web", offsets=offsets),
                                    Context())

    with pytest.raises(Refused) as e:
        asyncio.run(evict({}))
    assert e.value.args[0] == grpc.StatusCode.NOT_FOUND
    later = threading.Timer(0.3, lambda: cache.apply(PODS, value, 0))
    later.start()
    started = time.monotonic()
    assert asyncio.run(evict({f"{PODS}/0": 1})).code == 201
    assert time.monotonic() - started >= 0.25 and published
