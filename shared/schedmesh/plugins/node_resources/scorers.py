"""The resource scoring functions: LeastAllocated, MostAllocated, RequestedToCapacityRatio and
BalancedAllocation's standard deviation (least_allocated.go, most_allocated.go,
requested_to_capacity_ratio.go, helper/shape_score.go, balanced_allocation.go).

Each takes, per scored resource, what the node would have requested with the pod and what it
can allocate; a resource with allocatable 0 is left out. Each has two forms that must give the
same integers: `score(requested, allocatable)` on lists (one node) and
`score_arrays(requested, allocatable)` on int64 arrays shaped (resources, nodes).
"""
from __future__ import annotations

import math
from typing import Protocol, Sequence

import numpy as np

from schedmesh.framework.interface import MAX_NODE_SCORE
from schedmesh.plugins.node_resources.args import MAX_CUSTOM_PRIORITY_SCORE, MAX_UTILIZATION, ShapePoint
from schedmesh.plugins.helper.gomath import (
    div64,
    div64_arr,
    round_half_away,
    round_half_away_arr,
    trunc_to_int64,
    wrap64,
)


class ResourceScorer(Protocol):
    def score(self, requested: Sequence[int], allocatable: Sequence[int]) -> int: ...

    def score_arrays(self, requested: np.ndarray, allocatable: np.ndarray) -> np.ndarray: ...


