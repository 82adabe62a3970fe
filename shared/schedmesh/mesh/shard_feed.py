"""The cluster a shard evaluates on, fed by its caller: the caller's snapshot, as changes.

A shard used to replicate the whole cluster from the topics (every pod record of every pod,
decoded on every shard, a Kafka consumer each) and overlay the caller's in-flight pods sent with
every request. A shard only needs what its Filter and Score read: nodes in the caller's order,
namespaces' labels, the pods on its own nodes and, of other nodes' pods, those with affinity
terms (a node-local pod, the only kind a shard is asked about, is judged by the pods of the node
itself and by existing pods' affinity terms: framework/interface.py, InterPodAffinity). So the
caller sends that, with each request, as the changes since the previous request to that shard
(`ShardFeed`): node additions, updates and removals in their order, the nodes whose pods (as
this shard sees them) changed with their pods now, each pod's spec once. Each shard then decodes
and keeps about 1/N of the pods. A pod whose encoding is that of a pod sent before but for its
metadata (a workload's replicas) goes as its metadata and the number of that template: decoding
the metadata alone and copying the template is half the work of decoding it whole, and a
seventh of the bytes.

Exactness: for node-local pods, the shard's snapshot after a feed is the caller's snapshot when
it took the feed, but for what no Filter or Score plugin reads of them (a pod's binding and
status, the order of a node's pods, other nodes' pods without affinity terms); the node order is
checked (the feed's crc32 of it). Feeds apply in their order: a request
whose feed follows one the shard has not received yet waits for it. A shard that restarted, or
missed a feed, refuses; the caller then sends the whole cluster (`ShardFeed.reset`).
"""
from __future__ import annotations

import threading
import time
import uuid
from operator import is_
from contextlib import contextmanager
from typing import Callable, Iterator, Optional, Sequence

from google.protobuf.message import DecodeError

from schedmesh.api import convert
from schedmesh.api.evolve import evolve
from schedmesh.api.types import Pod, same_but_status
from schedmesh.cache.snapshot import Snapshot, SnapshotChanges
from schedmesh.mesh.partition import shard_of
from schedmesh.v1 import objects_pb2 as pb
from schedmesh.v1 import scheduling_pb2 as spb


def encode_pod(pod: Pod) -> bytes:
    return convert.pod_to_proto(pod).SerializeToString()


def encode_node(node) -> bytes:
    return convert.node_to_proto(node).SerializeToString()


class _Owned(dict):
    """node name -> whether the shard owns it, computed once per name: read for each pod change."""

    def __init__(self, shard_index: int, shard_count: int) -> None:
        super().__init__()
        self.shard_index, self.shard_count = shard_index, shard_count

    def __missing__(self, name: str) -> bool:
        owned = self[name] = shard_of(name, self.shard_count) == self.shard_index
        return owned


_NO_PODS: tuple = ((), ())  # a node the shard was told has none of the pods it is sent

# Templates a feed numbers (distinct pod encodings but for metadata) before it starts over. Pods
# created bound each encode their own node and are never copied: a replayed cluster's fill this
# once (the feed keeps each template's encoding as its key, about 300 bytes).
TEMPLATES_MAX = 1024


