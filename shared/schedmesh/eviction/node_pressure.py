"""The kubelet's node-pressure eviction, computed from a usage model instead of cgroups
(pkg/kubelet/eviction: eviction_manager.go synchronize / Admit / localStorageEviction,
helpers.go, api/types.go; defaults_linux.go; v1.35).

Configuration comes from KubeletConfiguration's fields (`EvictionConfig.from_kubelet_configuration`):
evictionHard (default memory.available<100Mi, nodefs.available<10%, nodefs.inodesFree<5%,
imagefs.available<15%, imagefs.inodesFree<5%; a given map replaces the defaults unless
mergeDefaultEvictionSettings), evictionSoft with evictionSoftGracePeriod (required per soft
signal), evictionMinimumReclaim, evictionMaxPodGracePeriod (0), evictionPressureTransitionPeriod
(5m), enforceNodeAllocatable (["pods"]: the hard memory.available threshold is copied to
allocatableMemory.available) and localStorageCapacityIsolation (true). "0%" and "100%" are ignored;
percentages are float32 as in kube, so 10% of a capacity is truncated from capacity * 0.1f.

Signals (from `NodeCapacity` and `NodeUsage`: system usage plus each pod's usage, see `usage`):
memory.available = capacity - working set; allocatableMemory.available = the pods cgroup limit
(allocatable + the hard memory threshold) - pods' working set; nodefs.available / inodesFree =
nodefs capacity - (system + pods' ephemeral storage / inodes + images when there is no dedicated
imagefs); imagefs.* = the dedicated imagefs minus its system usage, else the same as nodefs;
pid.available = max pids - processes. A signal without a capacity is not observed.

Each `EvictionManager.synchronize(now, usage, pods)` follows synchronize(): thresholds met
(ignoring grace), plus previously met ones not yet back above threshold + minimum reclaim;
first-observed times for soft grace periods; MemoryPressure / DiskPressure / PIDPressure while
observed within the transition period; pods over their ephemeral-storage limits evicted first
(grace 1 s); then the thresholds whose grace has passed and whose observation is new are ranked
(memory first), the starved resource's ranking orders the pods (memory: usage above requests
first, then priority ascending, then usage - request descending; disk likewise with
ephemeral-storage (inodes compare usage - ephemeral-storage request, as kube does); pids:
priority, then process count), and the first non-critical pod is evicted with kube's message
("The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. Container c
was using 200Mi, request is 100Mi, has larger consumption of memory. " - kube's trailing space
included) and grace 1 s (hard, immediateEvictionGracePeriodSeconds) or
min(evictionMaxPodGracePeriod, terminationGracePeriodSeconds) (soft).

Differences from the kubelet, because there is no real node: no node-level reclaim (image and
dead-container GC) is tried before evicting; no containerfs signals; with a dedicated imagefs the
pods' writable layers are not modelled (all their ephemeral storage is on nodefs, so imagefs
ranks by priority); orderings kube leaves to map iteration are fixed (signals in the order of
SIGNALS); pods already terminating are not evicted again (the kubelet blocks on their cleanup).
"""
from __future__ import annotations

import math
import re
import struct
import time
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

from schedmesh.api.quantity import QuantityError, parse_quantity
from schedmesh.api.resources import (EPHEMERAL_STORAGE, MEMORY, aggregate_container_requests, has_pod_level_requests,
                                     is_supported_pod_level_resource, pod_requests)
from schedmesh.api.types import NO_SCHEDULE, Container, Node, NodeCondition, Pod, PodCondition, Taint
from schedmesh.eviction.qos import BEST_EFFORT, qos_class
from schedmesh.eviction.usage import INODES, NO_USAGE, PIDS, PodUsage, pod_usage
from schedmesh.framework.config import parse_go_duration  # the one Go-duration parser
from schedmesh.plugins.taint_toleration.tolerations import tolerations_tolerate_taint
from schedmesh.preemption.gosort import go_sort_slice

# ---- signals ---------------------------------------------------------------------------------

MEMORY_AVAILABLE = "memory.available"
ALLOCATABLE_MEMORY_AVAILABLE = "allocatableMemory.available"
NODEFS_AVAILABLE = "nodefs.available"
NODEFS_INODES_FREE = "nodefs.inodesFree"
IMAGEFS_AVAILABLE = "imagefs.available"
IMAGEFS_INODES_FREE = "imagefs.inodesFree"
CONTAINERFS_AVAILABLE = "containerfs.available"
CONTAINERFS_INODES_FREE = "containerfs.inodesFree"
PID_AVAILABLE = "pid.available"

# Every signal kube accepts, in the order this module uses wherever kube iterates a map.
SIGNALS = (MEMORY_AVAILABLE, ALLOCATABLE_MEMORY_AVAILABLE, NODEFS_AVAILABLE, NODEFS_INODES_FREE,
           IMAGEFS_AVAILABLE, IMAGEFS_INODES_FREE, CONTAINERFS_AVAILABLE, CONTAINERFS_INODES_FREE, PID_AVAILABLE)

MEMORY_PRESSURE = "MemoryPressure"
DISK_PRESSURE = "DiskPressure"
PID_PRESSURE = "PIDPressure"
PRESSURE_CONDITIONS = (MEMORY_PRESSURE, DISK_PRESSURE, PID_PRESSURE)

