"""Counts per topology pair (kube's topologyToMatchedTermCount and scoreMap), kept as one int64
array per topology key over the snapshot's label codes so that per-node lookups are a gather.

A pair (key, value) maps to slot `code_of[value]` of the key's array. Each array has one more
slot than the column has values: label code -1 ("node has no such label") indexes that last
slot, which is never written and so always reads 0. Values that no node of the snapshot
carries (possible only for nodes outside it) live in a small overflow dict.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Mapping

import numpy as np

from schedmesh.cache.snapshot import Columns

if TYPE_CHECKING:
    from schedmesh.plugins.inter_pod_affinity.pod_index import Group


class TopologyCounts:
    __slots__ = ("_cols", "_by_key", "_extra")

    def __init__(self, cols: Columns) -> None:
        self._cols = cols
        self._by_key: dict[str, np.ndarray] = {}
        self._extra: dict[tuple[str, str], int] = {}

    @property
    def cols(self) -> Columns:
        """The snapshot columns whose label codes index the arrays."""
        return self._cols

    def _array(self, key: str) -> np.ndarray:
        arr = self._by_key.get(key)
        if arr is None:
            arr = self._by_key[key] = np.zeros(len(self._cols.label(key).values) + 1, np.int64)
        return arr

    # ---- adding -----------------------------------------------------------------------------
    def add_group(self, key: str, group: "Group", token: object, amount: int) -> bool:
        """For each node of `group` (rows of the node list `token`) with the label `key`: its pod
        count times `amount` added to (key, its value), from the group's sums per value over
        these columns (Group.totals). Returns whether any of its nodes had the label (kube only
        creates map entries then)."""
        per_code, labeled = group.totals(token, key, self._cols.label(key))
        if labeled == 0:
            return False
        arr = self._by_key.get(key)
        if arr is None:
            self._by_key[key] = per_code * amount  # (a new array: the group's stays its own)
        else:
            arr += per_code * amount
        return True

    def add(self, key: str, node_labels: Mapping[str, str], delta: int) -> bool:
        """kube's update(node, key, delta): only when the node has the label."""
        value = node_labels.get(key)
        if value is None:
            return False
        code = self._cols.label(key).code_of.get(value)
        if code is None:
            pair = (key, value)
            n = self._extra.get(pair, 0) + delta
            if n:
                self._extra[pair] = n
            else:
                self._extra.pop(pair, None)
        else:
            self._array(key)[code] += delta
        return True

    # ---- reading ----------------------------------------------------------------------------
    def get(self, key: str, value: str) -> int:
        code = self._cols.label(key).code_of.get(value)
        if code is None:
            return self._extra.get((key, value), 0)
        arr = self._by_key.get(key)
        return 0 if arr is None else int(arr[code])

    def for_node(self, key: str, node_labels: Mapping[str, str]) -> int:
        """The count of (key, the node's value); 0 when the node lacks the label."""
        value = node_labels.get(key)
        return 0 if value is None else self.get(key, value)

    def at_codes(self, key: str, codes: np.ndarray) -> np.ndarray:
        """Counts for nodes given by their label codes of `key` (-1 = no label -> 0)."""
        arr = self._by_key.get(key)
        if arr is None:
            return np.zeros(len(codes), np.int64)
        return arr[codes]

    def keys(self) -> Iterator[str]:
        """Topology keys that may hold non-zero counts."""
        yield from self._by_key
        for k in {k for k, _ in self._extra} - self._by_key.keys():
            yield k

    def is_empty(self) -> bool:
        """kube's len(map) == 0: entries that drop to zero are deleted there."""
        return not self._extra and not any(arr.any() for arr in self._by_key.values())

    def as_dict(self) -> dict[tuple[str, str], int]:
        """Non-zero pairs, as kube's map would hold them (for tests and debugging)."""
        out = dict(self._extra)
        for key, arr in self._by_key.items():
            values = self._cols.label(key).values
            for code in np.flatnonzero(arr[:-1]):
                out[(key, values[code])] = int(arr[code])
        return out

    def clone(self) -> "TopologyCounts":
        c = TopologyCounts(self._cols)
        c._by_key = {k: v.copy() for k, v in self._by_key.items()}
        c._extra = dict(self._extra)
        return c

    def __repr__(self) -> str:
        return f"TopologyCounts({self.as_dict()})"
