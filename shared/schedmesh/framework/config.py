"""Reading a kubescheduler.config.k8s.io/v1 KubeSchedulerConfiguration, as kube-scheduler v1.35 does.

Steps, each kube's:

1. strict decoding (cmd/kube-scheduler/app/options/configfile.go with a strict codec): unknown
   fields and wrongly typed values are errors;
2. defaulting (pkg/scheduler/apis/config/v1/defaults.go, default_plugins.go): the default plugins
   merged with each profile's enabled/disabled sets (mergePlugins), default args for every enabled
   in-tree plugin that has an args type, schedulerName "default-scheduler" for a lone profile;
3. validation (apis/config/validation/validation.go): schedulerNames, a common queueSort,
   percentages, backoffs, extenders;
4. what kube checks when it builds the scheduler (scheduler.go buildExtenders, runtime.NewFramework):
   unknown plugin names (via the plugin registry), plugins rejecting their args, profiles without
   exactly one queueSort or without a bind plugin; extenders' ignoredByScheduler resources become
   NodeResourcesFit's ignoredResources in every profile.

Every error is a `ConfigError` (a ValueError) whose message names the file, the field path and the
reason, e.g. `sched.yaml: profiles[1].schedulerName: Required value`. Several validation errors
are reported together, one per line.
"""
from __future__ import annotations

import base64
import binascii
import copy
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

import yaml

from schedmesh.api.resources import is_extended_resource_name, is_qualified_name
from schedmesh.framework.extender import ExtenderTLSConfig, HTTPExtender
from schedmesh.framework.profile import (DEFAULT_SCHEDULER_NAME, EXTENSION_POINTS, MULTI_POINT, Extender,
                                         PluginRef, PluginSet, Profile, default_plugins)

API_VERSION = "kubescheduler.config.k8s.io/v1"
API_GROUP = "kubescheduler.config.k8s.io"
KIND = "KubeSchedulerConfiguration"

DEFAULT_PARALLELISM = 16
DEFAULT_PERCENTAGE_OF_NODES_TO_SCORE = 0  # adaptive
DEFAULT_POD_INITIAL_BACKOFF_SECONDS = 1
DEFAULT_POD_MAX_BACKOFF_SECONDS = 10
NODE_RESOURCES_FIT = "NodeResourcesFit"

# Plugins removed from the v1 API (validation.go invalidPluginsByVersion).
REMOVED_PLUGINS = ("AzureDiskLimits", "CinderLimits", "EBSLimits", "GCEPDLimits")

# The order validatePluginConfig's stages are reported in (kube iterates a map: any order).
_STAGES = ("preEnqueue", "queueSort", "preFilter", "filter", "postFilter", "preScore", "score",
           "reserve", "permit", "preBind", "bind", "postBind")
_PLUGINS_FIELDS = (MULTI_POINT, *EXTENSION_POINTS)

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)


class ConfigError(ValueError):
    """A KubeSchedulerConfiguration that cannot be used: `errors` are "<field path>: <reason>"."""

    def __init__(self, source: str, errors: list[str]) -> None:
        self.source, self.errors = source, list(errors)
        super().__init__("\n".join(f"{source}: {e}" for e in self.errors))


