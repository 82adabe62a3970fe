"""The scheduler's view of the cluster for one cycle: NodeInfos plus NumPy columns over them.

Plugins that evaluate nodes in bulk read the columns (`snapshot.cols`), indexed by node
position (`NodeInfo.index`). Pod changes update the columns of one row in place; node set
changes rebuild them lazily. The node order is kube-scheduler's node tree order: zones
round-robin, nodes in each zone in the order they were added.
"""
from __future__ import annotations

import threading
import zlib
from typing import Iterable, Mapping, Optional

import numpy as np

from schedmesh.api.resources import remembered
from schedmesh.api.types import Node, Pod, Taint, same_but_status
from schedmesh.cache.node_info import ImageStateSummary, NodeInfo, PodInfo, pod_with_affinity, same_accounting

ZONE_LABELS = ("failure-domain.beta.kubernetes.io/zone", "topology.kubernetes.io/zone")
REGION_LABELS = ("failure-domain.beta.kubernetes.io/region", "topology.kubernetes.io/region")
MISSING = -1  # label code for "this node has no such label"


def zone_key(node: Node) -> str:
    labels = node.meta.labels
    zone = labels.get(ZONE_LABELS[0], labels.get(ZONE_LABELS[1], ""))
    region = labels.get(REGION_LABELS[0], labels.get(REGION_LABELS[1], ""))
    return "" if not region and not zone else f"{region}:\x00:{zone}"


#: Guards adding and removing change watchers (Snapshot.watch_changes / unwatch); changes are
#: recorded without it, over the tuple as it stands.
_WATCHERS_LOCK = threading.Lock()


class LabelColumn:
    """One label key over all nodes: an int code per node (MISSING where absent)."""

    __slots__ = ("codes", "values", "code_of", "_on_every_node")

    def __init__(self, key: str, nodes: list[Node]) -> None:
        self._on_every_node: Optional[bool] = None
        self.code_of: dict[str, int] = {}
        codes = np.empty(len(nodes), dtype=np.int32)
        for i, n in enumerate(nodes):
            v = n.meta.labels.get(key)
            if v is None:
                codes[i] = MISSING
            else:
                c = self.code_of.get(v)
                if c is None:
                    c = self.code_of[v] = len(self.code_of)
                codes[i] = c
        self.codes = codes
        self.values = list(self.code_of)

    def present(self) -> np.ndarray:
        return self.codes != MISSING

    def on_every_node(self) -> bool:
        """Whether every node has the label (kept: a column never changes)."""
        if self._on_every_node is None:
            self._on_every_node = bool(self.present().all())
        return self._on_every_node

    def isin(self, values: Iterable[str]) -> np.ndarray:
        wanted = [self.code_of[v] for v in values if v in self.code_of]
        if not wanted:
            return np.zeros(len(self.codes), dtype=bool)
        if len(wanted) == 1:
            return self.codes == wanted[0]
        return np.isin(self.codes, wanted)