SIGNAL_RESOURCE = {
    MEMORY_AVAILABLE: MEMORY, ALLOCATABLE_MEMORY_AVAILABLE: MEMORY,
    NODEFS_AVAILABLE: EPHEMERAL_STORAGE, IMAGEFS_AVAILABLE: EPHEMERAL_STORAGE, CONTAINERFS_AVAILABLE: EPHEMERAL_STORAGE,
    NODEFS_INODES_FREE: INODES, IMAGEFS_INODES_FREE: INODES, CONTAINERFS_INODES_FREE: INODES,
    PID_AVAILABLE: PIDS,
}
SIGNAL_CONDITION = {
    MEMORY_AVAILABLE: MEMORY_PRESSURE, ALLOCATABLE_MEMORY_AVAILABLE: MEMORY_PRESSURE,
    NODEFS_AVAILABLE: DISK_PRESSURE, NODEFS_INODES_FREE: DISK_PRESSURE, IMAGEFS_AVAILABLE: DISK_PRESSURE,
    IMAGEFS_INODES_FREE: DISK_PRESSURE, CONTAINERFS_AVAILABLE: DISK_PRESSURE, CONTAINERFS_INODES_FREE: DISK_PRESSURE,
    PID_AVAILABLE: PID_PRESSURE,
}

# KubeletConfiguration defaults (Linux).
DEFAULT_EVICTION_HARD = {MEMORY_AVAILABLE: "100Mi", NODEFS_AVAILABLE: "10%", NODEFS_INODES_FREE: "5%",
                         IMAGEFS_AVAILABLE: "15%", IMAGEFS_INODES_FREE: "5%"}
DEFAULT_PRESSURE_TRANSITION_PERIOD = 300.0
DEFAULT_ENFORCE_NODE_ALLOCATABLE = ("pods",)

# The kubelet's constants.
HARD_EVICTION_GRACE_PERIOD_SECONDS = 1  # immediateEvictionGracePeriodSeconds
POD_CLEANUP_TIMEOUT = 30.0  # how long the kubelet waits for an evicted pod before the next sync
SYSTEM_CRITICAL_PRIORITY = 2_000_000_000
REASON_EVICTED = "Evicted"
DISRUPTION_TARGET = "DisruptionTarget"
REASON_TERMINATION_BY_KUBELET = "TerminationByKubelet"
EVENT_EVICTION_THRESHOLD_MET = "EvictionThresholdMet"  # "Attempting to reclaim %s", on the node
SIGNAL_EPHEMERAL_POD_FS_LIMIT = "ephemeralpodfs.limit"
SIGNAL_EPHEMERAL_CONTAINER_FS_LIMIT = "ephemeralcontainerfs.limit"
CONFIG_SOURCE_ANNOTATION = "kubernetes.io/config.source"
CONFIG_MIRROR_ANNOTATION = "kubernetes.io/config.mirror"

# Event annotations the kubelet attaches to an eviction.
OFFENDING_CONTAINERS_KEY = "offending_containers"
OFFENDING_CONTAINERS_USAGE_KEY = "offending_containers_usage"
OFFENDING_POD_KEY = "offending_pod"
OFFENDING_POD_USAGE_KEY = "offending_pod_usage"
STARVED_RESOURCE_KEY = "starved_resource"

_CONDITION_TEXT = {  # (True reason, True message, False reason, False message), from the kubelet's setters
    MEMORY_PRESSURE: ("KubeletHasInsufficientMemory", "kubelet has insufficient memory available",
                      "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    DISK_PRESSURE: ("KubeletHasDiskPressure", "kubelet has disk pressure",
                    "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    PID_PRESSURE: ("KubeletHasInsufficientPID", "kubelet has insufficient PID available",
                   "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
}


class EvictionConfigError(ValueError):
    """A KubeletConfiguration eviction field is invalid."""


# ---- quantities as kube prints them (resource.Quantity.String) -------------------------------

BINARY_SI, DECIMAL_SI, DECIMAL_EXPONENT = "BinarySI", "DecimalSI", "DecimalExponent"
_DECIMAL_SUFFIX = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}
_BINARY_SUFFIX = {0: "", 10: "Ki", 20: "Mi", 30: "Gi", 40: "Ti", 50: "Pi", 60: "Ei"}


def quantity_string(q: Fraction | int, fmt: str) -> str:
    """Quantity.String() of a value in the given format: 104857600 BinarySI is "100Mi", 1500
    DecimalSI "1500", 2000 DecimalSI "2k"; BinarySI falls back to DecimalSI below 1024 or for
    fractions."""
    q = Fraction(q)
    if q == 0:
        return "0"
    if fmt == BINARY_SI and q.denominator == 1 and abs(q) >= 1024:
        mantissa, exp = q.numerator, 0
        while mantissa % 1024 == 0 and exp < 60:
            mantissa //= 1024
            exp += 10
        return f"{mantissa}{_BINARY_SUFFIX[exp]}"
    sign = -1 if q < 0 else 1
    mantissa, exp = math.ceil(abs(q) * 10**9), -9  # at most nano precision, rounded up
    while mantissa % 1000 == 0 and exp < 18:
        mantissa //= 1000
        exp += 3
    mantissa *= sign
    if fmt == DECIMAL_EXPONENT:
        return f"{mantissa}e{exp}" if exp else str(mantissa)
    return f"{mantissa}{_DECIMAL_SUFFIX[exp]}"


def spec_quantity_string(q: Fraction | int) -> str:
    """How a request or limit from a pod spec prints. Our object model keeps the value, not the
    suffix it was written with, so the shorter of the binary and decimal forms stands in
    (100Mi -> "100Mi", 128M -> "128M"); a tie goes to binary."""
    binary, decimal = quantity_string(q, BINARY_SI), quantity_string(q, DECIMAL_SI)
    return binary if len(binary) <= len(decimal) else decimal


