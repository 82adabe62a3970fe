"""The framework's metrics, as kube's frameworkImpl records them: every extension point run is one
scheduler_framework_extension_point_duration_seconds observation (status = the run's code, profile =
its schedulerName); plugins are timed (scheduler_plugin_execution_duration_seconds) only in the
cycles whose CycleState was drawn for it (kube's pluginMetricsSamplePercent, 10 %); Filter is one
observation per search for feasible nodes however many bulk calls it takes."""
from __future__ import annotations

import itertools
from typing import Optional

import pytest
from prometheus_client import REGISTRY

from schedmesh.api.load import admit_all, load_text
from schedmesh.cache.snapshot import Snapshot
from schedmesh.framework.interface import (BindPlugin, Code, CycleState, FilterPlugin, NodeToStatus, PermitPlugin,
                                           PluginError, PostBindPlugin, PostFilterPlugin, PreBindPlugin,
                                           PreFilterPlugin, PreScorePlugin, ReservePlugin, ScorePlugin, Status,
                                           PLUGIN_METRICS_SAMPLE_PERCENT)
from schedmesh.framework.profile import MULTI_POINT, PluginRef, PluginSet, Profile, default_profile
from schedmesh.framework.registry import default_registry
from schedmesh.framework.runtime import Framework
from schedmesh.scheduling.cycle import FitError, SchedulingAlgorithm

POINT = "scheduler_framework_extension_point_duration_seconds_count"
PLUGIN = "scheduler_plugin_execution_duration_seconds_count"
_profiles = itertools.count()


def point_count(point: str, status: str, profile: str) -> float:
    return REGISTRY.get_sample_value(POINT, {"extension_point": point, "status": status, "profile": profile}) or 0.0


def plugin_count(plugin: str, point: str, status: str) -> float:
    return REGISTRY.get_sample_value(PLUGIN, {"plugin": plugin, "extension_point": point, "status": status}) or 0.0


class Scripted(PreFilterPlugin, FilterPlugin, PostFilterPlugin, PreScorePlugin, ScorePlugin, ReservePlugin,
               PermitPlugin, PreBindPlugin, BindPlugin, PostBindPlugin):
    """Every extension point; answers what `answers[point]` says (default Success). Its name is
    the test's, so the plugin metric's series are the test's own."""

    name = "Scripted"
    answers: dict = {}

    def _answer(self, point: str) -> Optional[Status]:
        a = self.answers.get(point)
        if isinstance(a, Exception):
            raise a
        return a

    def pre_filter(self, state, pod, snapshot):
        return None, self._answer("PreFilter")

    def filter(self, state, pod, node_info):
        return self._answer("Filter")

    def post_filter(self, state, pod, node_to_status):
        return None, self._answer("PostFilter") or Status.unschedulable("nothing to preempt")

    def pre_score(self, state, pod, snapshot, nodes):
        return self._answer("PreScore")

    def score(self, state, pod, node_info):
        return 50, None

    def reserve(self, state, pod, node_name):
        return self._answer("Reserve")

    def unreserve(self, state, pod, node_name):
        pass

    def permit(self, state, pod, node_name):
        return self._answer("Permit"), 10.0

    def pre_bind(self, state, pod, node_name):
        return self._answer("PreBind")

    def bind(self, state, pod, node_name):
        return self._answer("Bind")

    def post_bind(self, state, pod, node_name):
        pass


def scripted_framework(**answers) -> tuple[Framework, str, str]:
    """A profile of one Scripted plugin (plus PrioritySort) with a name of its own; returns the
    framework, its profile name and the plugin's name."""
    n = next(_profiles)
    plugin = type(f"Scripted{n}", (Scripted,), {"name": f"Scripted{n}", "answers": answers})
    reg = default_registry()
    reg.register(plugin)
    prof = Profile(scheduler_name=f"metrics-{n}", plugins={
        "queueSort": PluginSet([PluginRef("PrioritySort")]),
        MULTI_POINT: PluginSet([PluginRef(plugin.name)])})
    return Framework(prof, reg), prof.scheduler_name, plugin.name


def cluster(nodes: int, small: int = 0) -> tuple[Snapshot, list]:
    """`nodes` nodes of 4 CPUs, the first `small` of them of 1; one pod asking for 2 CPUs."""
    docs = [f"---\napiVersion: v1\nkind: Node\nmetadata: {{name: n{i:04d}}}\n"
            f"status: {{capacity: {{cpu: \"{1 if i < small else 4}\", memory: 16Gi, pods: \"110\"}}}}\n"
            for i in range(nodes)]
    docs.append("---\napiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: default, uid: p}\n"
                "spec: {containers: [{name: c, resources: {requests: {cpu: \"2\", memory: 1Gi}}}]}\n")
    m = admit_all(load_text("".join(docs)))
    return Snapshot(m.nodes, []), m.pods


