"""The schedmesh.io/simulated-usage annotation: both spellings, attribution, and every error."""
from __future__ import annotations

import pytest

from schedmesh.eviction.testkit import container, pod
from schedmesh.eviction.usage import (NO_USAGE, ContainerUsage, PodUsage, SimulatedUsageError, parse_simulated_usage,
                                      pod_usage)

Mi = 2**20


@pytest.mark.parametrize("text, want", [
    ("memory=300Mi", PodUsage(memory=300 * Mi, containers={"app": ContainerUsage(memory=300 * Mi)})),
    ("memory=300Mi, ephemeral-storage=1Gi, pids=40, inodes=1k",
     PodUsage(memory=300 * Mi, ephemeral_storage=2**30, pids=40, inodes=1000,
              containers={"app": ContainerUsage(memory=300 * Mi, ephemeral_storage=2**30)})),
    ('{"memory": "300Mi", "pids": 40}', PodUsage(memory=300 * Mi, pids=40,
                                                 containers={"app": ContainerUsage(memory=300 * Mi)})),
    ('{"memory": 1000}', PodUsage(memory=1000, containers={"app": ContainerUsage(memory=1000)})),
    ("app.memory=200Mi,side.memory=100Mi",
     PodUsage(memory=300 * Mi, containers={"app": ContainerUsage(memory=200 * Mi),
                                           "side": ContainerUsage(memory=100 * Mi)})),
    ("memory=1Gi,side.memory=100Mi",  # a pod-level value wins; containers keep their own share
     PodUsage(memory=2**30, containers={"side": ContainerUsage(memory=100 * Mi)})),
    ("memory=1.5", PodUsage(memory=2, containers={"app": ContainerUsage(memory=2)})),  # whole bytes, rounded up
    ("pids=0", PodUsage()),
])
def test_parse(text, want):
    assert parse_simulated_usage(text, ["app", "side"], "app") == want


@pytest.mark.parametrize("text, reason", [
    ("", "is empty"),
    ("memory", "'memory' is not key=quantity"),
    ("memory=", "'memory=' is not key=quantity"),
    ("memory=1Gi,", "'' is not key=quantity"),
    ("cpu=1", "unknown key 'cpu'"),
    ("memory=12x", "memory: '12x' is not a quantity"),
    ("memory=-1", "memory: '-1' must not be negative"),
    ("pids=1.5", "pids: '1.5' must be a whole number"),
    ("inodes=100m", "inodes: '100m' must be a whole number"),
    ("memory=1,memory=2", "memory is given twice"),
    ("app.pids=3", "app.pids: pids is counted per pod, not per container"),
    ("app.cpu=3", "unknown key 'app.cpu'"),
    ("ghost.memory=1Gi", "ghost.memory: the pod has no container 'ghost'"),
    ("{", "is not valid JSON"),
    ('["memory"]', "must be a JSON object"),
    ('{"memory": true}', "memory: True is not a quantity"),
    ('{"memory": {"x": 1}}', "is not a quantity"),
])
def test_parse_errors_name_the_pod_annotation_and_reason(text, reason):
    with pytest.raises(SimulatedUsageError) as e:
        parse_simulated_usage(text, ["app"], "app", where="pod default/web: ")
    assert str(e.value).startswith("pod default/web: annotation schedmesh.io/simulated-usage: ")
    assert reason in str(e.value)


def test_pod_usage_reads_the_annotation():
    p = pod("web", containers=[container("app"), container("log")], usage={"memory": "64Mi", "log.memory": "16Mi"})
    assert pod_usage(p) == PodUsage(memory=64 * Mi, containers={"log": ContainerUsage(memory=16 * Mi)})
    assert pod_usage(pod("idle")) is NO_USAGE
    with pytest.raises(SimulatedUsageError, match=r"^pod default/bad: annotation"):
        pod_usage(pod("bad", usage="memory=lots"))


def test_init_containers_may_be_named():
    p = pod("web", containers=[container("app")], init_containers=[container("proxy", sidecar=True)],
            usage="proxy.memory=10Mi")
    assert pod_usage(p).containers == {"proxy": ContainerUsage(memory=10 * Mi)}