def _format_of(text: str) -> str:
    t = text.strip()
    if t[-2:] in ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"):
        return BINARY_SI
    if re.search(r"\d[eE][+-]?\d+$", t):
        return DECIMAL_EXPONENT
    return DECIMAL_SI


def _float32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


_PERCENT_BODY = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def _parse_percentage(text: str) -> float:
    """parsePercentage: float32(ParseFloat(trimmed, 32)) / 100, in float32."""
    body = text.rstrip("%")
    if not _PERCENT_BODY.fullmatch(body):
        raise ValueError(f'strconv.ParseFloat: parsing "{body}": invalid syntax')
    try:
        return _float32(_float32(float(body)) / 100)
    except OverflowError:
        raise ValueError(f'strconv.ParseFloat: parsing "{body}": value out of range') from None




# ---- thresholds ------------------------------------------------------------------------------

@dataclass(frozen=True)
class ThresholdValue:
    """evictionapi.ThresholdValue: a quantity, or a float32 fraction of the capacity."""

    quantity: Optional[Fraction] = None
    fmt: str = DECIMAL_SI  # how `quantity` prints
    percentage: float = 0.0

    def resolve(self, capacity: int) -> tuple[Fraction, str]:
        """GetThresholdQuantity: the amount, and the format kube prints it in."""
        if self.quantity is not None:
            return self.quantity, self.fmt
        return Fraction(int(float(capacity) * self.percentage)), BINARY_SI

    def __str__(self) -> str:
        if self.quantity is not None:
            return quantity_string(self.quantity, self.fmt)
        return f"{self.percentage * 100:g}%"


@dataclass(frozen=True)
class Threshold:
    """signal < value. Hard when grace_period is 0."""

    signal: str
    value: ThresholdValue
    grace_period: float = 0.0
    min_reclaim: Optional[ThresholdValue] = None

    @property
    def hard(self) -> bool:
        return self.grace_period == 0

    @property
    def resource(self) -> str:
        return SIGNAL_RESOURCE[self.signal]

    def same_as(self, other: "Threshold") -> bool:
        """hasThreshold's identity: signal, value and grace period (minimum reclaim aside)."""
        return (self.signal, self.value, self.grace_period) == (other.signal, other.value, other.grace_period)

    def __str__(self) -> str:
        return f"{self.signal}<{self.value}" + ("" if self.hard else f" for {self.grace_period:g}s")


def _signal_order(signal: str) -> int:
    return SIGNALS.index(signal)


def _check_signal(signal: str) -> None:
    if signal not in SIGNAL_RESOURCE:
        raise EvictionConfigError(f"unsupported eviction signal {signal}")


def parse_threshold_statement(signal: str, text: str) -> Optional[Threshold]:
    """parseThresholdStatement: `signal: "100Mi"` or `"10%"`; None for "0%" and "100%"."""
    _check_signal(signal)
    text = str(text)
    if text.endswith("%"):
        if text in ("0%", "100%"):
            return None
        try:
            percentage = _parse_percentage(text)
        except ValueError as e:
            raise EvictionConfigError(str(e)) from None
        if percentage < 0:
            raise EvictionConfigError(f"eviction percentage threshold {signal} must be >= 0%: {text}")
        if percentage > 1:
            raise EvictionConfigError(f"eviction percentage threshold {signal} must be <= 100%: {text}")
        return Threshold(signal, ThresholdValue(percentage=percentage))
    try:
        q = parse_quantity(text)
    except QuantityError as e:
        raise EvictionConfigError(f"eviction threshold {signal}: {e}") from None
    fmt = _format_of(text)
    if q <= 0:
        raise EvictionConfigError(f"eviction threshold {signal} must be positive: {quantity_string(q, fmt)}")
    return Threshold(signal, ThresholdValue(quantity=q, fmt=fmt))


def _parse_min_reclaim(signal: str, text: str) -> ThresholdValue:
    _check_signal(signal)
    text = str(text)
    if text.endswith("%"):
        try:
            percentage = _parse_percentage(text)
        except ValueError as e:
            raise EvictionConfigError(str(e)) from None
        if percentage <= 0:
            raise EvictionConfigError(f"eviction percentage minimum reclaim {signal} must be positive: {text}")
        return ThresholdValue(percentage=percentage)
    try:
        q = parse_quantity(text)
    except QuantityError as e:
        raise EvictionConfigError(f"eviction minimum reclaim {signal}: {e}") from None
    if q < 0:
        raise EvictionConfigError(f"negative eviction minimum reclaim specified for {signal}")
    return ThresholdValue(quantity=q, fmt=_format_of(text))


def _parse_grace_period(signal: str, text: Any) -> float:
    _check_signal(signal)
    try:
        seconds = parse_go_duration(text)
    except ValueError as e:
        raise EvictionConfigError(str(e)) from None
    if seconds < 0:
        raise EvictionConfigError(f"invalid eviction grace period specified: {text}, must be a positive value")
    return seconds


def _statements(field_name: str, m: Optional[Mapping[str, Any]]) -> list[tuple[str, Any]]:
    if m is None:
        return []
    if not isinstance(m, Mapping):
        raise EvictionConfigError(f"{field_name}: must be a map of signal to value")
    for k in m:
        if not isinstance(k, str):
            raise EvictionConfigError(f"{field_name}: key {k!r} is not a signal name")
    return sorted(m.items(), key=lambda kv: (_signal_order(kv[0]) if kv[0] in SIGNALS else -1, kv[0]))


