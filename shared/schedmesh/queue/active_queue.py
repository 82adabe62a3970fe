"""activeQ and the in-flight bookkeeping (kube's activeQueue).

activeQ is a heap ordered by the QueueSort plugin's less. Pop increments the scheduling cycle and
records the pod as in flight. While pods are in flight, every cluster event the queue receives is
appended to one list shared with the in-flight pods (kube's inFlightEvents), so that when a pod comes
back unschedulable the queue can look at exactly the events that arrived after its Pop. Done() removes
the pod and drops events no remaining in-flight pod can need.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Union

from schedmesh.api.types import Pod
from schedmesh.framework.events import ClusterEvent
from schedmesh.queue.heap import Heap, SortKeyFn
from schedmesh.queue.queued_pod_info import QueuedPodInfo

log = logging.getLogger("schedmesh.queue")

LessFn = Callable[[QueuedPodInfo, QueuedPodInfo], bool]


@dataclass(frozen=True, slots=True)
class InFlightEvent:
    """A cluster event received while some pod was in flight, with the objects involved."""

    event: ClusterEvent
    old_obj: Any = None
    new_obj: Any = None


class _Node:
    __slots__ = ("value", "prev", "next")

    def __init__(self, value: Union[Pod, InFlightEvent]) -> None:
        self.value = value
        self.prev: Optional[_Node] = None
        self.next: Optional[_Node] = None


class _LinkedList:
    """Doubly linked list (Go's container/list): O(1) append and removal of a known node."""

    __slots__ = ("head", "tail", "size")

    def __init__(self) -> None:
        self.head: Optional[_Node] = None
        self.tail: Optional[_Node] = None
        self.size = 0

    def push_back(self, value: Union[Pod, InFlightEvent]) -> _Node:
        n = _Node(value)
        n.prev = self.tail
        if self.tail is None:
            self.head = n
        else:
            self.tail.next = n
        self.tail = n
        self.size += 1
        return n

    def remove(self, n: _Node) -> None:
        if n.prev is None:
            self.head = n.next
        else:
            n.prev.next = n.next
        if n.next is None:
            self.tail = n.prev
        else:
            n.next.prev = n.prev
        n.prev = n.next = None
        self.size -= 1

    def __iter__(self) -> Iterator[Union[Pod, InFlightEvent]]:
        n = self.head
        while n is not None:
            yield n.value
            n = n.next


class ActiveQueue:
    """Not locked itself: the PriorityQueue serialises all access."""

    def __init__(self, less: LessFn, sort_key: Optional[SortKeyFn] = None) -> None:
        self.heap = Heap[QueuedPodInfo](lambda p: p.key, less, sort_key)
        self._in_flight_pods: dict[str, _Node] = {}  # uid -> its entry in _in_flight_events
        self._in_flight_events = _LinkedList()
        self.sched_cycle = 0
        self.closed = False

    # ---- the heap --------------------------------------------------------------------------
    def add(self, p: QueuedPodInfo) -> None:
        self.heap.add_or_update(p)

    def update(self, new_pod: Pod, old_lookup: QueuedPodInfo) -> Optional[QueuedPodInfo]:
        p = self.heap.get(old_lookup)
        if p is None:
            return None
        p.update(new_pod)
        self.heap.add_or_update(p)
        return p

    def get(self, lookup: QueuedPodInfo) -> Optional[QueuedPodInfo]:
        return self.heap.get(lookup)

    def get_by_key(self, key: str) -> Optional[QueuedPodInfo]:
        return self.heap.get_by_key(key)

    def has(self, p: QueuedPodInfo) -> bool:
        return self.heap.has(p)

    def delete(self, p: QueuedPodInfo) -> bool:
        return self.heap.delete(p)

    def list(self) -> list[QueuedPodInfo]:
        return self.heap.list()

    def __len__(self) -> int:
        return len(self.heap)

    def pop_head(self, pop_backoff: Optional[Callable[[], Optional[QueuedPodInfo]]] = None) -> Optional[QueuedPodInfo]:
        """kube's unlockedPop without the waiting: the head of activeQ, else (when given) of backoffQ.

        Marks the pod in flight, counts the attempt and the cycle, and clears last attempt's plugins.
        """
        while True:
            p = self.heap.pop()
            if p is None and pop_backoff is not None:
                p = pop_backoff()
            if p is None:
                return None
            p.attempts += 1
            uid = p.pod.meta.uid
            if uid in self._in_flight_pods:
                # The same pod tracked twice would leak its in-flight entry: drop this copy.
                log.error("pod %s is already in flight; discarding the duplicate popped from the queue", p.key,
                          extra={"pod": p})
                continue
            self._in_flight_pods[uid] = self._in_flight_events.push_back(p.pod)
            self.sched_cycle += 1
            p.unschedulable_plugins.clear()
            p.pending_plugins.clear()
            p.gating_plugin = ""
            p.gating_plugin_events = []
            return p

    # ---- in-flight pods and events ---------------------------------------------------------
    def is_in_flight(self, uid: str) -> bool:
        return uid in self._in_flight_pods

    def list_in_flight_pods(self) -> list[Pod]:
        return [n.value for n in self._in_flight_pods.values()]  # type: ignore[misc]

    def list_in_flight_events(self) -> list[Union[Pod, InFlightEvent]]:
        return list(self._in_flight_events)

    def cluster_events_for_pod(self, p: QueuedPodInfo) -> Optional[list[InFlightEvent]]:
        """Events received since p was popped; None when p is not in flight (a bug upstream)."""
        n = self._in_flight_pods.get(p.pod.meta.uid)
        if n is None:
            return None
        out = []
        n = n.next
        while n is not None:
            if isinstance(n.value, InFlightEvent):
                out.append(n.value)
            n = n.next
        return out

    def add_events_if_pod_in_flight(self, old_pod: Optional[Pod], new_pod: Pod, events: list[ClusterEvent]) -> bool:
        if new_pod.meta.uid not in self._in_flight_pods:
            return False
        for ev in events:
            self._in_flight_events.push_back(InFlightEvent(ev, old_pod, new_pod))
        return True

    def add_event_if_any_in_flight(self, old_obj: Any, new_obj: Any, event: ClusterEvent) -> bool:
        if not self._in_flight_pods:
            return False
        self._in_flight_events.push_back(InFlightEvent(event, old_obj, new_obj))
        return True

    def done(self, uid: str) -> None:
        n = self._in_flight_pods.pop(uid, None)
        if n is None:
            return  # already done
        self._in_flight_events.remove(n)
        # Events before the first remaining in-flight pod can no longer be asked for.
        while (head := self._in_flight_events.head) is not None and isinstance(head.value, InFlightEvent):
            self._in_flight_events.remove(head)

    def close(self) -> None:
        for uid in list(self._in_flight_pods):
            self.done(uid)
        self.closed = True
