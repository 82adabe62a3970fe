"""ImageLocality (pkg/scheduler/framework/plugins/imagelocality, v1.35).

Score (no NormalizeScore): for each init container and container whose image (normalised by
appending ":latest" when the name has no tag) the node already has, add the image size scaled by
spread = nodes having the image / all nodes in the snapshot; clamp the sum to
[23MB, 1000MB x number of containers] and map it linearly onto [0, 100] with int64 arithmetic.
Image names are otherwise compared verbatim (no docker.io/library/ expansion), as in kube.
"""
from __future__ import annotations

import weakref
from typing import Any, ClassVar, Optional

import numpy as np

from schedmesh.api.types import Pod
from schedmesh.framework.interface import MAX_NODE_SCORE, CycleState, ScorePlugin, Status

NAME = "ImageLocality"
MB = 1024 * 1024
MIN_THRESHOLD = 23 * MB
MAX_CONTAINER_THRESHOLD = 1000 * MB


def normalized_image_name(name: str) -> str:
    """normalizedImageName: append ":latest" unless a ':' comes after the last '/' (a tag or a
    digest). "localhost:5000/app" has no tag, so it becomes "localhost:5000/app:latest"."""
    if name.rfind(":") <= name.rfind("/"):
        return name + ":latest"
    return name


def scaled_image_score(size: int, num_nodes: int, total_num_nodes: int) -> int:
    """int64(float64(size) * (float64(numNodes) / float64(totalNumNodes)))."""
    spread = float(num_nodes) / float(total_num_nodes)
    return int(float(size) * spread)


def calculate_priority(sum_scores: int, num_containers: int) -> int:
    max_threshold = MAX_CONTAINER_THRESHOLD * num_containers
    if sum_scores < MIN_THRESHOLD:
        sum_scores = MIN_THRESHOLD
    elif sum_scores > max_threshold:
        sum_scores = max_threshold
    return _go_div(MAX_NODE_SCORE * (sum_scores - MIN_THRESHOLD), max_threshold - MIN_THRESHOLD)


def _go_div(a: int, b: int) -> int:
    """int64 division truncating toward zero."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def pod_image_names(pod: Pod) -> list[str]:
    """Normalised images of the init containers then the containers (duplicates count twice)."""
    return [normalized_image_name(c.image) for c in pod.init_containers] + \
           [normalized_image_name(c.image) for c in pod.containers]


class _ImageIndex:
    """Per node set: image name -> (node rows that have it, their scaled image scores)."""

    __slots__ = ("by_name",)

    def __init__(self, snapshot) -> None:
        snapshot.image_states()  # fills NodeInfo.image_states
        infos = snapshot.node_info_list
        name_id: dict[str, int] = {}
        ids: list[int] = []
        rows: list[int] = []
        sizes: list[int] = []
        counts: list[int] = []
        for ni in infos:
            for name, st in ni.image_states.items():
                ids.append(name_id.setdefault(name, len(name_id)))
                rows.append(ni.index)
                sizes.append(st.size)
                counts.append(st.num_nodes)
        # scaledImageScore for every (node, image) at once: the same float64 operations as Go,
        # then truncation toward zero (the values are non-negative).
        spread = np.array(counts, dtype=np.float64) / np.float64(len(infos)) if infos else np.zeros(0)
        scaled = (np.array(sizes, dtype=np.float64) * spread).astype(np.int64)
        id_arr = np.array(ids, dtype=np.int64)
        order = np.argsort(id_arr, kind="stable")
        bounds = np.searchsorted(id_arr[order], np.arange(len(name_id) + 1))
        row_arr = np.array(rows, dtype=np.int64)[order]
        scaled = scaled[order]
        self.by_name = {name: (row_arr[bounds[i]:bounds[i + 1]], scaled[bounds[i]:bounds[i + 1]])
                        for name, i in name_id.items()}


class ImageLocality(ScorePlugin):
    name: ClassVar[str] = NAME

    def node_local(self, pod) -> bool:
        return True  # images are node facts

    def __init__(self, args: Optional[dict] = None, handle: Any = None) -> None:
        super().__init__(args, handle)
        # Rebuilt whenever the snapshot rebuilds its columns (i.e. when nodes change).
        self._indexes: "weakref.WeakKeyDictionary[Any, _ImageIndex]" = weakref.WeakKeyDictionary()

    def warm(self, snapshot) -> None:
        self._index(snapshot)

    def _index(self, snapshot) -> _ImageIndex:
        cols = snapshot.cols
        idx = self._indexes.get(cols)
        if idx is None:
            idx = self._indexes[cols] = _ImageIndex(snapshot)
        return idx

    def score(self, state: CycleState, pod: Pod, node_info) -> tuple[int, Optional[Status]]:
        snapshot = self.handle.snapshot() if self.handle is not None else None
        if snapshot is None:
            return 0, Status.as_error("ImageLocality needs the snapshot from its handle")
        snapshot.image_states()
        total = snapshot.num_nodes()
        states = node_info.image_states
        total_score = 0
        for name in pod_image_names(pod):
            st = states.get(name)
            if st is not None:
                total_score += scaled_image_score(st.size, st.num_nodes, total)
        return calculate_priority(total_score, len(pod.init_containers) + len(pod.containers)), None

    def score_nodes(self, state: CycleState, pod: Pod, snapshot, nodes: np.ndarray) -> np.ndarray:
        index = self._index(snapshot).by_name
        sums = np.zeros(snapshot.cols.n, dtype=np.int64)
        for name in pod_image_names(pod):
            entry = index.get(name)
            if entry is not None:
                sums[entry[0]] += entry[1]  # rows are distinct per name, so += is safe
        s = sums[nodes]
        num_containers = len(pod.init_containers) + len(pod.containers)
        max_threshold = MAX_CONTAINER_THRESHOLD * num_containers
        s = np.where(s < MIN_THRESHOLD, MIN_THRESHOLD, np.where(s > max_threshold, max_threshold, s))
        denom = max_threshold - MIN_THRESHOLD
        if denom <= 0:  # no containers: Go's 0 / negative is 0
            return np.zeros(len(nodes), dtype=np.int64)
        return (MAX_NODE_SCORE * (s - MIN_THRESHOLD)) // denom