class ShardFeed:
    """The caller's side of one shard's feed: what that shard was sent, and the changes since.
    `take` is called under the lock the snapshot's writers take."""

    def __init__(self, encode: Callable[[Pod], bytes] = encode_pod,
                 encode_node: Callable[[object], bytes] = encode_node,
                 shard_index: int = 0, shard_count: int = 0) -> None:
        """`shard_count` 0: every node's pods (a shard that may be asked about any pod)."""
        self.feeder = uuid.uuid4().hex  # this process's feed: a shard that knows another starts over
        self.encode, self.encode_node = encode, encode_node
        self.shard_index, self.shard_count = shard_index, shard_count
        # (None: every node is this shard's; its change log and `take` read this one map)
        self._owns = _Owned(shard_index, shard_count) if shard_count > 1 else None
        self.generation = 0
        self._snapshot: Optional[Snapshot] = None
        self._changes: Optional[SnapshotChanges] = None
        self._sent: dict[str, Pod] = {}  # uid -> the copy of the pod the shard was sent
        # node -> the pods the shard was told are on it (the objects, to know them again), their uids
        self._rows: dict[str, tuple[list[Pod], list[str]]] = {}
        # a pod's encoding past its metadata -> the number of the template the shard keeps for it
        self._templates: dict[bytes, int] = {}
        self._forget_templates = False  # numbered TEMPLATES_MAX: the next feed starts over
        self._lock = threading.Lock()

    def reset(self) -> None:
        """The shard may not have applied what it was sent (a failed call): send it all next."""
        with self._lock:
            if self._snapshot is not None and self._changes is not None:
                self._snapshot.unwatch(self._changes)
            self._snapshot = self._changes = None
            # (what the shard was sent: the next take starts it again; a feed left unused, as a
            # SharedFeed's own ones once its readers share, holds no pods meanwhile)
            self._sent, self._rows, self._templates = {}, {}, {}

    def pending(self, snapshot: Snapshot) -> bool:
        """Whether the next feed would carry anything (the whole cluster, or changes)."""
        c = self._changes
        return (snapshot is not self._snapshot or c is None or bool(c.pod_nodes) or bool(c.node_ops)
                or c.namespaces_changed)

    def take(self, snapshot: Snapshot, out: spb.ShardFeed) -> None:
        """Fill `out` with what changed in `snapshot` since the previous feed (everything when the
        shard is to start over)."""
        with self._lock:
            out.feeder = self.feeder
            if snapshot is not self._snapshot:
                if self._snapshot is not None and self._changes is not None:
                    self._snapshot.unwatch(self._changes)
                self._snapshot = snapshot
                self._changes = snapshot.watch_changes(ignore_status_updates=True, by_name=True, owns=self._owns)
                self._sent, self._rows, self._templates = {}, {}, {}
                out.from_generation = 0
                infos = snapshot.node_info_list
                for ni in infos:
                    out.node_ops.add(node=self.encode_node(ni.node))
                nodes = [ni.name for ni in infos if ni.pods]
                namespaces = True
            else:
                c = self._changes
                out.from_generation = self.generation
                nodes = c.pod_nodes
                for removed, name in c.node_ops:
                    if removed:
                        out.node_ops.add(removed=name)
                        # the shard keeps the node's pods aside, as the snapshot does, until it comes back
                        self._rows.pop(name, None)
                    else:
                        ni = snapshot.get(name)
                        if ni is not None:  # (removed again later in this feed)
                            out.node_ops.add(node=self.encode_node(ni.node))
                            nodes.add(name)  # a node added again takes back its pods: say which
                namespaces = c.namespaces_changed
                c.pod_nodes, c.node_ops, c.namespaces_changed = set(), [], False
                c.beyond_rows = False
            if self._forget_templates:
                self._templates, self._forget_templates = {}, False
                out.templates_reset = True
            if namespaces:
                out.namespaces_changed = True
                for name, labels in snapshot.namespace_labels.items():
                    out.namespaces.add(name=name, labels=labels)
            out.shard_index, out.shard_count = self.shard_index, self.shard_count
            owns = self._owns
            for name in nodes:
                ni = snapshot.get(name)
                if ni is None:
                    continue
                if owns is not None and not owns[name]:
                    infos = ni.pods_with_affinity  # all this shard reads of another shard's node
                else:
                    infos = ni.pods
                pods = [pi.pod for pi in infos]
                before = self._rows.get(name)
                if before is not None and len(pods) >= len(before[0]) and all(map(is_, pods, before[0])):
                    # The pods sent before are still there, the same objects, in the same
                    # order: only those after them can be new (the common case, pods bound
                    # since; a node's pods are not looked up one by one for each pod bound there).
                    kept = len(before[0])
                    if len(pods) == kept:
                        continue  # nothing this shard reads changed there
                    uids = list(before[1])
                else:
                    kept, uids = 0, []
                for pod in pods[kept:]:
                    uid = pod.meta.uid
                    uids.append(uid)
                    sent = self._sent.get(uid)
                    if sent is not pod:
                        if sent is None or not same_but_status(sent, pod):
                            self._send_pod(out, pod)
                        self._sent[uid] = pod
                out.rows.add(node=name, uids=uids)
                self._rows[name] = (pods, uids) if pods else _NO_PODS
                if not kept and before is not None:
                    for uid in set(before[1]).difference(uids):
                        if snapshot.node_of(uid) is None:
                            self._sent.pop(uid, None)
            self.generation += 1
            out.generation = self.generation
            out.order_digest = snapshot.cols.order_digest

    def _send_pod(self, out: spb.ShardFeed, pod: Pod) -> None:
        """`pod` into `out`: as a replica of a template the shard holds, else whole (and numbered
        as a template while there is room)."""
        data = self.encode(pod)
        parts = convert.split_pod_encoding(data)
        number = 0
        if parts is not None:
            known = self._templates.get(parts[1])
            if known is not None:
                out.replica_metadata.append(parts[0])
                out.replica_templates.append(known)
                return
            if len(self._templates) < TEMPLATES_MAX:
                number = self._templates[parts[1]] = len(self._templates) + 1
            else:
                self._forget_templates = True
        out.pods.append(data)
        out.pod_templates.append(number)