class _WeightedAverage:
    """Weighted integer mean of per-resource scores over the resources the node has."""

    def __init__(self, weights: Sequence[int]) -> None:
        self.weights = list(weights)

    def resource_score(self, requested: int, capacity: int) -> int:
        raise NotImplementedError

    def resource_scores(self, requested: np.ndarray, capacity: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def score(self, requested: Sequence[int], allocatable: Sequence[int]) -> int:
        node_score = weight_sum = 0
        for req, alloc, w in zip(requested, allocatable, self.weights):
            if alloc == 0:
                continue
            node_score = wrap64(node_score + self.resource_score(req, alloc) * w)
            weight_sum += w
        return div64(node_score, weight_sum) if weight_sum else 0

    def score_arrays(self, requested: np.ndarray, allocatable: np.ndarray) -> np.ndarray:
        n = requested.shape[1]
        node_score = np.zeros(n, np.int64)
        if allocatable.all():  # every node has every resource: one weight sum for all
            for r, w in enumerate(self.weights):
                node_score += self.resource_scores(requested[r], allocatable[r]) * w
            total_weight = sum(self.weights)
            return div64_arr(node_score, np.full(n, total_weight, np.int64)) if total_weight else node_score
        weight_sum = np.zeros(n, np.int64)
        for r, w in enumerate(self.weights):
            has = allocatable[r] != 0
            s = self.resource_scores(requested[r], allocatable[r])
            node_score += np.where(has, s * w, 0)
            weight_sum += np.where(has, w, 0)
        return div64_arr(node_score, weight_sum)  # 0 where weight_sum == 0


class LeastAllocated(_WeightedAverage):
    """Free fraction of each resource: (capacity - requested) * 100 / capacity, 0 when over."""

    def resource_score(self, requested: int, capacity: int) -> int:
        if capacity == 0 or requested > capacity:
            return 0
        return div64(wrap64((capacity - requested) * MAX_NODE_SCORE), capacity)

    def resource_scores(self, requested: np.ndarray, capacity: np.ndarray) -> np.ndarray:
        # Clamping the free amount at 0 gives the 0 kube returns for requests above capacity.
        return div64_arr(np.maximum(capacity - requested, 0) * MAX_NODE_SCORE, capacity)


class MostAllocated(_WeightedAverage):
    """Used fraction of each resource, requests above capacity counted as capacity."""

    def resource_score(self, requested: int, capacity: int) -> int:
        if capacity == 0:
            return 0
        return div64(wrap64(min(requested, capacity) * MAX_NODE_SCORE), capacity)

    def resource_scores(self, requested: np.ndarray, capacity: np.ndarray) -> np.ndarray:
        return div64_arr(np.minimum(requested, capacity) * MAX_NODE_SCORE, capacity)


class BrokenLinear:
    """helper.BuildBrokenLinearFunction. Shape scores (0..10 in the args) are multiplied by
    `scale` (MaxNodeScore / MaxCustomPriorityScore) first, as requestedToCapacityRatioScorer does."""

    def __init__(self, shape: Sequence[ShapePoint], scale: int = MAX_NODE_SCORE // MAX_CUSTOM_PRIORITY_SCORE) -> None:
        self.utilizations = [p.utilization for p in shape]
        self.scores = [p.score * scale for p in shape]
        self._u = np.array(self.utilizations, np.int64)
        self._s = np.array(self.scores, np.int64)
        self._table = np.array([self(p) for p in range(MAX_UTILIZATION + 1)], np.int64)

    def __call__(self, p: int) -> int:
        u, s = self.utilizations, self.scores
        for i in range(len(u)):
            if p <= u[i]:
                if i == 0:
                    return s[0]
                return s[i - 1] + div64((s[i] - s[i - 1]) * (p - u[i - 1]), u[i] - u[i - 1])
        return s[-1]

    def apply(self, p: np.ndarray) -> np.ndarray:
        if len(p) and p.min() >= 0 and p.max() <= MAX_UTILIZATION:
            return self._table[p]  # the usual case: a utilization percentage
        u, s = self._u, self._s
        i = np.searchsorted(u, p, side="left")  # first i with p <= u[i]
        lo = np.clip(i - 1, 0, len(u) - 1)
        hi = np.clip(i, 0, len(u) - 1)
        span = u[hi] - u[lo]
        inner = s[lo] + div64_arr((s[hi] - s[lo]) * (p - u[lo]), span)
        return np.where(i == 0, s[0], np.where(i >= len(u), s[-1], inner))


class RequestedToCapacityRatio:
    """The shape function of the used percentage, averaged over the resources that score above 0
    and rounded (math.Round) rather than truncated."""

    def __init__(self, weights: Sequence[int], shape: Sequence[ShapePoint]) -> None:
        self.weights = list(weights)
        self.fn = BrokenLinear(shape)

    def resource_score(self, requested: int, capacity: int) -> int:
        if capacity == 0 or requested > capacity:
            return self.fn(MAX_UTILIZATION)
        return self.fn(div64(wrap64(requested * MAX_UTILIZATION), capacity))

    def score(self, requested: Sequence[int], allocatable: Sequence[int]) -> int:
        node_score = weight_sum = 0
        for req, alloc, w in zip(requested, allocatable, self.weights):
            if alloc == 0:
                continue
            s = self.resource_score(req, alloc)
            if s > 0:
                node_score = wrap64(node_score + s * w)
                weight_sum += w
        if weight_sum == 0:
            return 0
        return int(round_half_away(float(node_score) / float(weight_sum)))

    def score_arrays(self, requested: np.ndarray, allocatable: np.ndarray) -> np.ndarray:
        n = requested.shape[1]
        node_score = np.zeros(n, np.int64)
        weight_sum = np.zeros(n, np.int64)
        for r, w in enumerate(self.weights):
            req, cap = requested[r], allocatable[r]
            over = (cap == 0) | (req > cap)
            p = np.where(over, MAX_UTILIZATION, div64_arr(req * MAX_UTILIZATION, cap))
            s = self.fn.apply(p)
            counted = (cap != 0) & (s > 0)
            node_score += np.where(counted, s * w, 0)
            weight_sum += np.where(counted, w, 0)
        has = weight_sum != 0
        ratio = node_score.astype(np.float64) / np.where(has, weight_sum, 1).astype(np.float64)
        return np.where(has, round_half_away_arr(ratio), 0.0).astype(np.int64)


class Balanced:
    """BalancedAllocation: 1 - standard deviation of the requested fractions (each capped at 1),
    in float64 with Go's order of operations, truncated to int64."""

    def score(self, requested: Sequence[int], allocatable: Sequence[int]) -> int:
        fractions: list[float] = []
        total = 0.0
        for req, alloc in zip(requested, allocatable):
            if alloc == 0:
                continue
            f = float(req) / float(alloc)
            if f > 1:
                f = 1.0
            total += f
            fractions.append(f)
        std = 0.0
        if len(fractions) == 2:
            std = abs((fractions[0] - fractions[1]) / 2)
        elif len(fractions) > 2:
            mean = total / float(len(fractions))
            acc = 0.0
            for f in fractions:
                acc = acc + (f - mean) * (f - mean)
            std = math.sqrt(acc / float(len(fractions)))
        return int((1 - std) * float(MAX_NODE_SCORE))

    def score_arrays(self, requested: np.ndarray, allocatable: np.ndarray) -> np.ndarray:
        n = requested.shape[1]
        valid = allocatable != 0
        if valid.all():
            return self._score_all_valid(np.minimum(requested / allocatable, 1.0))
        frac = requested.astype(np.float64) / np.where(valid, allocatable, 1).astype(np.float64)
        frac = np.minimum(frac, 1.0)
        count = valid.sum(axis=0)
        # Adding 0.0 for a skipped resource leaves a float64 sum unchanged, so summing every row
        # in order reproduces Go's running sum over the kept ones.
        total = np.zeros(n)
        first = np.zeros(n)
        second = np.zeros(n)
        seen = np.zeros(n, np.int64)
        for r in range(frac.shape[0]):
            v = valid[r]
            total = total + np.where(v, frac[r], 0.0)
            first = np.where(v & (seen == 0), frac[r], first)
            second = np.where(v & (seen == 1), frac[r], second)
            seen += v
        safe_count = np.where(count == 0, 1, count).astype(np.float64)
        mean = total / safe_count
        acc = np.zeros(n)
        for r in range(frac.shape[0]):
            d = frac[r] - mean
            acc = acc + np.where(valid[r], d * d, 0.0)
        std = np.where(count == 2, np.abs((first - second) / 2),
                       np.where(count > 2, np.sqrt(acc / safe_count), 0.0))
        return trunc_to_int64((1 - std) * float(MAX_NODE_SCORE))

    @staticmethod
    def _score_all_valid(frac: np.ndarray) -> np.ndarray:
        """Every node has every resource: the same sums without the masks."""
        k = frac.shape[0]
        if k == 2:
            std = np.abs((frac[0] - frac[1]) / 2)
        elif k > 2:
            total = frac[0].copy()
            for r in range(1, k):
                total = total + frac[r]
            mean = total / float(k)
            d = frac[0] - mean
            acc = d * d
            for r in range(1, k):
                d = frac[r] - mean
                acc = acc + d * d
            std = np.sqrt(acc / float(k))
        else:
            return np.full(frac.shape[1], MAX_NODE_SCORE, np.int64)
        return trunc_to_int64((1 - std) * float(MAX_NODE_SCORE))
