"""The one contract between the scheduler and its plugins (kube-scheduler's framework/interface.go).

Every extension point is a base class with the method a plugin overrides. Filter and Score
have two forms:

* the per-node form (`filter(state, pod, node_info)`, `score(state, pod, node_info)`), the
  same shape as kube-scheduler's, which is all an out-of-tree plugin needs to write; and
* the bulk form (`filter_nodes`, `score_nodes`) that evaluates many nodes at once over the
  snapshot's NumPy columns. Its default implementation loops over the per-node form; the
  default plugins override it with vectorised code that gives the same integers.

A status of `None` means Success, as a nil *Status does in kube-scheduler.
"""
from __future__ import annotations

import enum
import os
import random
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterable, Mapping, Optional, Sequence

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from schedmesh.api.types import Pod
    from schedmesh.cache.node_info import NodeInfo, PodInfo
    from schedmesh.cache.snapshot import Snapshot
    from schedmesh.framework.events import ClusterEventWithHint

# Scores are integers in [MIN_NODE_SCORE, MAX_NODE_SCORE] after normalisation.
MAX_NODE_SCORE = 100
MIN_NODE_SCORE = 0
MAX_TOTAL_SCORE = 2**63 - 1


class Code(enum.IntEnum):
    SUCCESS = 0
    ERROR = 1
    UNSCHEDULABLE = 2
    UNSCHEDULABLE_AND_UNRESOLVABLE = 3
    WAIT = 4
    SKIP = 5
    PENDING = 6

    def __str__(self) -> str:
        return _CODE_NAMES[self]


_CODE_NAMES = {
    Code.SUCCESS: "Success", Code.ERROR: "Error", Code.UNSCHEDULABLE: "Unschedulable",
    Code.UNSCHEDULABLE_AND_UNRESOLVABLE: "UnschedulableAndUnresolvable", Code.WAIT: "Wait",
    Code.SKIP: "Skip", Code.PENDING: "Pending",
}


@dataclass(slots=True)
class Status:
    """The result of running a plugin: a code, reasons, and the plugin that decided."""

    code: Code = Code.SUCCESS
    reasons: tuple[str, ...] = ()
    plugin: str = ""
    error: Optional[BaseException] = None

    @staticmethod
    def of(code: Code, *reasons: str) -> "Status":
        return Status(code, tuple(reasons))

    @staticmethod
    def unschedulable(*reasons: str) -> "Status":
        return Status(Code.UNSCHEDULABLE, tuple(reasons))

    @staticmethod
    def unresolvable(*reasons: str) -> "Status":
        return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, tuple(reasons))

    @staticmethod
    def as_error(err: BaseException | str) -> "Status":
        e = err if isinstance(err, BaseException) else RuntimeError(err)
        return Status(Code.ERROR, (str(e),), error=e)

    @staticmethod
    def skip() -> "Status":
        return Status(Code.SKIP)

    def message(self) -> str:
        return ", ".join(self.reasons)

    def is_success(self) -> bool:
        return self.code == Code.SUCCESS

    def is_skip(self) -> bool:
        return self.code == Code.SKIP

    def is_wait(self) -> bool:
        return self.code == Code.WAIT

    def is_rejected(self) -> bool:
        return self.code in (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE, Code.PENDING)

    def with_plugin(self, plugin: str) -> "Status":
        return Status(self.code, self.reasons, plugin, self.error)

    def __str__(self) -> str:
        return f"{self.code}: {self.message()}" + (f" ({self.plugin})" if self.plugin else "")


def is_success(status: Optional[Status]) -> bool:
    return status is None or status.code == Code.SUCCESS


def code_of(status: Optional[Status]) -> Code:
    return Code.SUCCESS if status is None else status.code


# kube-scheduler's pluginMetricsSamplePercent: the share of cycles whose plugins are timed one by
# one (scheduler_plugin_execution_duration_seconds); every extension point is timed every time.
PLUGIN_METRICS_SAMPLE_PERCENT = 10
# kube's is a constant; SCHEDMESH_PLUGIN_METRICS_SAMPLE_PERCENT (0-100) overrides it for a
# process, e.g. 100 to time every cycle's plugins while investigating one, or in a test.
ENV_PLUGIN_METRICS_SAMPLE_PERCENT = "SCHEDMESH_PLUGIN_METRICS_SAMPLE_PERCENT"


def _sample_percent(value: Optional[str]) -> float:
    """The variable's value clamped to 0-100; kube's 10 when unset or not a number."""
    try:
        percent = float(value) if value else float(PLUGIN_METRICS_SAMPLE_PERCENT)
    except ValueError:
        return float(PLUGIN_METRICS_SAMPLE_PERCENT)
    return min(max(percent, 0.0), 100.0) if percent == percent else float(PLUGIN_METRICS_SAMPLE_PERCENT)  # NaN