class SharedFeed:
    """One ShardFeed read by several shards of the same nodes (shard i of n among the filter
    workers and among the score workers): each change is taken, and each pod encoded into a feed,
    once for all of them instead of once per shard (the takes were half of preparing a run with
    4 + 4).

    Every request still takes a feed (its shard then answers on the cluster as it is now); a
    reader is sent, before it, the feeds its twins' requests carried since its own last one
    (`ClusterView.earlier_shard_feeds`), kept serialized until every reader has had them. A
    reader whose call failed (it may not have applied what it was sent) resets the feed: every
    reader is sent the whole cluster next, as is every reader when more than LOG_MAX feeds wait
    for one that is not asked (the caller feeds a reader left idle for a second, keep_fed).

    Shards say in each answer whether they apply earlier feeds (`reads_earlier_feeds`; a shard of
    an older version ignores them and would refuse every feed that follows one it was not sent).
    Until every reader has said so, each reads a feed of its own, as before; the readers switch
    together, each sent the whole cluster once, and back if a reader stops saying so (a shard
    rolled back)."""

    LOG_MAX = 4096

    def __init__(self, make_feed: Callable[[], ShardFeed], readers: int = 1) -> None:
        self.feed = make_feed()
        # each reader's own feed while not every reader applies earlier feeds
        self._own = [make_feed() for _ in range(readers)] if readers > 1 else []
        self._said: list[Optional[bool]] = [None] * readers  # each reader's shard's reads_earlier_feeds, once heard
        self.sharing = readers == 1  # (a single reader's own feed is the shared one, with no log)
        # (generation, serialized feed, whether it changes anything) not yet sent to every reader
        self._log: list[tuple[int, bytes, bool]] = []
        self._cursor = [0] * readers  # per reader: the generation of the last feed it was sent
        self._lock = threading.Lock()
        self.readers = [FeedReader(self, k) for k in range(readers)]

    def take(self, reader: int, snapshot: Snapshot, view: spb.ClusterView) -> None:
        """Fill `view` with the feed of `reader`'s request (under the lock the snapshot's writers take)."""
        with self._lock:
            out = view.shard_feed
            if not self.sharing:
                self._own[reader].take(snapshot, out)
                return
            self.feed.take(snapshot, out)
            if len(self._cursor) == 1:
                return
            cursor = self._cursor[reader]
            if out.from_generation == 0:
                self._log.clear()  # the whole cluster: no reader needs what came before
            else:
                view.earlier_shard_feeds.extend(data for generation, data, _ in self._log if generation > cursor)
            self._log.append((out.generation, out.SerializeToString(), changes_anything(out)))
            self._cursor[reader] = out.generation
            oldest = min(self._cursor)
            if self._log[0][0] <= oldest:
                self._log = [entry for entry in self._log if entry[0] > oldest]
            if len(self._log) > self.LOG_MAX:
                self._reset()

    def probe(self, reader: int, view: spb.ClusterView) -> bool:
        """Whether `reader`'s shard has not said yet whether it applies earlier feeds; if so
        `view` gets a feed of an empty cluster for it: asked before it is fed (the caller's idle
        feeding does so at once), the shard says so before the cluster is sent, and is sent the
        whole cluster once, not once per feed (a second whole cluster cost each of 4 + 4 shards
        about 24 MiB of peak memory)."""
        with self._lock:
            if self.sharing or self._said[reader] is not None:
                return False
            self._own[reader].take(Snapshot(), view.shard_feed)
            return True

    def confirm(self, reader: int, reads_earlier: bool) -> None:
        """What `reader`'s shard said in an answer: share the feed once every reader applies
        earlier feeds, stop when one does not."""
        if reads_earlier is self._said[reader]:
            return
        with self._lock:
            self._said[reader] = reads_earlier
            sharing = all(self._said)
            if sharing != self.sharing and self._own:
                self.sharing = sharing
                self._reset()  # (whichever feed comes next starts with the whole cluster)
                for own in self._own:
                    own.reset()

    def pending(self, reader: int, snapshot: Snapshot) -> bool:
        """Whether `reader`'s next feed would change anything: the cluster changed since the last
        take, or a twin was sent a feed that changes something and this reader has not had it.
        (Feeds that change nothing, as the idle feeds of a quiet cluster, wait for the reader's
        next request: counting them, twins fed each other an empty feed every second forever.)"""
        if not self.sharing:
            return self._own[reader].pending(snapshot)
        if self.feed.pending(snapshot):
            return True
        cursor = self._cursor[reader]
        with self._lock:
            return any(changes and generation > cursor for generation, _, changes in self._log)

    def reset(self, reader: int) -> None:
        """`reader` may not have applied what it was sent: it is sent the whole cluster next
        (with a shared feed, every reader is)."""
        with self._lock:
            if self.sharing:
                self._reset()
            else:
                self._own[reader].reset()

    def _reset(self) -> None:
        self._log.clear()
        self.feed.reset()