class _DecodeError(Exception):
    """Raised inside decoding; becomes a ConfigError naming the file."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}" if path else reason)


# ---------------------------------------------------------------------------------------------
# kube's field.Error formatting
# ---------------------------------------------------------------------------------------------

def _go_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v)
    return json.dumps(v, separators=(",", ":"), default=str)


def invalid(path: str, value: Any, detail: str) -> str:
    return f"{path}: Invalid value: {_go_value(value)}: {detail}"


def required(path: str) -> str:
    return f"{path}: Required value"


def duplicate(path: str, value: Any, detail: str = "") -> str:
    return f"{path}: Duplicate value: {_go_value(value)}" + (f": {detail}" if detail else "")


# ---------------------------------------------------------------------------------------------
# strict decoding
# ---------------------------------------------------------------------------------------------

def _kind_of(v: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "null"}.get(type(v), type(v).__name__)


def _obj(v: Any, path: str, fields: tuple[str, ...]) -> dict:
    """An object with only the given fields (strict decoding); null is an empty object."""
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise _DecodeError(path, f"expected an object, got {_kind_of(v)}")
    for k in v:
        if k not in fields:
            raise _DecodeError(f"{path}.{k}" if path else str(k), "unknown field")
    return v


def _list(v: Any, path: str) -> list:
    if v is None:
        return []
    if not isinstance(v, list):
        raise _DecodeError(path, f"expected a list, got {_kind_of(v)}")
    return v


def _str(v: Any, path: str, default: Optional[str] = "") -> Optional[str]:
    if v is None:
        return default
    if not isinstance(v, str):
        raise _DecodeError(path, f"expected a string, got {_kind_of(v)}")
    return v


def _bool(v: Any, path: str, default: Optional[bool] = False) -> Optional[bool]:
    if v is None:
        return default
    if not isinstance(v, bool):
        raise _DecodeError(path, f"expected true or false, got {_kind_of(v)} {v!r}")
    return v


def _int(v: Any, path: str, bounds: tuple[int, int], default: Optional[int] = None) -> Optional[int]:
    if v is None:
        return default
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise _DecodeError(path, f"expected an integer, got {_kind_of(v)} {v!r}")
    if not bounds[0] <= v <= bounds[1]:
        raise _DecodeError(path, f"{v} does not fit in a {'32' if bounds == _INT32 else '64'}-bit integer")
    return v


def _number(v: Any, path: str, default: float = 0.0) -> float:
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _DecodeError(path, f"expected a number, got {_kind_of(v)} {v!r}")
    return float(v)


_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)?")


def parse_go_duration(text: str) -> float:
    """time.ParseDuration, in seconds: "1m30s" -> 90.0, "0" -> 0.0."""
    if not isinstance(text, str):
        raise ValueError(f"time: invalid duration {text!r}: must be a string such as \"1m30s\"")
    s = text
    sign = 1.0
    if s[:1] in ("+", "-"):
        sign = -1.0 if s[0] == "-" else 1.0
        s = s[1:]
    if s == "0":
        return 0.0
    if not s:
        raise ValueError(f'time: invalid duration "{text}"')
    total, pos = 0.0, 0
    while pos < len(s):
        m = _DURATION_PART.match(s, pos)
        if not m:
            raise ValueError(f'time: invalid duration "{text}"')
        if m.group(2) is None:
            rest = s[m.end():]
            if not rest:
                raise ValueError(f'time: missing unit in duration "{text}"')
            unit = re.match(r"[^\d.]+", rest)
            raise ValueError(f'time: unknown unit "{unit.group(0) if unit else rest}" in duration "{text}"')
        total += float(m.group(1)) * _DURATION_UNITS[m.group(2)]
        pos = m.end()
    return sign * total


def parse_duration(text: str) -> float:
    """Go's time.ParseDuration ("1m30s", "1.5s", "300ms", "0") in seconds, for the
    KubeSchedulerConfiguration's fields (their own error words)."""
    try:
        return parse_go_duration(text)
    except ValueError:
        raise ValueError(f"invalid duration {text!r}") from None


def _duration(v: Any, path: str, default: Optional[float] = None) -> Optional[float]:
    """metav1.Duration: a JSON string in Go's duration syntax."""
    if v is None:
        return default
    if not isinstance(v, str):
        raise _DecodeError(path, f'expected a duration string such as "30s", got {_kind_of(v)} {v!r}')
    try:
        return parse_duration(v)
    except ValueError as e:
        raise _DecodeError(path, str(e)) from None


def _bytes(v: Any, path: str) -> bytes:
    """[]byte: base64 in JSON (a PEM block written verbatim is accepted too)."""
    if v is None:
        return b""
    if not isinstance(v, str):
        raise _DecodeError(path, f"expected a base64 string, got {_kind_of(v)}")
    if "-----BEGIN" in v:
        return v.encode()
    try:
        return base64.b64decode(v, validate=True)
    except (binascii.Error, ValueError):
        raise _DecodeError(path, "illegal base64 data") from None


# ---------------------------------------------------------------------------------------------
# plugin args: kube's v1 args types, their fields and defaults
# ---------------------------------------------------------------------------------------------

def _default_resources(resources: Any) -> Any:
    """defaultResourceSpec when empty; a 0/absent weight becomes 1."""
    if not resources:
        return [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}]
    if isinstance(resources, list):
        for r in resources:
            if isinstance(r, dict) and not r.get("weight"):
                r["weight"] = 1
    return resources


def _defaults_default_preemption(a: dict) -> None:
    if a.get("minCandidateNodesPercentage") is None:
        a["minCandidateNodesPercentage"] = 10
    if a.get("minCandidateNodesAbsolute") is None:
        a["minCandidateNodesAbsolute"] = 100


def _defaults_inter_pod_affinity(a: dict) -> None:
    if a.get("hardPodAffinityWeight") is None:  # an explicit 0 stays 0
        a["hardPodAffinityWeight"] = 1


def _defaults_fit(a: dict) -> None:
    if a.get("scoringStrategy") is None:
        a["scoringStrategy"] = {"type": "LeastAllocated", "resources": _default_resources(None)}
        return
    ss = a["scoringStrategy"]
    if isinstance(ss, dict):
        ss["resources"] = _default_resources(ss.get("resources"))


def _defaults_balanced(a: dict) -> None:
    a["resources"] = _default_resources(a.get("resources"))


def _defaults_spread(a: dict) -> None:
    if not a.get("defaultingType"):
        a["defaultingType"] = "System"


def _defaults_volume_binding(a: dict) -> None:
    # StorageCapacityScoring is off by default in v1.35: no default shape.
    if a.get("bindTimeoutSeconds") is None:
        a["bindTimeoutSeconds"] = 600


def _defaults_dynamic_resources(a: dict) -> None:
    # DRASchedulerFilterTimeout is on by default; bindingTimeout needs DRADeviceBindingConditions (off).
    if a.get("filterTimeout") is None:
        a["filterTimeout"] = "10s"


@dataclass(frozen=True)
class _ArgsType:
    fields: tuple[str, ...]
    defaults: Callable[[dict], None]