# ------------------------------------------------------------------ extension points
def test_each_extension_point_run_is_one_observation_with_its_status_and_profile() -> None:
    fw, prof, _ = scripted_framework(Permit=Status(Code.WAIT), PreBind=Status.unschedulable("later"))
    snap, (pod,) = cluster(3)
    state = CycleState(record_plugin_metrics=False)
    rows = snap.all_indices()
    runs = [
        ("PreFilter", "Success", lambda: fw.run_pre_filter(state, pod, snap)),
        ("PostFilter", "Unschedulable", lambda: fw.run_post_filter(state, pod, NodeToStatus())),
        ("PreScore", "Success", lambda: fw.run_pre_score(state, pod, snap, rows)),
        ("Score", "Success", lambda: fw.run_raw_score(state, pod, snap, rows)),
        ("Reserve", "Success", lambda: fw.run_reserve(state, pod, "n0000")),
        ("Permit", "Wait", lambda: fw.run_permit(state, pod, "n0000")),
        ("Unreserve", "Success", lambda: fw.run_unreserve(state, pod, "n0000")),
        ("PreBind", "Unschedulable", lambda: fw.run_pre_bind(state, pod, "n0000")),
        ("Bind", "Success", lambda: fw.run_bind(state, pod, "n0000")),
        ("PostBind", "Success", lambda: fw.run_post_bind(state, pod, "n0000")),
    ]
    for point, status, run in runs:
        before = point_count(point, status, prof)
        run()
        assert point_count(point, status, prof) == before + 1, (point, status)
    # the per-node and bulk filter runs are not the Filter extension point (kube: the search is)
    before = point_count("Filter", "Success", prof)
    fw.run_filter(state, pod, snap.node_info_list[0])
    fw.run_filter_nodes(state, pod, snap, rows)
    assert point_count("Filter", "Success", prof) == before
    # the sum is the time spent: positive, and small for these trivial plugins
    total = REGISTRY.get_sample_value("scheduler_framework_extension_point_duration_seconds_sum",
                                      {"extension_point": "PreFilter", "status": "Success", "profile": prof})
    assert 0 < total < 1


@pytest.mark.parametrize("point, answer, run", [
    ("PreFilter", Status.as_error("boom"), lambda fw, s, pod, snap: fw.run_pre_filter(s, pod, snap)),
    ("PreFilter", Status.unschedulable("no"), lambda fw, s, pod, snap: fw.run_pre_filter(s, pod, snap)),
    ("PreScore", Status.as_error("boom"), lambda fw, s, pod, snap: fw.run_pre_score(s, pod, snap, snap.all_indices())),
    ("Reserve", RuntimeError("raised"), lambda fw, s, pod, snap: fw.run_reserve(s, pod, "n0000")),
    ("Bind", Status(Code.SKIP), lambda fw, s, pod, snap: fw.run_bind(s, pod, "n0000")),
], ids=["prefilter-error", "prefilter-unschedulable", "prescore-error", "reserve-raises", "bind-skip"])
def test_a_failed_run_is_observed_with_its_code(point, answer, run) -> None:
    fw, prof, _ = scripted_framework(**{point: answer})
    snap, (pod,) = cluster(2)
    code = "Error" if isinstance(answer, Exception) else str(answer.code)
    before = point_count(point, code, prof)
    try:
        run(fw, CycleState(record_plugin_metrics=False), pod, snap)
    except (PluginError, RuntimeError):
        pass
    assert point_count(point, code, prof) == before + 1


def test_one_search_is_one_filter_observation_however_many_chunks_it_takes() -> None:
    """1,000 nodes, 900 too small: the search wants 420 feasible nodes and walks chunks of 840,
    so it calls the bulk filter twice; kube's Filter is the whole search, observed once. The
    cycle's other points are observed once each too."""
    fw = Framework(default_profile(f"metrics-{next(_profiles)}"))
    prof = fw.profile.scheduler_name
    snap, (pod,) = cluster(1000, small=900)
    calls = []
    bulk = fw.run_filter_nodes
    fw.run_filter_nodes = lambda *a: calls.append(1) or bulk(*a)
    before = {p: point_count(p, "Success", prof) for p in ("PreFilter", "Filter", "PreScore", "Score")}
    res = SchedulingAlgorithm(seed=1).schedule_pod(fw, CycleState(record_plugin_metrics=False), pod, snap)
    assert res.feasible_nodes == 100 and len(calls) == 2
    assert {p: point_count(p, "Success", prof) - n for p, n in before.items()} == \
        {"PreFilter": 1, "Filter": 1, "PreScore": 1, "Score": 1}
    # nothing fits: the search still succeeded (Success), the pod is unschedulable
    big, (pod2,) = cluster(5, small=5)
    before = point_count("Filter", "Success", prof)
    with pytest.raises(FitError):
        SchedulingAlgorithm().schedule_pod(fw, CycleState(), pod2, big)
    assert point_count("Filter", "Success", prof) == before + 1


