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
    # every container requests both: the non-zero figures are the requests themselves
    ("  containers: [{name: a, resources: {requests: {cpu: 37m, memory: 301Mi}}},"
     " {name: b, resources: {requests: {cpu: 13m, memory: 1Mi}}}]\n", 50, 302 * 2**20, 50, 302 * 2**20),
    # ... but for an init container that requests cpu only: it gets the memory default there
    ("  initContainers: [{name: i, resources: {requests: {cpu: 10m}}}]\n"
     "  containers: [{name: a, resources: {requests: {cpu: 37m, memory: 100Mi}}}]\n", 37, 100 * 2**20, 37, 200 * 2**20),
    # sub-milli quantities add up before rounding up
    ("  containers: [{name: a, resources: {requests: {cpu: 0.4m, memory: '1.5'}}},"
     " {name: b, resources: {requests: {cpu: 0.4m, memory: '1.5'}}}]\n", 1, 3, 1, 3),
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


def test_remembered_by_identity_answers_only_for_the_same_request_objects():
    """pod_resource and the NodeResources requests are found by the identity of a pod's request
    objects first: a copy sharing them (evolve, a replica) gets the same answer object; a pod
    whose objects differ is answered by its own requests, though the objects before it were
    freed (their ids reused) or equal-looking."""
    import dataclasses

    from schedmesh.api.evolve import evolve
    from schedmesh.api.resources import _SHAPE_OF_INPUTS
    from schedmesh.plugins.node_resources.requests import fit_request, scoring_requests

    small = pod("  containers: [{name: a, resources: {requests: {cpu: 100m, memory: 1Gi}}}]\n")
    first = pod_resource(small)
    assert pod_resource(evolve(small, node_name="n1")) is first
    assert fit_request(evolve(small, node_name="n1")) is fit_request(small)
    shapes = [pod(f"  containers: [{{name: a, resources: {{requests: {{cpu: '{n}', memory: {n}Gi}}}}}}]\n")
              for n in (1, 3)]
    for i in range(200):  # fresh request objects, freed after each round: their ids come back
        n, shape = (1, 3)[i % 2], shapes[i % 2]
        fresh = dataclasses.replace(
            shape, containers=[dataclasses.replace(c, requests=dict(c.requests)) for c in shape.containers],
            init_containers=[], resource_requests={}, overhead={})
        assert (pod_resource(fresh).requests.milli_cpu, fit_request(fresh).milli_cpu) == (1000 * n, 1000 * n)
        assert scoring_requests(fresh, ["cpu", "memory"], False, False) == (1000 * n, n * 2**30)
        # the entry keeps the request objects alive, so their ids cannot come back while it stands
        assert any(inputs is not None and inputs[0] is fresh.containers and inputs[2] is fresh.resource_requests
                   for inputs, _shape in _SHAPE_OF_INPUTS.values())
        del fresh
    bigger = dataclasses.replace(small, containers=pod(
        "  containers: [{name: a, resources: {requests: {cpu: '2'}}}]\n").containers)
    assert pod_resource(bigger).requests.milli_cpu == 2000 and fit_request(bigger).milli_cpu == 2000
    assert scoring_requests(bigger, ["cpu", "memory"], False, False) == (2000, 200 * 2**20)
    assert scoring_requests(bigger, ["cpu"], True, False) == (2000,)
    assert pod_resource(small) is first and fit_request(small).milli_cpu == 100


def test_a_pods_request_shape_is_read_once_and_shared_by_equal_pods(monkeypatch) -> None:
    """resource_key is computed once per set of request objects, whichever memos ask after it
    (pod_resource, NodeResourcesFit's request, the scorers' lists), and equal requests of other
    objects get the same interned shape, so memo lookups hash no Fraction again."""
    import dataclasses

    import schedmesh.api.resources as resources
    from schedmesh.plugins.node_resources.requests import fit_request, scoring_requests

    computed = []
    real = resources.resource_key
    monkeypatch.setattr(resources, "resource_key", lambda p: computed.append(p) or real(p))
    base = pod("  containers: [{name: a, resources: {requests: {cpu: 700m, memory: 3Gi}}}]\n")

    def fresh():  # request objects no memo has seen
        return dataclasses.replace(base, containers=[dataclasses.replace(c, requests=dict(c.requests))
                                                     for c in base.containers])
    a, b = fresh(), fresh()
    pod_resource(a), fit_request(a), scoring_requests(a, ["cpu", "memory"], False, False)
    scoring_requests(a, ["cpu"], True, False)
    assert computed == [a]
    assert resources.request_shape(b) is resources.request_shape(a) and computed == [a, b]
    assert pod_resource(b) is pod_resource(a) and fit_request(b) is fit_request(a)
    other = dataclasses.replace(a, containers=pod(
        "  containers: [{name: a, resources: {requests: {cpu: 800m, memory: 3Gi}}}]\n").containers)
    assert resources.request_shape(other) != resources.request_shape(a)
    assert pod_resource(other).requests.milli_cpu == 800 and computed[-1] is other