# The in-tree plugins with a registered `<Name>Args` kind in kubescheduler.config.k8s.io/v1.
ARGS_TYPES: dict[str, _ArgsType] = {
    "DefaultPreemption": _ArgsType(("minCandidateNodesPercentage", "minCandidateNodesAbsolute"),
                                   _defaults_default_preemption),
    "InterPodAffinity": _ArgsType(("hardPodAffinityWeight", "ignorePreferredTermsOfExistingPods"),
                                  _defaults_inter_pod_affinity),
    "NodeResourcesFit": _ArgsType(("ignoredResources", "ignoredResourceGroups", "scoringStrategy"), _defaults_fit),
    "PodTopologySpread": _ArgsType(("defaultConstraints", "defaultingType"), _defaults_spread),
    "NodeResourcesBalancedAllocation": _ArgsType(("resources",), _defaults_balanced),
    "VolumeBinding": _ArgsType(("bindTimeoutSeconds", "shape"), _defaults_volume_binding),
    "NodeAffinity": _ArgsType(("addedAffinity",), lambda a: None),
    "DynamicResources": _ArgsType(("filterTimeout", "bindingTimeout"), _defaults_dynamic_resources),
}
_TYPE_META = ("apiVersion", "kind")


def default_plugin_args(name: str, args: Optional[Mapping[str, Any]] = None) -> Optional[dict]:
    """The args kube passes to in-tree plugin `name` (None when it has no args type): `args`
    (a copy) with the v1 defaults filled in."""
    t = ARGS_TYPES.get(name)
    if t is None:
        return None
    out = copy.deepcopy(dict(args or {}))
    for k in _TYPE_META:
        out.pop(k, None)
    t.defaults(out)
    return out


def _decode_args(name: str, raw: Any, path: str) -> Any:
    """PluginConfig.decodeNestedObjects + defaulting: in-tree args are strictly decoded against
    their type and defaulted; anything else (out-of-tree plugins) passes through unchanged."""
    t = ARGS_TYPES.get(name)
    if t is None:
        return copy.deepcopy(raw)
    if raw is not None and not isinstance(raw, dict):
        raise _DecodeError(path, f"expected an object, got {_kind_of(raw)}")
    raw = raw or {}
    kind = raw.get("kind")
    if kind is not None and kind != f"{name}Args":
        raise _DecodeError(path, f"args for plugin {name} were not of type {name}Args.{API_GROUP}, "
                                 f"got {kind}.{API_GROUP}")
    api = raw.get("apiVersion")
    if api is not None and api != API_VERSION:
        raise _DecodeError(f"{path}.apiVersion", f"{api!r} is not supported (only {API_VERSION})")
    _obj(raw, path, t.fields + _TYPE_META)
    return default_plugin_args(name, raw)


# ---------------------------------------------------------------------------------------------
# defaulting of plugin sets (default_plugins.go)
# ---------------------------------------------------------------------------------------------

def merge_plugin_set(default: PluginSet, custom: PluginSet) -> PluginSet:
    """mergePluginSet: custom-enabled plugins replace same-named defaults in place (the last
    custom entry of a name wins the slot, earlier duplicates are appended), other custom ones are
    appended; defaults named in `disabled` (or all, with "*") are dropped."""
    disabled = [PluginRef(r.name) for r in custom.disabled] + [PluginRef(r.name) for r in default.disabled]
    disabled_names = {r.name for r in disabled}
    custom_index = {r.name: i for i, r in enumerate(custom.enabled)}
    replaced: set[int] = set()
    enabled: list[PluginRef] = []
    if "*" not in disabled_names:
        for d in default.enabled:
            if d.name in disabled_names:
                continue
            i = custom_index.get(d.name)
            if i is not None:
                d = custom.enabled[i]
                replaced.add(i)
            enabled.append(PluginRef(d.name, d.weight))
    enabled += [PluginRef(r.name, r.weight) for i, r in enumerate(custom.enabled) if i not in replaced]
    return PluginSet(enabled=enabled, disabled=disabled)


def merge_plugins(defaults: dict[str, PluginSet], custom: Optional[dict[str, PluginSet]]) -> dict[str, PluginSet]:
    """mergePlugins over multiPoint and every extension point; empty sets are left out."""
    if custom is None:
        return {k: PluginSet(list(v.enabled), list(v.disabled)) for k, v in defaults.items()}
    out: dict[str, PluginSet] = {}
    for point in _PLUGINS_FIELDS:
        merged = merge_plugin_set(defaults.get(point) or PluginSet(), custom.get(point) or PluginSet())
        if merged.enabled or merged.disabled:
            out[point] = merged
    return out


def enabled_plugin_names(plugins: Mapping[str, PluginSet]) -> list[str]:
    """pluginsNames: every plugin enabled at any point, sorted."""
    return sorted({r.name for ps in plugins.values() for r in ps.enabled})


# ---------------------------------------------------------------------------------------------
# the configuration
# ---------------------------------------------------------------------------------------------