plugin_metrics_sample_percent = _sample_percent(os.environ.get(ENV_PLUGIN_METRICS_SAMPLE_PERCENT))


def sample_plugin_metrics() -> bool:
    """True for plugin_metrics_sample_percent % of calls, at random (kube: rand.Intn(100) < 10)."""
    return random.random() * 100 < plugin_metrics_sample_percent


class CycleState:
    """Per-cycle scratch space shared by the plugins, cloned for preemption's what-if runs.

    `record_plugin_metrics` is kube's ShouldRecordPluginMetrics: whether the framework times
    each plugin of this cycle. kube's scheduleOne draws it for every cycle it starts; here every
    new CycleState draws it (each cycle a process starts: the queue-manager's attempt, a shard's
    request, the preemption service's), unless the caller says; a clone keeps it, as kube's
    Clone does."""

    __slots__ = ("_data", "skip_filter_plugins", "skip_score_plugins", "record_plugin_metrics")

    def __init__(self, record_plugin_metrics: Optional[bool] = None) -> None:
        self._data: dict[str, Any] = {}
        self.skip_filter_plugins: set[str] = set()
        self.skip_score_plugins: set[str] = set()
        self.record_plugin_metrics: bool = (sample_plugin_metrics() if record_plugin_metrics is None
                                            else record_plugin_metrics)

    def read(self, key: str) -> Any:
        try:
            return self._data[key]
        except KeyError:
            raise KeyError(f"{key!r} not found in cycle state") from None

    def get(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)

    def write(self, key: str, value: Any) -> None:
        self._data[key] = value

    def delete(self, key: str) -> None:
        self._data.pop(key, None)

    def clone(self) -> "CycleState":
        c = CycleState(self.record_plugin_metrics)
        for k, v in self._data.items():
            c._data[k] = v.clone() if hasattr(v, "clone") else v
        c.skip_filter_plugins = set(self.skip_filter_plugins)
        c.skip_score_plugins = set(self.skip_score_plugins)
        return c


@dataclass(slots=True)
class PreFilterResult:
    """PreFilter may narrow the nodes to evaluate; None node_names means all nodes."""

    node_names: Optional[frozenset[str]] = None

    def all_nodes(self) -> bool:
        return self.node_names is None

    def merge(self, other: Optional["PreFilterResult"]) -> "PreFilterResult":
        if other is None or other.all_nodes():
            return self
        if self.all_nodes():
            return other
        return PreFilterResult(self.node_names & other.node_names)


@dataclass(slots=True)
class PostFilterResult:
    nominated_node_name: str = ""
    # Set by preemption: the pods it would evict, most important first (namespace/name).
    victims: list[str] = field(default_factory=list)


@dataclass(slots=True)
class FilterVerdicts:
    """Bulk Filter result over `candidates` (indices into the snapshot's node table).

    `failed[i]` is -1 where candidate i passed, otherwise an index into `statuses`.
    """

    failed: np.ndarray
    statuses: list[Status]

    @staticmethod
    def all_pass(n: int) -> "FilterVerdicts":
        return FilterVerdicts(np.full(n, -1, dtype=np.int32), [])

    @staticmethod
    def from_mask(passed: np.ndarray, status: Status) -> "FilterVerdicts":
        failed = np.where(passed, -1, 0).astype(np.int32)
        return FilterVerdicts(failed, [status])


class Handle:
    """What plugins may ask of the framework (kube's framework.Handle), kept small."""

    #: What the process a plugin runs in provides, by name: "binder" (a callable
    #: binder(pod, node_name)), "pdbs", "nominator", "extenders", "preemption_executor",
    #: "spread_selector_sources", "preemption_all_candidates", "waiting_pods" (the pods Permit
    #: holds: schedmesh.framework.waiting_pods.WaitingPodsMap). The runtime sets its own dict.
    services: Mapping[str, Any] = MappingProxyType({})

    def snapshot(self) -> "Snapshot":  # pragma: no cover - implemented by the runtime
        raise NotImplementedError

    # kube's Handle.GetWaitingPod / IterateOverWaitingPods / RejectWaitingPod, for Permit plugins
    # that allow or reject the pods they hold (a WaitingPod has allow(plugin), reject(plugin, msg)).
    def get_waiting_pod(self, uid: str) -> Any:
        waiting = self.services.get("waiting_pods")
        return waiting.get(uid) if waiting is not None else None

    def iterate_over_waiting_pods(self, callback: Callable[[Any], None]) -> None:
        waiting = self.services.get("waiting_pods")
        if waiting is not None:
            waiting.iterate(callback)

    def reject_waiting_pod(self, uid: str) -> bool:
        """Rejects the pod if it waits in Permit; returns whether it did."""
        waiting = self.services.get("waiting_pods")
        return waiting is not None and waiting.reject_waiting_pod(uid)