def _in_field(field_name: str, signal: str, parse: Callable[[str, Any], Any], value: Any) -> Any:
    """parse(signal, value), its error naming the KubeletConfiguration field and signal."""
    try:
        return parse(signal, value)
    except EvictionConfigError as e:
        raise EvictionConfigError(f'{field_name}["{signal}"]: {e}') from None


def parse_threshold_config(eviction_hard: Optional[Mapping[str, str]] = None,
                           eviction_soft: Optional[Mapping[str, str]] = None,
                           eviction_soft_grace_period: Optional[Mapping[str, str]] = None,
                           eviction_minimum_reclaim: Optional[Mapping[str, str]] = None,
                           enforce_node_allocatable: Sequence[str] = DEFAULT_ENFORCE_NODE_ALLOCATABLE,
                           ) -> tuple[Threshold, ...]:
    """ParseThresholdConfig: hard thresholds, then soft ones with their grace periods, minimum
    reclaims attached, and allocatableMemory.available copied from a hard memory.available when
    "pods" is enforced. Maps are taken as given (no defaults)."""
    hard = [t for s, v in _statements("evictionHard", eviction_hard)
            if (t := _in_field("evictionHard", s, parse_threshold_statement, v))]
    soft = [t for s, v in _statements("evictionSoft", eviction_soft)
            if (t := _in_field("evictionSoft", s, parse_threshold_statement, v))]
    grace: dict[str, float] = {}
    for signal, text in _statements("evictionSoftGracePeriod", eviction_soft_grace_period):
        grace[signal] = _in_field("evictionSoftGracePeriod", signal, _parse_grace_period, text)
    reclaim = {s: _in_field("evictionMinimumReclaim", s, _parse_min_reclaim, v)
               for s, v in _statements("evictionMinimumReclaim", eviction_minimum_reclaim)}
    with_grace = []
    for t in soft:
        if t.signal not in grace:
            raise EvictionConfigError(f"evictionSoftGracePeriod: grace period must be specified for the soft eviction "
                                      f"threshold {t.signal}")
        with_grace.append(Threshold(t.signal, t.value, grace[t.signal]))
    results = [Threshold(t.signal, t.value, t.grace_period, reclaim.get(t.signal)) for t in hard + with_grace]
    if "pods" in enforce_node_allocatable:
        results += [Threshold(ALLOCATABLE_MEMORY_AVAILABLE, t.value, 0.0, t.min_reclaim)
                    for t in results if t.signal == MEMORY_AVAILABLE and t.hard]
    return tuple(results)


@dataclass(frozen=True)
class EvictionConfig:
    thresholds: tuple[Threshold, ...] = ()
    pressure_transition_period: float = DEFAULT_PRESSURE_TRANSITION_PERIOD
    max_pod_grace_period: int = 0
    local_storage_capacity_isolation: bool = True

    @staticmethod
    def from_kubelet_configuration(cfg: Optional[Mapping[str, Any]] = None) -> "EvictionConfig":
        """From a KubeletConfiguration document (or just its eviction fields), with kube's defaults."""
        cfg = dict(cfg or {})
        kind = cfg.get("kind")
        if kind is not None and kind != "KubeletConfiguration":
            raise EvictionConfigError(f"kind {kind!r} is not KubeletConfiguration")
        merge = cfg.get("mergeDefaultEvictionSettings", False)
        if not isinstance(merge, bool):
            raise EvictionConfigError("mergeDefaultEvictionSettings: must be true or false")
        hard = cfg.get("evictionHard")
        if hard is None:
            hard = DEFAULT_EVICTION_HARD
        elif merge and isinstance(hard, Mapping):
            hard = {**DEFAULT_EVICTION_HARD, **hard}
        enforce = cfg.get("enforceNodeAllocatable", list(DEFAULT_ENFORCE_NODE_ALLOCATABLE))
        if not isinstance(enforce, (list, tuple)) or not all(isinstance(e, str) for e in enforce):
            raise EvictionConfigError("enforceNodeAllocatable: must be a list of strings")
        thresholds = parse_threshold_config(hard, cfg.get("evictionSoft"), cfg.get("evictionSoftGracePeriod"),
                                            cfg.get("evictionMinimumReclaim"), enforce)
        try:
            transition = parse_go_duration(cfg.get("evictionPressureTransitionPeriod", "5m"))
        except ValueError as e:
            raise EvictionConfigError(f"evictionPressureTransitionPeriod: {e}") from None
        if transition < 0:
            raise EvictionConfigError("evictionPressureTransitionPeriod: must not be negative")
        max_grace = cfg.get("evictionMaxPodGracePeriod", 0)
        if isinstance(max_grace, bool) or not isinstance(max_grace, int) or max_grace < 0:
            raise EvictionConfigError("evictionMaxPodGracePeriod: must be a non-negative integer (seconds)")
        isolation = cfg.get("localStorageCapacityIsolation", True)
        if not isinstance(isolation, bool):
            raise EvictionConfigError("localStorageCapacityIsolation: must be true or false")
        return EvictionConfig(thresholds, transition, max_grace, isolation)


# ---- the usage model and observations ----------------------------------------------------------