@dataclass(slots=True)
class ExtenderConfig(Extender):
    """An Extender with what profile.Extender does not hold: TLS settings and the managed
    resources the scheduler should ignore (managedResources[].ignoredByScheduler)."""

    tls_config: Optional[ExtenderTLSConfig] = None
    ignored_by_scheduler: list[str] = field(default_factory=list)


@dataclass
class _ProfileSource:
    """Where a profile's pieces came from in the file, for error paths."""

    index: int
    plugin_config_index: dict[str, int] = field(default_factory=dict)  # plugin -> pluginConfig[i]
    enabled_paths: list[tuple[str, str]] = field(default_factory=list)  # (plugin, path of its name)


@dataclass
class SchedulerConfig:
    """A defaulted, validated KubeSchedulerConfiguration (the parts schedmesh uses)."""

    profiles: list[Profile]
    percentage_of_nodes_to_score: int = DEFAULT_PERCENTAGE_OF_NODES_TO_SCORE
    pod_initial_backoff_seconds: int = DEFAULT_POD_INITIAL_BACKOFF_SECONDS
    pod_max_backoff_seconds: int = DEFAULT_POD_MAX_BACKOFF_SECONDS
    parallelism: int = DEFAULT_PARALLELISM
    extenders: list[Extender] = field(default_factory=list)
    delay_cache_until_active: bool = False
    source: str = "<config>"
    _sources: list[_ProfileSource] = field(default_factory=list, repr=False, compare=False)

    def profile(self, scheduler_name: str) -> Optional[Profile]:
        return next((p for p in self.profiles if p.scheduler_name == scheduler_name), None)

    def build_extenders(self) -> list[HTTPExtender]:
        """HTTPExtenders in kube's order: the configured order, ignorable ones moved to the end."""
        built: list[HTTPExtender] = []
        ignorable: list[HTTPExtender] = []
        for i, e in enumerate(self.extenders):
            try:
                ext = HTTPExtender(e, getattr(e, "tls_config", None))
            except (ValueError, OSError) as err:
                raise ConfigError(self.source, [f"extenders[{i}].tlsConfig: {err}"]) from None
            (ignorable if ext.is_ignorable() else built).append(ext)
        return built + ignorable

    def validate(self, registry: Any = None) -> None:
        """What kube checks when it builds the scheduler from this configuration: every enabled
        plugin is registered, every profile's Framework can be built (plugins accept their args,
        one queueSort, at least one bind plugin, no double registration). Args of the plugins
        kube's config validation checks are checked even when the plugin is not enabled."""
        from schedmesh.framework.registry import default_registry
        from schedmesh.framework.runtime import Framework, ProfileError

        registry = registry or default_registry()
        known = set(registry.names())
        if len(self._sources) != len(self.profiles):  # built by hand, not read from a file
            self._sources = [_ProfileSource(i) for i in range(len(self.profiles))]
        errors = []
        for prof, src in zip(self.profiles, self._sources):
            for name, path in src.enabled_paths:
                if name not in known:
                    errors.append(invalid(path, name, f"no plugin named {json.dumps(name)} is registered "
                                                      f"(known: {', '.join(sorted(known))})"))
            enabled = set(enabled_plugin_names(prof.plugins))
            for name in src.plugin_config_index:
                if name in VALIDATED_ARGS and name not in enabled:
                    err = _args_error(name, prof.plugin_config.get(name), registry, src)
                    if err:
                        errors.append(err)
        if errors:
            raise ConfigError(self.source, errors)
        for prof, src in zip(self.profiles, self._sources):
            try:
                Framework(prof, registry)
            except ProfileError as e:
                located = next(filter(None, (_args_error(n, prof.plugin_config.get(n), registry, src)
                                             for n in enabled_plugin_names(prof.plugins))), None)
                raise ConfigError(self.source, [located or
                                                f"profiles[{src.index}]: {_strip_profile_prefix(str(e))}"]) from None
            except Exception as e:  # noqa: BLE001 - a plugin failing oddly: still one line, with where
                raise ConfigError(self.source, [f"profiles[{src.index}]: building the framework: "
                                                f"{type(e).__name__}: {e}"]) from None


# The plugins whose args kube's config validation checks (validatePluginConfig; its entry for
# NodeResourcesFit is keyed "NodeResourcesFitArgs", so NodeResourcesFit's args are only checked
# when the plugin is built).
VALIDATED_ARGS = ("DefaultPreemption", "InterPodAffinity", "NodeAffinity", "NodeResourcesBalancedAllocation",
                  "PodTopologySpread", "VolumeBinding", "DynamicResources")


def _args_error(name: str, args: Any, registry: Any, src: _ProfileSource) -> Optional[str]:
    """Whether plugin `name` rejects `args` (its constructor raises ValueError), as an error naming
    where those args are in the file."""
    try:
        cls = registry.get(name)
    except Exception:  # noqa: BLE001 - a missing plugin is reported elsewhere
        return None
    try:
        cls(args, None)
    except (ValueError, TypeError) as e:
        j = src.plugin_config_index.get(name)
        where = (f"profiles[{src.index}].pluginConfig[{j}].args" if j is not None
                 else f"profiles[{src.index}] (default args of plugin {name})")
        msg = str(e)
        if j is not None and re.match(r"^[A-Za-z_][\w.\[\]]*: ", msg):
            return f"{where}.{msg}"
        return f"{where}: plugin {name}: {msg}"
    except Exception:  # noqa: BLE001 - needs a real handle; the Framework's own error stands
        return None
    return None