def test_a_filter_plugin_error_is_the_searchs_error() -> None:
    fw, prof, _ = scripted_framework(Filter=Status.as_error("broken"))
    snap, (pod,) = cluster(3)
    before = point_count("Filter", "Error", prof)
    with pytest.raises(PluginError):
        SchedulingAlgorithm().schedule_pod(fw, CycleState(), pod, snap)
    assert point_count("Filter", "Error", prof) == before + 1


# ------------------------------------------------------------------ plugins, sampled
def test_plugins_are_timed_only_in_the_cycles_drawn_for_it() -> None:
    fw, prof, name = scripted_framework(Filter=Status.unschedulable("no"))
    snap, (pod,) = cluster(4)
    rows = snap.all_indices()
    points = [("PreFilter", "Success"), ("Filter", "Unschedulable"), ("PreScore", "Success"), ("Score", "Success"),
              ("Reserve", "Success"), ("Unreserve", "Success"), ("Permit", "Success"), ("PreBind", "Success"),
              ("Bind", "Success"), ("PostBind", "Success")]

    def cycle(state: CycleState) -> None:
        fw.run_pre_filter(state, pod, snap)
        fw.run_filter_nodes(state, pod, snap, rows)  # one observation for the batch
        fw.run_pre_score(state, pod, snap, rows)
        fw.run_raw_score(state, pod, snap, rows)
        for run in (fw.run_reserve, fw.run_unreserve, fw.run_permit, fw.run_pre_bind, fw.run_bind, fw.run_post_bind):
            run(state, pod, "n0000")

    before = {p: plugin_count(name, *p) for p in points}
    cycle(CycleState(record_plugin_metrics=False))
    assert {p: plugin_count(name, *p) for p in points} == before
    cycle(CycleState(record_plugin_metrics=True))
    assert {p: plugin_count(name, *p) - before[p] for p in points} == {p: 1 for p in points}
    # the per-node filter in a sampled cycle: one observation per node, as kube's
    state = CycleState(record_plugin_metrics=True)
    before = plugin_count(name, "Filter", "Unschedulable")
    for ni in snap.node_info_list:
        fw.run_filter(state, pod, ni)
    assert plugin_count(name, "Filter", "Unschedulable") == before + 4


def test_cycle_state_draws_pluginMetricsSamplePercent_of_cycles_and_clones_keep_it(monkeypatch) -> None:
    from schedmesh.framework import interface
    assert PLUGIN_METRICS_SAMPLE_PERCENT == 10  # kube's pluginMetricsSamplePercent
    monkeypatch.setattr(interface, "plugin_metrics_sample_percent", interface._sample_percent(None))
    drawn = sum(CycleState().record_plugin_metrics for _ in range(20000)) / 20000
    assert 0.08 < drawn < 0.12, drawn
    for flag in (True, False):
        s = CycleState(record_plugin_metrics=flag)
        assert s.clone().record_plugin_metrics is flag


def test_a_framework_that_does_not_schedule_records_nothing() -> None:
    """The binder's admission check runs PreFilter and Filter: not a scheduler's extension points,
    so kept out of the scheduler_* metrics (kube's dashboards sum them by extension point)."""
    from schedmesh.mesh.binder import BindLedger
    from schedmesh.mesh.cluster_cache import ClusterCache

    ledger = BindLedger(ClusterCache())
    snap, (pod,) = cluster(2)
    prof = ledger.framework.profile.scheduler_name
    state = CycleState(record_plugin_metrics=True)
    before = point_count("PreFilter", "Success", prof), plugin_count("NodeResourcesFit", "Filter", "Success")
    ledger.framework.run_pre_filter(state, pod, snap)
    ledger.framework.run_filter(state, pod, snap.node_info_list[0])
    assert (point_count("PreFilter", "Success", prof), plugin_count("NodeResourcesFit", "Filter", "Success")) == before
    assert REGISTRY.get_sample_value(POINT, {"extension_point": "PreFilter", "status": "Success",
                                             "profile": prof}) is None


@pytest.mark.parametrize("value, percent", [(None, 10), ("", 10), ("100", 100), ("0", 0), ("2.5", 2.5),
                                            ("250", 100), ("-1", 0), ("lots", 10), ("nan", 10)])
def test_the_sample_percent_may_be_overridden_from_the_environment(monkeypatch, value, percent) -> None:
    from schedmesh.framework import interface
    assert interface._sample_percent(value) == percent
    monkeypatch.setattr(interface, "plugin_metrics_sample_percent", interface._sample_percent(value))
    if percent in (0, 100):
        assert {CycleState().record_plugin_metrics for _ in range(200)} == {percent == 100}
