"""Matching pods per node without visiting every pod: a label index over a snapshot's pods.

kube counts, for every node, the pods a constraint's selector matches (countPodsMatchSelector:
same namespace, not terminating). Doing that by scanning every pod of a 5,000-node cluster in
Python costs tens of milliseconds per incoming pod, so this index keeps, per snapshot, postings
(namespace, key, value) -> {node row: [pod labels]} and answers a selector by walking only its
most selective posting (then checking the whole selector on those pods).

The index follows the snapshot incrementally: only the rows the snapshot's change feed names
(nodes whose pods changed) are re-indexed; a new node list (nodes added, removed or changed)
rebuilds it. Candidate for a shared place: InterPodAffinity counts pods by
selector the same way.
"""
from __future__ import annotations

import weakref
from typing import Mapping, Optional

import numpy as np

from schedmesh.api.labels import EXISTS, IN, LabelSelector
from schedmesh.cache.snapshot import SnapshotChanges

Posting = dict[int, list[Mapping[str, str]]]  # node row -> labels of its pods in the posting


class PodLabelIndex:
    """Non-terminating pods of one snapshot, indexed by namespace and label."""

    __slots__ = ("_infos", "_changes", "_rows", "_by_label", "_by_key", "_by_ns", "_snapshot_gen", "_counts")

    def __init__(self) -> None:
        self._infos: Optional[list] = None
        self._changes: Optional[SnapshotChanges] = None
        self._rows: list[list[tuple[str, Mapping[str, str]]]] = []
        self._by_label: dict[tuple[str, str, str], Posting] = {}
        self._by_key: dict[tuple[str, str], Posting] = {}
        self._by_ns: dict[str, Posting] = {}
        self._snapshot_gen = -1
        # Pods per row of the postings a one-requirement selector asked for, kept up to date row by
        # row: rebuilding them from a posting of 5,000 rows was a tenth of a spreading workload's
        # queue-manager. Keyed by (posting kind, posting key).
        self._counts: dict[tuple[str, object], np.ndarray] = {}

    # ---- keeping up with the snapshot ---------------------------------------------------------
    def refresh(self, snapshot) -> "PodLabelIndex":
        """Catch up with `snapshot`; called under the lock its writers take."""
        if snapshot.generation == self._snapshot_gen and snapshot.node_info_list is self._infos:
            return self  # nothing changed since the last refresh
        self._snapshot_gen = snapshot.generation
        if self._changes is None:
            # For the snapshot's lifetime, as this index. A binding or a status report (the same pod
            # on the same node, its labels and terms unchanged: same_but_status) changes nothing
            # indexed here; each pod's binding and Running report made its row read twice more.
            self._changes = snapshot.watch_changes(ignore_status_updates=True)
        changed_rows = self._changes.take_rows()
        infos = snapshot.node_info_list
        n = len(infos)
        if infos is not self._infos:
            self._infos = infos
            self._rows = [[] for _ in range(n)]
            self._by_label, self._by_key, self._by_ns = {}, {}, {}
            self._counts = {}
            changed = range(n)
        else:
            changed = [row for row in changed_rows if 0 <= row < n]
        for row in changed:
            self._reindex_row(row, infos[row])
        return self

    def _reindex_row(self, row: int, ni) -> None:
        touched = self._row_postings(row) if self._counts else ()
        for ns, labels in self._rows[row]:
            for k, v in labels.items():
                _drop(self._by_label, (ns, k, v), row)
                _drop(self._by_key, (ns, k), row)
            _drop(self._by_ns, ns, row)
        self._index_row(row, ni)
        if self._counts:
            for posting in {*touched, *self._row_postings(row)}:
                counts = self._counts.get(posting)
                if counts is not None:
                    counts[row] = len(self._posting(posting).get(row, ()))

    def _row_postings(self, row: int) -> list[tuple[str, object]]:
        """The postings row `row`'s pods are in, as _counts keys."""
        out: list[tuple[str, object]] = []
        for ns, labels in self._rows[row]:
            out += [("label", (ns, k, v)) for k, v in labels.items()]
            out += [("key", (ns, k)) for k in labels]
            out.append(("ns", ns))
        return out

    def _posting(self, posting: tuple[str, object]) -> Posting:
        kind, key = posting
        index = self._by_label if kind == "label" else self._by_key if kind == "key" else self._by_ns
        return index.get(key, {})

    def _index_row(self, row: int, ni) -> None:
        entries = []
        for pi in ni.pods:
            meta = pi.pod.meta
            # Terminating pods never count (#87621), so they are never indexed.
            if meta.deletion_timestamp is not None:
                continue
            ns, labels = meta.namespace, meta.labels
            entries.append((ns, labels))
            for k, v in labels.items():
                self._by_label.setdefault((ns, k, v), {}).setdefault(row, []).append(labels)
                self._by_key.setdefault((ns, k), {}).setdefault(row, []).append(labels)
            self._by_ns.setdefault(ns, {}).setdefault(row, []).append(labels)
        self._rows[row] = entries

    # ---- answering ----------------------------------------------------------------------------
    def node_counts(self, namespace: str, selector: Optional[LabelSelector]) -> np.ndarray:
        """int64 per node row: countPodsMatchSelector(node's pods, selector, namespace)."""
        n = len(self._rows)
        if selector is None or selector.is_empty():
            return np.zeros(n, np.int64)
        keys, exact = self._candidates(namespace, selector)
        if exact:  # every pod of the postings matches: counts are the postings' sizes
            out = np.zeros(n, np.int64)
            for key in keys:  # distinct postings
                out += self._posting_counts(key, n)
            return out
        rows: list[int] = []
        for posting in map(self._posting, keys):
            for row, pods in posting.items():
                rows.extend(row for labels in pods if selector.matches(labels))
        if not rows:
            return np.zeros(n, np.int64)
        return np.bincount(np.asarray(rows, np.int64), minlength=n).astype(np.int64)

    def _posting_counts(self, key: tuple[str, object], n: int) -> np.ndarray:
        """Pods per row in posting `key` (kept up to date by _reindex_row once asked for)."""
        counts = self._counts.get(key)
        if counts is None:
            posting = self._posting(key)
            counts = self._counts[key] = np.zeros(n, np.int64)
            m = len(posting)
            if m:
                counts[np.fromiter(posting.keys(), np.int64, m)] = np.fromiter(map(len, posting.values()), np.int64, m)
        return counts

    def _candidates(self, ns: str, sel: LabelSelector) -> tuple[list[tuple[str, object]], bool]:
        """The smallest set of postings (as _counts keys) that holds every pod `sel` can match, and
        whether those pods all match (the selector is that one requirement)."""
        options: list[tuple[int, list[tuple[str, object]]]] = []
        for k, v in sel.match_labels:
            key = ("label", (ns, k, v))
            options.append((len(self._posting(key)), [key]))
        for r in sel.match_expressions:
            if r.operator == IN:
                keys = [("label", (ns, r.key, v)) for v in sorted(set(r.values))]
                options.append((sum(len(self._posting(key)) for key in keys), keys))
            elif r.operator == EXISTS:
                key = ("key", (ns, r.key))
                options.append((len(self._posting(key)), [key]))
        if not options:  # only NotIn / DoesNotExist: every pod of the namespace is a candidate
            return [("ns", ns)], False
        best = min(options, key=lambda o: o[0])[1]
        single = len(sel.match_labels) + len(sel.match_expressions) == 1
        return best, single


def _drop(index: dict, key, row: int) -> None:
    posting = index.get(key)
    if posting is not None:
        posting.pop(row, None)
        if not posting:
            del index[key]


class PodIndexCache:
    """One PodLabelIndex per live snapshot."""

    def __init__(self) -> None:
        self._by_snapshot: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()

    def get(self, snapshot) -> PodLabelIndex:
        idx = self._by_snapshot.get(snapshot)
        if idx is None:
            idx = self._by_snapshot[snapshot] = PodLabelIndex()
        return idx.refresh(snapshot)