def _strip_profile_prefix(msg: str) -> str:
    return re.sub(r"^profile '[^']*': ", "", msg)


# ---------------------------------------------------------------------------------------------
# decoding + defaulting
# ---------------------------------------------------------------------------------------------

_TOP_FIELDS = ("apiVersion", "kind", "parallelism", "leaderElection", "clientConnection", "enableProfiling",
               "enableContentionProfiling", "percentageOfNodesToScore", "podInitialBackoffSeconds",
               "podMaxBackoffSeconds", "profiles", "extenders", "delayCacheUntilActive")
_LEADER_FIELDS = ("leaderElect", "leaseDuration", "renewDeadline", "retryPeriod", "resourceLock", "resourceName",
                  "resourceNamespace")
_CLIENT_FIELDS = ("kubeconfig", "acceptContentTypes", "contentType", "qps", "burst")
_PROFILE_FIELDS = ("schedulerName", "percentageOfNodesToScore", "plugins", "pluginConfig")
_EXTENDER_FIELDS = ("urlPrefix", "filterVerb", "preemptVerb", "prioritizeVerb", "weight", "bindVerb", "enableHTTPS",
                    "tlsConfig", "httpTimeout", "nodeCacheCapable", "managedResources", "ignorable")
_TLS_FIELDS = ("insecure", "serverName", "certFile", "keyFile", "caFile", "certData", "keyData", "caData")


def _plugin_set(v: Any, path: str) -> PluginSet:
    d = _obj(v, path, ("enabled", "disabled"))
    out = PluginSet()
    for key, dest in (("enabled", out.enabled), ("disabled", out.disabled)):
        for i, p in enumerate(_list(d.get(key), f"{path}.{key}")):
            pp = f"{path}.{key}[{i}]"
            p = _obj(p, pp, ("name", "weight"))
            dest.append(PluginRef(_str(p.get("name"), f"{pp}.name"), _int(p.get("weight"), f"{pp}.weight", _INT32, 0)))
    return out


def _leader_election(v: Any, errors: list[str]) -> None:
    d = _obj(v, "leaderElection", _LEADER_FIELDS)
    elect = _bool(d.get("leaderElect"), "leaderElection.leaderElect", True)
    # RecommendedDefaultLeaderElectionConfiguration; a zero duration means unset.
    lease = _duration(d.get("leaseDuration"), "leaderElection.leaseDuration", 0.0) or 15.0
    renew = _duration(d.get("renewDeadline"), "leaderElection.renewDeadline", 0.0) or 10.0
    retry = _duration(d.get("retryPeriod"), "leaderElection.retryPeriod", 0.0) or 2.0
    lock = _str(d.get("resourceLock"), "leaderElection.resourceLock") or "leases"
    # resourceNamespace / resourceName default to kube-system / kube-scheduler when empty, so the
    # Required checks kube makes on them never fail after defaulting.
    _str(d.get("resourceNamespace"), "leaderElection.resourceNamespace")
    _str(d.get("resourceName"), "leaderElection.resourceName")
    if not elect:
        return
    for f, val in (("leaseDuration", lease), ("renewDeadline", renew), ("retryPeriod", retry)):
        if val <= 0:
            errors.append(invalid(f"leaderElection.{f}", d.get(f), "must be greater than zero"))
    if lease <= renew:
        errors.append(invalid("leaderElection.leaseDuration", d.get("renewDeadline") or "10s",
                              "must be greater than `RenewDeadline`"))
    if lock != "leases":
        errors.append(invalid("leaderElection.resourceLock", lock, 'resourceLock value must be "leases"'))


def _client_connection(v: Any, errors: list[str]) -> None:
    d = _obj(v, "clientConnection", _CLIENT_FIELDS)
    for f in ("kubeconfig", "acceptContentTypes", "contentType"):
        _str(d.get(f), f"clientConnection.{f}")
    _number(d.get("qps"), "clientConnection.qps")
    burst = _int(d.get("burst"), "clientConnection.burst", _INT32, 0)
    if burst < 0:
        errors.append(invalid("clientConnection.burst", burst, "must be non-negative"))


