"""ImageLocality, re-expressing kube's image_locality_test.go cases (with v1.35's formula:
threshold scaled by the number of containers) plus name normalisation and edge cases."""
from __future__ import annotations

import random

import numpy as np
import pytest

from schedmesh.api.load import load_text
from schedmesh.api.types import Container, ContainerImage, Node, ObjectMeta, Pod
from schedmesh.cache.snapshot import Snapshot
from schedmesh.framework.interface import Code, CycleState
from schedmesh.plugins.image_locality import (ImageLocality, calculate_priority, normalized_image_name,
                                              scaled_image_score)

MB = 1024 * 1024


class _Handle:
    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap

    def snapshot(self) -> Snapshot:
        return self.snap


def pod(*images: str, init: tuple[str, ...] = ()) -> Pod:
    return Pod(meta=ObjectMeta(name="p", namespace="default"),
               containers=[Container(f"c{i}", image=im) for i, im in enumerate(images)],
               init_containers=[Container(f"i{i}", image=im) for i, im in enumerate(init)])


def node(name: str, *images: tuple[list[str], int]) -> Node:
    return Node(meta=ObjectMeta(name=name), images=[ContainerImage(list(n), s) for n, s in images])


NODE_40_300_2000 = [(["gcr.io/40:latest", "gcr.io/40:v1", "gcr.io/40:v1"], 40 * MB),
                    (["gcr.io/300:latest", "gcr.io/300:v1"], 300 * MB),
                    (["gcr.io/2000:latest"], 2000 * MB)]
NODE_250_10 = [(["gcr.io/250:latest"], 250 * MB), (["gcr.io/10:latest", "gcr.io/10:v1"], 10 * MB)]
NODE_WITH_NO_IMAGES: list = []

CASES = [
    ("two-images-spread-prefer-larger", pod("gcr.io/40", "gcr.io/250"),
     {"machine1": NODE_40_300_2000, "machine2": NODE_250_10}, {"machine1": 0, "machine2": 5}),
    ("two-images-on-one-node", pod("gcr.io/40", "gcr.io/300"),
     {"machine1": NODE_40_300_2000, "machine2": NODE_250_10}, {"machine1": 7, "machine2": 0}),
    ("exceeding-limit-uses-limit", pod("gcr.io/10", "gcr.io/2000"),
     {"machine1": NODE_40_300_2000, "machine2": NODE_250_10}, {"machine1": 49, "machine2": 0}),
    ("spread-over-three-nodes", pod("gcr.io/10", "gcr.io/2000"),
     {"machine1": NODE_40_300_2000, "machine2": NODE_250_10, "machine3": NODE_WITH_NO_IMAGES},
     {"machine1": 32, "machine2": 0, "machine3": 0}),
    ("tagged-name-must-match-exactly", pod("gcr.io/300:v2"),
     {"machine1": NODE_40_300_2000}, {"machine1": 0}),
    ("single-container-max", pod("gcr.io/2000"), {"machine1": NODE_40_300_2000}, {"machine1": 100}),
    ("init-containers-count", pod("gcr.io/unknown", init=("gcr.io/2000",)),
     {"machine1": NODE_40_300_2000}, {"machine1": 100}),
    ("duplicate-containers-count-twice", pod("gcr.io/300", "gcr.io/300"),
     {"machine1": NODE_40_300_2000}, {"machine1": 29}),
    ("image-on-every-node-full-size", pod("img:1"),
     {"a": [(["img:1"], 500 * MB)], "b": [(["img:1"], 500 * MB)]}, {"a": 48, "b": 48}),
    ("below-min-threshold", pod("small:1"), {"a": [(["small:1"], 23 * MB - 1)]}, {"a": 0}),
    ("no-images-anywhere", pod("nginx"), {"a": [], "b": []}, {"a": 0, "b": 0}),
]


@pytest.mark.parametrize("name,p,nodes,want", CASES, ids=[c[0] for c in CASES])
def test_score(name, p, nodes, want):
    snap = Snapshot([node(n, *imgs) for n, imgs in nodes.items()])
    pl = ImageLocality(None, _Handle(snap))
    rows = snap.all_indices()
    bulk = pl.score_nodes(CycleState(), p, snap, rows)
    per_node = [pl.score(CycleState(), p, ni) for ni in snap.node_info_list]
    assert all(st is None for _, st in per_node)
    assert bulk.tolist() == [s for s, _ in per_node]
    assert dict(zip(snap.cols.names, bulk.tolist())) == want
    assert not pl.has_normalize


def test_spread_counts_all_snapshot_nodes_not_just_scored_ones():
    snap = Snapshot([node("a", (["img:1"], 1000 * MB)), node("b"), node("c"), node("d")])
    pl = ImageLocality(None, _Handle(snap))
    only_a = np.array([snap.cols.index_of("a")], dtype=np.int64)
    # 1000MB * 1/4 = 250MB -> 100 * (250 - 23) / (1000 - 23) = 23
    assert pl.score_nodes(CycleState(), pod("img:1"), snap, only_a).tolist() == [23]


