"""NodePorts (pkg/scheduler/framework/plugins/nodeports, v1.35).

PreFilter collects the pod's host ports (containers and restartable "sidecar" init containers,
hostPort > 0) and Skips pods without any. Filter rejects (Unschedulable, so preemption may
help) a node where one of them conflicts with a port in use, with HostPortInfo semantics: the
same protocol and port on the same IP, or where either side binds 0.0.0.0.
"""
from __future__ import annotations

import operator
import weakref
from typing import Any, ClassVar, Optional

import numpy as np

from schedmesh.api.types import Pod
from schedmesh.cache.node_info import HostPortInfo, host_ports
from schedmesh.framework.events import (ActionType, ClusterEvent, ClusterEventWithHint, EventResource,
                                        QueueingHint)
from schedmesh.framework.interface import (CycleState, EnqueueExtensions, FilterPlugin, FilterVerdicts,
                                           PreFilterPlugin, PreFilterResult, Status)

NAME = "NodePorts"
PRE_FILTER_STATE_KEY = "PreFilter" + NAME
ERR_REASON = "node(s) didn't have free ports for the requested pod ports"

HostPort = tuple[str, str, int]  # (hostIP, protocol, hostPort), already defaulted to 0.0.0.0 / TCP


class _PreFilterState(tuple):
    """The pod's wanted host ports; immutable, so clone() shares it."""

    def clone(self) -> "_PreFilterState":
        return self


def fits_ports(want: list[HostPort] | tuple[HostPort, ...], in_use: HostPortInfo) -> bool:
    """fitsPorts: no wanted port conflicts with the ports in use."""
    return not any(in_use.check_conflict(ip, proto, port) for ip, proto, port in want)


def fits(pod: Pod, node_info) -> bool:
    """nodeports.Fits: the pod's host ports are free on the node."""
    return fits_ports(host_ports(pod), node_info.used_ports)


_generation = operator.attrgetter("generation")
_MAX_CACHED_PORTS = 256


class _ConflictCache:
    """Per node set (one Columns object): for each wanted host port, which nodes conflict.

    A NodeInfo's generation grows with every pod added or removed, so after the first
    evaluation only nodes whose generation moved are re-checked: a pod with host ports costs one
    attribute read per node plus the check of the nodes that changed since the last such pod,
    instead of a HostPortInfo lookup on every node.
    """

    __slots__ = ("entries",)

    def __init__(self) -> None:
        self.entries: dict[HostPort, tuple[np.ndarray, np.ndarray]] = {}  # port -> (generations, conflicts)

    def conflicts(self, infos: list, generations: np.ndarray, port: HostPort) -> np.ndarray:
        ip, proto, number = port
        entry = self.entries.get(port)
        if entry is None:
            if len(self.entries) >= _MAX_CACHED_PORTS:
                self.entries.pop(next(iter(self.entries)))
            mask = np.fromiter((ni.used_ports.check_conflict(ip, proto, number) for ni in infos),
                               dtype=bool, count=len(infos))
        else:
            old_generations, mask = entry
            changed = np.flatnonzero(old_generations != generations)
            if len(changed):
                mask = mask.copy()
                for row in changed.tolist():
                    mask[row] = infos[row].used_ports.check_conflict(ip, proto, number)
        self.entries[port] = (generations, mask)
        return mask


class NodePorts(PreFilterPlugin, FilterPlugin, EnqueueExtensions):
    name: ClassVar[str] = NAME

    def node_local(self, pod) -> bool:
        return True  # the ports of the node's own pods

    def __init__(self, args: Optional[dict] = None, handle: Any = None) -> None:
        super().__init__(args, handle)
        self._conflict = Status.unschedulable(ERR_REASON)
        self._caches: "weakref.WeakKeyDictionary[Any, _ConflictCache]" = weakref.WeakKeyDictionary()

    def pre_filter(self, state: CycleState, pod: Pod, snapshot) -> tuple[Optional[PreFilterResult], Optional[Status]]:
        ports = host_ports(pod)
        if not ports:
            return None, Status.skip()
        state.write(PRE_FILTER_STATE_KEY, _PreFilterState(ports))
        return None, None

    def pre_filter_extensions(self):
        return None  # the wanted ports do not depend on other pods

    def _wanted(self, state: CycleState) -> Optional[_PreFilterState]:
        return state.get(PRE_FILTER_STATE_KEY)

    @staticmethod
    def _missing_state() -> Status:
        return Status.as_error(f'reading "{PRE_FILTER_STATE_KEY}" from cycleState: not found')

    def filter(self, state: CycleState, pod: Pod, node_info) -> Optional[Status]:
        want = self._wanted(state)
        if want is None:
            return self._missing_state()
        return None if fits_ports(want, node_info.used_ports) else self._conflict

    def filter_nodes(self, state: CycleState, pod: Pod, snapshot, candidates: np.ndarray) -> FilterVerdicts:
        want = self._wanted(state)
        if want is None:
            return FilterVerdicts.from_mask(np.zeros(len(candidates), dtype=bool), self._missing_state())
        cols = snapshot.cols
        cache = self._caches.get(cols)
        if cache is None:
            cache = self._caches[cols] = _ConflictCache()
        infos = snapshot.node_info_list
        generations = np.array(list(map(_generation, infos)), dtype=np.int64)
        conflict = np.zeros(len(infos), dtype=bool)
        for port in dict.fromkeys(want):  # each distinct wanted port once
            conflict |= cache.conflicts(infos, generations, port)
        return FilterVerdicts.from_mask(~conflict[candidates], self._conflict)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        # Container ports are immutable, so only a deleted pod (or a new node) frees ports.
        return [
            ClusterEventWithHint(ClusterEvent(EventResource.POD, ActionType.DELETE), self.is_schedulable_after_pod_deleted),
            ClusterEventWithHint(ClusterEvent(EventResource.NODE, ActionType.ADD)),
        ]

    def is_schedulable_after_pod_deleted(self, pod: Pod, old_obj: Any, new_obj: Any) -> QueueingHint:
        """Queue only when the deleted pod was (or was about to be) on a node and held one of the
        host ports this pod wants."""
        if not isinstance(old_obj, Pod):
            return QueueingHint.QUEUE
        deleted = old_obj
        if not deleted.node_name and not deleted.nominated_node_name:
            return QueueingHint.QUEUE_SKIP
        ports = host_ports(deleted)
        if not ports:
            return QueueingHint.QUEUE_SKIP
        in_use = HostPortInfo()
        for ip, proto, port in ports:
            in_use.add(ip, proto, port)
        return QueueingHint.QUEUE_SKIP if fits_ports(host_ports(pod), in_use) else QueueingHint.QUEUE