def _extender(v: Any, path: str) -> ExtenderConfig:
    d = _obj(v, path, _EXTENDER_FIELDS)
    tls = None
    if d.get("tlsConfig") is not None:
        t = _obj(d["tlsConfig"], f"{path}.tlsConfig", _TLS_FIELDS)
        tp = f"{path}.tlsConfig"
        tls = ExtenderTLSConfig(
            insecure=_bool(t.get("insecure"), f"{tp}.insecure"), server_name=_str(t.get("serverName"), f"{tp}.serverName"),
            cert_file=_str(t.get("certFile"), f"{tp}.certFile"), key_file=_str(t.get("keyFile"), f"{tp}.keyFile"),
            ca_file=_str(t.get("caFile"), f"{tp}.caFile"), cert_data=_bytes(t.get("certData"), f"{tp}.certData"),
            key_data=_bytes(t.get("keyData"), f"{tp}.keyData"), ca_data=_bytes(t.get("caData"), f"{tp}.caData"))
    managed, ignored = [], []
    for j, r in enumerate(_list(d.get("managedResources"), f"{path}.managedResources")):
        rp = f"{path}.managedResources[{j}]"
        r = _obj(r, rp, ("name", "ignoredByScheduler"))
        name = _str(r.get("name"), f"{rp}.name")
        managed.append(name)
        if _bool(r.get("ignoredByScheduler"), f"{rp}.ignoredByScheduler"):
            ignored.append(name)
    return ExtenderConfig(
        url_prefix=_str(d.get("urlPrefix"), f"{path}.urlPrefix"),
        filter_verb=_str(d.get("filterVerb"), f"{path}.filterVerb"),
        prioritize_verb=_str(d.get("prioritizeVerb"), f"{path}.prioritizeVerb"),
        preempt_verb=_str(d.get("preemptVerb"), f"{path}.preemptVerb"),
        bind_verb=_str(d.get("bindVerb"), f"{path}.bindVerb"),
        weight=_int(d.get("weight"), f"{path}.weight", _INT64, 0),
        enable_https=_bool(d.get("enableHTTPS"), f"{path}.enableHTTPS"),
        # NewHTTPExtender: a zero timeout means the 5s default.
        http_timeout_seconds=_duration(d.get("httpTimeout"), f"{path}.httpTimeout", 0.0) or 5.0,
        node_cache_capable=_bool(d.get("nodeCacheCapable"), f"{path}.nodeCacheCapable"),
        managed_resources=managed, ignorable=_bool(d.get("ignorable"), f"{path}.ignorable"),
        tls_config=tls, ignored_by_scheduler=ignored)


@dataclass
class _RawProfile:
    scheduler_name: Optional[str]
    percentage: Optional[int]
    plugins: Optional[dict[str, PluginSet]]
    plugin_config: list[tuple[str, Any]]


def _raw_profile(v: Any, path: str) -> _RawProfile:
    d = _obj(v, path, _PROFILE_FIELDS)
    plugins = None
    if d.get("plugins") is not None:
        pd = _obj(d["plugins"], f"{path}.plugins", _PLUGINS_FIELDS)
        plugins = {k: _plugin_set(pd.get(k), f"{path}.plugins.{k}") for k in _PLUGINS_FIELDS if pd.get(k) is not None}
    configs = []
    for j, pc in enumerate(_list(d.get("pluginConfig"), f"{path}.pluginConfig")):
        pp = f"{path}.pluginConfig[{j}]"
        pc = _obj(pc, pp, ("name", "args"))
        name = _str(pc.get("name"), f"{pp}.name")
        configs.append((name, _decode_args(name, pc.get("args"), f"{pp}.args")))
    return _RawProfile(_str(d.get("schedulerName"), f"{path}.schedulerName", None),
                       _int(d.get("percentageOfNodesToScore"), f"{path}.percentageOfNodesToScore", _INT32),
                       plugins, configs)


def _validate_percentage(path: str, value: Optional[int], errors: list[str]) -> None:
    if value is not None and not 0 <= value <= 100:
        errors.append(invalid(path, value, "not in valid range [0-100]"))


def _plugin_set_key(ps: Optional[PluginSet]) -> tuple:
    ps = ps or PluginSet()
    return (tuple((r.name, r.weight) for r in ps.enabled), tuple(r.name for r in ps.disabled))


def _validate_common_queue_sort(profiles: list[Profile], errors: list[str]) -> None:
    """validateCommonQueueSort: the queueSort plugin set (as written, after defaulting) and the
    queue sort plugin's args must be the same in every profile."""
    canon = profiles[0].plugins.get("queueSort")
    enabled = canon.enabled if canon else []
    qs_name = enabled[0].name if enabled else ""
    if len(enabled) > 1:
        errors.append(invalid("profiles[0].plugins.queueSort.Enabled", len(enabled),
                              "only one queue sort plugin can be enabled"))
    qs_args = profiles[0].plugin_config.get(qs_name) if qs_name else None
    for i in range(1, len(profiles)):
        curr = profiles[i].plugins.get("queueSort")
        if _plugin_set_key(canon) != _plugin_set_key(curr):
            errors.append(invalid(f"profiles[{i}].plugins.queueSort",
                                  {"enabled": [{"name": n, "weight": w} for n, w in _plugin_set_key(curr)[0]],
                                   "disabled": [{"name": n} for n in _plugin_set_key(curr)[1]]},
                                  "must be the same for all profiles"))
        if qs_name and qs_name in profiles[i].plugin_config and profiles[i].plugin_config[qs_name] != qs_args:
            errors.append(invalid(f"profiles[{i}].pluginConfig.args", profiles[i].plugin_config[qs_name],
                                  "queueSort must be the same for all profiles"))


