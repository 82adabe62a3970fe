import pytest

from schedmesh.api.load import load_text
from schedmesh.api.resources import compute_pod_resource, is_scalar_resource_name, pod_resource


def pod(spec: str):
    return load_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n" + spec).pods[0]


@pytest.mark.parametrize("spec, cpu, mem, non0_cpu, non0_mem", [
    ("  containers: [{name: a}]\n", 0, 0, 100, 200 * 2**20),
    ("  containers: [{name: a, resources: {requests: {cpu: 200m}}}, {name: b}]\n", 200, 0, 300, 400 * 2**20),
    # explicit zero is a request: no default applies for it
    ("  containers: [{name: a, resources: {requests: {cpu: '0', memory: '0'}}}]\n", 0, 0, 0, 0),
    # init containers: the max of (each init container) and (sum of containers)
    ("  initContainers: [{name: i, resources: {requests: {cpu: '2'}}}]\n"
     "  containers: [{name: a, resources: {requests: {cpu: 500m, memory: 1Gi}}}]\n", 2000, 2**30, 2000, 2**30),
    # sidecars run alongside: added to the containers, and to later init containers
    ("  initContainers:\n"
     "  - {name: s, restartPolicy: Always, resources: {requests: {cpu: 300m}}}\n"
     "  - {name: i, resources: {requests: {cpu: '1'}}}\n"
     "  containers: [{name: a, resources: {requests: {cpu: 500m}}}]\n", 1300, 0, 1300, 400 * 2**20),
    # overhead is added
    ("  overhead: {cpu: 250m, memory: 120Mi}\n"
     "  containers: [{name: a, resources: {requests: {cpu: 500m, memory: 1Gi}}}]\n", 750, 2**30 + 120 * 2**20, 750, 2**30 + 120 * 2**20),
    # pod-level requests replace the containers' aggregate
    ("  resources: {requests: {cpu: '1', memory: 2Gi}}\n"
     "  containers: [{name: a, resources: {requests: {cpu: 500m}}}]\n", 1000, 2 * 2**30, 1000, 2 * 2**30),
    # pod-level limits only: requests default from the containers, then the limits
    ("  resources: {limits: {cpu: '2', memory: 4Gi}}\n"
     "  containers: [{name: a, resources: {requests: {cpu: 500m}}}]\n", 500, 4 * 2**30, 500, 4 * 2**30),
])
def test_pod_requests(spec, cpu, mem, non0_cpu, non0_mem):
    r = compute_pod_resource(pod(spec))
    assert (r.requests.milli_cpu, r.requests.memory, r.non0_cpu, r.non0_mem) == (cpu, mem, non0_cpu, non0_mem)
    # remembered per request shape: the other shapes of this table, seen before, never answer for it
    for _ in range(2):
        r = pod_resource(pod(spec))
        assert (r.requests.milli_cpu, r.requests.memory, r.non0_cpu, r.non0_mem) == (cpu, mem, non0_cpu, non0_mem)


@pytest.mark.parametrize("name, scalar", [
    ("nvidia.com/gpu", True), ("hugepages-2Mi", True), ("example.com/foo", True),
    ("kubernetes.io/something", True), ("attachable-volumes-csi-x", True),
    ("cpu", False), ("memory", False), ("pods", False), ("foo", False), ("requests.foo/bar", False),
])
def test_scalar_resource_names(name, scalar):
    assert is_scalar_resource_name(name) is scalar
