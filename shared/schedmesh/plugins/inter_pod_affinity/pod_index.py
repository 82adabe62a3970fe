"""An index of the snapshot's pods by what inter-pod affinity matching depends on.

Kube walks every pod of every node for each pod it schedules. Whether a term matches a pod
depends only on the pod's namespace and labels (terms of the incoming pod) or only on the
existing pod's terms (terms of existing pods). So pods are grouped by those, each group
remembering on which nodes its pods run and how many. A cycle then matches each term once
per group (Python) and adds the group's nodes into per-topology counts in bulk (NumPy).

The index lives beside its snapshot and follows it incrementally: a node whose NodeInfo
generation changed since the last sync is re-read, the rest is untouched. Term groups (pods
with affinity terms) are always kept; label groups cover every pod and are built and kept
only once a pod with terms of its own asks for them.
"""
from __future__ import annotations

import weakref
from collections import Counter
from typing import Callable, Optional

import numpy as np

from schedmesh.api.types import ObjectMeta, Pod
from schedmesh.cache.node_info import AffinityTerm, NodeInfo, WeightedAffinityTerm
from schedmesh.cache.snapshot import MISSING, LabelColumn, Snapshot, SnapshotChanges
from schedmesh.plugins.inter_pod_affinity.terms import NsLabelsOf, matches_all

# (namespace, labels as items). Equal label sets listed in another order make a second group
# with the same match results, which is harmless and cheaper than normalising.
LabelKey = tuple[str, tuple[tuple[str, str], ...]]
AntiKey = tuple[AffinityTerm, ...]  # required anti-affinity terms
# (required affinity, preferred affinity, preferred anti-affinity) terms
AffinityKey = tuple[tuple[AffinityTerm, ...], tuple[WeightedAffinityTerm, ...], tuple[WeightedAffinityTerm, ...]]


class _Totals:
    """A group's pod counts summed per value of one topology key (Group.totals)."""

    __slots__ = ("column", "per_code", "labeled", "codes")

    def __init__(self, column: LabelColumn, per_code: np.ndarray, labeled: int, codes: np.ndarray) -> None:
        self.column = column  # the snapshot columns' label column the codes are of
        self.per_code = per_code  # one slot per value of the key, and a last one (no label) kept 0
        self.labeled = labeled  # how many of the group's nodes have the label
        self.codes = codes  # each of the group's positions: its node's code (MISSING: no label)


class Group:
    """Pods that match alike: on which nodes they run, and how many on each.

    Kept as parallel arrays updated in place: a pod joining a group of 5,000 nodes (every
    scheduled pod of an affinity workload) is one row written, not the group rebuilt. The sums
    per topology value that PreFilter and PreScore add up (`totals`) are kept the same way."""

    __slots__ = ("sample", "_slot", "_infos", "_rows", "_counts", "_token", "_cache", "_totals", "_totals_token")

    def __init__(self, sample: object) -> None:
        self.sample = sample  # a stand-in pod (label groups) or the terms (term groups)
        self._slot: dict[int, int] = {}  # id(NodeInfo) -> its position in the arrays
        self._infos: list[NodeInfo] = []
        self._rows = np.empty(4, np.int64)
        self._counts = np.empty(4, np.int64)
        self._token: object = None  # the node list _rows are valid for
        self._cache: Optional[tuple[np.ndarray, np.ndarray]] = None
        self._totals: dict[str, _Totals] = {}  # topology key -> its sums, for _totals_token
        self._totals_token: object = None

    @classmethod
    def of(cls, sample: object, infos: list[NodeInfo], counts: list[int]) -> "Group":
        """A group of these nodes (distinct, in their list's order) with these pod counts."""
        g = cls(sample)
        g._infos = list(infos)
        g._slot = {id(ni): pos for pos, ni in enumerate(infos)}
        size = max(4, len(infos))
        g._rows = np.empty(size, np.int64)
        g._counts = np.empty(size, np.int64)
        g._rows[:len(infos)] = np.fromiter((ni.index for ni in infos), np.int64, len(infos))
        g._counts[:len(infos)] = counts
        return g

    def change(self, ni: NodeInfo, delta: int) -> None:
        self._cache = None
        pos = self._slot.get(id(ni))
        if pos is not None:
            self._counts[pos] += delta
            for t in self._totals.values():
                code = t.codes[pos]
                if code != MISSING:
                    t.per_code[code] += delta
            if self._counts[pos] == 0:
                self._drop(pos)
            return
        pos = len(self._infos)
        if pos == len(self._rows):
            self._rows = np.resize(self._rows, 2 * pos)
            self._counts = np.resize(self._counts, 2 * pos)
        self._slot[id(ni)] = pos
        self._infos.append(ni)
        self._rows[pos] = ni.index  # the index of the node list being synced (see placement)
        self._counts[pos] = delta
        for key in list(self._totals):
            t = self._totals[key]
            if not 0 <= ni.index < len(t.column.codes):  # a node list the sums are not of: made again when asked
                del self._totals[key]
                continue
            if pos == len(t.codes):
                t.codes = np.resize(t.codes, max(4, 2 * pos))
            code = t.codes[pos] = t.column.codes[ni.index]
            if code != MISSING:
                t.per_code[code] += delta
                t.labeled += 1

    def _drop(self, pos: int) -> None:
        """The last entry takes the dropped one's place."""
        last = len(self._infos) - 1
        gone = self._infos[pos]
        for t in self._totals.values():
            if t.codes[pos] != MISSING:
                t.labeled -= 1
            t.codes[pos] = t.codes[last]
        if pos != last:
            moved = self._infos[last]
            self._infos[pos] = moved
            self._slot[id(moved)] = pos
            self._rows[pos] = self._rows[last]
            self._counts[pos] = self._counts[last]
        self._infos.pop()
        del self._slot[id(gone)]

    def empty(self) -> bool:
        return not self._infos

    def placement(self, token: object) -> tuple[np.ndarray, np.ndarray]:
        """(node rows, pod counts); rows are valid for the node list `token`. The arrays are
        the caller's to keep: later changes do not reach them."""
        if self._token is not token:  # the node list was rebuilt: every row may have moved
            self._rows[:len(self._infos)] = np.fromiter((ni.index for ni in self._infos), np.int64,
                                                        len(self._infos))
            self._token = token
            self._cache = None
        c = self._cache
        if c is None:
            n = len(self._infos)
            c = self._cache = (self._rows[:n].copy(), self._counts[:n].copy())
        return c

    def totals(self, token: object, key: str, column: LabelColumn) -> tuple[np.ndarray, int]:
        """The group's pod counts summed per value of `key` (`column`: its codes in the columns of
        the node list `token`), the last slot (nodes without the label) 0, and how many of its
        nodes have the label: what TopologyCounts.add_group adds. Kept as pods join
        and leave; made again for another node list or columns. The array is not the caller's."""
        if self._totals_token is not token:
            self._totals, self._totals_token = {}, token
        t = self._totals.get(key)
        if t is None or t.column is not column:
            rows, counts = self.placement(token)
            codes = np.empty(max(4, len(self._rows)), np.int32)
            codes[:len(rows)] = column.codes[rows]
            has = codes[:len(rows)] != MISSING
            per_code = np.zeros(len(column.values) + 1, np.int64)
            np.add.at(per_code, codes[:len(rows)][has], counts[has])
            t = self._totals[key] = _Totals(column, per_code, int(has.sum()), codes)
        return t.per_code, t.labeled