def parse_scheduler_config(doc: Any, source: str = "<config>", registry: Any = None,
                           check_plugins: bool = True) -> SchedulerConfig:
    """Decode, default and validate one KubeSchedulerConfiguration object (a dict as read from
    YAML/JSON). With `check_plugins`, also build every profile's Framework (see validate())."""
    try:
        cfg, errors = _decode_and_default(doc)
    except _DecodeError as e:
        raise ConfigError(source, [str(e)]) from None
    cfg.source = source
    if errors:
        raise ConfigError(source, errors)
    if check_plugins:
        cfg.validate(registry)
    return cfg


def _decode_and_default(doc: Any) -> tuple[SchedulerConfig, list[str]]:
    if not isinstance(doc, dict):
        raise _DecodeError("", f"expected a KubeSchedulerConfiguration object, got {_kind_of(doc)}")
    api, kind = doc.get("apiVersion"), doc.get("kind")
    if not kind:
        raise _DecodeError("kind", f"Object 'Kind' is missing (want {KIND})")
    if kind != KIND:
        raise _DecodeError("kind", f"{kind!r} is not {KIND}")
    if api != API_VERSION:
        raise _DecodeError("apiVersion", f"no kind {KIND!r} is registered for version {api!r} "
                                         f"(only {API_VERSION} is supported)")
    d = _obj(doc, "", _TOP_FIELDS)
    errors: list[str] = []
    _client_connection(d.get("clientConnection"), errors)
    _leader_election(d.get("leaderElection"), errors)
    enable_profiling = _bool(d.get("enableProfiling"), "enableProfiling", True)
    _bool(d.get("enableContentionProfiling"), "enableContentionProfiling", enable_profiling)

    parallelism = _int(d.get("parallelism"), "parallelism", _INT32, DEFAULT_PARALLELISM)
    if parallelism <= 0:
        errors.append(invalid("parallelism", parallelism, "should be an integer value greater than zero"))

    raw_profiles = [_raw_profile(p, f"profiles[{i}]") for i, p in enumerate(_list(d.get("profiles"), "profiles"))]
    if not raw_profiles:
        raw_profiles = [_RawProfile(None, None, None, [])]
    if len(raw_profiles) == 1 and raw_profiles[0].scheduler_name is None:
        raw_profiles[0].scheduler_name = DEFAULT_SCHEDULER_NAME

    profiles, sources = [], []
    seen_names: dict[str, int] = {}
    for i, rp in enumerate(raw_profiles):
        path = f"profiles[{i}]"
        prof, src = _default_profile(i, rp, errors)
        profiles.append(prof)
        sources.append(src)
        if not prof.scheduler_name:
            errors.append(required(f"{path}.schedulerName"))
        _validate_percentage(f"{path}.percentageOfNodesToScore", prof.percentage_of_nodes_to_score, errors)
        if prof.scheduler_name in seen_names:
            errors.append(duplicate(f"{path}.schedulerName", prof.scheduler_name,
                                    f"already used by profiles[{seen_names[prof.scheduler_name]}].schedulerName"))
        seen_names[prof.scheduler_name] = i
    _validate_common_queue_sort(profiles, errors)

    percentage = _int(d.get("percentageOfNodesToScore"), "percentageOfNodesToScore", _INT32,
                      DEFAULT_PERCENTAGE_OF_NODES_TO_SCORE)
    _validate_percentage("percentageOfNodesToScore", percentage, errors)
    initial = _int(d.get("podInitialBackoffSeconds"), "podInitialBackoffSeconds", _INT64,
                   DEFAULT_POD_INITIAL_BACKOFF_SECONDS)
    maximum = _int(d.get("podMaxBackoffSeconds"), "podMaxBackoffSeconds", _INT64, DEFAULT_POD_MAX_BACKOFF_SECONDS)
    if initial <= 0:
        errors.append(invalid("podInitialBackoffSeconds", initial, "must be greater than 0"))
    if maximum < initial:
        errors.append(invalid("podMaxBackoffSeconds", maximum, "must be greater than or equal to PodInitialBackoffSeconds"))

    extenders = [_extender(e, f"extenders[{i}]") for i, e in enumerate(_list(d.get("extenders"), "extenders"))]
    _validate_extenders(extenders, errors)
    if not errors:
        _apply_ignored_resources(extenders, profiles, errors)

    cfg = SchedulerConfig(profiles=profiles, percentage_of_nodes_to_score=percentage,
                          pod_initial_backoff_seconds=initial, pod_max_backoff_seconds=maximum,
                          parallelism=parallelism, extenders=list(extenders),
                          delay_cache_until_active=_bool(d.get("delayCacheUntilActive"), "delayCacheUntilActive"),
                          _sources=sources)
    return cfg, errors


