"""A scheduling profile: which plugins run at which extension point, their weights and args.

This is the already-defaulted form of a KubeSchedulerConfiguration profile (see
`schedmesh.framework.config` for reading the file). `default_profile()` is kube-scheduler
v1.35's default profile.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

EXTENSION_POINTS = ("preEnqueue", "queueSort", "preFilter", "filter", "postFilter", "preScore", "score",
                    "reserve", "permit", "preBind", "bind", "postBind")
MULTI_POINT = "multiPoint"
DEFAULT_SCHEDULER_NAME = "default-scheduler"


@dataclass(slots=True)
class PluginRef:
    name: str
    weight: int = 0  # 0 means unset (a score plugin then weighs 1)


@dataclass(slots=True)
class PluginSet:
    enabled: list[PluginRef] = field(default_factory=list)
    disabled: list[PluginRef] = field(default_factory=list)


@dataclass(slots=True)
class Extender:
    """An HTTP scheduler extender (kube's config.Extender)."""

    url_prefix: str
    filter_verb: str = ""
    prioritize_verb: str = ""
    preempt_verb: str = ""
    bind_verb: str = ""
    weight: int = 1
    enable_https: bool = False
    http_timeout_seconds: float = 30.0
    node_cache_capable: bool = False
    managed_resources: list[str] = field(default_factory=list)
    ignorable: bool = False


@dataclass(slots=True)
class Profile:
    scheduler_name: str = DEFAULT_SCHEDULER_NAME
    plugins: dict[str, PluginSet] = field(default_factory=dict)  # extension point (or multiPoint) -> set
    plugin_config: dict[str, dict] = field(default_factory=dict)  # plugin name -> args
    percentage_of_nodes_to_score: Optional[int] = None  # None: the scheduler-wide value

    def plugin_set(self, point: str) -> PluginSet:
        return self.plugins.get(point) or PluginSet()


# kube-scheduler v1.35 getDefaultPlugins() with its default feature gates applied
# (DynamicResources sits before DefaultPreemption).
DEFAULT_MULTI_POINT: tuple[tuple[str, int], ...] = (
    ("SchedulingGates", 0),
    ("PrioritySort", 0),
    ("NodeUnschedulable", 0),
    ("NodeName", 0),
    ("TaintToleration", 3),
    ("NodeAffinity", 2),
    ("NodePorts", 0),
    ("NodeResourcesFit", 1),
    ("VolumeRestrictions", 0),
    ("NodeVolumeLimits", 0),
    ("VolumeBinding", 0),
    ("VolumeZone", 0),
    ("PodTopologySpread", 2),
    ("InterPodAffinity", 2),
    ("DynamicResources", 2),
    ("DefaultPreemption", 0),
    ("NodeResourcesBalancedAllocation", 1),
    ("ImageLocality", 1),
    ("DefaultBinder", 0),
)


def default_plugins() -> dict[str, PluginSet]:
    return {MULTI_POINT: PluginSet(enabled=[PluginRef(n, w) for n, w in DEFAULT_MULTI_POINT])}


def default_profile(scheduler_name: str = DEFAULT_SCHEDULER_NAME) -> Profile:
    return Profile(scheduler_name=scheduler_name, plugins=default_plugins())