@pytest.mark.parametrize("name,want", [
    ("nginx", "nginx:latest"),
    ("nginx:1.25", "nginx:1.25"),
    ("docker.io/library/nginx", "docker.io/library/nginx:latest"),
    ("localhost:5000/app", "localhost:5000/app:latest"),
    ("localhost:5000/app:v1", "localhost:5000/app:v1"),
    ("repo/app@sha256:abcd", "repo/app@sha256:abcd"),
    ("", ":latest"),
], ids=["bare", "tagged", "docker-hub-prefix-kept", "registry-port-no-tag", "registry-port-tag", "digest", "empty"])
def test_normalized_image_name(name, want):
    assert normalized_image_name(name) == want


def test_docker_library_prefix_is_not_expanded():
    snap = Snapshot([node("a", (["docker.io/library/nginx:latest"], 500 * MB))])
    pl = ImageLocality(None, _Handle(snap))
    assert pl.score_nodes(CycleState(), pod("nginx"), snap, snap.all_indices()).tolist() == [0]
    assert pl.score_nodes(CycleState(), pod("docker.io/library/nginx"), snap, snap.all_indices()).tolist() == [48]


@pytest.mark.parametrize("sum_scores,n,want", [
    (0, 1, 0), (23 * MB, 1, 0), (1000 * MB, 1, 100), (5000 * MB, 1, 100), (511 * MB, 1, 49),
    (1000 * MB, 2, 49), (0, 0, 0),
], ids=["zero", "at-min", "at-max", "over-max", "middle", "two-containers", "no-containers"])
def test_calculate_priority(sum_scores, n, want):
    assert calculate_priority(sum_scores, n) == want


def test_scaled_image_score_uses_float64_then_truncates():
    assert scaled_image_score(1000, 1, 3) == 333
    assert scaled_image_score(10, 2, 3) == 6
    assert scaled_image_score(2000 * MB, 2, 3) == int(float(2000 * MB) * (2.0 / 3.0))


def test_bulk_matches_per_node_on_random_cluster_and_index_refresh():
    rng = random.Random(5)
    names = [f"reg/img{i}:v{j}" for i in range(6) for j in range(2)]
    nodes = [node(f"n{i:02d}", *[([nm], rng.randint(1, 3000) * MB) for nm in rng.sample(names, rng.randint(0, 4))])
             for i in range(40)]
    snap = Snapshot(nodes)
    pl = ImageLocality(None, _Handle(snap))
    rows = snap.all_indices()
    for _ in range(25):
        p = pod(*rng.sample(names, rng.randint(1, 3)), init=tuple(rng.sample(names, rng.randint(0, 1))))
        assert pl.score_nodes(CycleState(), p, snap, rows).tolist() == \
            [pl.score(CycleState(), p, ni)[0] for ni in snap.node_info_list]
    # Adding a node rebuilds the columns, and with them the image index.
    snap.add_node(node("zz", (["reg/img0:v0"], 3000 * MB)))
    rows = snap.all_indices()
    p = pod("reg/img0:v0")
    assert pl.score_nodes(CycleState(), p, snap, rows).tolist() == \
        [pl.score(CycleState(), p, ni)[0] for ni in snap.node_info_list]


def test_score_without_snapshot_is_an_error():
    s, st = ImageLocality().score(CycleState(), pod("x"), None)
    assert st is not None and st.code == Code.ERROR


def test_from_yaml():
    m = load_text("""
apiVersion: v1
kind: Node
metadata: {name: cached}
status:
  images: [{names: ["registry.k8s.io/pause:3.10"], sizeBytes: 734003200}]
---
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  containers: [{name: c, image: "registry.k8s.io/pause:3.10"}]
""")
    snap = Snapshot(m.nodes)
    pl = ImageLocality(None, _Handle(snap))
    # 700MB on the only node: 100 * (700 - 23) / 977 = 69
    assert pl.score(CycleState(), m.pods[0], snap.get("cached"))[0] == 69


def test_warm_builds_the_index_a_cycle_would_and_scores_do_not_change():
    """Idle, the queue-manager warms the plugins: the image index of the current columns is
    built then, not in the next pod's cycle, and it scores exactly as one built on demand."""
    snap = Snapshot([node("a", (["img:1"], 1000 * MB)), node("b", (["img:2"], 300 * MB)), node("c")])
    warmed, cold = ImageLocality(None, _Handle(snap)), ImageLocality(None, _Handle(snap))
    warmed.warm(snap)
    index = warmed._indexes.get(snap.cols)
    assert index is not None and set(index.by_name) == {"img:1", "img:2"}
    rows = snap.all_indices()
    for p in (pod("img:1"), pod("img:2", "img:1"), pod("nginx")):
        assert warmed.score_nodes(CycleState(), p, snap, rows).tolist() == \
            cold.score_nodes(CycleState(), p, snap, rows).tolist()
    assert warmed._indexes.get(snap.cols) is index  # the one warm built
