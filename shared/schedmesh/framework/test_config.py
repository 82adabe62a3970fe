"""KubeSchedulerConfiguration reading: decoding, kube v1.35 defaulting, validation, and the
profiles the framework builds from it.

Cases re-express kube's apis/config/v1/default_plugins_test.go (TestMergePlugins),
defaults_test.go (TestSchedulerDefaults, TestPluginArgsDefaults) and
validation/validation_test.go (TestValidateKubeSchedulerConfiguration), plus the framework's
multiPoint expansion (runtime/framework_test.go behaviour).
"""
from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any, Optional

import pytest
import yaml

from schedmesh.api.load import load_text
from schedmesh.framework.config import (API_VERSION, KIND, ConfigError, ExtenderConfig, default_scheduler_config,
                                        load_scheduler_config, merge_plugin_set, parse_duration,
                                        parse_scheduler_config)
from schedmesh.framework.interface import (BindPlugin, FilterPlugin, PermitPlugin, PostFilterPlugin,
                                           PreBindPlugin, PreEnqueuePlugin, PreFilterPlugin, PreScorePlugin,
                                           QueueSortPlugin, ReservePlugin, ScorePlugin)
from schedmesh.framework.profile import DEFAULT_MULTI_POINT, MULTI_POINT, PluginRef, PluginSet
from schedmesh.framework.registry import Registry
from schedmesh.framework.runtime import Framework

# ---------------------------------------------------------------------------------------------
# a registry of stand-ins with kube's interfaces (so these tests do not depend on plugin code)
# ---------------------------------------------------------------------------------------------

KUBE_INTERFACES: dict[str, tuple[type, ...]] = {
    "SchedulingGates": (PreEnqueuePlugin,),
    "PrioritySort": (QueueSortPlugin,),
    "NodeUnschedulable": (FilterPlugin,),
    "NodeName": (FilterPlugin,),
    "TaintToleration": (FilterPlugin, PreScorePlugin, ScorePlugin),
    "NodeAffinity": (PreFilterPlugin, FilterPlugin, PreScorePlugin, ScorePlugin),
    "NodePorts": (PreFilterPlugin, FilterPlugin),
    "NodeResourcesFit": (PreFilterPlugin, FilterPlugin, PreScorePlugin, ScorePlugin),
    "VolumeRestrictions": (PreFilterPlugin, FilterPlugin),
    "NodeVolumeLimits": (PreFilterPlugin, FilterPlugin),
    "VolumeBinding": (PreFilterPlugin, FilterPlugin, ReservePlugin, PreBindPlugin, PreScorePlugin, ScorePlugin),
    "VolumeZone": (PreFilterPlugin, FilterPlugin),
    "PodTopologySpread": (PreFilterPlugin, FilterPlugin, PreScorePlugin, ScorePlugin),
    "InterPodAffinity": (PreFilterPlugin, FilterPlugin, PreScorePlugin, ScorePlugin),
    "DynamicResources": (PreEnqueuePlugin, PreFilterPlugin, FilterPlugin, PostFilterPlugin, ScorePlugin,
                         ReservePlugin, PreBindPlugin),
    "DefaultPreemption": (PreEnqueuePlugin, PostFilterPlugin),
    "NodeResourcesBalancedAllocation": (PreScorePlugin, ScorePlugin),
    "ImageLocality": (ScorePlugin,),
    "DefaultBinder": (BindPlugin,),
    # out-of-tree style plugins used below
    "CustomSort": (QueueSortPlugin,),
    "CustomBind": (BindPlugin,),
    "CustomFilter": (FilterPlugin,),
    "CustomScore": (PreScorePlugin, ScorePlugin),
    "CustomPermit": (PermitPlugin,),
}


class _StrictArgs(FilterPlugin):
    """Rejects args as a plugin constructor does: ValueError("<field path>: <reason>")."""

    name = "StrictArgs"

    def __init__(self, args: Optional[dict] = None, handle: Any = None) -> None:
        super().__init__(args, handle)
        if (args or {}).get("level", 0) < 0:
            raise ValueError(f"level: Invalid value: {args['level']}: must be greater than or equal to 0")


def stub_registry() -> Registry:
    r = Registry()
    for name, bases in KUBE_INTERFACES.items():
        r.register(type(name, bases, {"name": name}))
    r.register(_StrictArgs)
    return r


REGISTRY = stub_registry()
DEFAULT_NAMES = [n for n, _ in DEFAULT_MULTI_POINT]


def cfg(**fields: Any) -> dict:
    return {"apiVersion": API_VERSION, "kind": KIND, **fields}


def parse(doc: dict, check: bool = True):
    return parse_scheduler_config(doc, "sched.yaml", REGISTRY, check_plugins=check)


def errors_of(doc: dict, check: bool = True) -> list[str]:
    with pytest.raises(ConfigError) as ei:
        parse(doc, check)
    assert all(line.startswith("sched.yaml: ") for line in str(ei.value).splitlines())
    return ei.value.errors


def points(doc: dict, name: Optional[str] = None) -> Framework:
    c = parse(doc)
    prof = c.profiles[0] if name is None else c.profile(name)
    return Framework(prof, REGISTRY)


# ---------------------------------------------------------------------------------------------
# mergePluginSet (default_plugins_test.go TestMergePlugins)
# ---------------------------------------------------------------------------------------------

def ps(enabled=(), disabled=()) -> PluginSet:
    return PluginSet([PluginRef(*e) if isinstance(e, tuple) else PluginRef(e) for e in enabled],
                     [PluginRef(d) for d in disabled])


