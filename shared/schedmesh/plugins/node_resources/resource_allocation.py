"""resource_allocation.go's resourceAllocationScorer: for each scored resource, the node's
allocatable and what it would have requested with the pod, then a ResourceScorer.

calculateResourceAllocatableRequest rules kept here:
* cpu / memory: the node's non-zero requests (or plain requests with `use_requested`, as
  BalancedAllocation does) plus the pod's request;
* ephemeral-storage: always the plain requests;
* a scalar resource (extended, hugepages, ...) the pod does not request is left out, as is
  one the node does not list; anything else (e.g. "pods") is left out too;
* a resource whose allocatable is 0 is left out (requested and allocatable both 0).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from schedmesh.api.resources import CPU, EPHEMERAL_STORAGE, MEMORY, is_scalar_resource_name
from schedmesh.api.types import Pod
from schedmesh.cache.node_info import NodeInfo
from schedmesh.cache.snapshot import Columns
from schedmesh.plugins.node_resources.args import ResourceSpec
from schedmesh.plugins.helper.gomath import wrap64
from schedmesh.plugins.node_resources.requests import scoring_requests
from schedmesh.plugins.node_resources.rows import Rows
from schedmesh.plugins.node_resources.scorers import ResourceScorer


class ResourceAllocationScorer:
    def __init__(self, resources: Sequence[ResourceSpec], use_requested: bool, pod_level: bool,
                 scorer: ResourceScorer) -> None:
        self.resources = tuple(resources)
        self.names = [r.name for r in self.resources]
        self.use_requested = use_requested
        self.pod_level = pod_level
        self.scorer = scorer

    def pod_requests(self, pod: Pod) -> list[int]:
        return scoring_requests(pod, self.names, self.use_requested, self.pod_level)

    # ---- one node ------------------------------------------------------------------------
    def allocatable_and_requested(self, ni: NodeInfo, name: str, pod_request: int) -> tuple[int, int]:
        if pod_request == 0 and is_scalar_resource_name(name):
            return 0, 0
        requested = ni.requested if self.use_requested else ni.non_zero_requested
        if name == CPU:
            return ni.allocatable.milli_cpu, wrap64(requested.milli_cpu + pod_request)
        if name == MEMORY:
            return ni.allocatable.memory, wrap64(requested.memory + pod_request)
        if name == EPHEMERAL_STORAGE:
            return ni.allocatable.ephemeral_storage, wrap64(ni.requested.ephemeral_storage + pod_request)
        if name in ni.allocatable.scalar:
            return ni.allocatable.scalar[name], wrap64(ni.requested.scalar.get(name, 0) + pod_request)
        return 0, 0

    def node_vectors(self, ni: NodeInfo, pod_requests: Sequence[int]) -> tuple[list[int], list[int]]:
        requested, allocatable = [], []
        for name, pod_request in zip(self.names, pod_requests):
            alloc, req = self.allocatable_and_requested(ni, name, pod_request)
            if alloc == 0:
                alloc = req = 0
            requested.append(req)
            allocatable.append(alloc)
        return requested, allocatable

    def score(self, ni: NodeInfo, pod_requests: Sequence[int]) -> int:
        return self.scorer.score(*self.node_vectors(ni, pod_requests))

    # ---- many nodes ----------------------------------------------------------------------
    def column_vectors(self, cols: Columns, rows: np.ndarray, pod_requests: Sequence[int]
                       ) -> tuple[np.ndarray, np.ndarray]:
        """(requested, allocatable), int64 arrays shaped (resources, len(rows))."""
        n = len(rows)
        gather = Rows(rows, cols.n)
        requested = np.zeros((len(self.names), n), np.int64)
        allocatable = np.zeros((len(self.names), n), np.int64)
        for i, (name, pod_request) in enumerate(zip(self.names, pod_requests)):
            if pod_request == 0 and is_scalar_resource_name(name):
                continue
            if name == CPU:
                alloc, used = cols.alloc_cpu, cols.req_cpu if self.use_requested else cols.nz_cpu
            elif name == MEMORY:
                alloc, used = cols.alloc_mem, cols.req_mem if self.use_requested else cols.nz_mem
            elif name == EPHEMERAL_STORAGE:
                alloc, used = cols.alloc_eph, cols.req_eph
            elif name in cols.alloc_scalar:
                alloc, used = cols.alloc_scalar[name], cols.scalar_req(name)
            else:
                continue
            a = gather.of(alloc)
            allocatable[i] = a
            requested[i] = gather.of(used) + pod_request
            if not a.all():
                requested[i][a == 0] = 0
        return requested, allocatable

    def score_rows(self, cols: Columns, rows: np.ndarray, pod_requests: Sequence[int]) -> np.ndarray:
        return self.scorer.score_arrays(*self.column_vectors(cols, rows, pod_requests))
