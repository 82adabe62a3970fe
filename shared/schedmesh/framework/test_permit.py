"""Permit's Wait through the framework (kube's RunPermitPlugins and the Handle's waiting pods),
with a small co-scheduling plugin, Gang, registered by the test.

Gang is also what the mesh tests load into a running queue-manager
(SCHEDMESH_PLUGINS=schedmesh.framework.test_permit:Gang)."""
from __future__ import annotations

from typing import Optional

import pytest

from schedmesh.api.types import ObjectMeta, Pod
from schedmesh.framework.events import ActionType, ClusterEvent, ClusterEventWithHint, EventResource
from schedmesh.framework.interface import (Code, CycleState, EnqueueExtensions, PermitPlugin, ReservePlugin,
                                           Status)
from schedmesh.framework.profile import MULTI_POINT, PluginRef, Profile, default_plugins
from schedmesh.framework.registry import Registry
from schedmesh.framework.runtime import build_frameworks
from schedmesh.framework.waiting_pods import MAX_PERMIT_TIMEOUT_SECONDS, Timers

GANG_LABEL = "gang.schedmesh.test/name"
GANG_SIZE_LABEL = "gang.schedmesh.test/size"


class Gang(PermitPlugin, ReservePlugin, EnqueueExtensions):
    """Co-scheduling, small (after scheduler-plugins' Coscheduling): a pod labelled with a gang
    name and size waits in Permit until the gang's other pods are waiting too, then all of them
    are allowed. When one of the gang is unreserved (rejected, timed out, its binding failed), the
    others waiting are rejected: a gang holds nodes together or not at all. Args: timeoutSeconds."""

    name = "Gang"

    def __init__(self, args: Optional[dict] = None, handle=None) -> None:
        super().__init__(args, handle)
        self.timeout = float(self.args.get("timeoutSeconds", 30))

    @staticmethod
    def gang_of(pod: Pod) -> Optional[tuple[str, str]]:
        name = pod.meta.labels.get(GANG_LABEL)
        return (pod.meta.namespace, name) if name else None

    def _waiting_of(self, gang: tuple[str, str], but: str) -> list:
        out = []
        self.handle.iterate_over_waiting_pods(
            lambda wp: out.append(wp) if self.gang_of(wp.pod) == gang and wp.pod.meta.uid != but else None)
        return out

    def permit(self, state: CycleState, pod: Pod, node_name: str) -> tuple[Optional[Status], float]:
        gang = self.gang_of(pod)
        if gang is None:
            return None, 0.0
        size = int(pod.meta.labels.get(GANG_SIZE_LABEL, "1"))
        waiting = self._waiting_of(gang, pod.meta.uid)
        if len(waiting) + 1 < size:
            return Status(Code.WAIT, (f"gang {gang[1]}: {len(waiting) + 1} of {size} pods",)), self.timeout
        for wp in waiting:
            wp.allow(self.name)
        return None, 0.0

    def unreserve(self, state: CycleState, pod: Pod, node_name: str) -> None:
        gang = self.gang_of(pod)
        if gang is not None:
            for wp in self._waiting_of(gang, pod.meta.uid):
                wp.reject(self.name, f"gang {gang[1]}: pod {pod.meta.name} was unreserved")

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [ClusterEventWithHint(ClusterEvent(EventResource.POD, ActionType.ADD))]


class Deny(PermitPlugin):
    name = "Deny"

    def permit(self, state, pod, node_name):
        if pod.meta.labels.get("deny") == "error":
            return Status.as_error("broken"), 0.0
        return (Status.unschedulable("denied"), 0.0) if "deny" in pod.meta.labels else (None, 0.0)


class Waits(PermitPlugin):
    """Asks to wait as long as its args say (seconds)."""

    name = "Waits"

    def permit(self, state, pod, node_name):
        return Status(Code.WAIT), float(self.args.get("seconds", 3600))