@dataclass(frozen=True)
class NodeCapacity:
    """What the node has. A None capacity leaves its signals unobserved (their thresholds never
    fire). Without `imagefs_bytes` images and containers share nodefs (no dedicated imagefs)."""

    memory: Optional[int] = None
    allocatable_memory: Optional[int] = None
    nodefs_bytes: Optional[int] = None
    nodefs_inodes: Optional[int] = None
    imagefs_bytes: Optional[int] = None
    imagefs_inodes: Optional[int] = None
    max_pids: Optional[int] = None

    @property
    def dedicated_imagefs(self) -> bool:
        return self.imagefs_bytes is not None

    @staticmethod
    def from_node(node: Node, nodefs_inodes: Optional[int] = None, max_pids: Optional[int] = None,
                  imagefs_bytes: Optional[int] = None, imagefs_inodes: Optional[int] = None) -> "NodeCapacity":
        """memory and nodefs from status.capacity (memory, ephemeral-storage), allocatable memory
        from status.allocatable; what a Node object does not say is passed in."""
        def whole(q: Optional[Fraction]) -> Optional[int]:
            return None if q is None else math.ceil(q)
        return NodeCapacity(memory=whole(node.capacity.get(MEMORY)),
                            allocatable_memory=whole(node.allocatable.get(MEMORY)),
                            nodefs_bytes=whole(node.capacity.get(EPHEMERAL_STORAGE)), nodefs_inodes=nodefs_inodes,
                            imagefs_bytes=imagefs_bytes, imagefs_inodes=imagefs_inodes, max_pids=max_pids)


@dataclass(frozen=True)
class SystemUsage:
    """What the node uses outside pods: system daemons and kernel, and images."""

    memory: int = 0
    nodefs_bytes: int = 0
    nodefs_inodes: int = 0
    imagefs_bytes: int = 0  # images: on the dedicated imagefs, or on nodefs when there is none
    imagefs_inodes: int = 0
    pids: int = 0


@dataclass(frozen=True)
class NodeUsage:
    """The node's usage: the system's, and each pod's by pod key (namespace/name)."""

    system: SystemUsage = SystemUsage()
    pods: Mapping[str, PodUsage] = field(default_factory=dict)

    @staticmethod
    def from_pods(pods: Iterable[Pod], system: SystemUsage = SystemUsage()) -> "NodeUsage":
        """Each pod's usage from its schedmesh.io/simulated-usage annotation."""
        return NodeUsage(system, {p.key: pod_usage(p) for p in pods})

    def of(self, pod: Pod) -> PodUsage:
        return self.pods.get(pod.key, NO_USAGE)

    def pods_total(self, resource: str) -> int:
        return sum(u.get(resource) for u in self.pods.values())


@dataclass(frozen=True)
class Observation:
    available: int
    capacity: int
    time: float


def observe(capacity: NodeCapacity, usage: NodeUsage, now: float,
            thresholds: Sequence[Threshold] = ()) -> dict[str, Observation]:
    """makeSignalObservations over the usage model. `thresholds` supply the hard memory.available
    amount the pods cgroup limit leaves out of allocatable."""
    obs: dict[str, Observation] = {}
    sys_ = usage.system
    pods_memory = usage.pods_total(MEMORY)
    if capacity.memory is not None:
        obs[MEMORY_AVAILABLE] = Observation(capacity.memory - sys_.memory - pods_memory, capacity.memory, now)
    if capacity.allocatable_memory is not None:
        reserve = 0
        hard_memory = next((t for t in thresholds if t.signal == MEMORY_AVAILABLE and t.hard), None)
        if hard_memory is not None and (hard_memory.value.quantity is not None or capacity.memory is not None):
            reserve = int(hard_memory.value.resolve(capacity.memory or 0)[0])
        limit = capacity.allocatable_memory + reserve
        obs[ALLOCATABLE_MEMORY_AVAILABLE] = Observation(limit - pods_memory, limit, now)
    shared_images = not capacity.dedicated_imagefs
    nodefs_used = sys_.nodefs_bytes + usage.pods_total(EPHEMERAL_STORAGE) + (sys_.imagefs_bytes if shared_images else 0)
    inodes_used = sys_.nodefs_inodes + usage.pods_total(INODES) + (sys_.imagefs_inodes if shared_images else 0)
    if capacity.nodefs_bytes is not None:
        obs[NODEFS_AVAILABLE] = Observation(capacity.nodefs_bytes - nodefs_used, capacity.nodefs_bytes, now)
    if capacity.nodefs_inodes is not None:
        obs[NODEFS_INODES_FREE] = Observation(capacity.nodefs_inodes - inodes_used, capacity.nodefs_inodes, now)
    if shared_images:  # the runtime reports the same filesystem as its imagefs
        for nodefs, imagefs in ((NODEFS_AVAILABLE, IMAGEFS_AVAILABLE), (NODEFS_INODES_FREE, IMAGEFS_INODES_FREE)):
            if nodefs in obs:
                obs[imagefs] = obs[nodefs]
    else:
        obs[IMAGEFS_AVAILABLE] = Observation(capacity.imagefs_bytes - sys_.imagefs_bytes, capacity.imagefs_bytes, now)
        if capacity.imagefs_inodes is not None:
            obs[IMAGEFS_INODES_FREE] = Observation(capacity.imagefs_inodes - sys_.imagefs_inodes,
                                                   capacity.imagefs_inodes, now)
    if capacity.max_pids is not None:
        obs[PID_AVAILABLE] = Observation(capacity.max_pids - sys_.pids - usage.pods_total(PIDS), capacity.max_pids, now)
    return obs