def _stand_in(key: LabelKey) -> Pod:
    """What AffinityTerm.matches reads of a pod: its namespace and labels."""
    return Pod(ObjectMeta(name="", namespace=key[0], labels=dict(key[1])))


def _same(key: object) -> object:
    return key


_NO_KEYS: Counter = Counter()  # shared by every node without such pods; never changed


def _label_keys(ni: NodeInfo) -> tuple[Counter, ...]:
    if not ni.pods:
        return (_NO_KEYS,)
    return (Counter([(p.pod.meta.namespace, tuple(p.pod.meta.labels.items())) for p in ni.pods]),)


def _term_keys(ni: NodeInfo) -> tuple[Counter, ...]:
    if not ni.pods_with_affinity:
        return _NO_KEYS, _NO_KEYS
    anti = Counter([tuple(p.required_anti_affinity_terms) for p in ni.pods_with_required_anti_affinity])
    aff: Counter = Counter()
    for p in ni.pods_with_affinity:
        if p.required_affinity_terms or p.preferred_affinity_terms or p.preferred_anti_affinity_terms:
            aff[(tuple(p.required_affinity_terms), tuple(p.preferred_affinity_terms),
                 tuple(p.preferred_anti_affinity_terms))] += 1
    return anti, aff


class _Part:
    """Groups built from a list of NodeInfos, kept in step with it: the nodes whose pods
    changed (the snapshot's change feed) are re-read, or all of them for a new list."""

    def __init__(self, keys_of: Callable[[NodeInfo], tuple[Counter, ...]],
                 targets: tuple[tuple[dict, Callable[[object], object]], ...]) -> None:
        self._keys_of = keys_of
        self._targets = targets  # one (groups by key, sample maker) per Counter of keys_of
        self._source: object = None
        self._tracked: dict[int, tuple[NodeInfo, int, tuple[Counter, ...]]] = {}
        self.changed_rows: set[int] = set()  # rows of _source whose pods changed since the last sync

    def sync(self, source: list[NodeInfo]) -> None:
        """Catch up with `source`."""
        if source is self._source:
            n = len(source)
            for i in self.changed_rows:
                if 0 <= i < n:
                    ni = source[i]
                    t = self._tracked.get(id(ni))
                    if t is None or t[1] != ni.generation:
                        self._reread(ni)
        elif not self._tracked:
            self._build(source)
            self._source = source
        else:
            present = set()
            for ni in source:
                present.add(id(ni))
                t = self._tracked.get(id(ni))
                if t is None or t[0] is not ni or t[1] != ni.generation:
                    self._reread(ni)
            for k in [k for k in self._tracked if k not in present]:
                t = self._tracked.pop(k)
                self._apply(t[0], t[2], -1)
            self._source = source
        self.changed_rows = set()

    def _build(self, source: list[NodeInfo]) -> None:
        """The first sync: every node read once, each group's arrays made in one go (joining
        groups node by node took most of the first affinity pod's 0.2-0.4 s at 5,000 nodes)."""
        found: list[dict[object, tuple[list[NodeInfo], list[int]]]] = [{} for _ in self._targets]
        for ni in source:
            keys = self._keys_of(ni)
            self._tracked[id(ni)] = (ni, ni.generation, keys)
            for counts, by_key in zip(keys, found):
                for key, n in counts.items():
                    at = by_key.get(key)
                    if at is None:
                        at = by_key[key] = ([], [])
                    at[0].append(ni)
                    at[1].append(n)
        for by_key, (groups, sample_of) in zip(found, self._targets):
            for key, (infos, counts) in by_key.items():  # no group yet: they empty out with their nodes
                groups[key] = Group.of(sample_of(key), infos, counts)

    def _reread(self, ni: NodeInfo) -> None:
        old = self._tracked.get(id(ni))
        keys = self._keys_of(ni)
        self._tracked[id(ni)] = (ni, ni.generation, keys)
        if old is None or old[0] is not ni:
            if old is not None:
                self._apply(old[0], old[2], -1)
            self._apply(ni, keys, 1)
            return
        # The same node: only what changed (a pod joining a node that already runs pods of its
        # group is one count up, not the node leaving the group and joining it again).
        for before, now, (groups, sample_of) in zip(old[2], keys, self._targets):
            if before is now:
                continue
            for key, n in now.items():
                delta = n - before.get(key, 0)
                if delta:
                    _change(groups, sample_of, key, ni, delta)
            for key, n in before.items():
                if key not in now:
                    _change(groups, sample_of, key, ni, -n)

    def _apply(self, ni: NodeInfo, keys: tuple[Counter, ...], sign: int) -> None:
        for counts, (groups, sample_of) in zip(keys, self._targets):
            for key, n in counts.items():
                _change(groups, sample_of, key, ni, sign * n)