class RecordingTimers(Timers):
    """Real timers that also note each delay asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.delays: list[float] = []

    def after(self, seconds, fn):
        self.delays.append(seconds)
        return super().after(seconds, fn)


def framework(*extra: str, args: Optional[dict] = None):
    reg = Registry()
    for cls in (Gang, Deny, Waits):
        reg.register(cls)
    plugins = default_plugins()
    plugins[MULTI_POINT].enabled += [PluginRef(n) for n in extra]
    prof = Profile(scheduler_name="gang-scheduler", plugins=plugins, plugin_config=args or {})
    return build_frameworks([prof], reg)["gang-scheduler"]


def member(name: str, gang: str = "g", size: int = 3, **labels: str) -> Pod:
    lab = {GANG_LABEL: gang, GANG_SIZE_LABEL: str(size), **labels} if gang else dict(labels)
    return Pod(meta=ObjectMeta(name=name, namespace="default", uid=f"uid-{name}", labels=lab))


def test_a_gang_waits_until_its_last_pod_then_all_are_allowed() -> None:
    fw = framework("Gang")
    a, b, c = member("a"), member("b"), member("c")
    for p in (a, b):
        st = fw.run_permit(CycleState(), p, "node-1")
        assert st.code == Code.WAIT
        assert st.message() == f'one or more plugins asked to wait and no plugin rejected pod "{p.name}"'
    wa, wb = fw.get_waiting_pod(a.uid), fw.get_waiting_pod(b.uid)
    assert wa is not None and wb is not None and wa.get_pending_plugins() == ["Gang"]
    assert wa.wait(0) is None, "two of three: still waiting"
    assert fw.run_permit(CycleState(), c, "node-2") is None  # the last one goes on, and frees the others
    assert wa.wait(1).is_success() and wb.wait(1).is_success()
    assert fw.get_waiting_pod(c.uid) is None


def test_pods_of_another_gang_or_of_none_are_not_counted() -> None:
    fw = framework("Gang")
    assert fw.run_permit(CycleState(), member("solo", gang=""), "n") is None
    assert fw.run_permit(CycleState(), member("x1", gang="x", size=2), "n").is_wait()
    assert fw.run_permit(CycleState(), member("y1", gang="y", size=2), "n").is_wait()
    assert fw.get_waiting_pod("uid-x1").wait(0) is None
    assert fw.run_permit(CycleState(), member("x2", gang="x", size=2), "n") is None
    assert fw.get_waiting_pod("uid-x1").wait(1).is_success()
    assert fw.get_waiting_pod("uid-y1").wait(0) is None


def test_a_waiting_gang_times_out_with_kubes_message() -> None:
    fw = framework("Gang", args={"Gang": {"timeoutSeconds": 0.05}})
    fw.run_permit(CycleState(), member("a"), "n")
    st = fw.get_waiting_pod("uid-a").wait(5)
    assert (st.code, st.plugin, st.message()) == (
        Code.UNSCHEDULABLE, "Gang", "rejected due to timeout after waiting 50ms at plugin Gang")


def test_unreserving_one_of_a_gang_rejects_the_others_waiting() -> None:
    fw = framework("Gang")
    a, b = member("a"), member("b")
    fw.run_permit(CycleState(), a, "n")
    fw.run_permit(CycleState(), b, "n")
    fw.run_unreserve(CycleState(), a, "n")
    st = fw.get_waiting_pod(b.uid).wait(1)
    assert (st.code, st.plugin, st.message()) == (Code.UNSCHEDULABLE, "Gang", "gang g: pod a was unreserved")
    assert fw.get_waiting_pod(a.uid).wait(0) is None  # a's own answer comes from whoever failed it


def test_reject_waiting_pod_through_the_handle() -> None:
    fw = framework("Gang")
    fw.run_permit(CycleState(), member("a"), "n")
    assert fw.reject_waiting_pod("uid-a") is True and fw.reject_waiting_pod("uid-none") is False
    st = fw.get_waiting_pod("uid-a").wait(0)
    assert (st.code, st.plugin, st.message()) == (Code.UNSCHEDULABLE, "", "removed")


def test_profiles_of_one_scheduler_share_the_waiting_pods() -> None:
    reg = Registry()
    reg.register(Gang)
    profs = []
    for name in ("one", "two"):
        plugins = default_plugins()
        plugins[MULTI_POINT].enabled.append(PluginRef("Gang"))
        profs.append(Profile(scheduler_name=name, plugins=plugins))
    fws = build_frameworks(profs, reg)
    fws["one"].run_permit(CycleState(), member("a", size=2), "n")
    assert fws["two"].get_waiting_pod("uid-a") is not None


@pytest.mark.parametrize("labels,want", [
    ({"deny": ""}, (Code.UNSCHEDULABLE, "Deny", "denied")),
    ({"deny": "error"}, (Code.ERROR, "Deny", 'running Permit plugin "Deny": broken')),
], ids=["rejected", "error"])
def test_a_rejection_or_error_after_a_wait_ends_permit_and_nothing_waits(labels, want) -> None:
    fw = framework("Gang", "Deny")
    p = member("a", **labels)
    st = fw.run_permit(CycleState(), p, "n")
    assert (st.code, st.plugin, st.message()) == want
    assert fw.get_waiting_pod(p.uid) is None


def test_a_wait_is_capped_at_fifteen_minutes_per_plugin() -> None:
    fw = framework("Gang", "Waits", args={"Waits": {"seconds": 3600}, "Gang": {"timeoutSeconds": 120}})
    timers = RecordingTimers()
    fw.waiting_pods.timers = timers
    p = member("a")
    assert fw.run_permit(CycleState(), p, "n").is_wait()
    assert sorted(timers.delays) == [120.0, MAX_PERMIT_TIMEOUT_SECONDS]
    assert sorted(fw.get_waiting_pod(p.uid).get_pending_plugins()) == ["Gang", "Waits"]
    fw.get_waiting_pod(p.uid).allow("Gang")
    assert fw.get_waiting_pod(p.uid).wait(0) is None, "Waits has not allowed it yet"
    fw.get_waiting_pod(p.uid).allow("Waits")
    assert fw.get_waiting_pod(p.uid).wait(0).is_success()