def _default_profile(i: int, rp: _RawProfile, errors: list[str]) -> tuple[Profile, _ProfileSource]:
    """setDefaults_KubeSchedulerProfile plus the per-profile pluginConfig validation."""
    path = f"profiles[{i}]"
    src = _ProfileSource(i)
    plugins = merge_plugins(default_plugins(), rp.plugins)
    for point, ps in (rp.plugins or {}).items():
        for j, ref in enumerate(ps.enabled):
            src.enabled_paths.append((ref.name, f"{path}.plugins.{point}.enabled[{j}].name"))
            if point != MULTI_POINT and ref.name in REMOVED_PLUGINS:
                errors.append(invalid(f"{path}.plugins.{point}.enabled[{j}]", ref.name,
                                      f'was invalid in version "{API_VERSION}" (KubeSchedulerConfiguration is '
                                      f'version "{API_VERSION}")'))
    config: dict[str, Any] = {}
    for j, (name, args) in enumerate(rp.plugin_config):
        pc_path = f"{path}.pluginConfig[{j}]"
        if name in config:
            errors.append(duplicate(pc_path, name))
            continue
        if name in REMOVED_PLUGINS:
            errors.append(invalid(pc_path, name, f'was invalid in version "{API_VERSION}" '
                                                 f'(KubeSchedulerConfiguration is version "{API_VERSION}")'))
        config[name] = args
        src.plugin_config_index[name] = j
    for name in enabled_plugin_names(plugins):
        if name not in config and name in ARGS_TYPES:
            config[name] = default_plugin_args(name)
    prof = Profile(scheduler_name=rp.scheduler_name or "", plugins=plugins, plugin_config=config,
                   percentage_of_nodes_to_score=rp.percentage)
    return prof, src


def _validate_extenders(extenders: list[ExtenderConfig], errors: list[str]) -> None:
    binders = 0
    seen: set[str] = set()
    for i, e in enumerate(extenders):
        path = f"extenders[{i}]"
        if e.prioritize_verb and e.weight <= 0:
            errors.append(invalid(f"{path}.weight", e.weight, "must have a positive weight applied to it"))
        if e.bind_verb:
            binders += 1
        for j, name in enumerate(e.managed_resources):
            rp = f"{path}.managedResources[{j}].name"
            if not is_qualified_name(name):
                errors.append(invalid(rp, name, "must be a qualified name ([prefix/]name of alphanumerics, "
                                                "'-', '_' or '.', starting and ending with an alphanumeric)"))
            elif not is_extended_resource_name(name):
                errors.append(invalid(rp, name, "is an invalid extended resource name"))
            if name in seen:
                errors.append(invalid(rp, name, "duplicate extender managed resource name"))
            seen.add(name)
    if binders > 1:
        errors.append(invalid("extenders", f"found {binders} extenders implementing bind",
                              "only one extender can implement bind"))


def _apply_ignored_resources(extenders: list[ExtenderConfig], profiles: list[Profile], errors: list[str]) -> None:
    """buildExtenders: resources extenders manage with ignoredByScheduler become NodeResourcesFit's
    ignoredResources in every profile (replacing what the profile set)."""
    ignored = [name for e in extenders for name in e.ignored_by_scheduler]
    if not ignored:
        return
    for i, prof in enumerate(profiles):
        args = prof.plugin_config.get(NODE_RESOURCES_FIT)
        if not isinstance(args, dict):
            errors.append(f"profiles[{i}].pluginConfig: can't find NodeResourcesFitArgs in plugin config "
                          f"(extenders' ignoredByScheduler resources need it)")
            continue
        args["ignoredResources"] = list(ignored)


# ---------------------------------------------------------------------------------------------
# entry points
# ---------------------------------------------------------------------------------------------

def _read_documents(path: Path) -> list[Any]:
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(str(path), [f"cannot be read: {e.strerror}"]) from None
    try:
        if text.lstrip().startswith("{"):
            return [json.loads(text)]
        return [d for d in yaml.safe_load_all(text) if d is not None]
    except (yaml.YAMLError, json.JSONDecodeError) as e:
        mark = getattr(e, "problem_mark", None)
        if mark is not None:
            at = f"line {mark.line + 1}, column {mark.column + 1}"
        elif isinstance(e, json.JSONDecodeError):
            at = f"line {e.lineno}, column {e.colno}"
        else:
            at = "?"
        raise ConfigError(str(path), [f"not valid YAML or JSON at {at}: {getattr(e, 'problem', None) or e}"]) from None


def load_scheduler_config(config: str | Path | Mapping[str, Any], source: Optional[str] = None,
                          registry: Any = None, check_plugins: bool = True) -> SchedulerConfig:
    """Read a KubeSchedulerConfiguration from a YAML/JSON file path, or from the dict form
    `schedmesh.api.load.Manifests.scheduler_configs` holds. A file may hold other documents too
    (a cluster manifest); exactly one of them must be the configuration."""
    if isinstance(config, Mapping):
        return parse_scheduler_config(dict(config), source or "<config>", registry, check_plugins)
    path = Path(config)
    src = source or str(path)
    docs = _read_documents(path)
    if len(docs) == 1:
        return parse_scheduler_config(docs[0], src, registry, check_plugins)
    configs = [d for d in docs if isinstance(d, dict) and d.get("kind") == KIND]
    if len(configs) != 1:
        raise ConfigError(src, [f"expected one {KIND} document, found {len(configs)}"])
    return parse_scheduler_config(configs[0], src, registry, check_plugins)


def default_scheduler_config(registry: Any = None, check_plugins: bool = False) -> SchedulerConfig:
    """kube-scheduler's configuration when none is given (one default profile, defaulted args)."""
    return parse_scheduler_config({"apiVersion": API_VERSION, "kind": KIND}, "<default>", registry, check_plugins)
