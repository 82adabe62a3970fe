"""The node-lifecycle controller: node health from the kubelet agents' heartbeats, and the taints
that follow from node conditions (TaintNodesByCondition and the NoExecute tainting pass).

Heartbeats are the lease records agents publish on schedmesh.leases (agent.lease_records): the
names of many nodes and the Ready condition they post (NodeLeases; an agent of an earlier version
sent a NodeRecord per node). As kube does with Lease renewals, the controller notes *its own* clock when a node's renew time advances (so clock skew between
processes does not matter) and judges health against that (node-monitor-grace-period). While
heartbeats arrive, the Ready condition the agent posts in them is the node's; when they stop,
schedmesh.eviction.node_lifecycle sets Ready and the pressure conditions Unknown. Taints are
published as add/remove edits of the taints this controller manages (NodeUpdate.add_taints /
remove_taints), so users' taints and `schedmesh taint` are never overwritten.

Only nodes whose agent has been heard from are managed: a Node applied as an object has no
kubelet here, and it keeps the conditions and taints it was applied with.
"""
from __future__ import annotations

import heapq
import logging
from dataclasses import replace
from typing import Optional

from schedmesh.api.types import Node, NodeCondition, Taint
from schedmesh.bus import Record
from schedmesh.bus.topics import LEASES
from schedmesh.eviction.node_lifecycle import (DEFAULT_NODE_MONITOR_GRACE_PERIOD, DEFAULT_NODE_STARTUP_GRACE_PERIOD,
                                               READY, UNKNOWN, find_condition, node_health)
from schedmesh.mesh.cluster_cache import ClusterCache
from schedmesh.mesh.records import expand, node_update
from schedmesh.v1 import events_pb2

log = logging.getLogger("schedmesh.controllers.node_lifecycle")


def taint_id(t: Taint) -> tuple[str, str]:
    return t.key, t.effect


def _condition_changed(old: Optional[NodeCondition], new: NodeCondition) -> bool:
    return old is None or (old.status, old.reason, old.message) != (new.status, new.reason, new.message)


