"""The framework runtime: builds a profile's plugins and runs them at each extension point
(kube-scheduler's framework/runtime/framework.go), over many nodes at once.

Metrics, as kube's frameworkImpl records them: every run of an extension point observes
scheduler_framework_extension_point_duration_seconds{extension_point, status, profile} once
(one perf_counter pair, one histogram observation); the plugins themselves are timed one by one
(scheduler_plugin_execution_duration_seconds{plugin, extension_point, status}) only in the
cycles whose CycleState says so (`record_plugin_metrics`, drawn for 10 % of them). Filter is
kube's exception: RunFilterPlugins is per node, so kube times the whole search for feasible nodes
instead (findNodesThatPassFilters); here that is SchedulingAlgorithm.filter_in_order, which calls
`observe_extension_point("Filter", ...)`. Score is timed around the raw scoring
(run_raw_score: what a score shard computes); normalisation and weights, a few vector operations
after it, are timed per plugin (ScoreExtensionNormalize) in sampled cycles only. In the bulk
paths one plugin observation covers the plugin's call over the whole batch of nodes.
"""
from __future__ import annotations

from dataclasses import dataclass
from time import perf_counter
from typing import TYPE_CHECKING, Callable, Collection, Iterable, Optional

import numpy as np

from schedmesh.framework.interface import (MAX_NODE_SCORE, MAX_TOTAL_SCORE, MIN_NODE_SCORE, BindPlugin, Code,
                                           CycleState, EnqueueExtensions, FilterPlugin, Handle, NodeToStatus,
                                           PermitPlugin, Plugin, PluginError, PostBindPlugin, PostFilterPlugin,
                                           PostFilterResult, PreBindPlugin, PreEnqueuePlugin, PreFilterPlugin,
                                           PreFilterResult, PreScorePlugin, QueueSortPlugin, ReservePlugin,
                                           ScorePlugin, Status, sample_plugin_metrics)
from schedmesh.framework.profile import EXTENSION_POINTS, MULTI_POINT, Profile
from schedmesh.framework.registry import Registry, default_registry
from schedmesh.framework.waiting_pods import MAX_PERMIT_TIMEOUT_SECONDS, WaitingPod, WaitingPodsMap
from schedmesh.telemetry.metrics import FRAMEWORK_EXTENSION_POINT_DURATION, PLUGIN_EXECUTION_DURATION

if TYPE_CHECKING:  # pragma: no cover
    from schedmesh.api.types import Pod
    from schedmesh.cache.node_info import NodeInfo, PodInfo
    from schedmesh.cache.snapshot import Snapshot

_POINT_TYPES: dict[str, type] = {
    "preEnqueue": PreEnqueuePlugin, "queueSort": QueueSortPlugin, "preFilter": PreFilterPlugin,
    "filter": FilterPlugin, "postFilter": PostFilterPlugin, "preScore": PreScorePlugin, "score": ScorePlugin,
    "reserve": ReservePlugin, "permit": PermitPlugin, "preBind": PreBindPlugin, "bind": BindPlugin,
    "postBind": PostBindPlugin,
}


class ProfileError(ValueError):
    """The profile cannot be built (unknown plugin, double registration, bad args...)."""


class Nominator:
    """Pods nominated to nodes by preemption (the queue's nominator implements this)."""

    def nominated_pods_for_node(self, node_name: str) -> list["PodInfo"]:
        return []


@dataclass(slots=True)
class FilterOutcome:
    """Bulk Filter over candidate rows: the feasible rows and each rejected row's status.

    Statuses are shared by the nodes that failed the same way: `rejected_status_index[i]` is
    the index in `statuses` of row `rejected_rows[i]`'s status (with its plugin set).
    """

    feasible: np.ndarray  # int64 rows that passed every filter, in candidate order
    rejected_rows: np.ndarray  # int64 rows that failed
    rejected_status_index: np.ndarray  # int32, aligned with rejected_rows
    statuses: list[Status]

    @property
    def rejected_status(self) -> list[Status]:
        return [self.statuses[i] for i in self.rejected_status_index.tolist()]