class Plugin:
    """Base of every plugin. `name` is the name used in KubeSchedulerConfiguration."""

    name: ClassVar[str] = ""

    def __init__(self, args: Optional[dict] = None, handle: Optional[Handle] = None) -> None:
        self.args = args or {}
        self.handle = handle

    def node_local(self, pod: "Pod") -> bool:
        """True when, for `pod`, this plugin's verdicts and scores on a node depend on the other
        pods of that node only, and `pod` itself changes no verdict or score elsewhere: then
        assuming such pods changes nothing but the nodes they are assumed on. The mesh evaluates
        a run of such pods on its shards in one request against one cluster state and
        re-evaluates itself only the nodes changed since (schedmesh.mesh.batch). False unless a
        plugin says so, so a plugin that does not know is evaluated pod by pod."""
        return False

    def warm(self, snapshot: "Snapshot") -> None:
        """Build now what this plugin keeps beside `snapshot` and would otherwise build in the
        first cycle that needs it. The queue-manager calls it while its queue is idle, under
        the lock the snapshot's writers take. Decisions never depend on it. Nothing by default."""


class QueueSortPlugin(Plugin):
    # Optional: a function of a queued pod info whose keys compare as `less` does (less(a, b)
    # exactly when sort_key(a) < sort_key(b)); the activeQ then compares keys (queue/heap.py).
    sort_key: Optional[Callable[[Any], Any]] = None

    def less(self, a: Any, b: Any) -> bool:
        """a and b are queued pod infos (with .pod and .timestamp)."""
        raise NotImplementedError


class PreEnqueuePlugin(Plugin):
    def pre_enqueue(self, pod: "Pod") -> Optional[Status]:
        raise NotImplementedError


class EnqueueExtensions:
    """Plugins that can fail a pod declare which cluster events may make it schedulable."""

    def events_to_register(self) -> list["ClusterEventWithHint"]:
        return []


class PreFilterExtensions:
    """Incremental updates of PreFilter state when preemption or nominated pods add/remove a pod."""

    def add_pod(self, state: CycleState, pod_to_schedule: "Pod", pod_info_to_add: "PodInfo",
                node_info: "NodeInfo") -> Optional[Status]:
        return None

    def remove_pod(self, state: CycleState, pod_to_schedule: "Pod", pod_info_to_remove: "PodInfo",
                   node_info: "NodeInfo") -> Optional[Status]:
        return None


class PreFilterPlugin(Plugin):
    def pre_filter(self, state: CycleState, pod: "Pod", snapshot: "Snapshot"
                   ) -> tuple[Optional[PreFilterResult], Optional[Status]]:
        raise NotImplementedError

    def pre_filter_extensions(self) -> Optional[PreFilterExtensions]:
        return None


class FilterPlugin(Plugin):
    def filter(self, state: CycleState, pod: "Pod", node_info: "NodeInfo") -> Optional[Status]:
        raise NotImplementedError

    def filter_nodes(self, state: CycleState, pod: "Pod", snapshot: "Snapshot",
                     candidates: np.ndarray) -> FilterVerdicts:
        """Bulk Filter over snapshot node indices; the default loops over `filter`."""
        failed = np.full(len(candidates), -1, dtype=np.int32)
        statuses: list[Status] = []
        infos = snapshot.node_info_list
        for i, idx in enumerate(candidates):
            st = self.filter(state, pod, infos[idx])
            if st is not None and st.code != Code.SUCCESS:
                failed[i] = len(statuses)
                statuses.append(st)
        return FilterVerdicts(failed, statuses)


class PostFilterPlugin(Plugin):
    def post_filter(self, state: CycleState, pod: "Pod", node_to_status: "NodeToStatus"
                    ) -> tuple[Optional[PostFilterResult], Optional[Status]]:
        raise NotImplementedError


class PreScorePlugin(Plugin):
    def pre_score(self, state: CycleState, pod: "Pod", snapshot: "Snapshot",
                  nodes: np.ndarray) -> Optional[Status]:
        """`nodes` are the feasible node indices; return Skip when Score has nothing to do."""
        raise NotImplementedError