def _change(groups: dict, sample_of: Callable[[object], object], key: object, ni: NodeInfo, delta: int) -> None:
    g = groups.get(key)
    if g is None:
        g = groups[key] = Group(sample_of(key))
    g.change(ni, delta)
    if g.empty():
        del groups[key]


class PodIndex:
    """Groups of one snapshot's pods; `sync` brings them up to date."""

    def __init__(self) -> None:
        self.token: object = None  # the snapshot's node list that group rows refer to
        self.by_labels: dict[LabelKey, Group] = {}
        self.by_anti_terms: dict[AntiKey, Group] = {}
        self.by_affinity_terms: dict[AffinityKey, Group] = {}
        self._labels = _Part(_label_keys, ((self.by_labels, _stand_in),))
        self._terms = _Part(_term_keys, ((self.by_anti_terms, _same), (self.by_affinity_terms, _same)))
        self._changes: Optional[SnapshotChanges] = None
        self._synced_at = -1  # snapshot.generation at the last sync
        self._labels_at = -1  # ... at the last sync that included the label groups

    def sync(self, snapshot: Snapshot, labels: bool) -> None:
        """Term groups always (cheap: only pods with affinity are read); label groups, which
        cover every pod, only when asked for. Called under the lock its snapshot's writers take."""
        # Nothing changed since the last sync: skip even the change feed.
        gen = snapshot.generation
        if self._synced_at == gen and (not labels or self._labels_at == gen):
            return
        if self._changes is None:
            # For the snapshot's lifetime, as this index. A binding or a status report (the same pod
            # on the same node, its labels and terms unchanged: same_but_status) changes nothing
            # indexed here; each pod's binding and Running report made its row read twice more.
            self._changes = snapshot.watch_changes(ignore_status_updates=True)
        changed = self._changes.take_rows()
        self._terms.changed_rows |= changed
        self._labels.changed_rows |= changed
        lst = snapshot.node_info_list
        self.token = lst
        self._terms.sync(lst)
        if labels:
            self._labels.sync(lst)
            self._labels_at = snapshot.generation
        self._synced_at = snapshot.generation


_INDEXES: "weakref.WeakKeyDictionary[Snapshot, PodIndex]" = weakref.WeakKeyDictionary()


def pod_index(snapshot: Snapshot, *, labels: bool) -> PodIndex:
    """This snapshot's index, up to date (label groups only when `labels`)."""
    idx = _INDEXES.get(snapshot)
    if idx is None:
        idx = _INDEXES[snapshot] = PodIndex()
    idx.sync(snapshot, labels)
    return idx


def label_groups_matching_all(index: PodIndex, terms: list[AffinityTerm], ns_labels_of: NsLabelsOf) -> list[Group]:
    """Label groups whose pods match every one of the incoming pod's terms (none without terms)."""
    if not terms:
        return []
    return [g for g in index.by_labels.values() if matches_all(terms, g.sample, ns_labels_of)]