def _ignore(*_args) -> None:
    pass


def _out_of_range(scores: np.ndarray) -> Optional[int]:
    """A score outside [MIN_NODE_SCORE, MAX_NODE_SCORE] (the largest if one is too large), or None."""
    if not len(scores):
        return None
    hi = scores.max()
    if hi > MAX_NODE_SCORE:
        return int(hi)
    lo = scores.min()
    return int(lo) if lo < MIN_NODE_SCORE else None


class Framework(Handle):
    """One profile's plugins, instantiated, per extension point, in order."""

    def __init__(self, profile: Profile, registry: Optional[Registry] = None,
                 snapshot_fn: Optional[Callable[[], "Snapshot"]] = None, services: Optional[dict] = None,
                 record_metrics: bool = True) -> None:
        """`record_metrics=False`: no scheduler_* observations (a framework that does not
        schedule, e.g. the binder's admission check, stays out of kube's metrics)."""
        self.profile = profile
        self.registry = registry or default_registry()
        self._snapshot_fn = snapshot_fn
        # Things plugins may need from the process they run in (binder client, extenders, ...).
        self.services: dict = dict(services or {})
        # Pods held by Permit; build_frameworks gives a scheduler's profiles one map, as kube.
        self.services.setdefault("waiting_pods", WaitingPodsMap())
        self.plugins: dict[str, Plugin] = {}
        self.points: dict[str, list[Plugin]] = {p: [] for p in EXTENSION_POINTS}
        self.score_weights: dict[str, int] = {}
        # The histograms' children by (extension point[, plugin], code): a labels() lookup costs
        # a lock and a tuple of strings; these dicts make an observation a dict hit and observe().
        self._point_metrics: dict[tuple[str, Code], object] = {}
        self._plugin_metrics: dict[tuple[str, str, Code], object] = {}
        if not record_metrics:
            self.observe_extension_point = self.observe_plugin = _ignore  # type: ignore[method-assign]
        self._build()

    # ---- construction (kube's NewFramework) -----------------------------------------------
    def _build(self) -> None:
        prof = self.profile
        needed: list[str] = []
        for point in (MULTI_POINT, *EXTENSION_POINTS):
            for ref in prof.plugin_set(point).enabled:
                if ref.name not in needed:
                    needed.append(ref.name)
        for name in needed:
            try:
                cls = self.registry.get(name)
            except (KeyError, ImportError) as e:
                raise ProfileError(f"profile {prof.scheduler_name!r}: {e}") from None
            try:
                self.plugins[name] = cls(prof.plugin_config.get(name), self)
            except (ValueError, TypeError) as e:
                raise ProfileError(f"profile {prof.scheduler_name!r}: initializing plugin {name!r}: {e}") from None
        for point in EXTENSION_POINTS:
            pset = prof.plugin_set(point)
            lst: list[Plugin] = []
            for ref in pset.enabled:
                p = self.plugins[ref.name]
                if not isinstance(p, _POINT_TYPES[point]):
                    raise ProfileError(f"plugin {ref.name!r} does not extend {point} plugin")
                if p in lst:
                    raise ProfileError(f"plugin {ref.name!r} already registered as {point!r}")
                lst.append(p)
            self.points[point] = lst
        if prof.plugin_set(MULTI_POINT).enabled:
            self._expand_multi_point()
        if len(self.points["queueSort"]) != 1:
            raise ProfileError(f"only one queue sort plugin required for profile with scheduler name "
                               f"{prof.scheduler_name!r}, but got {len(self.points['queueSort'])}")
        if not self.points["bind"]:
            raise ProfileError(f"at least one bind plugin is needed for profile with scheduler name {prof.scheduler_name!r}")
        total = 0
        for ref in prof.plugin_set("score").enabled + prof.plugin_set(MULTI_POINT).enabled:
            if not isinstance(self.plugins[ref.name], ScorePlugin) or ref.name in self.score_weights:
                continue
            w = ref.weight or 1
            if w * MAX_NODE_SCORE > MAX_TOTAL_SCORE - total:
                raise ProfileError("total score of Score plugins could overflow")
            total += w * MAX_NODE_SCORE
            self.score_weights[ref.name] = w

    def _expand_multi_point(self) -> None:
        prof = self.profile
        for point in EXTENSION_POINTS:
            pset = prof.plugin_set(point)
            enabled = [r.name for r in pset.enabled]
            disabled = {r.name for r in pset.disabled}
            if "*" in disabled:
                continue
            multi: list[str] = []
            overrides: list[str] = []
            for ref in prof.plugin_set(MULTI_POINT).enabled:
                p = self.plugins[ref.name]
                if not isinstance(p, _POINT_TYPES[point]) or ref.name in disabled:
                    continue
                if ref.name in enabled:
                    overrides.append(ref.name)
                    continue
                if ref.name in multi:
                    raise ProfileError(f"plugin {ref.name!r} already registered as {point!r}")
                multi.append(ref.name)
            order = ([n for n in enabled if n in overrides] + multi + [n for n in enabled if n not in overrides])
            self.points[point] = [self.plugins[n] for n in order]

    # ---- Handle ----------------------------------------------------------------------------
    def snapshot(self) -> "Snapshot":
        if self._snapshot_fn is None:
            raise RuntimeError("this framework has no snapshot source")
        return self._snapshot_fn()

    def set_snapshot_source(self, fn: Callable[[], "Snapshot"]) -> None:
        self._snapshot_fn = fn

    @property
    def name(self) -> str:
        return self.profile.scheduler_name

    def plugin_names(self, point: str) -> list[str]:
        return [p.name for p in self.points[point]]

    def warm(self, snapshot: "Snapshot") -> None:
        """Every plugin builds ahead what it keeps per snapshot (Plugin.warm)."""
        for p in self.plugins.values():
            p.warm(snapshot)

    def has_filter_plugins(self) -> bool:
        return bool(self.points["filter"])

    def has_score_plugins(self) -> bool:
        return bool(self.points["score"])

    def has_post_filter_plugins(self) -> bool:
        return bool(self.points["postFilter"])

    def queue_sort_less(self) -> Callable:
        return self.points["queueSort"][0].less

    def queue_sort_key(self) -> Optional[Callable]:
        """The QueueSort plugin's sort_key, when it has one (see QueueSortPlugin) and the class
        that defines its less defines it too (a subclass that changes less alone keeps less)."""
        plugin = self.points["queueSort"][0]
        key = getattr(plugin, "sort_key", None)
        if key is None:
            return None
        mro = type(plugin).__mro__
        owner = {name: next((c for c in mro if name in c.__dict__), None) for name in ("less", "sort_key")}
        return key if owner["less"] is owner["sort_key"] else None

    def enqueue_extensions(self) -> list[tuple[str, EnqueueExtensions]]:
        return [(n, p) for n, p in self.plugins.items() if isinstance(p, EnqueueExtensions)]

    # ---- metrics ---------------------------------------------------------------------------
    def observe_extension_point(self, point: str, code: Code, seconds: float) -> None:
        """scheduler_framework_extension_point_duration_seconds{point, code's name, this profile}."""
        child = self._point_metrics.get((point, code))
        if child is None:
            child = self._point_metrics[(point, code)] = FRAMEWORK_EXTENSION_POINT_DURATION.labels(
                point, str(Code(code)), self.profile.scheduler_name)
        child.observe(seconds)

    def observe_plugin(self, plugin: str, point: str, code: Code, seconds: float) -> None:
        """scheduler_plugin_execution_duration_seconds{plugin, point, code's name}."""
        child = self._plugin_metrics.get((plugin, point, code))
        if child is None:
            child = self._plugin_metrics[(plugin, point, code)] = PLUGIN_EXECUTION_DURATION.labels(
                plugin, point, str(Code(code)))
        child.observe(seconds)

    def time_plugin(self, point: str, p: Plugin, call: Callable, *args, status_at: Optional[int] = None):
        """`call(*args)` (plugin `p`'s method returning a Status or None, or a tuple with it at
        `status_at`), observed as `p` at `point`; for a sampled cycle's per-plugin calls (the
        bulk paths time their plugins inline)."""
        t0 = perf_counter()
        code = Code.ERROR
        try:
            out = call(*args)
            st = out if status_at is None else out[status_at]
            code = Code.SUCCESS if st is None else st.code
            return out
        finally:
            self.observe_plugin(p.name, point, code, perf_counter() - t0)

    # ---- PreEnqueue ------------------------------------------------------------------------
    def run_pre_enqueue(self, pod: "Pod") -> Optional[Status]:
        """kube's RunPreEnqueuePlugins has no extension point metric; the queue times its plugins
        for a sample of the pods (pluginMetricsSamplePercent), as kube's queue does."""
        record = sample_plugin_metrics() if self.points["preEnqueue"] else False
        for p in self.points["preEnqueue"]:
            st = self.time_plugin("PreEnqueue", p, p.pre_enqueue, pod) if record else p.pre_enqueue(pod)
            if st is not None and not st.is_success():
                return st.with_plugin(p.name)
        return None

    # ---- PreFilter -------------------------------------------------------------------------
    def run_pre_filter(self, state: CycleState, pod: "Pod", snapshot: "Snapshot"
                       ) -> tuple[Optional[PreFilterResult], Optional[Status], set[str]]:
        """Returns (result, status, plugins that narrowed the node set)."""
        t0 = perf_counter()
        code = Code.ERROR
        try:
            out = self._run_pre_filter(state, pod, snapshot)
            code = Code.SUCCESS if out[1] is None else out[1].code
            return out
        finally:
            self.observe_extension_point("PreFilter", code, perf_counter() - t0)

    def _run_pre_filter(self, state: CycleState, pod: "Pod", snapshot: "Snapshot"
                        ) -> tuple[Optional[PreFilterResult], Optional[Status], set[str]]:
        skip: set[str] = set()
        result: Optional[PreFilterResult] = None
        with_nodes: set[str] = set()
        returned: Optional[Status] = None
        record = state.record_plugin_metrics
        try:
            for p in self.points["preFilter"]:
                r, st = (self.time_plugin("PreFilter", p, p.pre_filter, state, pod, snapshot, status_at=1)
                         if record else p.pre_filter(state, pod, snapshot))
                if st is not None and st.code == Code.SKIP:
                    skip.add(p.name)
                    continue
                if st is not None and st.code != Code.SUCCESS:
                    st = st.with_plugin(p.name)
                    if st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                        return None, st, set()
                    if st.code == Code.UNSCHEDULABLE:
                        returned = st
                        continue
                    return None, Status(Code.ERROR, (f'running PreFilter plugin "{p.name}": {st.message()}',),
                                        p.name, st.error), set()
                if r is not None and not r.all_nodes():
                    with_nodes.add(p.name)
                result = r if result is None else result.merge(r)
                if result is not None and not result.all_nodes() and not result.node_names:
                    names = sorted(with_nodes)
                    msg = (f"node(s) didn't satisfy plugin {names[0]}" if len(names) == 1
                           else f"node(s) didn't satisfy plugin(s) [{' '.join(names)}] simultaneously")
                    return result, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (msg,)), with_nodes
            return result, returned, with_nodes
        finally:
            state.skip_filter_plugins = skip

    def run_pre_filter_extension_add_pod(self, state: CycleState, pod: "Pod", pod_info_to_add: "PodInfo",
                                         node_info: "NodeInfo") -> Optional[Status]:
        for p in self.points["preFilter"]:
            ext = p.pre_filter_extensions()
            if ext is None or p.name in state.skip_filter_plugins:
                continue
            st = (self.time_plugin("PreFilterExtensionAddPod", p, ext.add_pod, state, pod, pod_info_to_add,
                                     node_info) if state.record_plugin_metrics
                  else ext.add_pod(state, pod, pod_info_to_add, node_info))
            if st is not None and not st.is_success():
                return Status(Code.ERROR, (f'running AddPod on PreFilter plugin "{p.name}": {st.message()}',), p.name)
        return None

    def run_pre_filter_extension_remove_pod(self, state: CycleState, pod: "Pod", pod_info_to_remove: "PodInfo",
                                            node_info: "NodeInfo") -> Optional[Status]:
        for p in self.points["preFilter"]:
            ext = p.pre_filter_extensions()
            if ext is None or p.name in state.skip_filter_plugins:
                continue
            st = (self.time_plugin("PreFilterExtensionRemovePod", p, ext.remove_pod, state, pod,
                                     pod_info_to_remove, node_info) if state.record_plugin_metrics
                  else ext.remove_pod(state, pod, pod_info_to_remove, node_info))
            if st is not None and not st.is_success():
                return Status(Code.ERROR, (f'running RemovePod on PreFilter plugin "{p.name}": {st.message()}',), p.name)
        return None

    # ---- Filter ----------------------------------------------------------------------------
    def run_filter(self, state: CycleState, pod: "Pod", node_info: "NodeInfo") -> Optional[Status]:
        """All filters on one node, stopping at the first rejection (kube's RunFilterPlugins: no
        extension point metric of its own, see the module's docstring)."""
        record = state.record_plugin_metrics
        for p in self.points["filter"]:
            if p.name in state.skip_filter_plugins:
                continue
            st = self.time_plugin("Filter", p, p.filter, state, pod, node_info) if record else \
                p.filter(state, pod, node_info)
            if st is not None and st.code != Code.SUCCESS:
                if not st.is_rejected():
                    st = Status(Code.ERROR, (f'running "{p.name}" filter plugin: {st.message()}',), p.name, st.error)
                return st.with_plugin(p.name)
        return None

    def run_filter_nodes(self, state: CycleState, pod: "Pod", snapshot: "Snapshot",
                         candidates: np.ndarray) -> FilterOutcome:
        """All filters over many nodes: each plugin sees only the nodes every earlier one passed."""
        alive = np.asarray(candidates, dtype=np.int64)
        rej_rows: list[np.ndarray] = []
        rej_idx: list[np.ndarray] = []
        statuses: list[Status] = []
        record = state.record_plugin_metrics
        for p in self.points["filter"]:
            if p.name in state.skip_filter_plugins or len(alive) == 0:
                continue
            if record:
                t = perf_counter()
                try:
                    v = p.filter_nodes(state, pod, snapshot, alive)
                except BaseException:
                    self.observe_plugin(p.name, "Filter", Code.ERROR, perf_counter() - t)
                    raise
                seconds = perf_counter() - t
                # one observation for the batch: Success when every node passed, else the
                # first rejection's code
                self.observe_plugin(p.name, "Filter", v.statuses[0].code if v.statuses and (v.failed >= 0).any()
                                    else Code.SUCCESS, seconds)
            else:
                v = p.filter_nodes(state, pod, snapshot, alive)
            failed = v.failed
            bad = failed >= 0
            if not bad.any():
                continue
            for st in v.statuses:
                if not st.is_rejected():
                    raise PluginError(Status(Code.ERROR, (f'running "{p.name}" filter plugin: {st.message()}',),
                                             p.name, st.error))
            rej_rows.append(alive[bad])
            rej_idx.append(failed[bad].astype(np.int32) + len(statuses))
            statuses.extend(st.with_plugin(p.name) for st in v.statuses)
            alive = alive[~bad]
        if not rej_rows:
            return FilterOutcome(alive, np.empty(0, np.int64), np.empty(0, np.int32), statuses)
        return FilterOutcome(alive, np.concatenate(rej_rows), np.concatenate(rej_idx), statuses)

    def run_filter_with_nominated_pods(self, state: CycleState, pod: "Pod", node_info: "NodeInfo",
                                       nominator: Optional[Nominator]) -> Optional[Status]:
        """Filters with equal-or-higher priority pods nominated to the node counted as if running
        there (the first pass); a second pass without them when any were added."""
        pods_added = False
        state_to_use, info_to_use = state, node_info
        if nominator is not None:
            nominated = [pi for pi in nominator.nominated_pods_for_node(node_info.name)
                         if pi.pod.priority >= pod.priority and pi.pod.meta.uid != pod.meta.uid]
            if nominated:
                state_to_use, info_to_use = state.clone(), node_info.clone()
                for pi in nominated:
                    info_to_use.add_pod_info(pi)
                    st = self.run_pre_filter_extension_add_pod(state_to_use, pod, pi, info_to_use)
                    if st is not None:
                        return st
                pods_added = True
        st = self.run_filter(state_to_use, pod, info_to_use)
        if st is not None and not st.is_success():
            return st
        if pods_added:
            return self.run_filter(state, pod, node_info)
        return None

    # ---- PostFilter ------------------------------------------------------------------------
    def run_post_filter(self, state: CycleState, pod: "Pod", node_to_status: NodeToStatus
                        ) -> tuple[Optional[PostFilterResult], Status]:
        """Stops at the first plugin that succeeds or errors; otherwise joins the rejection messages."""
        t0 = perf_counter()
        code = Code.ERROR
        try:
            out = self._run_post_filter(state, pod, node_to_status)
            code = out[1].code
            return out
        finally:
            self.observe_extension_point("PostFilter", code, perf_counter() - t0)

    def _run_post_filter(self, state: CycleState, pod: "Pod", node_to_status: NodeToStatus
                         ) -> tuple[Optional[PostFilterResult], Status]:
        reasons: list[str] = []
        rejector = ""
        result: Optional[PostFilterResult] = None
        record = state.record_plugin_metrics
        for p in self.points["postFilter"]:
            r, st = (self.time_plugin("PostFilter", p, p.post_filter, state, pod, node_to_status, status_at=1)
                     if record else p.post_filter(state, pod, node_to_status))
            if st is None or st.is_success():
                return r, Status(Code.SUCCESS, st.reasons if st else (), p.name)
            if st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                return r, st.with_plugin(p.name)
            if not st.is_rejected():
                return None, Status(Code.ERROR, st.reasons, p.name, st.error)
            reasons.extend(st.reasons)
            if not rejector:
                rejector = p.name
            if r is not None:
                result = r
        return result, Status(Code.UNSCHEDULABLE, tuple(reasons), rejector)

    # ---- PreScore / Score ------------------------------------------------------------------
    def run_pre_score(self, state: CycleState, pod: "Pod", snapshot: "Snapshot", nodes: np.ndarray) -> None:
        t0 = perf_counter()
        code = Code.ERROR  # a PluginError
        try:
            self._run_pre_score(state, pod, snapshot, nodes)
            code = Code.SUCCESS
        finally:
            self.observe_extension_point("PreScore", code, perf_counter() - t0)

    def _run_pre_score(self, state: CycleState, pod: "Pod", snapshot: "Snapshot", nodes: np.ndarray) -> None:
        skip: set[str] = set()
        record = state.record_plugin_metrics
        for p in self.points["preScore"]:
            st = self.time_plugin("PreScore", p, p.pre_score, state, pod, snapshot, nodes) if record else \
                p.pre_score(state, pod, snapshot, nodes)
            if st is not None and st.code == Code.SKIP:
                skip.add(p.name)
            elif st is not None and st.code != Code.SUCCESS:
                state.skip_score_plugins = skip
                raise PluginError(Status(Code.ERROR, (f'running PreScore plugin "{p.name}": {st.message()}',),
                                         p.name, st.error))
        state.skip_score_plugins = skip

    def run_score(self, state: CycleState, pod: "Pod", snapshot: "Snapshot", nodes: np.ndarray
                  ) -> dict[str, np.ndarray]:
        """Normalized, weighted scores per plugin that ran: plugin name -> int64 array aligned with nodes."""
        return self.normalize_and_weigh(state, pod, self.run_raw_score(state, pod, snapshot, nodes))

    def run_raw_score(self, state: CycleState, pod: "Pod", snapshot: "Snapshot", nodes: np.ndarray,
                      only: Optional[Collection[str]] = None, observe: bool = True) -> dict[str, np.ndarray]:
        """Score without normalisation: what a score shard computes for its nodes. Timed as the
        Score extension point (see the module's docstring), unless `observe` is False (part of
        a Score the caller observes). `only`: these plugins alone (of those not skipped)."""
        t0 = perf_counter()
        code = Code.ERROR
        plugins = [p for p in self.points["score"] if p.name not in state.skip_score_plugins
                   and (only is None or p.name in only)]
        try:
            if state.record_plugin_metrics:
                out = {}
                for p in plugins:
                    t = perf_counter()
                    c = Code.ERROR
                    try:
                        out[p.name] = np.asarray(p.score_nodes(state, pod, snapshot, nodes), dtype=np.int64)
                        c = Code.SUCCESS
                    finally:
                        self.observe_plugin(p.name, "Score", c, perf_counter() - t)
            else:
                out = {p.name: np.asarray(p.score_nodes(state, pod, snapshot, nodes), dtype=np.int64)
                       for p in plugins}
            code = Code.SUCCESS
            return out
        finally:
            if observe or code != Code.SUCCESS:
                self.observe_extension_point("Score", code, perf_counter() - t0)

    def normalize_and_weigh(self, state: CycleState, pod: "Pod", raw: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """NormalizeScore over all feasible nodes, range check, then weights (kube's RunScorePlugins tail)."""
        normalized: dict[str, np.ndarray] = {}
        for p in self.points["score"]:
            if p.name not in raw:
                continue
            scores = normalized[p.name] = raw[p.name].copy()
            if p.has_normalize:
                st = (self.time_plugin("ScoreExtensionNormalize", p, p.normalize_score, state, pod, scores)
                      if state.record_plugin_metrics else p.normalize_score(state, pod, scores))
                if st is not None and not st.is_success():
                    raise PluginError(Status(Code.ERROR, (f'plugin "{p.name}" failed with: {st.message()}',), p.name))
        # kube normalizes every plugin's scores, then weighs and range-checks them: the range is
        # checked once over all of them (two reductions per plugin were a twentieth of a cycle),
        # and only a failure looks for the first plugin out of range.
        if normalized and _out_of_range(np.concatenate(list(normalized.values()))) is not None:
            for name, scores in normalized.items():
                bad = _out_of_range(scores)
                if bad is not None:
                    raise PluginError(Status(Code.ERROR, (
                        f'plugin "{name}" returns an invalid score {bad}, it should in the range of '
                        f'[{MIN_NODE_SCORE}, {MAX_NODE_SCORE}] after normalizing',), name))
        return {name: scores * self.score_weights[name] for name, scores in normalized.items()}

    # ---- Reserve / Permit / Bind -----------------------------------------------------------
    def _timed_point(self, point: str, run: Callable, state: CycleState, pod: "Pod", node_name: str, *args):
        """`run(state, pod, node_name, *args)` (returning a Status or None), observed as `point`."""
        t0 = perf_counter()
        code = Code.ERROR
        try:
            st = run(state, pod, node_name, *args)
            code = Code.SUCCESS if st is None else st.code
            return st
        finally:
            self.observe_extension_point(point, code, perf_counter() - t0)

    def _run_each(self, state: CycleState, pod: "Pod", node_name: str, point: str, method: str,
                  plugins: Iterable[Plugin]) -> Optional[Status]:
        """Each plugin's `method` in order until one does not succeed (its status, with its name)."""
        record = state.record_plugin_metrics
        for p in plugins:
            call = getattr(p, method)
            st = self.time_plugin(point, p, call, state, pod, node_name) if record else call(state, pod, node_name)
            if st is not None and not st.is_success():
                return st.with_plugin(p.name)
        return None

    def run_reserve(self, state: CycleState, pod: "Pod", node_name: str) -> Optional[Status]:
        return self._timed_point("Reserve", self._run_each, state, pod, node_name, "Reserve", "reserve",
                                 self.points["reserve"])

    def run_unreserve(self, state: CycleState, pod: "Pod", node_name: str) -> None:
        self._timed_point("Unreserve", self._run_all, state, pod, node_name, "Unreserve", "unreserve",
                          self.points["reserve"][::-1])

    def _run_all(self, state: CycleState, pod: "Pod", node_name: str, point: str, method: str,
                 plugins: Iterable[Plugin]) -> None:
        """Every plugin's `method`, whatever it returns (Unreserve, PostBind: kube's label is Success)."""
        record = state.record_plugin_metrics
        for p in plugins:
            call = getattr(p, method)
            if record:
                t = perf_counter()
                call(state, pod, node_name)
                self.observe_plugin(p.name, point, Code.SUCCESS, perf_counter() - t)
            else:
                call(state, pod, node_name)

    def run_permit(self, state: CycleState, pod: "Pod", node_name: str) -> Optional[Status]:
        """kube's RunPermitPlugins: the first rejection or error ends it; when plugins asked to
        wait (and none rejected), the pod joins the waiting pods (services["waiting_pods"]) with
        each such plugin's timeout, at most 15 minutes, and the status is Wait."""
        return self._timed_point("Permit", self._run_permit, state, pod, node_name)

    def _run_permit(self, state: CycleState, pod: "Pod", node_name: str) -> Optional[Status]:
        waits: dict[str, float] = {}
        record = state.record_plugin_metrics
        for p in self.points["permit"]:
            st, timeout = (self.time_plugin("Permit", p, p.permit, state, pod, node_name, status_at=0)
                           if record else p.permit(state, pod, node_name))
            if st is None or st.is_success():
                continue
            if st.is_rejected():
                return st.with_plugin(p.name)
            if st.is_wait():
                waits[p.name] = min(max(float(timeout), 0.0), MAX_PERMIT_TIMEOUT_SECONDS)
                continue
            return Status(Code.ERROR, (f'running Permit plugin "{p.name}": {st.message()}',), p.name, st.error)
        if not waits:
            return None
        self.waiting_pods.add(WaitingPod(pod, waits, self.waiting_pods.timers))
        return Status(Code.WAIT, (f'one or more plugins asked to wait and no plugin rejected pod "{pod.meta.name}"',))

    @property
    def waiting_pods(self) -> WaitingPodsMap:
        return self.services["waiting_pods"]

    def run_pre_bind(self, state: CycleState, pod: "Pod", node_name: str) -> Optional[Status]:
        return self._timed_point("PreBind", self._run_each, state, pod, node_name, "PreBind", "pre_bind",
                                 self.points["preBind"])

    def run_bind(self, state: CycleState, pod: "Pod", node_name: str) -> Status:
        """Each Bind plugin until one does not Skip. (The mesh's binding cycle runs the chain
        itself, up to DefaultBinder, which is the binder service, and observes Bind once the
        binder answered: schedmesh.mesh.scheduler.binding_cycle.)"""
        return self._timed_point("Bind", self._run_bind, state, pod, node_name)

    def _run_bind(self, state: CycleState, pod: "Pod", node_name: str) -> Status:
        record = state.record_plugin_metrics
        for p in self.points["bind"]:
            st = self.time_plugin("Bind", p, p.bind, state, pod, node_name) if record else \
                p.bind(state, pod, node_name)
            if st is not None and st.is_skip():
                continue
            return (st or Status()).with_plugin(p.name)
        return Status(Code.SKIP)

    def run_post_bind(self, state: CycleState, pod: "Pod", node_name: str) -> None:
        self._timed_point("PostBind", self._run_all, state, pod, node_name, "PostBind", "post_bind",
                          self.points["postBind"])


def build_frameworks(profiles: Iterable[Profile], registry: Optional[Registry] = None,
                     services: Optional[dict] = None) -> dict[str, Framework]:
    """One framework per profile, keyed by schedulerName; `services`: what every profile's
    handle offers its plugins besides the waiting pods (Handle.services)."""
    out: dict[str, Framework] = {}
    waiting = WaitingPodsMap()
    for prof in profiles:
        if prof.scheduler_name in out:
            raise ProfileError(f"duplicate profile with scheduler name {prof.scheduler_name!r}")
        out[prof.scheduler_name] = Framework(prof, registry, services={**(services or {}), "waiting_pods": waiting})
    return out