class ScorePlugin(Plugin):
    def score(self, state: CycleState, pod: "Pod", node_info: "NodeInfo") -> tuple[int, Optional[Status]]:
        raise NotImplementedError

    def score_nodes(self, state: CycleState, pod: "Pod", snapshot: "Snapshot",
                    nodes: np.ndarray) -> np.ndarray:
        """Bulk Score: int64 raw scores aligned with `nodes`; the default loops over `score`."""
        out = np.zeros(len(nodes), dtype=np.int64)
        infos = snapshot.node_info_list
        for i, idx in enumerate(nodes):
            s, st = self.score(state, pod, infos[idx])
            if st is not None and st.code != Code.SUCCESS:
                raise PluginError(st.with_plugin(self.name))
            out[i] = s
        return out

    def normalize_score(self, state: CycleState, pod: "Pod", scores: np.ndarray) -> Optional[Status]:
        """ScoreExtensions.NormalizeScore, in place on an int64 array. Plugins without one keep this."""
        return None

    has_normalize: ClassVar[bool] = False


class ReservePlugin(Plugin):
    def reserve(self, state: CycleState, pod: "Pod", node_name: str) -> Optional[Status]:
        return None

    def unreserve(self, state: CycleState, pod: "Pod", node_name: str) -> None:
        return None


class PermitPlugin(Plugin):
    def permit(self, state: CycleState, pod: "Pod", node_name: str) -> tuple[Optional[Status], float]:
        """Returns a status (Wait to hold the pod) and the wait timeout in seconds."""
        return None, 0.0


class PreBindPlugin(Plugin):
    def pre_bind(self, state: CycleState, pod: "Pod", node_name: str) -> Optional[Status]:
        return None


class BindPlugin(Plugin):
    def bind(self, state: CycleState, pod: "Pod", node_name: str) -> Optional[Status]:
        """Return Skip to let the next bind plugin bind."""
        raise NotImplementedError


class PostBindPlugin(Plugin):
    def post_bind(self, state: CycleState, pod: "Pod", node_name: str) -> None:
        return None


class PluginError(Exception):
    """A plugin returned an Error status; the scheduling attempt fails with it."""

    def __init__(self, status: Status) -> None:
        super().__init__(f"{status.plugin}: {status.message()}" if status.plugin else status.message())
        self.status = status


class NodeToStatus:
    """Per-node failure statuses, plus one status for nodes absent from the map (kube's NodeToStatus).

    A search's rejected nodes come in chunks of rows (`add_rows`) and are named and put in the
    map only when it is first read: a pod that finds its nodes never reads them, and naming
    every rejected node was a sixth of SchedulingPodAntiAffinity's cycle."""

    __slots__ = ("_map", "absent", "_pending", "_pending_count")

    def __init__(self) -> None:
        self._map: dict[str, Status] = {}
        # Nodes not in the map were not evaluated; by default they are unresolvable so
        # preemption will not try them.
        self.absent: Status = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE)
        self._pending: list[tuple[Sequence[str], np.ndarray, np.ndarray, Sequence[Status]]] = []
        self._pending_count = 0

    def add_rows(self, names: Sequence[str], rows: np.ndarray, status_index: np.ndarray,
                 statuses: Sequence[Status]) -> None:
        """Node names[r] of each of `rows` failed with statuses[status_index[i]]. The rows are
        nodes not in the map yet nor in an earlier add_rows (a search's disjoint chunks), and
        `names` a list never changed (a snapshot's columns make a new one when nodes change)."""
        if len(rows):
            self._pending.append((names, rows, status_index, statuses))
            self._pending_count += len(rows)

    def _named(self) -> dict[str, Status]:
        if self._pending:
            for names, rows, index, statuses in self._pending:
                self._map.update(zip([names[r] for r in rows.tolist()], [statuses[i] for i in index.tolist()]))
            self._pending, self._pending_count = [], 0
        return self._map

    def set(self, node: str, status: Status) -> None:
        self._named()[node] = status

    def update(self, pairs) -> None:
        """Set many (node, status) pairs at once."""
        self._named().update(pairs)

    def get(self, node: str) -> Status:
        return self._named().get(node, self.absent)

    def items(self) -> Iterable[tuple[str, Status]]:
        return self._named().items()

    def __len__(self) -> int:
        return len(self._map) + self._pending_count

    def __contains__(self, node: str) -> bool:
        return node in self._named()

    def nodes_for_status_code(self, all_nodes: Sequence[str], code: Code) -> list[str]:
        """Names of the nodes (explicit or absent) whose status has this code."""
        if self.absent.code == code:
            return [n for n in all_nodes if self.get(n).code == code]
        return [n for n, s in self._named().items() if s.code == code]
