"""The Scheduler API's Apply, in process against a stand-in queue-manager (a real ClusterCache, a
producer that records what is sent): the manifest is read in a worker thread, never on the event
loop, with the same refusals as before; names an API server refuses are accepted with kubectl's
warning by default and refused with --strict-names."""
from __future__ import annotations

import asyncio
import itertools
import threading
import time
from types import SimpleNamespace

import grpc
import pytest

from schedmesh.api import load
from schedmesh.api.load import ManifestError, load_text
from schedmesh.bus.topics import PODS
from schedmesh.mesh import records
from schedmesh.mesh.cluster_cache import ClusterCache
from schedmesh.mesh.scheduler import api
from schedmesh.v1 import events_pb2, queue_pb2


class Producer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, bytes]] = []

    async def send(self, topic: str, value: bytes, key: str = "") -> None:
        self.sent.append((topic, key, value))


class Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code, self.details = code, details


class Context:
    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise Aborted(code, details)


def servicer(strict_names: bool = False) -> api.SchedulerServicer:
    versions = itertools.count(1)
    qm = SimpleNamespace(cfg=SimpleNamespace(strict_names=strict_names, strict_admission=False, client_id="qm-test"),
                         cache=ClusterCache(), producer=Producer(), applied_nodes={}, store=None,
                         next_resource_version=lambda: f"qm-test-{next(versions)}",
                         queue_name=lambda pod, pending: "")
    return api.SchedulerServicer(qm)  # type: ignore[arg-type]


def apply(s: api.SchedulerServicer, manifest: str, source: str = "m.yaml") -> queue_pb2.ApplyResponse:
    return asyncio.run(s.Apply(queue_pb2.ApplyRequest(manifest=manifest, source=source), Context()))


def published_pods(s: api.SchedulerServicer) -> list[str]:
    return [rec.pod.metadata.name for topic, _k, v in s.qm.producer.sent if topic == PODS
            for rec in records.expand(events_pb2.PodRecord.FromString(v))]


POD = "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  containers: [{{name: c}}]\n"


def test_the_manifest_is_read_in_a_worker_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """While a slow manifest is read, the event loop goes on (other RPCs, the scheduling loop)."""
    s = servicer()
    seen = {}
    real = api.load_text

    def slow_load_text(*args, **kwargs):
        seen["thread"] = threading.current_thread()
        try:
            asyncio.get_running_loop()
            seen["loop"] = True
        except RuntimeError:
            seen["loop"] = False
        time.sleep(0.5)
        return real(*args, **kwargs)

    monkeypatch.setattr(api, "load_text", slow_load_text)

    async def scenario() -> tuple[queue_pb2.ApplyResponse, int]:
        ticks = 0
        task = asyncio.create_task(s.Apply(queue_pb2.ApplyRequest(manifest=POD.format(name="p"), source="m.yaml"),
                                           Context()))
        while not task.done():
            await asyncio.sleep(0.01)
            ticks += 1
        return await task, ticks

    resp, ticks = asyncio.run(scenario())
    assert list(resp.applied) == ["pod/default/p created"]
    assert seen["thread"] is not threading.main_thread() and seen["loop"] is False
    assert ticks >= 10, f"the event loop ran {ticks} times during a 0.5 s read: it was blocked"


@pytest.mark.parametrize("manifest", [
    "kind: Pod\n",
    POD.format(name="p") + "---\n" + POD.format(name="p"),
    '{"a": ' + "[" * 200_000 + "]" * 200_000 + "}",
    "a: " + "[" * 200_000 + "]" * 200_000,
    "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: c}]\n  priorityClassName: nope\n",
], ids=["no apiVersion", "duplicate", "deep JSON", "deep YAML", "unknown PriorityClass"])
def test_refusals_are_what_they_were(manifest: str) -> None:
    """INVALID_ARGUMENT with the reader's (or admission's) own message, nothing published."""
    with pytest.raises(ManifestError) as direct:
        m = load_text(manifest, "m.yaml")
        load.admit_all(m, [])
    s = servicer()
    with pytest.raises(Aborted) as e:
        apply(s, manifest)
    assert (e.value.code, e.value.details) == (grpc.StatusCode.INVALID_ARGUMENT, str(direct.value))
    assert s.qm.producer.sent == []


def test_other_errors_still_propagate(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(api, "load_text", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        apply(servicer(), POD.format(name="p"))


# A Deployment's pod named by kube's rules is fine; these names break them (an uppercase letter,
# an underscore: recorded scenarios use such names).
LENIENT = POD.format(name="p0-fields_missing") + "---\n" + """apiVersion: v1
kind: Node
metadata: {name: Node_A}
status: {allocatable: {cpu: "1"}}
"""


def test_names_an_api_server_refuses_are_created_with_kubectls_warning_by_default() -> None:
    s = servicer()
    resp = apply(s, LENIENT)
    assert list(resp.applied) == ["node/Node_A created", "pod/default/p0-fields_missing created"]
    assert published_pods(s) == ["p0-fields_missing"]
    pod_warning, node_warning = sorted(resp.warnings, key=lambda w: not w.startswith("pod/"))
    # the object, the field, the rule, and what happened
    assert pod_warning.startswith("pod/default/p0-fields_missing: metadata.name: Invalid value: "
                                  '"p0-fields_missing": a lowercase RFC 1123 subdomain must consist of')
    assert node_warning.startswith('node/Node_A: metadata.name: Invalid value: "Node_A": a lowercase RFC 1123 '
                                   "subdomain")
    for w in (pod_warning, node_warning):
        assert "regex used for validation is" in w
        assert w.endswith("(a Kubernetes API server refuses it; accepted here, --strict-names refuses it)")


def test_strict_names_refuse_them_and_apply_nothing() -> None:
    s = servicer(strict_names=True)
    with pytest.raises(Aborted) as e:
        apply(s, LENIENT)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "metadata.name" in e.value.details and "p0-fields_missing" in e.value.details
    assert s.qm.producer.sent == []


def test_a_valid_manifest_has_no_warning() -> None:
    resp = apply(servicer(), POD.format(name="web-0"))
    assert list(resp.applied) == ["pod/default/web-0 created"] and list(resp.warnings) == []