def changes_anything(feed: spb.ShardFeed) -> bool:
    """Whether applying `feed` changes a shard's cluster (beyond its generation)."""
    return bool(feed.from_generation == 0 or feed.node_ops or feed.rows or feed.pods or feed.replica_metadata
                or feed.namespaces_changed or feed.templates_reset)


class FeedReader:
    """One shard's side of a SharedFeed: what its caller's fan-out takes for that shard's requests."""

    def __init__(self, shared: SharedFeed, index: int) -> None:
        self.shared, self.index = shared, index
        self.sent_at = 0.0  # time.monotonic() of this reader's last feed

    def take(self, snapshot: Snapshot, view: spb.ClusterView) -> None:
        self.shared.take(self.index, snapshot, view)
        self.sent_at = time.monotonic()

    def probe(self, view: spb.ClusterView) -> bool:
        return self.shared.probe(self.index, view)

    def confirm(self, reads_earlier: bool) -> None:
        self.shared.confirm(self.index, reads_earlier)

    def pending(self, snapshot: Snapshot) -> bool:
        return self.shared.pending(self.index, snapshot)

    def reset(self) -> None:
        self.shared.reset(self.index)


class FeedRefused(Exception):
    """This shard cannot apply the feed (it has not the one the feed follows): the caller
    sends the whole cluster again."""