def thresholds_met(thresholds: Iterable[Threshold], observations: Mapping[str, Observation],
                   enforce_min_reclaim: bool) -> list[Threshold]:
    """thresholdsMet: available below the threshold (plus its minimum reclaim when enforced)."""
    met = []
    for t in thresholds:
        obs = observations.get(t.signal)
        if obs is None:
            continue
        amount = t.value.resolve(obs.capacity)[0]
        if enforce_min_reclaim and t.min_reclaim is not None:
            amount += t.min_reclaim.resolve(obs.capacity)[0]
        if amount > obs.available:
            met.append(t)
    return met


def _merge_thresholds(a: list[Threshold], b: Iterable[Threshold]) -> list[Threshold]:
    out = list(a)
    for t in b:
        if not any(t.same_as(x) for x in out):
            out.append(t)
    return out


def _by_eviction_priority(a: Threshold, b: Threshold) -> bool:
    """byEvictionPriority.Less: memory before everything, signals without a resource last."""
    return a.signal in (MEMORY_AVAILABLE, ALLOCATABLE_MEMORY_AVAILABLE) or b.signal not in SIGNAL_RESOURCE


# ---- ranking --------------------------------------------------------------------------------

def eviction_request(pod: Pod, resource: str) -> Fraction:
    """v1resource.GetResourceRequestQuantity: the pod's request without overhead (pod-level
    resources replace container ones), plus overhead when the request is non-zero."""
    if has_pod_level_requests(pod) and not is_supported_pod_level_resource(resource):
        q = Fraction(0)  # SkipContainerLevelResources drops what pod level cannot express
    else:
        q = pod_requests(pod, exclude_overhead=True).get(resource, Fraction(0))
    if q != 0 and resource in pod.overhead:
        q += pod.overhead[resource]
    return q


def _cmp(a: Fraction | int, b: Fraction | int) -> int:
    return (a > b) - (a < b)


def _cmp_bool(a: bool, b: bool) -> int:
    """cmpBool: true before false."""
    return 0 if a == b else (-1 if not b else 1)


Cmp = Callable[[Pod, Pod], int]


def _by_priority(p1: Pod, p2: Pod) -> int:
    return _cmp(p1.priority or 0, p2.priority or 0)


def _exceeds(used: Callable[[Pod], int], resource: str) -> Cmp:
    return lambda p1, p2: _cmp_bool(used(p1) > eviction_request(p1, resource),
                                    used(p2) > eviction_request(p2, resource))


def _larger_above_request(used: Callable[[Pod], int], resource: str) -> Cmp:
    return lambda p1, p2: _cmp(used(p2) - eviction_request(p2, resource), used(p1) - eviction_request(p1, resource))


def rank_functions(signal: str, usage: NodeUsage, dedicated_imagefs: bool = False) -> list[Cmp]:
    """buildSignalToRankFunc: the comparisons that order pods for eviction on `signal`."""
    resource = SIGNAL_RESOURCE[signal]
    if resource == MEMORY:
        used: Callable[[Pod], int] = lambda p: usage.of(p).memory
        return [_exceeds(used, MEMORY), _by_priority, _larger_above_request(used, MEMORY)]
    if resource == PIDS:
        pids: Callable[[Pod], int] = lambda p: usage.of(p).pids
        return [_by_priority, lambda p1, p2: _cmp(pids(p2), pids(p1))]
    if dedicated_imagefs and signal in (IMAGEFS_AVAILABLE, IMAGEFS_INODES_FREE):
        used = lambda p: 0  # writable layers and images are not part of the usage model
    else:
        used = (lambda p: usage.of(p).inodes) if resource == INODES else (lambda p: usage.of(p).ephemeral_storage)
    # kube subtracts the ephemeral-storage request for inodes too.
    return [_exceeds(used, resource), _by_priority, _larger_above_request(used, EPHEMERAL_STORAGE)]


def rank_pods(pods: Sequence[Pod], signal: str, usage: NodeUsage, dedicated_imagefs: bool = False) -> list[Pod]:
    """The pods in eviction order for `signal` (multiSorter with Go's sort, so ties fall as in kube)."""
    cmps = rank_functions(signal, usage, dedicated_imagefs)

    def less(p1: Pod, p2: Pod) -> bool:
        for cmp in cmps[:-1]:
            r = cmp(p1, p2)
            if r:
                return r < 0
        return cmps[-1](p1, p2) < 0

    ranked = list(pods)
    go_sort_slice(ranked, less)
    return ranked


# ---- pods -----------------------------------------------------------------------------------

def is_critical_pod(pod: Pod) -> bool:
    """kubelettypes.IsCriticalPod: static or mirror pods, or system-critical priority."""
    source = pod.meta.annotations.get(CONFIG_SOURCE_ANNOTATION)
    if source is not None and source != "api":
        return True
    if CONFIG_MIRROR_ANNOTATION in pod.meta.annotations:
        return True
    return (pod.priority or 0) >= SYSTEM_CRITICAL_PRIORITY


def effective_grace_period(pod: Pod, override: int) -> int:
    """What the kubelet's pod worker makes of an eviction's grace period override (first kill):
    0 falls back to the pod's terminationGracePeriodSeconds, and never less than 1."""
    grace = override
    if grace == 0:
        grace = pod.termination_grace_period_seconds
    return max(grace, 1)


@dataclass(frozen=True)
class PodEviction:
    """One pod the kubelet evicts: killed with `grace_period_seconds` as the override, phase
    Failed with reason Evicted and `message`, an Event with `annotations`."""

    pod: Pod
    grace_period_seconds: int
    message: str
    signal: str
    annotations: Mapping[str, str] = field(default_factory=dict)
    reason: str = REASON_EVICTED
    condition: Optional[PodCondition] = None  # DisruptionTarget, for threshold evictions

    @property
    def effective_grace_period_seconds(self) -> int:
        return effective_grace_period(self.pod, self.grace_period_seconds)