MERGE_CASES = [
    ("AppendCustomPlugin", ps(["DefaultPlugin1", "DefaultPlugin2"]), ps(["CustomPlugin"]),
     ps(["DefaultPlugin1", "DefaultPlugin2", "CustomPlugin"])),
    ("InsertAfterDefaultPlugins2", ps(["DefaultPlugin1", "DefaultPlugin2"]),
     ps(["CustomPlugin", "DefaultPlugin2"], ["DefaultPlugin2"]),
     ps(["DefaultPlugin1", "CustomPlugin", "DefaultPlugin2"], ["DefaultPlugin2"])),
    ("InsertBeforeAllPlugins", ps(["DefaultPlugin1", "DefaultPlugin2"]),
     ps(["CustomPlugin", "DefaultPlugin1", "DefaultPlugin2"], ["*"]),
     ps(["CustomPlugin", "DefaultPlugin1", "DefaultPlugin2"], ["*"])),
    ("ReorderDefaultPlugins", ps(["DefaultPlugin1", "DefaultPlugin2"]),
     ps(["DefaultPlugin2", "DefaultPlugin1"], ["*"]), ps(["DefaultPlugin2", "DefaultPlugin1"], ["*"])),
    ("CustomPluginOverrideDefaultPlugin", ps(["Plugin1", "Plugin2", "Plugin3"]),
     ps([("Plugin1", 2), ("Plugin3", 3)]), ps([("Plugin1", 2), "Plugin2", ("Plugin3", 3)])),
    ("OrderPreserveAfterOverride", ps(["Plugin1", "Plugin2", "Plugin3"]),
     ps([("Plugin2", 2), ("Plugin1", 1)]), ps([("Plugin1", 1), ("Plugin2", 2), "Plugin3"])),
    ("RepeatedCustomPlugin", ps(["Plugin1", "Plugin2", "Plugin3"]),
     ps(["Plugin1", ("Plugin2", 2), "Plugin3", ("Plugin2", 4)]),
     ps(["Plugin1", ("Plugin2", 4), "Plugin3", ("Plugin2", 2)])),
    ("Append custom MultiPoint plugin", ps(["DefaultPlugin1", "DefaultPlugin2"]), ps(["CustomPlugin"]),
     ps(["DefaultPlugin1", "DefaultPlugin2", "CustomPlugin"])),
    ("Append disabled Multipoint plugins", ps(["DefaultPlugin1", "DefaultPlugin2"]),
     ps(["CustomPlugin", "CustomPlugin2"], ["DefaultPlugin2"]),
     ps(["DefaultPlugin1", "CustomPlugin", "CustomPlugin2"], ["DefaultPlugin2"])),
    ("override default MultiPoint plugins with custom value", ps(["DefaultPlugin"]), ps([("DefaultPlugin", 5)]),
     ps([("DefaultPlugin", 5)])),
    ("disabled MultiPoint plugin in default set", ps(["DefaultPlugin"], ["DefaultPlugin2"]), ps(["CustomPlugin"]),
     ps(["DefaultPlugin", "CustomPlugin"], ["DefaultPlugin2"])),
    ("multipoint with only disabled gets merged", ps(["DefaultPlugin"]), ps([], ["DefaultPlugin"]),
     ps([], ["DefaultPlugin"])),
    ("empty custom set keeps the defaults", ps(["A", ("B", 3)]), ps(), ps(["A", ("B", 3)])),
]


@pytest.mark.parametrize("default,custom,want", [c[1:] for c in MERGE_CASES], ids=[c[0] for c in MERGE_CASES])
def test_merge_plugin_set(default: PluginSet, custom: PluginSet, want: PluginSet) -> None:
    assert merge_plugin_set(default, custom) == want


# ---------------------------------------------------------------------------------------------
# defaulting (defaults_test.go TestSchedulerDefaults)
# ---------------------------------------------------------------------------------------------