class NotCaughtUp(Exception):
    """The shard's nodes are not in the caller's order yet (their digests differ): the feed that
    brings them is on its way; the caller tries again (UNAVAILABLE)."""


class FeedNotReady(Exception):
    """`FedCluster.at(..., wait=False)`: the feeds do not apply at once (they follow one not
    applied yet, carry the whole cluster, or another request holds the cluster); nothing applied."""


class FedCluster:
    """A shard's copy of its caller's snapshot, kept by the caller's feeds (see the module)."""

    def __init__(self, wait_timeout: float = 5.0) -> None:
        self.snapshot = Snapshot()
        self.feeder = ""
        self.generation = 0
        self.wait_timeout = wait_timeout
        self._pods: dict[str, Pod] = {}  # uid -> the pod as sent, for every pod on a node
        self._templates: dict[int, Pod] = {}  # number -> the pod sent as that template (ShardFeed._send_pod)
        # node -> its row's uids as last applied: a row that only adds pods after them is told by
        # comparing two lists, not by listing the uids of the node's pods (a fifth of a shard's CPU
        # with 28 pods a node)
        self._row_uids: dict[str, list[str]] = {}
        self._cond = threading.Condition(threading.RLock())

    @contextmanager
    def at(self, feed: spb.ShardFeed, earlier: Sequence[bytes] = (), wait: bool = True) -> Iterator[Snapshot]:
        """The snapshot as the caller had it when it took `feed` (applied here once the feeds
        before it are: `earlier`, serialized, were sent with it), held for the caller's
        evaluation: no other feed applies meanwhile. `wait` False: FeedNotReady, nothing applied,
        unless the feeds are changes that follow what this shard has and no other request holds it."""
        try:
            feeds = [spb.ShardFeed.FromString(data) for data in earlier]
        except DecodeError as e:
            raise FeedRefused(f"an earlier feed sent with feed {feed.generation} does not decode: {e}") from e
        feeds.append(feed)
        if not self._cond.acquire(blocking=wait):
            raise FeedNotReady("another request holds the cluster")
        try:
            if not wait and not self._follow_at_once(feeds):
                raise FeedNotReady(f"feed {feeds[0].from_generation} -> {feed.generation} does not follow "
                                   f"this shard's {self.generation} at once")
            for f in feeds:
                self._follow(f)
            yield self.snapshot
        finally:
            self._cond.release()

    def _follow_at_once(self, feeds: Sequence[spb.ShardFeed]) -> bool:
        """Whether `feeds` are changes, each following the one before, the first what this shard has."""
        feeder, generation = self.feeder, self.generation
        for f in feeds:
            if f.from_generation == 0 or f.feeder != feeder or f.from_generation != generation:
                return False
            generation = f.generation
        return True

    def _follow(self, feed: spb.ShardFeed) -> None:
        """Apply `feed` once the feeds before it are (under the condition's lock)."""
        if feed.from_generation == 0:
            if feed.feeder == self.feeder and feed.generation <= self.generation:
                raise FeedRefused(f"a whole-cluster feed older ({feed.generation}) than the one "
                                  f"applied ({self.generation})")
        else:
            deadline = time.monotonic() + self.wait_timeout
            while not (feed.feeder == self.feeder and self.generation >= feed.from_generation):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise FeedRefused(f"feed {feed.from_generation} -> {feed.generation} of {feed.feeder} "
                                      f"does not follow what this shard has ({self.generation} of "
                                      f"{self.feeder or 'nobody'})")
                self._cond.wait(left)
            if self.generation != feed.from_generation:
                raise FeedRefused(f"feed {feed.from_generation} -> {feed.generation} is behind this shard "
                                  f"({self.generation})")
        try:
            self._apply(feed)
        except Exception as e:
            self.feeder = ""  # half applied: only a whole-cluster feed may follow
            raise FeedRefused(f"feed {feed.from_generation} -> {feed.generation} not applied: {e!r}") from e
        finally:
            self._cond.notify_all()
        if self.snapshot.cols.order_digest != feed.order_digest:
            self.feeder = ""
            raise FeedRefused(f"node order differs from the caller's after feed {feed.generation} "
                              f"({self.snapshot.cols.order_digest} != {feed.order_digest})")

    def _apply(self, feed: spb.ShardFeed) -> None:
        if feed.from_generation == 0:
            self.snapshot, self._pods, self._row_uids = Snapshot(), {}, {}
        if feed.from_generation == 0 or feed.templates_reset:
            self._templates = {}
        snap = self.snapshot
        for op in feed.node_ops:
            if op.removed:
                snap.remove_node(op.removed)
                self._row_uids.pop(op.removed, None)  # (its pods kept aside: its row, when it comes back, is checked whole)
            else:
                snap.add_node(convert.node_from_proto(pb.Node.FromString(op.node)))
        if feed.namespaces_changed:
            names = {ns.name for ns in feed.namespaces}
            for gone in [n for n in snap.namespace_labels if n not in names]:
                snap.set_namespace_labels(gone, None)
            for ns in feed.namespaces:
                snap.set_namespace_labels(ns.name, dict(ns.labels))
        sent: dict[str, Pod] = {}
        numbers = feed.pod_templates
        for i, b in enumerate(feed.pods):
            pod = convert.pod_from_proto(pb.Pod.FromString(b), b)  # (its spec memo keyed by these bytes)
            sent[pod.meta.uid] = pod
            if numbers and numbers[i]:
                self._templates[numbers[i]] = pod
        templates = self._templates
        for meta, number in zip(feed.replica_metadata, feed.replica_templates, strict=True):
            template = templates.get(number)
            if template is None:
                raise ValueError(f"a replica of template {number}, which this shard was not sent")
            # what decoding the template's encoding with this metadata gives (split_pod_encoding)
            pod = evolve(template, meta=convert.meta_from(pb.ObjectMeta.FromString(meta)))
            sent[pod.meta.uid] = pod
        left: list[str] = []
        node_of = snap.node_of
        row_uids = self._row_uids
        for row in feed.rows:
            node, uids = row.node, list(row.uids)
            ni = snap.get(node)
            before = row_uids.get(node)
            if ni is not None and before is not None and len(ni.pods) == len(before) and uids[:len(before)] == before:
                here = before  # (the node's pods are its last row's: only this process's feeds change them)
            else:
                here = [pi.pod.meta.uid for pi in ni.pods] if ni is not None else []
            kept = len(here)
            row_uids[node] = uids
            if uids[:kept] != here:
                # Not only pods added after those here (the common case: pods bound since):
                # take out those that left, then check every uid of the row.
                stay = set(uids)
                for pi in list(ni.pods):
                    if pi.pod.meta.uid not in stay:
                        snap.remove_pod(pi.pod)
                        left.append(pi.pod.meta.uid)
                kept = 0
            # The pods kept need a look only if one of them was sent again (its spec changed): on
            # a node of 25 pods, walking them all for each pod bound there was a third of a feed.
            start = kept if kept and sent.keys().isdisjoint(uids[:kept]) else 0
            for i in range(start, len(uids)):
                uid = uids[i]
                pod = sent.get(uid)
                if pod is not None:
                    self._pods[uid] = pod
                    snap.add_pod(pod, node)
                elif i >= kept and node_of(uid) != node:
                    snap.add_pod(self._pods[uid], node)  # moved here, unchanged
        for uid in left:
            if snap.node_of(uid) is None:
                self._pods.pop(uid, None)
        self.feeder, self.generation = feed.feeder, feed.generation