class Columns:
    """Per-node integer columns of allocatable and requested resources, and node properties."""

    def __init__(self, infos: list[NodeInfo]) -> None:
        n = len(infos)
        self.n = n
        self.names = [ni.name for ni in infos]
        self.alloc_cpu = np.fromiter((ni.allocatable.milli_cpu for ni in infos), np.int64, n)
        self.alloc_mem = np.fromiter((ni.allocatable.memory for ni in infos), np.int64, n)
        self.alloc_eph = np.fromiter((ni.allocatable.ephemeral_storage for ni in infos), np.int64, n)
        self.alloc_pods = np.fromiter((ni.allocatable.allowed_pod_number for ni in infos), np.int64, n)
        self.req_cpu = np.zeros(n, np.int64)
        self.req_mem = np.zeros(n, np.int64)
        self.req_eph = np.zeros(n, np.int64)
        self.num_pods = np.zeros(n, np.int64)
        self.nz_cpu = np.zeros(n, np.int64)
        self.nz_mem = np.zeros(n, np.int64)
        self.alloc_scalar: dict[str, np.ndarray] = {}
        self.req_scalar: dict[str, np.ndarray] = {}
        for i, ni in enumerate(infos):
            for k, v in ni.allocatable.scalar.items():
                self.alloc_scalar.setdefault(k, np.zeros(n, np.int64))[i] = v
        self.unschedulable = np.fromiter((ni.node.unschedulable for ni in infos), bool, n)
        # Nodes grouped by identical taint lists, so taint checks run once per group.
        self.taint_groups: list[tuple[Taint, ...]] = []
        group_of: dict[tuple[Taint, ...], int] = {}
        self.taint_group = np.empty(n, np.int32)
        for i, ni in enumerate(infos):
            t = tuple(ni.node.taints)
            g = group_of.get(t)
            if g is None:
                g = group_of[t] = len(self.taint_groups)
                self.taint_groups.append(t)
            self.taint_group[i] = g
        self._labels: dict[str, LabelColumn] = {}
        self._nodes = [ni.node for ni in infos]
        self._name_index: Optional[dict[str, int]] = None
        self._name_rank: Optional[np.ndarray] = None
        self._order_digest: Optional[int] = None
        for i, ni in enumerate(infos):
            self.set_pod_totals(i, ni)

    @property
    def order_digest(self) -> int:
        """crc32 of the node order: replicas compare it to know they walk the same order."""
        if self._order_digest is None:
            self._order_digest = zlib.crc32("\n".join(self.names).encode())
        return self._order_digest

    def set_pod_totals(self, i: int, ni: NodeInfo) -> None:
        r = ni.requested
        self.req_cpu[i] = r.milli_cpu
        self.req_mem[i] = r.memory
        self.req_eph[i] = r.ephemeral_storage
        self.num_pods[i] = len(ni.pods)
        self.nz_cpu[i] = ni.non_zero_requested.milli_cpu
        self.nz_mem[i] = ni.non_zero_requested.memory
        for k, v in r.scalar.items():
            col = self.req_scalar.get(k)
            if col is None:
                col = self.req_scalar[k] = np.zeros(self.n, np.int64)
            col[i] = v

    def scalar_alloc(self, name: str) -> np.ndarray:
        col = self.alloc_scalar.get(name)
        return col if col is not None else np.zeros(self.n, np.int64)

    def scalar_req(self, name: str) -> np.ndarray:
        col = self.req_scalar.get(name)
        return col if col is not None else np.zeros(self.n, np.int64)

    def label(self, key: str) -> LabelColumn:
        col = self._labels.get(key)
        if col is None:
            col = self._labels[key] = LabelColumn(key, self._nodes)
        return col

    def name_index(self) -> dict[str, int]:
        if self._name_index is None:
            self._name_index = {n: i for i, n in enumerate(self.names)}
        return self._name_index

    def index_of(self, name: str) -> int:
        return self.name_index().get(name, -1)

    @property
    def name_rank(self) -> np.ndarray:
        """Per row: the node name's position in the names sorted (Python's str order), so that the
        smallest name among many rows is an argmin, not a loop over strings."""
        if self._name_rank is None:
            rank = np.empty(self.n, np.int64)
            rank[sorted(range(self.n), key=self.names.__getitem__)] = np.arange(self.n)
            self._name_rank = rank
        return self._name_rank

    def rows_of(self, names) -> np.ndarray:
        """Rows of many node names at once (-1 for unknown names)."""
        get = self.name_index().get
        return np.fromiter((get(n, -1) for n in names), np.int64, len(names))


def _affinity_membership(ni: NodeInfo) -> tuple[bool, bool]:
    return bool(ni.pods_with_affinity), bool(ni.pods_with_required_anti_affinity)



_ALL_ROWS: dict[int, np.ndarray] = {}


def _read_only_arange(n: int) -> np.ndarray:
    rows = np.arange(n, dtype=np.int64)
    rows.flags.writeable = False  # shared by every caller: one that writes to it fails loudly
    return rows