@dataclass(frozen=True)
class SyncResult:
    observations: Mapping[str, Observation]
    thresholds_met: tuple[Threshold, ...]  # met with their grace periods over (kube's m.thresholdsMet)
    pressure: tuple[str, ...]  # node conditions that are True now
    reclaiming: Optional[str] = None  # resource of the "Attempting to reclaim" event, when one was recorded
    evictions: tuple[PodEviction, ...] = ()


@dataclass(frozen=True)
class AdmitResult:
    admit: bool
    reason: str = ""
    message: str = ""


def _limits_total(pod: Pod, resource: str) -> Optional[Fraction]:
    """resourcehelper.PodLimits(pod)[resource]: containers summed, init containers as a maximum,
    plus overhead; None when no container limits it."""
    shadow = Pod(meta=pod.meta,
                 containers=[Container(c.name, requests=c.limits) for c in pod.containers],
                 init_containers=[Container(c.name, requests=c.limits, restart_policy=c.restart_policy)
                                  for c in pod.init_containers])
    total = aggregate_container_requests(shadow).get(resource)
    if total is not None and resource in pod.overhead:
        total += pod.overhead[resource]
    return total


def _stat_containers(pod: Pod) -> list[Container]:
    """Containers the stats summary reports: regular ones and running sidecars."""
    return [*pod.containers, *(c for c in pod.init_containers if c.restart_policy == "Always")]


def eviction_message(resource: str, pod: Pod, usage: PodUsage, thresholds: Sequence[Threshold],
                     observations: Mapping[str, Observation]) -> tuple[str, dict[str, str]]:
    """evictionMessage: the pod's status message and the Event's annotations."""
    message = f"The node was low on resource: {resource}. "
    for t in thresholds:
        if t.resource == resource and t.signal in observations:
            obs = observations[t.signal]
            amount, fmt = t.value.resolve(obs.capacity)
            available_fmt = BINARY_SI if resource in (MEMORY, EPHEMERAL_STORAGE) else DECIMAL_SI
            message += (f"Threshold quantity: {quantity_string(amount, fmt)}, "
                        f"available: {quantity_string(obs.available, available_fmt)}. ")
            break
    annotations: dict[str, str] = {}
    if resource == MEMORY and pod.resource_requests and MEMORY in pod.resource_requests:
        used = quantity_string(usage.memory, BINARY_SI)
        message += (f"Pod {pod.meta.name} was using {used}, request is "
                    f"{spec_quantity_string(pod.resource_requests[MEMORY])}, has larger consumption of {resource}. ")
        annotations[OFFENDING_POD_KEY] = pod.meta.name
        annotations[OFFENDING_POD_USAGE_KEY] = used
    offending, offending_usage = [], []
    if resource in (MEMORY, EPHEMERAL_STORAGE):
        for c in _stat_containers(pod):
            cu = usage.containers.get(c.name)
            if cu is None:
                continue
            used_amount = cu.memory if resource == MEMORY else cu.ephemeral_storage
            request = c.requests.get(resource, Fraction(0))
            if used_amount > request:
                used = quantity_string(used_amount, BINARY_SI)
                message += (f"Container {c.name} was using {used}, request is {spec_quantity_string(request)}, "
                            f"has larger consumption of {resource}. ")
                offending.append(c.name)
                offending_usage.append(used)
    annotations[OFFENDING_CONTAINERS_KEY] = ",".join(offending)
    annotations[OFFENDING_CONTAINERS_USAGE_KEY] = ",".join(offending_usage)
    annotations[STARVED_RESOURCE_KEY] = resource
    return message, annotations


def local_storage_violation(pod: Pod, usage: PodUsage) -> Optional[tuple[str, str]]:
    """podEphemeralStorageLimitEviction / containerEphemeralStorageLimitEviction: (signal,
    message) when the pod or one of its containers uses more ephemeral storage than its limit."""
    pod_limit = _limits_total(pod, EPHEMERAL_STORAGE)
    if pod_limit is not None and usage.ephemeral_storage > pod_limit:
        return (SIGNAL_EPHEMERAL_POD_FS_LIMIT,
                f"Pod ephemeral local storage usage exceeds the total limit of containers "
                f"{spec_quantity_string(pod_limit)}. ")
    limits = {c.name: c.limits[EPHEMERAL_STORAGE] for c in pod.containers
              if c.limits.get(EPHEMERAL_STORAGE, 0) != 0}
    for c in _stat_containers(pod):
        cu = usage.containers.get(c.name)
        if cu is not None and c.name in limits and limits[c.name] < cu.ephemeral_storage:
            return (SIGNAL_EPHEMERAL_CONTAINER_FS_LIMIT,
                    f'Container {c.name} exceeded its local ephemeral storage limit "'
                    f'{spec_quantity_string(limits[c.name])}". ')
    return None


def pressure_conditions(pressure: Iterable[str]) -> list[NodeCondition]:
    """MemoryPressure, DiskPressure and PIDPressure as the kubelet reports them."""
    on = set(pressure)
    out = []
    for cond in PRESSURE_CONDITIONS:
        true_reason, true_msg, false_reason, false_msg = _CONDITION_TEXT[cond]
        out.append(NodeCondition(cond, "True", true_reason, true_msg) if cond in on
                   else NodeCondition(cond, "False", false_reason, false_msg))
    return out


