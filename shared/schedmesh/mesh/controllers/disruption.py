"""The disruption controller: each PodDisruptionBudget's status, published on schedmesh.pdbs
(a status-only record) whenever what it would write differs from what the PDB carries.

The controller is the only writer of PDB status; the Eviction API (controllers.policy) runs in
the same process and spends a budget through `spend`, under the same lock, so a budget is never
spent twice. disruptedPods are kept here between syncs (seeded from the PDB when first seen), so
an eviction counts before its status record has come back from the broker.
"""
from __future__ import annotations

import logging
from typing import Optional

from schedmesh.api.types import PodDisruptionBudget
from schedmesh.eviction.disruption import DisruptionBudgetStatus, disruption_status, with_status
from schedmesh.mesh.cluster_cache import ClusterCache
from schedmesh.mesh.records import pdb_status_record

log = logging.getLogger("schedmesh.controllers.disruption")

# A status we published that has not come back yet is not published again before this long.
REPUBLISH_AFTER = 2.0
# A PDB is synced at least this often even when nothing changed (kube's resync).
RESYNC_PERIOD = 30.0


def pdb_key(pdb: PodDisruptionBudget) -> str:
    return f"{pdb.namespace}/{pdb.name}"


def carried_status(pdb: PodDisruptionBudget) -> DisruptionBudgetStatus:
    """What the PDB object carries, comparable with a computed status."""
    return DisruptionBudgetStatus.of(pdb)


def same_status(a: DisruptionBudgetStatus, b: DisruptionBudgetStatus) -> bool:
    return (a.expected_pods, a.current_healthy, a.desired_healthy, a.disruptions_allowed, dict(a.disrupted_pods)) == \
        (b.expected_pods, b.current_healthy, b.desired_healthy, b.disruptions_allowed, dict(b.disrupted_pods))


class DisruptionController:
    def __init__(self, cache: ClusterCache) -> None:
        self.cache = cache
        self.disrupted: dict[str, dict[str, float]] = {}  # pdb key -> disruptedPods, as this controller knows them
        self._published: dict[str, tuple[DisruptionBudgetStatus, float]] = {}
        self._last_offsets: dict[str, int] = {}
        self._next_sync = 0.0

    # ---- computing ------------------------------------------------------------------
    def status_of(self, pdb: PodDisruptionBudget, now: float) -> DisruptionBudgetStatus:
        """The PDB's status at `now` (call with the cache locked). A status written in the applied
        PDB is taken as given (evictions still spend it), as recorded scenarios take it."""
        key = pdb_key(pdb)
        if pdb.status_given:
            return carried_status(pdb)
        known = self.disrupted.setdefault(key, dict(pdb.disrupted_pods))
        pods = [p for p in self.cache.pods.values() if p.namespace == pdb.namespace]
        status = disruption_status(with_status(pdb, DisruptionBudgetStatus(disrupted_pods=known)), pods, now)
        if status.sync_error:
            log.warning("pdb %s: %s (disruptionsAllowed set to 0)", key, status.sync_error)
        self.disrupted[key] = dict(status.disrupted_pods)
        return status

    def spend(self, pdb: PodDisruptionBudget, spent: DisruptionBudgetStatus, now: float) -> tuple[str, str, bytes]:
        """Record an eviction the Eviction API allowed; returns the status record to publish."""
        key = pdb_key(pdb)
        self.disrupted[key] = dict(spent.disrupted_pods)
        self._published[key] = (spent, now)
        return pdb_status_record(with_status(pdb, spent))

    # ---- syncing ----------------------------------------------------------------------
    def _due(self, now: float) -> bool:
        offsets = self.cache.view_offsets()
        relevant = {k: v for k, v in offsets.items() if k.startswith(("schedmesh.pods/", "schedmesh.pdbs/"))}
        if relevant != self._last_offsets or now >= self._next_sync:
            self._last_offsets = relevant
            return True
        return False

    def sync(self, now: float, force: bool = False) -> list[tuple[str, str, bytes]]:
        """Status records for every PDB whose status changed (call under the controller lock)."""
        if not force and not self._due(now):
            return []
        out = []
        next_sync: Optional[float] = now + RESYNC_PERIOD
        with self.cache.lock:
            pdbs = list(self.cache.pdbs.values())
            live = {pdb_key(p) for p in pdbs}
            for key in [k for k in self.disrupted if k not in live]:  # deleted PDBs
                self.disrupted.pop(key, None)
                self._published.pop(key, None)
            for pdb in pdbs:
                key = pdb_key(pdb)
                status = self.status_of(pdb, now)
                if status.recheck_at is not None:
                    next_sync = min(next_sync, status.recheck_at + 0.01)  # just past the expiry
                if same_status(status, carried_status(pdb)):
                    self._published.pop(key, None)
                    continue
                sent = self._published.get(key)
                if sent is not None and same_status(sent[0], status) and now - sent[1] < REPUBLISH_AFTER:
                    continue  # on its way back from the broker
                self._published[key] = (status, now)
                log.info("pdb %s: expectedPods=%d currentHealthy=%d desiredHealthy=%d disruptionsAllowed=%d",
                         key, status.expected_pods, status.current_healthy, status.desired_healthy,
                         status.disruptions_allowed)
                out.append(pdb_status_record(with_status(pdb, status)))
        self._next_sync = next_sync
        return out