class SnapshotChanges:
    """What changed in a snapshot since `Snapshot.watch_changes()`: the rows whose pods changed,
    and whether anything changed that reaches beyond those nodes (the node set, pods with
    affinity terms, namespace labels)."""

    __slots__ = ("rows", "beyond_rows", "ignore_status_updates", "ignore_affinity", "pod_nodes", "node_ops",
                 "namespaces_changed", "owns")

    def __init__(self, ignore_status_updates: bool = False, by_name: bool = False,
                 ignore_affinity: bool = False, owns: Optional[Mapping[str, bool]] = None) -> None:
        self.rows: set[int] = set()
        self.beyond_rows = False
        # A pod with affinity terms placed or removed changes only its own row for a watcher
        # that reads node-local answers (mesh/answers.py's node-local part of a template).
        self.ignore_affinity = ignore_affinity
        # Leave out a pod put back on its node with only its status, binding or version changed
        # (assumed -> bound -> Running): its node's pods and totals are what they were.
        self.ignore_status_updates = ignore_status_updates
        # by_name (a shard feed, mesh/shard_feed.py): the nodes whose pods changed by name, and
        # node additions, updates and removals in their order (the node order follows from it).
        self.pod_nodes: Optional[set[str]] = set() if by_name else None
        self.node_ops: Optional[list[tuple[bool, str]]] = [] if by_name else None  # (removed, name)
        self.namespaces_changed = False
        # owns (by_name only; None: every node): owns[name] says whether this watcher wants every
        # pod change of that node; of other nodes it hears only of pods with affinity terms (a
        # shard's feed: all it reads of another shard's nodes, so each of N feeds walks about 1/N
        # of the nodes changed, not all of them).
        self.owns = owns

    def take_rows(self) -> set[int]:
        """The rows changed since the last take (for an index following the snapshot under the
        lock its writers take)."""
        rows, self.rows = self.rows, set()
        return rows