class NodeLifecycleController:
    def __init__(self, cache: ClusterCache, grace_period: float = DEFAULT_NODE_MONITOR_GRACE_PERIOD,
                 startup_grace_period: float = DEFAULT_NODE_STARTUP_GRACE_PERIOD, source: str = "") -> None:
        self.cache = cache
        self.grace_period, self.startup_grace_period = grace_period, startup_grace_period
        self.source = source
        self.probe: dict[str, float] = {}  # node -> our clock when its heartbeat last advanced
        self.renewed: dict[str, float] = {}  # node -> the renew time its last heartbeat carried
        # node -> the Ready its agent last posted (its heartbeat time: `renewed`)
        self.posted_ready: dict[str, NodeCondition] = {}
        self._pending: dict[str, tuple[tuple, float]] = {}  # node -> (edit published, when): not yet seen back
        # A node's desired state changes only when its heartbeat or its object changes, or when
        # its grace period runs out: sync looks at those nodes, not at every node each period
        # (at 5,000 nodes the full pass was most of this process's CPU).
        self._dirty: set[str] = set()
        self._settled: set[str] = set()  # nodes whose last examination found nothing to do
        # Heap of (time after which to look again, node, grace period): at most one entry per node
        # and grace (`_queued`). A heartbeat does not move its entries (5,000 nodes beating every
        # 10 s made that most of this controller's CPU): an entry found stale when due is pushed
        # again for the node's latest heartbeat.
        self._due: list[tuple[float, str, float]] = []
        self._graces = tuple(sorted({grace_period, startup_grace_period}))
        self._queued: dict[float, set[str]] = {g: set() for g in self._graces}
        cache.listeners.append(self._on_change)

    def _on_change(self, kind: str, old: object, new: object) -> None:
        if kind == "node":
            node = new if new is not None else old
            if node is not None and node.name in self.probe:
                self._dirty.add(node.name)
                self._settled.discard(node.name)

    # ---- heartbeats ------------------------------------------------------------------
    def monitors(self, node: str) -> bool:
        """Whether a kubelet heartbeats this node (nodes applied as objects have none)."""
        return node in self.probe

    def on_lease(self, r: Record, now: float) -> None:
        if r.topic != LEASES or r.value is None:
            return
        try:
            msg = events_pb2.NodeRecord.FromString(r.value)
        except Exception:  # noqa: BLE001 - not a lease: ignore it, as the caches ignore bad records
            log.warning("undecodable lease record at %s/%d@%d", r.topic, r.partition, r.offset)
            return
        if msg.HasField("leases"):
            self._renewed(msg.leases.names, msg.leases.ready, now)
            return
        for item in expand(msg):  # an agent of an earlier version: a NodeRecord per node
            for ready in item.node.conditions:  # (a loop, not next(genexpr): a third of this loop's time)
                if ready.type == READY:
                    self._renewed((item.node.metadata.name,), ready, now)
                    break

    def _renewed(self, names, ready, now: float) -> None:
        """Heartbeats of `names`, each posting `ready` (a NodeCondition message)."""
        if ready.type != READY:
            return
        # (the message's fields read once, not per node as _condition_changed would: 4.9 -> 8 ms
        # for 5,000 nodes)
        renew, posted = ready.last_heartbeat_time, (ready.status, ready.reason, ready.message)
        condition = None  # (made once for the nodes whose posted Ready changes)
        for name in names:
            if not name:
                continue
            last = self.renewed.get(name)
            if last is not None and renew <= last:
                continue
            self.renewed[name] = renew
            self.probe[name] = now
            before = self.posted_ready.get(name)
            if before is None or (before.status, before.reason, before.message) != posted:
                condition = condition or NodeCondition(READY, *posted)
                self.posted_ready[name] = condition
            if name in self._settled and before is not None and before.status == ready.status:
                # still fine: only the deadline moves (desired reads the posted Ready's status only)
                self._push_deadlines(name, now)
            else:
                self._dirty.add(name)
                self._settled.discard(name)

    # ---- reconciling -----------------------------------------------------------------
    def desired(self, node: Node, now: float) -> tuple[list[NodeCondition], list[Taint], list[Taint]]:
        """(conditions to publish, taints to add, taints to remove) for a managed node."""
        name = node.name
        posted = self.posted_ready.get(name)
        fresh = now <= self.probe[name] + self.grace_period
        current = find_condition(node.conditions, READY)
        # While heartbeats arrive, the Ready the agent posts is the node's (it comes back after Unknown).
        if fresh and posted is not None and (current is None or current.status != posted.status):
            posted = replace(posted, last_heartbeat_time=self.renewed.get(name) or None)
            merged = [c for c in node.conditions if c.type != READY] + [posted]
            node = replace(node, conditions=merged)
        health = node_health(node, now, last_heartbeat=self.probe[name], grace_period=self.grace_period,
                             startup_grace_period=self.startup_grace_period)
        before = {c.type: c for c in self.cache_node_conditions(name)}
        conditions = [c for c in health.conditions if _condition_changed(before.get(c.type), c)]
        have = {taint_id(t): t for t in node.taints}
        want = {taint_id(t): t for t in health.taints}
        add = [t for k, t in want.items() if k not in have]
        remove = [t for k, t in have.items() if k not in want]
        return conditions, add, remove

    def cache_node_conditions(self, name: str) -> list[NodeCondition]:
        ni = self.cache.snapshot.get(name)
        return list(ni.node.conditions) if ni is not None and ni.node is not None else []

    def _push_deadlines(self, name: str, now: float) -> None:
        """Look at the node again once a grace period (Ready's, or the startup one) may have run out
        (unless an entry, maybe for an older heartbeat, is queued: _to_examine moves it when due)."""
        probe = self.probe[name]
        for grace in self._graces:
            queued = self._queued[grace]
            if name not in queued and now <= probe + grace:
                queued.add(name)
                heapq.heappush(self._due, (probe + grace, name, grace))

    def _to_examine(self, now: float) -> set[str]:
        """Nodes whose desired state may have changed since the last sync (under cache.lock)."""
        names, self._dirty = self._dirty, set()
        names.update(self._pending)
        while self._due and self._due[0][0] < now:
            _, name, grace = heapq.heappop(self._due)
            self._queued[grace].discard(name)
            probe = self.probe.get(name)
            if probe is None:
                continue
            if probe + grace < now:
                names.add(name)
            else:  # a later heartbeat moved the deadline
                self._queued[grace].add(name)
                heapq.heappush(self._due, (probe + grace, name, grace))
        return names

    def sync(self, now: float) -> list[tuple[str, str, bytes]]:
        out = []
        with self.cache.lock:
            for name in sorted(self._to_examine(now)):
                ni = self.cache.snapshot.get(name)
                if ni is None or ni.node is None or name not in self.probe:
                    continue
                probe = self.probe[name]
                self._push_deadlines(name, now)
                conditions, add, remove = self.desired(ni.node, now)
                if not (conditions or add or remove):
                    self._pending.pop(name, None)
                    if now <= probe + self.grace_period:
                        self._settled.add(name)
                    continue
                self._settled.discard(name)
                edit = (tuple((c.type, c.status, c.reason) for c in conditions),
                        tuple(map(taint_id, add)), tuple(map(taint_id, remove)))
                sent = self._pending.get(name)
                if sent is not None and sent[0] == edit and now - sent[1] < 2.0:
                    continue  # published, not seen back yet
                self._pending[name] = (edit, now)
                ready = next((c.status for c in conditions if c.type == READY), None)
                if ready is not None:
                    log.info("node %s: Ready=%s%s", name, ready,
                             f" (no heartbeat for {now - self.probe[name]:.1f}s)" if ready == UNKNOWN else "")
                if add or remove:
                    log.info("node %s: taints +%s -%s", name, [str(t) for t in add], [str(t) for t in remove])
                out.append(node_update(name, conditions=conditions, add_taints=add, remove_taints=remove,
                                       source=self.source))
        return out