KUBE_DEFAULT_PLUGIN_CONFIG = {
    "DefaultPreemption": {"minCandidateNodesPercentage": 10, "minCandidateNodesAbsolute": 100},
    "DynamicResources": {"filterTimeout": "10s"},
    "InterPodAffinity": {"hardPodAffinityWeight": 1},
    "NodeAffinity": {},
    "NodeResourcesBalancedAllocation": {"resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}]},
    "NodeResourcesFit": {"scoringStrategy": {"type": "LeastAllocated",
                                             "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}]}},
    "PodTopologySpread": {"defaultingType": "System"},
    "VolumeBinding": {"bindTimeoutSeconds": 600},
}


@pytest.mark.parametrize("doc", [cfg(), cfg(profiles=[{}]), cfg(profiles=[{"plugins": {}}]),
                                 cfg(profiles=[{"schedulerName": "default-scheduler", "plugins": None}])],
                         ids=["empty config", "no scheduler name", "empty plugins", "explicit name, null plugins"])
def test_default_profile_is_kubes(doc: dict) -> None:
    c = parse(doc)
    assert len(c.profiles) == 1
    p = c.profiles[0]
    assert p.scheduler_name == "default-scheduler"
    assert p.plugins == {MULTI_POINT: PluginSet([PluginRef(n, w) for n, w in DEFAULT_MULTI_POINT])}
    assert p.plugin_config == KUBE_DEFAULT_PLUGIN_CONFIG
    assert p.percentage_of_nodes_to_score is None
    assert (c.percentage_of_nodes_to_score, c.pod_initial_backoff_seconds, c.pod_max_backoff_seconds,
            c.parallelism, c.extenders) == (0, 1, 10, 16, [])


def test_default_scheduler_config_matches_an_empty_file() -> None:
    assert default_scheduler_config().profiles == parse(cfg()).profiles


def test_default_profile_extension_points() -> None:
    fw = points(cfg())
    assert fw.plugin_names("preEnqueue") == ["SchedulingGates", "DynamicResources", "DefaultPreemption"]
    assert fw.plugin_names("queueSort") == ["PrioritySort"]
    assert fw.plugin_names("filter") == [
        "NodeUnschedulable", "NodeName", "TaintToleration", "NodeAffinity", "NodePorts", "NodeResourcesFit",
        "VolumeRestrictions", "NodeVolumeLimits", "VolumeBinding", "VolumeZone", "PodTopologySpread",
        "InterPodAffinity", "DynamicResources"]
    assert fw.plugin_names("postFilter") == ["DynamicResources", "DefaultPreemption"]
    assert fw.plugin_names("score") == [
        "TaintToleration", "NodeAffinity", "NodeResourcesFit", "VolumeBinding", "PodTopologySpread",
        "InterPodAffinity", "DynamicResources", "NodeResourcesBalancedAllocation", "ImageLocality"]
    assert fw.score_weights == {"TaintToleration": 3, "NodeAffinity": 2, "NodeResourcesFit": 1, "VolumeBinding": 1,
                                "PodTopologySpread": 2, "InterPodAffinity": 2, "DynamicResources": 2,
                                "NodeResourcesBalancedAllocation": 1, "ImageLocality": 1}
    assert fw.plugin_names("bind") == ["DefaultBinder"]


def test_two_profiles_defaults() -> None:
    """defaults_test.go "two profiles": the unnamed one of two stays unnamed (validation rejects it),
    the other keeps its bind override on top of the default multiPoint set."""
    doc = cfg(profiles=[{"pluginConfig": [{"name": "FooPlugin"}]},
                        {"schedulerName": "custom-scheduler",
                         "plugins": {"bind": {"enabled": [{"name": "CustomBind"}],
                                              "disabled": [{"name": "DefaultBinder"}]}}}])
    assert errors_of(doc) == ["profiles[0].schedulerName: Required value"]
    doc["profiles"][0]["schedulerName"] = "default-scheduler"
    c = parse(doc)
    first, second = c.profiles
    assert list(first.plugin_config) == ["FooPlugin", *KUBE_DEFAULT_PLUGIN_CONFIG]
    assert first.plugin_config["FooPlugin"] is None
    assert second.plugins["bind"] == ps(["CustomBind"], ["DefaultBinder"])
    assert second.plugins[MULTI_POINT].enabled == [PluginRef(n, w) for n, w in DEFAULT_MULTI_POINT]
    assert Framework(second, REGISTRY).plugin_names("bind") == ["CustomBind"]
    assert c.profile("custom-scheduler") is second and c.profile("nope") is None


@pytest.mark.parametrize("doc,global_pct,profile_pct", [
    (cfg(percentageOfNodesToScore=50), 50, None),
    (cfg(profiles=[{"percentageOfNodesToScore": 50}]), 0, 50),
    (cfg(percentageOfNodesToScore=10, profiles=[{"percentageOfNodesToScore": 50}]), 10, 50),
    (cfg(percentageOfNodesToScore=0, profiles=[{"percentageOfNodesToScore": 0}]), 0, 0),
], ids=["global", "profile", "global and profile", "explicit zeros"])
def test_percentage_of_nodes_to_score(doc: dict, global_pct: int, profile_pct: Optional[int]) -> None:
    c = parse(doc)
    assert c.percentage_of_nodes_to_score == global_pct
    assert c.profiles[0].percentage_of_nodes_to_score == profile_pct


def test_scalar_settings_pass_through() -> None:
    c = parse(cfg(parallelism=8, podInitialBackoffSeconds=2, podMaxBackoffSeconds=20, delayCacheUntilActive=True,
                  leaderElection={"leaderElect": False}, clientConnection={"qps": 10.5, "burst": 20},
                  enableProfiling=False))
    assert (c.parallelism, c.pod_initial_backoff_seconds, c.pod_max_backoff_seconds, c.delay_cache_until_active) == \
        (8, 2, 20, True)


# ---------------------------------------------------------------------------------------------
# plugin args defaulting (defaults_test.go TestPluginArgsDefaults) and passthrough
# ---------------------------------------------------------------------------------------------

ARGS_CASES = [
    ("DefaultPreemptionArgs empty", "DefaultPreemption", {},
     {"minCandidateNodesPercentage": 10, "minCandidateNodesAbsolute": 100}),
    ("DefaultPreemptionArgs with value", "DefaultPreemption", {"minCandidateNodesPercentage": 50},
     {"minCandidateNodesPercentage": 50, "minCandidateNodesAbsolute": 100}),
    ("InterPodAffinityArgs empty", "InterPodAffinity", {}, {"hardPodAffinityWeight": 1}),
    ("InterPodAffinityArgs explicit 0", "InterPodAffinity", {"hardPodAffinityWeight": 0}, {"hardPodAffinityWeight": 0}),
    ("InterPodAffinityArgs with value", "InterPodAffinity", {"hardPodAffinityWeight": 5}, {"hardPodAffinityWeight": 5}),
    ("NodeResourcesBalancedAllocationArgs resources empty", "NodeResourcesBalancedAllocation", {},
     {"resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}]}),
    ("NodeResourcesBalancedAllocationArgs with scalar resource", "NodeResourcesBalancedAllocation",
     {"resources": [{"name": "scalar.io/scalar1", "weight": 1}]}, {"resources": [{"name": "scalar.io/scalar1", "weight": 1}]}),
    ("NodeResourcesBalancedAllocationArgs have resource no weight", "NodeResourcesBalancedAllocation",
     {"resources": [{"name": "cpu"}, {"name": "scalar.io/scalar0", "weight": 0}, {"name": "scalar.io/scalar1", "weight": 1}]},
     {"resources": [{"name": "cpu", "weight": 1}, {"name": "scalar.io/scalar0", "weight": 1},
                    {"name": "scalar.io/scalar1", "weight": 1}]}),
    ("PodTopologySpreadArgs resources empty", "PodTopologySpread", {}, {"defaultingType": "System"}),
    ("PodTopologySpreadArgs resources with value", "PodTopologySpread",
     {"defaultConstraints": [{"topologyKey": "planet", "whenUnsatisfiable": "DoNotSchedule", "maxSkew": 2}]},
     {"defaultConstraints": [{"topologyKey": "planet", "whenUnsatisfiable": "DoNotSchedule", "maxSkew": 2}],
      "defaultingType": "System"}),
    ("PodTopologySpreadArgs List kept", "PodTopologySpread", {"defaultingType": "List"}, {"defaultingType": "List"}),
    ("NodeResourcesFitArgs not set", "NodeResourcesFit", {},
     {"scoringStrategy": {"type": "LeastAllocated", "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}]}}),
    ("NodeResourcesFitArgs Resources empty", "NodeResourcesFit", {"scoringStrategy": {"type": "MostAllocated"}},
     {"scoringStrategy": {"type": "MostAllocated", "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}]}}),
    ("NodeResourcesFitArgs zero weight", "NodeResourcesFit",
     {"ignoredResources": ["x.io/y"], "scoringStrategy": {"type": "MostAllocated", "resources": [{"name": "cpu", "weight": 0}]}},
     {"ignoredResources": ["x.io/y"], "scoringStrategy": {"type": "MostAllocated", "resources": [{"name": "cpu", "weight": 1}]}}),
    ("VolumeBindingArgs empty, StorageCapacityScoring disabled", "VolumeBinding", {}, {"bindTimeoutSeconds": 600}),
    ("DynamicResourcesArgs defaults", "DynamicResources", {}, {"filterTimeout": "10s"}),
    ("DynamicResourcesArgs explicit zero timeout", "DynamicResources", {"filterTimeout": "0s"}, {"filterTimeout": "0s"}),
    ("NodeAffinityArgs", "NodeAffinity", {"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}},
     {"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}),
    ("type meta is accepted and dropped", "InterPodAffinity",
     {"apiVersion": API_VERSION, "kind": "InterPodAffinityArgs", "hardPodAffinityWeight": 3}, {"hardPodAffinityWeight": 3}),
    ("args omitted", "VolumeBinding", None, {"bindTimeoutSeconds": 600}),
    ("out-of-tree args pass through verbatim", "CustomFilter", {"kind": "Anything", "x": [1, 2]},
     {"kind": "Anything", "x": [1, 2]}),
]


@pytest.mark.parametrize("name,args,want", [c[1:] for c in ARGS_CASES], ids=[c[0] for c in ARGS_CASES])
def test_plugin_args_defaults(name: str, args: Optional[dict], want: dict) -> None:
    entry = {"name": name} if args is None else {"name": name, "args": args}
    c = parse(cfg(profiles=[{"pluginConfig": [entry]}]))
    assert c.profiles[0].plugin_config[name] == want
    if args is not None:
        assert entry["args"] == args  # the input is not modified


def test_plugin_config_only_for_enabled_plugins() -> None:
    """Default args are added only for plugins enabled somewhere (pluginsNames)."""
    c = parse(cfg(profiles=[{"plugins": {"multiPoint": {"disabled": [{"name": "*"}],
                                                        "enabled": [{"name": "PrioritySort"}, {"name": "DefaultBinder"},
                                                                    {"name": "NodeResourcesFit"}]}}}]))
    assert c.profiles[0].plugin_config == {"NodeResourcesFit": KUBE_DEFAULT_PLUGIN_CONFIG["NodeResourcesFit"]}


# ---------------------------------------------------------------------------------------------
# plugin sets: disabling, overrides, ordering, weights (through the framework's expansion)
# ---------------------------------------------------------------------------------------------

def test_disable_plugin_at_one_point() -> None:
    fw = points(cfg(profiles=[{"plugins": {"filter": {"disabled": [{"name": "TaintToleration"}]},
                                           "score": {"disabled": [{"name": "ImageLocality"}]}}}]))
    assert "TaintToleration" not in fw.plugin_names("filter")
    assert "TaintToleration" in fw.plugin_names("score") and "TaintToleration" in fw.plugin_names("preScore")
    assert "ImageLocality" not in fw.plugin_names("score")


def test_disable_plugin_everywhere_via_multi_point() -> None:
    c = parse(cfg(profiles=[{"plugins": {"multiPoint": {"disabled": [{"name": "NodeAffinity"}]}}}]))
    assert [r.name for r in c.profiles[0].plugins[MULTI_POINT].enabled] == [n for n in DEFAULT_NAMES if n != "NodeAffinity"]
    fw = Framework(c.profiles[0], REGISTRY)
    assert "NodeAffinity" not in fw.plugins
    assert "NodeAffinity" not in c.profiles[0].plugin_config  # no default args for a plugin not enabled


def test_disable_all_at_a_point_keeps_explicit_ones() -> None:
    fw = points(cfg(profiles=[{"plugins": {"score": {"enabled": [{"name": "ImageLocality", "weight": 5},
                                                                 {"name": "CustomScore"}],
                                                     "disabled": [{"name": "*"}]}}}]))
    assert fw.plugin_names("score") == ["ImageLocality", "CustomScore"]
    assert (fw.score_weights["ImageLocality"], fw.score_weights["CustomScore"]) == (5, 1)
    # other points still get the multiPoint expansion
    assert fw.plugin_names("filter")[0] == "NodeUnschedulable"


def test_point_override_comes_first_and_its_weight_wins() -> None:
    """A multiPoint plugin also enabled at a point is an override: it moves to the front of that
    point (kube's part 1), and the point's weight wins over multiPoint's."""
    fw = points(cfg(profiles=[{"plugins": {"score": {"enabled": [{"name": "NodeResourcesBalancedAllocation",
                                                                  "weight": 7}]}}}]))
    assert fw.plugin_names("score") == [
        "NodeResourcesBalancedAllocation", "TaintToleration", "NodeAffinity", "NodeResourcesFit", "VolumeBinding",
        "PodTopologySpread", "InterPodAffinity", "DynamicResources", "ImageLocality"]
    assert fw.score_weights["NodeResourcesBalancedAllocation"] == 7
    # preScore is not overridden: multiPoint order there
    assert fw.plugin_names("preScore")[-1] == "NodeResourcesBalancedAllocation"


def test_multi_point_weight_override_keeps_position() -> None:
    c = parse(cfg(profiles=[{"plugins": {"multiPoint": {"enabled": [{"name": "ImageLocality", "weight": 5},
                                                                    {"name": "TaintToleration", "weight": 0}]}}}]))
    enabled = c.profiles[0].plugins[MULTI_POINT].enabled
    assert [r.name for r in enabled] == DEFAULT_NAMES
    assert enabled[DEFAULT_NAMES.index("ImageLocality")].weight == 5
    fw = Framework(c.profiles[0], REGISTRY)
    assert fw.score_weights["ImageLocality"] == 5
    assert fw.score_weights["TaintToleration"] == 1  # weight 0 means unset: 1, not multiPoint's default 3


def test_negative_score_weight_is_accepted_as_kube_does() -> None:
    """kube v1.35 validates no score-plugin weight: a negative one is used as is."""
    fw = points(cfg(profiles=[{"plugins": {"score": {"enabled": [{"name": "ImageLocality", "weight": -2}]}}}]))
    assert fw.score_weights["ImageLocality"] == -2


def test_custom_plugins_are_appended() -> None:
    fw = points(cfg(profiles=[{"plugins": {"multiPoint": {"enabled": [{"name": "CustomScore", "weight": 4}]},
                                           "filter": {"enabled": [{"name": "CustomFilter"}]},
                                           "permit": {"enabled": [{"name": "CustomPermit"}]}}}]))
    assert fw.plugin_names("filter")[-1] == "CustomFilter"  # part 3, after the multiPoint ones
    assert fw.plugin_names("score")[-1] == "CustomScore"
    assert fw.score_weights["CustomScore"] == 4
    assert fw.plugin_names("permit") == ["CustomPermit"]


def test_reorder_a_point_from_scratch() -> None:
    fw = points(cfg(profiles=[{"plugins": {"filter": {"enabled": [{"name": "NodeName"}, {"name": "NodeUnschedulable"}],
                                                      "disabled": [{"name": "*"}]}}}]))
    assert fw.plugin_names("filter") == ["NodeName", "NodeUnschedulable"]


def test_profile_from_scratch_with_multi_point_disabled() -> None:
    fw = points(cfg(profiles=[{"plugins": {"multiPoint": {"disabled": [{"name": "*"}]},
                                           "queueSort": {"enabled": [{"name": "CustomSort"}]},
                                           "filter": {"enabled": [{"name": "NodeName"}]},
                                           "bind": {"enabled": [{"name": "CustomBind"}]}}}]))
    assert {p: fw.plugin_names(p) for p in ("queueSort", "filter", "score", "bind")} == \
        {"queueSort": ["CustomSort"], "filter": ["NodeName"], "score": [], "bind": ["CustomBind"]}


def test_multiple_profiles() -> None:
    c = parse(cfg(profiles=[
        {"schedulerName": "default-scheduler"},
        {"schedulerName": "no-scoring", "plugins": {"preScore": {"disabled": [{"name": "*"}]},
                                                   "score": {"disabled": [{"name": "*"}]}}},
        {"schedulerName": "binpack", "pluginConfig": [
            {"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "MostAllocated"}}}]},
    ]))
    assert [p.scheduler_name for p in c.profiles] == ["default-scheduler", "no-scoring", "binpack"]
    assert Framework(c.profile("no-scoring"), REGISTRY).plugin_names("score") == []
    assert c.profile("binpack").plugin_config["NodeResourcesFit"]["scoringStrategy"]["type"] == "MostAllocated"
    assert c.profile("default-scheduler").plugin_config["NodeResourcesFit"] == KUBE_DEFAULT_PLUGIN_CONFIG["NodeResourcesFit"]


# ---------------------------------------------------------------------------------------------
# validation (validation_test.go) and framework checks, with their messages
# ---------------------------------------------------------------------------------------------

def _two_profiles(**changes: Any) -> dict:
    """validation_test.go's validConfig, in v1 form."""
    doc = cfg(parallelism=8, percentageOfNodesToScore=35, podInitialBackoffSeconds=1, podMaxBackoffSeconds=1,
              profiles=[
                  {"schedulerName": "me",
                   "plugins": {"queueSort": {"enabled": [{"name": "CustomSort"}], "disabled": [{"name": "*"}]},
                               "score": {"disabled": [{"name": "*"}]}},
                   "pluginConfig": [{"name": "DefaultPreemption",
                                     "args": {"minCandidateNodesPercentage": 10, "minCandidateNodesAbsolute": 100}}]},
                  {"schedulerName": "other",
                   "plugins": {"queueSort": {"enabled": [{"name": "CustomSort"}], "disabled": [{"name": "*"}]},
                               "bind": {"enabled": [{"name": "CustomBind"}]}}},
              ],
              extenders=[{"urlPrefix": "http://127.0.0.1:8081/extender", "prioritizeVerb": "prioritize", "weight": 1}])
    for k, v in changes.items():
        doc[k] = v
    return doc


def test_valid_config_is_valid() -> None:
    c = parse(_two_profiles())
    assert [p.scheduler_name for p in c.profiles] == ["me", "other"]
    # multiPoint's DefaultBinder (part 2) comes before the point's own CustomBind (part 3)
    assert Framework(c.profiles[1], REGISTRY).plugin_names("bind") == ["DefaultBinder", "CustomBind"]


def _edit(fn) -> dict:
    doc = _two_profiles()
    fn(doc)
    return doc


VALIDATION_CASES = [
    ("bad-parallelism-invalid-value", _two_profiles(parallelism=0),
     ["parallelism: Invalid value: 0: should be an integer value greater than zero"]),
    ("bad-percentage-of-nodes-to-score", _two_profiles(percentageOfNodesToScore=101),
     ["percentageOfNodesToScore: Invalid value: 101: not in valid range [0-100]"]),
    ("negative-percentage-of-nodes-to-score", _two_profiles(percentageOfNodesToScore=-1),
     ["percentageOfNodesToScore: Invalid value: -1: not in valid range [0-100]"]),
    ("bad-profile-percentage", _edit(lambda d: d["profiles"][1].update(percentageOfNodesToScore=200)),
     ["profiles[1].percentageOfNodesToScore: Invalid value: 200: not in valid range [0-100]"]),
    ("scheduler-name-not-set", _edit(lambda d: d["profiles"][1].pop("schedulerName")),
     ["profiles[1].schedulerName: Required value"]),
    ("scheduler-name-empty", _edit(lambda d: d["profiles"][1].update(schedulerName="")),
     ["profiles[1].schedulerName: Required value"]),
    ("repeated-scheduler-name", _edit(lambda d: d["profiles"][0].update(schedulerName="other")),
     ['profiles[1].schedulerName: Duplicate value: "other": already used by profiles[0].schedulerName']),
    ("different-queue-sort", _edit(lambda d: d["profiles"][1]["plugins"]["queueSort"]["enabled"][0].update(name="PrioritySort")),
     ['profiles[1].plugins.queueSort: Invalid value: {"enabled":[{"name":"PrioritySort","weight":0}],'
      '"disabled":[{"name":"*"}]}: must be the same for all profiles']),
    ("one-empty-queue-sort", _edit(lambda d: d["profiles"][0].pop("plugins")),
     ['profiles[1].plugins.queueSort: Invalid value: {"enabled":[{"name":"CustomSort","weight":0}],'
      '"disabled":[{"name":"*"}]}: must be the same for all profiles']),
    ("two-queue-sorts", _edit(lambda d: [p["plugins"]["queueSort"]["enabled"].append({"name": "PrioritySort"})
                                         for p in d["profiles"]]),
     ["profiles[0].plugins.queueSort.Enabled: Invalid value: 2: only one queue sort plugin can be enabled"]),
    ("mismatch-queue-sort-args", _edit(lambda d: [d["profiles"][0].update(pluginConfig=[{"name": "CustomSort", "args": {"a": 1}}]),
                                                  d["profiles"][1].update(pluginConfig=[{"name": "CustomSort", "args": {"a": 2}}])]),
     ['profiles[1].pluginConfig.args: Invalid value: {"a":2}: queueSort must be the same for all profiles']),
    ("pod-initial-backoff", _two_profiles(podInitialBackoffSeconds=0, podMaxBackoffSeconds=5),
     ["podInitialBackoffSeconds: Invalid value: 0: must be greater than 0"]),
    ("pod-max-backoff-below-initial", _two_profiles(podInitialBackoffSeconds=5, podMaxBackoffSeconds=4),
     ["podMaxBackoffSeconds: Invalid value: 4: must be greater than or equal to PodInitialBackoffSeconds"]),
    ("extender-negative-weight", _edit(lambda d: d["extenders"][0].update(weight=-1)),
     ["extenders[0].weight: Invalid value: -1: must have a positive weight applied to it"]),
    ("extender-missing-weight", _edit(lambda d: d["extenders"][0].pop("weight")),
     ["extenders[0].weight: Invalid value: 0: must have a positive weight applied to it"]),
    ("extender-duplicate-managed-resources",
     _edit(lambda d: d["extenders"][0].update(managedResources=[{"name": "example.com/foo"}, {"name": "example.com/foo"}])),
     ['extenders[0].managedResources[1].name: Invalid value: "example.com/foo": duplicate extender managed resource name']),
    ("extender-duplicate-managed-resources-across-extenders",
     _two_profiles(extenders=[{"urlPrefix": "http://a", "managedResources": [{"name": "foo.com/bar"}]},
                              {"urlPrefix": "http://b", "bindVerb": "bind", "managedResources": [{"name": "foo.com/bar"}]}]),
     ['extenders[1].managedResources[0].name: Invalid value: "foo.com/bar": duplicate extender managed resource name']),
    ("extender-invalid-extended-resource-name",
     _two_profiles(extenders=[{"urlPrefix": "http://a", "managedResources": [{"name": "kubernetes.io/foo"}, {"name": "cpu"}]}]),
     ['extenders[0].managedResources[0].name: Invalid value: "kubernetes.io/foo": is an invalid extended resource name',
      'extenders[0].managedResources[1].name: Invalid value: "cpu": is an invalid extended resource name']),
    ("extender-unqualified-resource-name",
     _two_profiles(extenders=[{"urlPrefix": "http://a", "managedResources": [{"name": "a/b/c"}]}]),
     ['extenders[0].managedResources[0].name: Invalid value: "a/b/c": must be a qualified name ([prefix/]name of '
      "alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric)"]),
    ("extender-duplicate-bind",
     _edit(lambda d: [d["extenders"][0].update(bindVerb="foo"),
                      d["extenders"].append({"urlPrefix": "http://b", "prioritizeVerb": "prioritize", "weight": 1,
                                             "bindVerb": "bar"})]),
     ['extenders: Invalid value: "found 2 extenders implementing bind": only one extender can implement bind']),
    ("duplicated-plugin-config", _edit(lambda d: d["profiles"][0].update(pluginConfig=[{"name": "config"}, {"name": "config"}])),
     ['profiles[0].pluginConfig[1]: Duplicate value: "config"']),
    ("bad-removed-plugins", _edit(lambda d: d["profiles"][0]["plugins"]["score"].update(enabled=[{"name": "EBSLimits"}])),
     ['profiles[0].plugins.score.enabled[0]: Invalid value: "EBSLimits": was invalid in version '
      '"kubescheduler.config.k8s.io/v1" (KubeSchedulerConfiguration is version "kubescheduler.config.k8s.io/v1")']),
    ("bad-removed-plugin-config", _edit(lambda d: d["profiles"][0]["pluginConfig"].append({"name": "GCEPDLimits"})),
     ['profiles[0].pluginConfig[1]: Invalid value: "GCEPDLimits": was invalid in version '
      '"kubescheduler.config.k8s.io/v1" (KubeSchedulerConfiguration is version "kubescheduler.config.k8s.io/v1")']),
    ("leader-election-lease-not-above-renew", _two_profiles(leaderElection={"leaseDuration": "5s", "renewDeadline": "10s"}),
     ['leaderElection.leaseDuration: Invalid value: "10s": must be greater than `RenewDeadline`']),
    ("leader-election-resource-lock", _two_profiles(leaderElection={"resourceLock": "configmaps"}),
     ['leaderElection.resourceLock: Invalid value: "configmaps": resourceLock value must be "leases"']),
    ("client-connection-burst", _two_profiles(clientConnection={"burst": -1}),
     ["clientConnection.burst: Invalid value: -1: must be non-negative"]),
    ("several errors at once", _two_profiles(parallelism=-3, percentageOfNodesToScore=120),
     ["parallelism: Invalid value: -3: should be an integer value greater than zero",
      "percentageOfNodesToScore: Invalid value: 120: not in valid range [0-100]"]),
]


@pytest.mark.parametrize("doc,want", [c[1:] for c in VALIDATION_CASES], ids=[c[0] for c in VALIDATION_CASES])
def test_validation_errors(doc: dict, want: list[str]) -> None:
    assert errors_of(doc) == want


def test_good_removed_plugin_name_check_is_per_name() -> None:
    parse(_edit(lambda d: d["profiles"][0]["plugins"]["score"].update(enabled=[{"name": "PodTopologySpread", "weight": 2}])))


DECODE_CASES = [
    ("unknown top-level field", cfg(profile=[]), ["profile: unknown field"]),
    ("unknown profile field", cfg(profiles=[{"name": "x"}]), ["profiles[0].name: unknown field"]),
    ("unknown extension point", cfg(profiles=[{"plugins": {"scores": {}}}]), ["profiles[0].plugins.scores: unknown field"]),
    ("unknown plugin field", cfg(profiles=[{"plugins": {"score": {"enabled": [{"name": "A", "wieght": 1}]}}}]),
     ["profiles[0].plugins.score.enabled[0].wieght: unknown field"]),
    ("unknown in-tree args field", cfg(profiles=[{"pluginConfig": [{"name": "InterPodAffinity", "args": {"hardPodAffinity": 1}}]}]),
     ["profiles[0].pluginConfig[0].args.hardPodAffinity: unknown field"]),
    ("args of another kind", cfg(profiles=[{"pluginConfig": [{"name": "DefaultPreemption", "args": {"kind": "InterPodAffinityArgs"}}]}]),
     ["profiles[0].pluginConfig[0].args: args for plugin DefaultPreemption were not of type "
      "DefaultPreemptionArgs.kubescheduler.config.k8s.io, got InterPodAffinityArgs.kubescheduler.config.k8s.io"]),
    ("args not an object", cfg(profiles=[{"pluginConfig": [{"name": "NodeResourcesFit", "args": [1]}]}]),
     ["profiles[0].pluginConfig[0].args: expected an object, got a list"]),
    ("weight as a string", cfg(profiles=[{"plugins": {"score": {"enabled": [{"name": "A", "weight": "3"}]}}}]),
     ["profiles[0].plugins.score.enabled[0].weight: expected an integer, got a string '3'"]),
    ("weight beyond int32", cfg(profiles=[{"plugins": {"score": {"enabled": [{"name": "A", "weight": 2**40}]}}}]),
     ["profiles[0].plugins.score.enabled[0].weight: 1099511627776 does not fit in a 32-bit integer"]),
    ("profiles not a list", cfg(profiles={"schedulerName": "x"}), ["profiles: expected a list, got an object"]),
    ("http timeout not a string", cfg(extenders=[{"urlPrefix": "http://a", "httpTimeout": 30}]),
     ['extenders[0].httpTimeout: expected a duration string such as "30s", got an integer 30']),
    ("http timeout not a duration", cfg(extenders=[{"urlPrefix": "http://a", "httpTimeout": "30 seconds"}]),
     ["extenders[0].httpTimeout: invalid duration '30 seconds'"]),
    ("unknown extender field", cfg(extenders=[{"url": "http://a"}]), ["extenders[0].url: unknown field"]),
    ("bad base64", cfg(extenders=[{"urlPrefix": "https://a", "tlsConfig": {"caData": "%%%"}}]),
     ["extenders[0].tlsConfig.caData: illegal base64 data"]),
    ("old api version", {"apiVersion": "kubescheduler.config.k8s.io/v1beta3", "kind": KIND},
     ["apiVersion: no kind 'KubeSchedulerConfiguration' is registered for version "
      "'kubescheduler.config.k8s.io/v1beta3' (only kubescheduler.config.k8s.io/v1 is supported)"]),
    ("missing kind", {"apiVersion": API_VERSION}, ["kind: Object 'Kind' is missing (want KubeSchedulerConfiguration)"]),
    ("another kind", {"apiVersion": "v1", "kind": "Pod"}, ["kind: 'Pod' is not KubeSchedulerConfiguration"]),
    ("not an object", [1, 2], ["expected a KubeSchedulerConfiguration object, got a list"]),
]


@pytest.mark.parametrize("doc,want", [c[1:] for c in DECODE_CASES], ids=[c[0] for c in DECODE_CASES])
def test_decoding_errors(doc: Any, want: list[str]) -> None:
    assert errors_of(doc, check=False) == want


FRAMEWORK_CASES = [
    ("unknown plugin", cfg(profiles=[{"schedulerName": "a"}, {"schedulerName": "b", "plugins": {
        "score": {"enabled": [{"name": "ImageLocality"}, {"name": "NoSuchPlugin", "weight": 1}]}}}]),
     'profiles[1].plugins.score.enabled[1].name: Invalid value: "NoSuchPlugin": no plugin named "NoSuchPlugin" is '
     'registered (known: '),
    ("unknown plugin via multiPoint", cfg(profiles=[{"plugins": {"multiPoint": {"enabled": [{"name": "Nope"}]}}}]),
     'profiles[0].plugins.multiPoint.enabled[0].name: Invalid value: "Nope": no plugin named "Nope"'),
    ("plugin rejects its args", cfg(profiles=[{"plugins": {"filter": {"enabled": [{"name": "StrictArgs"}]}},
                                               "pluginConfig": [{"name": "NodeAffinity"},
                                                                {"name": "StrictArgs", "args": {"level": -1}}]}]),
     "profiles[0].pluginConfig[1].args.level: Invalid value: -1: must be greater than or equal to 0"),
    ("plugin at a point it does not implement", cfg(profiles=[{"plugins": {"score": {"enabled": [{"name": "NodeName"}]}}}]),
     "profiles[0]: plugin 'NodeName' does not extend score plugin"),
    ("two queue sort plugins", cfg(profiles=[{"plugins": {"queueSort": {"enabled": [{"name": "CustomSort"}]}}}]),
     "profiles[0]: only one queue sort plugin required for profile with scheduler name 'default-scheduler', but got 2"),
    ("no bind plugin", cfg(profiles=[{"plugins": {"bind": {"disabled": [{"name": "*"}]}}}]),
     "profiles[0]: at least one bind plugin is needed for profile with scheduler name 'default-scheduler'"),
    ("double registration via multiPoint", cfg(profiles=[{"plugins": {"multiPoint": {
        "enabled": [{"name": "CustomFilter"}, {"name": "CustomFilter"}]}}}]),
     "profiles[0]: plugin 'CustomFilter' already registered as 'filter'"),
    ("double registration at a point", cfg(profiles=[{"plugins": {"filter": {
        "enabled": [{"name": "CustomFilter"}, {"name": "CustomFilter"}]}}}]),
     "profiles[0]: plugin 'CustomFilter' already registered as 'filter'"),
]


@pytest.mark.parametrize("doc,want", [c[1:] for c in FRAMEWORK_CASES], ids=[c[0] for c in FRAMEWORK_CASES])
def test_framework_errors(doc: dict, want: str) -> None:
    errs = errors_of(doc)
    assert len(errs) == 1 and errs[0].startswith(want), errs


def test_unknown_plugin_error_skipped_without_checks() -> None:
    parse(cfg(profiles=[{"plugins": {"filter": {"enabled": [{"name": "NoSuchPlugin"}]}}}]), check=False)


def test_unknown_plugin_only_disabled_is_fine() -> None:
    parse(cfg(profiles=[{"plugins": {"filter": {"disabled": [{"name": "NoSuchPlugin"}]}}}]))


# ---------------------------------------------------------------------------------------------
# extenders in the configuration
# ---------------------------------------------------------------------------------------------

def test_extender_fields_and_defaults() -> None:
    c = parse(cfg(extenders=[
        {"urlPrefix": "http://a/ext", "filterVerb": "filter", "prioritizeVerb": "prioritize", "weight": 3,
         "bindVerb": "bind", "preemptVerb": "preempt", "httpTimeout": "1m30s", "nodeCacheCapable": True,
         "managedResources": [{"name": "example.com/gpu", "ignoredByScheduler": True}, {"name": "example.com/fpga"}]},
        {"urlPrefix": "http://b", "filterVerb": "f", "ignorable": True},
        {"urlPrefix": "https://c", "filterVerb": "f", "enableHTTPS": True,
         "tlsConfig": {"insecure": True, "serverName": "ext.local"}},
    ]))
    a, b, tls = c.extenders
    assert isinstance(a, ExtenderConfig)
    assert (a.url_prefix, a.filter_verb, a.prioritize_verb, a.weight, a.bind_verb, a.preempt_verb,
            a.http_timeout_seconds, a.node_cache_capable, a.managed_resources, a.ignored_by_scheduler, a.ignorable) == \
        ("http://a/ext", "filter", "prioritize", 3, "bind", "preempt", 90.0, True,
         ["example.com/gpu", "example.com/fpga"], ["example.com/gpu"], False)
    assert (b.weight, b.http_timeout_seconds, b.ignorable, b.tls_config) == (0, 5.0, True, None)
    assert tls.tls_config.insecure and tls.tls_config.server_name == "ext.local"
    built = c.build_extenders()
    # kube's buildExtenders puts ignorable extenders last
    assert [e.name for e in built] == ["http://a/ext", "https://c", "http://b"]
    assert built[0].timeout == 90.0 and built[2].timeout == 5.0


def test_ignored_by_scheduler_becomes_fit_ignored_resources() -> None:
    c = parse(cfg(profiles=[{"schedulerName": "a"},
                            {"schedulerName": "b", "pluginConfig": [
                                {"name": "NodeResourcesFit", "args": {"ignoredResources": ["x.io/y"]}}]}],
                  extenders=[{"urlPrefix": "http://a", "managedResources": [
                      {"name": "example.com/gpu", "ignoredByScheduler": True}, {"name": "example.com/nic"}]}]))
    for p in c.profiles:
        assert p.plugin_config["NodeResourcesFit"]["ignoredResources"] == ["example.com/gpu"]


def test_ignored_by_scheduler_needs_node_resources_fit() -> None:
    doc = cfg(profiles=[{"plugins": {"multiPoint": {"disabled": [{"name": "NodeResourcesFit"}]}}}],
              extenders=[{"urlPrefix": "http://a", "managedResources": [{"name": "example.com/gpu",
                                                                         "ignoredByScheduler": True}]}])
    assert errors_of(doc) == ["profiles[0].pluginConfig: can't find NodeResourcesFitArgs in plugin config "
                              "(extenders' ignoredByScheduler resources need it)"]


def test_tls_insecure_with_ca_is_rejected_when_built() -> None:
    ca = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    c = parse(cfg(extenders=[{"urlPrefix": "https://a", "filterVerb": "f",
                              "tlsConfig": {"insecure": True, "caData": ca}}]))
    with pytest.raises(ConfigError) as ei:
        c.build_extenders()
    assert str(ei.value) == ("sched.yaml: extenders[0].tlsConfig: specifying a root certificates file with the "
                             "insecure flag is not allowed")


@pytest.mark.parametrize("text,seconds", [
    ("0", 0.0), ("30s", 30.0), ("1m30s", 90.0), ("1.5s", 1.5), ("300ms", 0.3), ("2h", 7200.0), ("-1s", -1.0),
    ("1h2m3s4ms", 3723.004), ("10us", 1e-5), (".5m", 30.0),
])
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "30", "1d", "s", "1 s", "1.2.3s"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


# ---------------------------------------------------------------------------------------------
# reading files and the manifest dict form
# ---------------------------------------------------------------------------------------------

CONFIG_YAML = textwrap.dedent("""\
    apiVersion: kubescheduler.config.k8s.io/v1
    kind: KubeSchedulerConfiguration
    percentageOfNodesToScore: 40
    profiles:
    - schedulerName: default-scheduler
    - schedulerName: binpack
      plugins:
        score:
          enabled:
          - name: NodeResourcesFit
            weight: 5
      pluginConfig:
      - name: NodeResourcesFit
        args:
          scoringStrategy:
            type: MostAllocated
    """)


def test_load_yaml_file(tmp_path: Path) -> None:
    f = tmp_path / "sched.yaml"
    f.write_text(CONFIG_YAML)
    c = load_scheduler_config(f, registry=REGISTRY)
    assert c.source == str(f) and c.percentage_of_nodes_to_score == 40
    assert Framework(c.profile("binpack"), REGISTRY).score_weights["NodeResourcesFit"] == 5


def test_load_json_file(tmp_path: Path) -> None:
    f = tmp_path / "sched.json"
    f.write_text(json.dumps(yaml.safe_load(CONFIG_YAML)))
    assert [p.scheduler_name for p in load_scheduler_config(str(f), registry=REGISTRY).profiles] == \
        ["default-scheduler", "binpack"]


def test_load_from_a_manifest_with_other_documents(tmp_path: Path) -> None:
    node = "apiVersion: v1\nkind: Node\nmetadata:\n  name: n1\n"
    f = tmp_path / "all.yaml"
    f.write_text(node + "---\n" + CONFIG_YAML)
    assert load_scheduler_config(f, registry=REGISTRY).percentage_of_nodes_to_score == 40
    m = load_text(node + "---\n" + CONFIG_YAML, "all.yaml")
    c = load_scheduler_config(m.scheduler_configs[0], source="all.yaml", registry=REGISTRY)
    assert c.source == "all.yaml" and c.profile("binpack") is not None


def test_errors_name_the_file(tmp_path: Path) -> None:
    f = tmp_path / "profile.yaml"
    f.write_text(CONFIG_YAML.replace("weight: 5", "weight: five"))
    with pytest.raises(ValueError) as ei:
        load_scheduler_config(f, registry=REGISTRY)
    assert str(ei.value) == (f"{f}: profiles[1].plugins.score.enabled[0].weight: expected an integer, "
                             f"got a string 'five'")


@pytest.mark.parametrize("text,want", [
    ("kind: [\n", "not valid YAML or JSON at line 2, column 1"),
    ('{"kind": }', "not valid YAML or JSON at line 1, column 10"),
    ("apiVersion: v1\nkind: Node\n---\napiVersion: v1\nkind: Node\n", "expected one KubeSchedulerConfiguration document, found 0"),
])
def test_unreadable_files(tmp_path: Path, text: str, want: str) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError) as ei:
        load_scheduler_config(f, registry=REGISTRY)
    assert str(ei.value).startswith(f"{f}: {want}")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot be read"):
        load_scheduler_config(tmp_path / "nope.yaml")


def test_cli_reports_config_errors_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from schedmesh.cli.main import main

    f = tmp_path / "profile.yaml"
    f.write_text(CONFIG_YAML.replace("percentageOfNodesToScore: 40", "percentageOfNodesToScore: 400"))
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    with pytest.raises(SystemExit) as ei:
        main(["explain", "--cluster", str(empty), "--pods", str(empty), "--config", str(f)])
    assert ei.value.code == 2
    err = capsys.readouterr().err
    assert err == f"schedmesh: error: {f}: percentageOfNodesToScore: Invalid value: 400: not in valid range [0-100]\n"


# ---------------------------------------------------------------------------------------------
# with the real plugins
# ---------------------------------------------------------------------------------------------

def test_default_config_builds_with_the_real_plugins() -> None:
    c = parse_scheduler_config(cfg(), "sched.yaml")  # default registry
    fw = Framework(c.profiles[0])
    assert fw.plugin_names("queueSort") == ["PrioritySort"] and fw.plugin_names("bind") == ["DefaultBinder"]


def test_real_plugin_args_errors_carry_the_path() -> None:
    doc = cfg(profiles=[{"pluginConfig": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "Foo"}}}]}])
    with pytest.raises(ConfigError) as ei:
        parse_scheduler_config(doc, "sched.yaml")
    assert str(ei.value).startswith("sched.yaml: profiles[0].pluginConfig[0].args.scoringStrategy.type: ")


@pytest.mark.parametrize("profile,want", [
    ({"pluginConfig": [{"name": "DefaultPreemption", "args": {"minCandidateNodesPercentage": 200}}]},
     "sched.yaml: profiles[0].pluginConfig[0].args.minCandidateNodesPercentage: Invalid value: 200: "),
    # kube's config validation checks these args even when the plugin is disabled ...
    ({"plugins": {"multiPoint": {"disabled": [{"name": "DefaultPreemption"}]}},
      "pluginConfig": [{"name": "DefaultPreemption", "args": {"minCandidateNodesPercentage": 200}}]},
     "sched.yaml: profiles[0].pluginConfig[0].args.minCandidateNodesPercentage: Invalid value: 200: "),
    # ... but not NodeResourcesFit's (its validator is registered under "NodeResourcesFitArgs")
    ({"plugins": {"multiPoint": {"disabled": [{"name": "NodeResourcesFit"}]}},
      "pluginConfig": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "Foo"}}}]}, None),
], ids=["enabled", "disabled but validated", "disabled NodeResourcesFit not validated"])
def test_real_plugin_args_validation(profile: dict, want: Optional[str]) -> None:
    doc = cfg(profiles=[profile])
    if want is None:
        parse_scheduler_config(doc, "sched.yaml")
        return
    with pytest.raises(ConfigError) as ei:
        parse_scheduler_config(doc, "sched.yaml")
    assert str(ei.value).startswith(want)


def test_plugin_crashing_in_its_constructor_is_reported_in_one_line() -> None:
    class Crashing(FilterPlugin):
        name = "Crashing"

        def __init__(self, args: Optional[dict] = None, handle: Any = None) -> None:
            raise KeyError("oops")

    r = stub_registry()
    r.register(Crashing)
    with pytest.raises(ConfigError) as ei:
        parse_scheduler_config(cfg(profiles=[{"plugins": {"filter": {"enabled": [{"name": "Crashing"}]}}}]),
                               "sched.yaml", r)
    assert str(ei.value) == "sched.yaml: profiles[0]: building the framework: KeyError: 'oops'"