class EvictionManager:
    """The kubelet eviction manager of one node. Time comes from `clock` unless synchronize is
    given `now` (seconds); state carries over between synchronize calls as in the kubelet."""

    def __init__(self, config: Optional[EvictionConfig] = None, capacity: NodeCapacity = NodeCapacity(),
                 clock: Callable[[], float] = time.time) -> None:
        self.config = config if config is not None else EvictionConfig.from_kubelet_configuration()
        self.capacity = capacity
        self.clock = clock
        self._pressure: tuple[str, ...] = ()
        self._thresholds_first_observed: dict[Threshold, float] = {}
        self._conditions_last_observed: dict[str, float] = {}
        self._thresholds_met: list[Threshold] = []
        self._last_observations: dict[str, Observation] = {}

    @property
    def pressure(self) -> tuple[str, ...]:
        """Node conditions that are True (MemoryPressure, DiskPressure, PIDPressure)."""
        return self._pressure

    @property
    def settled(self) -> bool:
        """Nothing to watch: no pressure reported, no threshold met (even one whose grace period
        runs). Another synchronize with the same usage would change nothing."""
        return not self._pressure and not self._thresholds_first_observed and not self._thresholds_met

    def node_conditions(self) -> list[NodeCondition]:
        return pressure_conditions(self._pressure)

    def admit(self, pod: Pod) -> AdmitResult:
        """Admit: under memory pressure only, non-BestEffort pods and pods tolerating the
        memory-pressure taint are admitted; any other pressure rejects all but critical pods."""
        if not self._pressure or is_critical_pod(pod):
            return AdmitResult(True)
        if self._pressure == (MEMORY_PRESSURE,):
            if qos_class(pod) != BEST_EFFORT:
                return AdmitResult(True)
            if tolerations_tolerate_taint(pod.tolerations, Taint("node.kubernetes.io/memory-pressure", NO_SCHEDULE)):
                return AdmitResult(True)
        return AdmitResult(False, REASON_EVICTED, f"The node had condition: [{' '.join(self._pressure)}]. ")

    def synchronize(self, now: Optional[float] = None, usage: Optional[NodeUsage] = None,
                    pods: Sequence[Pod] = ()) -> SyncResult:
        """One housekeeping pass. `pods` are the node's pods (candidates for eviction); `usage`
        defaults to their simulated-usage annotations with no system usage."""
        now = self.clock() if now is None else now
        usage = NodeUsage.from_pods(pods) if usage is None else usage
        config = self.config
        if not config.thresholds and not config.local_storage_capacity_isolation:
            return SyncResult({}, (), self._pressure)
        observations = observe(self.capacity, usage, now, config.thresholds)

        met = thresholds_met(config.thresholds, observations, enforce_min_reclaim=False)
        if self._thresholds_met:
            met = _merge_thresholds(met, thresholds_met(self._thresholds_met, observations, enforce_min_reclaim=True))
        first_observed = {t: self._thresholds_first_observed.get(t, now) for t in met}
        observed_conditions = {SIGNAL_CONDITION[t.signal] for t in met}
        last_observed = {c: now for c in observed_conditions}
        for c, at in self._conditions_last_observed.items():
            last_observed.setdefault(c, at)
        period = config.pressure_transition_period
        pressure = tuple(c for c in PRESSURE_CONDITIONS if c in last_observed and now - last_observed[c] < period)
        grace_over = [t for t, at in first_observed.items() if not now - at < t.grace_period]

        self._pressure = pressure
        self._thresholds_first_observed = first_observed
        self._conditions_last_observed = last_observed
        self._thresholds_met = grace_over
        previous = self._last_observations
        fresh = [t for t in grace_over
                 if t.signal not in previous or observations[t.signal].time > previous[t.signal].time]
        self._last_observations = observations
        result = SyncResult(observations, tuple(grace_over), pressure)

        # Terminal pods are inactive; terminating ones are already on their way out.
        active = [p for p in pods if p.phase not in ("Succeeded", "Failed") and p.meta.deletion_timestamp is None]
        if config.local_storage_capacity_isolation:
            evicted = []
            for pod in active:
                violation = local_storage_violation(pod, usage.of(pod))
                if violation is not None and not is_critical_pod(pod):
                    evicted.append(PodEviction(pod, HARD_EVICTION_GRACE_PERIOD_SECONDS, violation[1], violation[0]))
            if evicted:
                return SyncResult(observations, tuple(grace_over), pressure, evictions=tuple(evicted))
        if not fresh:
            return result
        go_sort_slice(fresh, _by_eviction_priority)
        to_reclaim = fresh[0]
        resource = to_reclaim.resource
        result = SyncResult(observations, tuple(grace_over), pressure, reclaiming=resource)
        if not active:
            return result
        for pod in rank_pods(active, to_reclaim.signal, usage, self.capacity.dedicated_imagefs):
            if is_critical_pod(pod):
                continue
            grace = HARD_EVICTION_GRACE_PERIOD_SECONDS
            if not to_reclaim.hard:
                grace = min(config.max_pod_grace_period, pod.termination_grace_period_seconds)
            message, annotations = eviction_message(resource, pod, usage.of(pod), fresh, observations)
            condition = PodCondition(DISRUPTION_TARGET, "True", REASON_TERMINATION_BY_KUBELET, message)
            eviction = PodEviction(pod, grace, message, to_reclaim.signal, annotations, condition=condition)
            return SyncResult(observations, tuple(grace_over), pressure, reclaiming=resource, evictions=(eviction,))
        return result