class Snapshot:
    """Nodes, the pods on them, namespaces' labels, and columns for bulk evaluation."""

    def __init__(self, nodes: Iterable[Node] = (), pods: Iterable[Pod] = (),
                 namespaces: Optional[Mapping[str, Mapping[str, str]]] = None) -> None:
        self.node_info_map: dict[str, NodeInfo] = {}
        self._zone_order: dict[str, list[str]] = {}
        self.namespace_labels: dict[str, dict[str, str]] = {k: dict(v) for k, v in (namespaces or {}).items()}
        self._pod_node: dict[str, str] = {}  # pod uid -> node name
        self._pending_pods: dict[str, list[Pod]] = {}  # pods whose node is not known yet
        self._list: Optional[list[NodeInfo]] = None
        self._cols: Optional[Columns] = None
        self._affinity_lists: Optional[tuple[list[NodeInfo], list[NodeInfo]]] = None
        # Whether any node has pods with affinity / with required anti-affinity: what InterPodAffinity
        # asks every cycle. Kept without a rescan when a node joins those lists, which is every
        # placement of an anti-affinity workload (rescanning 5,000 nodes was a tenth of its
        # queue-manager); forgotten when a node leaves them or the node set changes.
        self._affinity_any: Optional[list[bool]] = None
        self._image_states: Optional[dict[str, ImageStateSummary]] = None
        # Bumped on every change: plugin indexes can tell in O(1) whether to resync.
        self.generation = 0
        # Replaced, never mutated: a watcher ends from another thread than the one applying changes.
        self._watchers: tuple[SnapshotChanges, ...] = ()
        self._status_update = False  # add_pod is putting a pod back with only its status changed
        for n in nodes:
            self.add_node(n)
        for p in pods:
            self.add_pod(p)

    # ---- reading -------------------------------------------------------------------------
    @property
    def node_info_list(self) -> list[NodeInfo]:
        if self._list is None:
            zones = list(self._zone_order.values())
            out: list[NodeInfo] = []
            depth = max((len(z) for z in zones), default=0)
            for i in range(depth):
                for z in zones:
                    if i < len(z):
                        out.append(self.node_info_map[z[i]])
            for idx, ni in enumerate(out):
                ni.index = idx
            self._list = out
        return self._list

    @property
    def cols(self) -> Columns:
        if self._cols is None:
            self._cols = Columns(self.node_info_list)
        return self._cols

    def num_nodes(self) -> int:
        return len(self.node_info_map)

    def get(self, name: str) -> Optional[NodeInfo]:
        return self.node_info_map.get(name)

    def all_indices(self) -> np.ndarray:
        """Every row, in order: one shared read-only array per node count (every cycle asks)."""
        n = len(self.node_info_list)
        return remembered(_ALL_ROWS, n, lambda: _read_only_arange(n), limit=64)

    def have_pods_with_affinity(self) -> list[NodeInfo]:
        return self._affinity()[0]

    def have_pods_with_required_anti_affinity(self) -> list[NodeInfo]:
        return self._affinity()[1]

    def any_pods_with_affinity(self) -> bool:
        """bool(have_pods_with_affinity()), without building the list."""
        return self._any_affinity()[0]

    def any_pods_with_required_anti_affinity(self) -> bool:
        """bool(have_pods_with_required_anti_affinity()), without building the list."""
        return self._any_affinity()[1]

    def _any_affinity(self) -> list[bool]:
        if self._affinity_any is None:
            if self._affinity_lists is not None:
                self._affinity_any = [bool(self._affinity_lists[0]), bool(self._affinity_lists[1])]
            else:
                lst = self.node_info_list
                self._affinity_any = [any(ni.pods_with_affinity for ni in lst),
                                      any(ni.pods_with_required_anti_affinity for ni in lst)]
        return self._affinity_any

    def _affinity(self) -> tuple[list[NodeInfo], list[NodeInfo]]:
        if self._affinity_lists is None:
            lst = self.node_info_list
            self._affinity_lists = ([ni for ni in lst if ni.pods_with_affinity],
                                    [ni for ni in lst if ni.pods_with_required_anti_affinity])
        return self._affinity_lists

    def image_states(self) -> dict[str, ImageStateSummary]:
        """Image name -> (size, number of nodes that have it); sizes are per node in NodeInfo."""
        if self._image_states is None:
            nodes_with: dict[str, set[str]] = {}
            for ni in self.node_info_map.values():
                for img in ni.node.images:
                    for name in img.names:
                        nodes_with.setdefault(name, set()).add(ni.name)
            for ni in self.node_info_map.values():
                ni.image_states = {name: ImageStateSummary(img.size_bytes, len(nodes_with[name]))
                                   for img in ni.node.images for name in img.names}
            self._image_states = {k: ImageStateSummary(0, len(v)) for k, v in nodes_with.items()}
        return self._image_states

    def namespace_labels_of(self, namespace: str) -> dict[str, str]:
        labels = self.namespace_labels.get(namespace)
        if labels is None:
            # The API server labels every namespace with its own name.
            labels = self.namespace_labels[namespace] = {"kubernetes.io/metadata.name": namespace}
        return labels

    def node_of_pod(self, uid: str) -> Optional[str]:
        return self._pod_node.get(uid)

    def pods(self) -> Iterable[PodInfo]:
        for ni in self.node_info_map.values():
            yield from ni.pods

    # ---- changing ------------------------------------------------------------------------
    def watch_changes(self, ignore_status_updates: bool = False, by_name: bool = False,
                      ignore_affinity: bool = False, owns: Optional[Mapping[str, bool]] = None) -> SnapshotChanges:
        """Start recording changes (until `unwatch`)."""
        w = SnapshotChanges(ignore_status_updates, by_name, ignore_affinity, owns)
        with _WATCHERS_LOCK:
            self._watchers = self._watchers + (w,)
        return w

    def unwatch(self, w: SnapshotChanges) -> None:
        # Under a lock of its own: a batch ends on the scheduling thread (or a feed resets on a
        # fan-out thread) without the cache lock while another batch starts watching under it;
        # two copies of the tuple made at once would lose one of them.
        with _WATCHERS_LOCK:
            self._watchers = tuple(x for x in self._watchers if x is not w)

    def set_namespace_labels(self, namespace: str, labels: Optional[Mapping[str, str]]) -> None:
        """A namespace's labels (None: the namespace is gone)."""
        if labels is None:
            self.namespace_labels.pop(namespace, None)
        else:
            self.namespace_labels[namespace] = dict(labels)
        for w in self._watchers:
            w.beyond_rows = True
            w.namespaces_changed = True

    def _nodes_changed(self, name: str, removed: bool = False) -> None:
        self.generation += 1
        for w in self._watchers:
            w.beyond_rows = True
            if w.node_ops is not None:
                w.node_ops.append((removed, name))
        self._list = None
        self._cols = None
        self._affinity_lists = None
        self._affinity_any = None
        self._image_states = None

    def _pods_changed(self, ni: NodeInfo, affinity_changed: bool, had: tuple[bool, bool]) -> None:
        """`had`: whether the node had pods with affinity, with required anti-affinity, before."""
        self.generation += 1
        for w in self._watchers:
            if self._status_update and w.ignore_status_updates:
                continue
            if w.pod_nodes is not None:  # a feed's log reads names, never rows
                if affinity_changed or w.owns is None or w.owns[ni.name]:
                    w.pod_nodes.add(ni.name)
            else:
                w.rows.add(ni.index)
            w.beyond_rows = w.beyond_rows or (affinity_changed and not w.ignore_affinity)
        if self._cols is not None and ni.index >= 0:
            self._cols.set_pod_totals(ni.index, ni)
        if affinity_changed:
            now = _affinity_membership(ni)
            if had != now:
                # The lists hold the nodes themselves: only a node joining or leaving one changes it
                # (rebuilding them on every affinity pod was an eighth of an affinity workload's cycle).
                self._affinity_lists = None
                if self._affinity_any is not None:
                    if (had[0] and not now[0]) or (had[1] and not now[1]):
                        self._affinity_any = None  # a node left: maybe the last one
                    else:
                        self._affinity_any = [a or n for a, n in zip(self._affinity_any, now)]

    def add_node(self, node: Node) -> NodeInfo:
        name = node.meta.name
        ni = self.node_info_map.get(name)
        if ni is None:
            ni = self.node_info_map[name] = NodeInfo(node)
            self._zone_order.setdefault(zone_key(node), []).append(name)
            for p in self._pending_pods.pop(name, []):
                self._add_pod_to(ni, p)
        else:
            old_zone = zone_key(ni.node)
            ni.set_node(node)
            if zone_key(node) != old_zone:
                self._zone_order[old_zone].remove(name)
                if not self._zone_order[old_zone]:
                    del self._zone_order[old_zone]
                self._zone_order.setdefault(zone_key(node), []).append(name)
        self._nodes_changed(name)
        return ni

    update_node = add_node

    def remove_node(self, name: str) -> Optional[NodeInfo]:
        ni = self.node_info_map.pop(name, None)
        if ni is None:
            return None
        z = zone_key(ni.node)
        self._zone_order[z].remove(name)
        if not self._zone_order[z]:
            del self._zone_order[z]
        for pi in ni.pods:
            self._pod_node.pop(pi.pod.meta.uid, None)
            # Pods stay known: they come back if the node is re-registered.
            self._pending_pods.setdefault(name, []).append(pi.pod)
        self._nodes_changed(name, removed=True)
        return ni

    def _add_pod_to(self, ni: NodeInfo, pod: Pod) -> PodInfo:
        had = _affinity_membership(ni)
        pi = ni.add_pod(pod)
        self._pod_node[pod.meta.uid] = ni.name
        # Only pods with (anti-)affinity can change which nodes have such pods.
        self._pods_changed(ni, pod_with_affinity(pod), had)
        return pi

    def add_pod(self, pod: Pod, node_name: str = "") -> Optional[PodInfo]:
        """Add a pod bound (or assumed) to `node_name` (default: its spec.nodeName)."""
        node_name = node_name or pod.node_name
        uid = pod.meta.uid
        try:
            if uid in self._pod_node:
                if self._pod_node[uid] == node_name:
                    ni = self.node_info_map[node_name]
                    old = next(pi for pi in ni.pods if pi.pod.meta.uid == uid)
                    if any(w.ignore_status_updates for w in self._watchers):
                        self._status_update = same_but_status(old.pod, pod)
                    if same_accounting(old.pod, pod):
                        # A binding or a status update: the pod's place and totals stay (replace_pod
                        # orders the node's pods as the remove and add below would).
                        had = _affinity_membership(ni)
                        pi = old.with_pod(pod)
                        ni.replace_pod(old, pi)
                        self._pods_changed(ni, pod_with_affinity(pod), had)
                        return pi
                self.remove_pod(pod)  # removed and added again, as kube's cache updates a pod (the pod order)
            ni = self.node_info_map.get(node_name)
            if ni is None:
                self._pending_pods.setdefault(node_name, []).append(pod)
                return None
            return self._add_pod_to(ni, pod)
        finally:
            self._status_update = False

    @property
    def pod_count(self) -> int:
        """Pods on the snapshot's nodes (bound or assumed)."""
        return len(self._pod_node)

    def node_of(self, uid: str) -> Optional[str]:
        """The node a pod is on (bound or assumed) in this snapshot, if any."""
        return self._pod_node.get(uid)

    def remove_pod(self, pod: Pod) -> Optional[PodInfo]:
        node_name = self._pod_node.pop(pod.meta.uid, None)
        if node_name is None:
            for lst in self._pending_pods.values():
                for i, p in enumerate(lst):
                    if p.meta.uid == pod.meta.uid:
                        del lst[i]
                        return None
            return None
        ni = self.node_info_map[node_name]
        had = _affinity_membership(ni)
        pi = ni.remove_pod(pod)
        # the pod taken out, not the copy that names it (an update may differ from it)
        self._pods_changed(ni, pod_with_affinity(pi.pod), had)
        return pi
