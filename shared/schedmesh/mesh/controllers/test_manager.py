"""The controller-manager process's wiring (its Kafka clients are never started)."""
from __future__ import annotations

from schedmesh.mesh.controllers.manager import ControllerManager, ControllerManagerConfig


def test_its_follower_dozes_again_as_soon_as_a_fetch_comes_back_empty():
    """Leases arrive from every agent each 10 s: staying awake for IDLE_AFTER_SECONDS after each
    kept an idle mesh's controller manager fetching 2 s of every 10."""
    cm = ControllerManager(ControllerManagerConfig(), "127.0.0.1:9")
    assert cm.follower.consumer._idle_after == 0.0
