"""The scheduling queue (kube-scheduler v1.35's PriorityQueue), shared by all profiles.

    activeQ            pods ready to be tried, highest priority first (the QueueSort plugin's less)
    backoffQ           pods waiting out a backoff after a failed attempt
    unschedulablePods  pods rejected by plugins (or gated at PreEnqueue), waiting for an event that
                       one of their rejecting plugins registered and whose queueing hint says Queue;
                       flushed back after 5 minutes regardless (UnschedulableTimeout)

v1.35 defaults are what this implements: queueing hints always on (so the in-flight event list is
always kept and a pod rejected during a cycle is requeued if a relevant event arrived meanwhile),
and SchedulerPopFromBackoffQ on (1-second backoff ordering windows; Pop takes from backoffQ when
activeQ is empty; PreEnqueue runs when a pod enters backoffQ).

How kube's event handlers drive the queue (v1.35, hints on):
    unscheduled pod add      add(pod)
    unscheduled pod update   update(old, new)  [skip when resourceVersion is unchanged or the pod is
                             assumed]; then, if old.nominated_node_name was set and changed,
                             move_all_to_active_or_backoff_queue(EVENT_ASSIGNED_POD_DELETE, old, None,
                             pre_check=priority <= old's)
    unscheduled pod delete   delete(pod); if it had a nominated node, the same AssignedPodDelete move
    assigned pod add         move_all_to_active_or_backoff_queue(EVENT_ASSIGNED_POD_ADD, None, pod)
    assigned pod update      for ev in pod_scheduling_properties_change(new, old):
                                 move_all_to_active_or_backoff_queue(ev, old, new)
    assigned pod delete      move_all_to_active_or_backoff_queue(EVENT_ASSIGNED_POD_DELETE, pod, None)
    node add/update/delete   move_all_to_active_or_backoff_queue(Node event, old, new, pre_check)
The scheduling loop: `await pop()`, then `done(uid)` after binding, or on failure set the
QueuedPodInfo's unschedulable_plugins / pending_plugins and call add_unschedulable_if_not_present.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import math
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Optional, Sequence, Union

from schedmesh.api.types import ObjectMeta, Pod
from schedmesh.cache.node_info import PodInfo
from schedmesh.framework.events import (EVENT_FORCE_ACTIVATE, EVENT_UNSCHEDULABLE_TIMEOUT, ActionType,
                                        ClusterEvent, EventResource, QueueingHint)
from schedmesh.framework.interface import Code, PreEnqueuePlugin, Status
from schedmesh.framework.runtime import Nominator as RuntimeNominator
from schedmesh.queue.active_queue import ActiveQueue, InFlightEvent
from schedmesh.queue.backoff_queue import BACKOFF_Q_ORDERING_WINDOW, BackoffQueue
from schedmesh.queue.clock import Clock, RealClock
from schedmesh.queue.heap import SortKeyFn
from schedmesh.queue.hints import (BACKOFF_COMPLETE, EVENT_ASSIGNED_POD_ADD, EVENT_UNSCHEDULED_POD_ADD,
                                   EVENT_UNSCHEDULED_POD_UPDATE, FORCE_ACTIVATE, POP_FROM_BACKOFF_Q,
                                   SCHEDULE_ATTEMPT_FAILURE, QueueingHintMap, QueueingStrategy,
                                   build_queueing_hint_map, event_label, is_wildcard, match_any_cluster_event,
                                   match_cluster_events, plugin_to_events, pod_scheduling_properties_change)
from schedmesh.queue.nominator import NominatingInfo, Nominator, PodLister
from schedmesh.queue.queued_pod_info import QueuedPodInfo
from schedmesh.queue.unschedulable_pods import UnschedulablePods

if TYPE_CHECKING:  # pragma: no cover
    from schedmesh.framework.runtime import Framework

log = logging.getLogger("schedmesh.queue")

DEFAULT_POD_INITIAL_BACKOFF_SECONDS = 1.0
DEFAULT_POD_MAX_BACKOFF_SECONDS = 10.0
DEFAULT_POD_MAX_IN_UNSCHEDULABLE_PODS_DURATION = 300.0
UNSCHEDULABLE_FLUSH_INTERVAL = 30.0
POD_TOPOLOGY_SPREAD = "PodTopologySpread"

# Which queue a pending pod is in (for `schedmesh get pods`).
ACTIVE_Q = "activeQ"
BACKOFF_Q = "backoffQ"
UNSCHEDULABLE_Q = "unschedulable"
GATED = "gated"

LessFn = Callable[[QueuedPodInfo, QueuedPodInfo], bool]
PreEnqueueCheck = Callable[[Pod], bool]
NamespaceLabels = Callable[[str], Mapping[str, str]]
# (queue, event, pod) each time a pod enters a queue: kube's scheduler_queue_incoming_pods_total.
IncomingHook = Callable[[str, str, QueuedPodInfo], None]


class QueueError(Exception):
    """A queue operation that kube answers with an error (e.g. the pod is already queued)."""


@dataclass(frozen=True, slots=True)
class PendingPod:
    pod: Pod
    queue: str  # ACTIVE_Q | BACKOFF_Q | UNSCHEDULABLE_Q | GATED
    info: QueuedPodInfo


class _Waiters:
    """Futures of coroutines blocked in pop() and events of threads blocked in wait(); woken from
    any thread."""

    def __init__(self) -> None:
        self._futs: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._events: list[threading.Event] = []

    def new_event(self) -> threading.Event:
        event = threading.Event()
        self._events.append(event)
        return event

    def discard_event(self, event: threading.Event) -> None:
        self._events = [e for e in self._events if e is not event]

    def new(self) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._futs.append((loop, fut))
        return fut

    def discard(self, fut: asyncio.Future[None]) -> None:
        self._futs = [(lp, f) for lp, f in self._futs if f is not fut]

    def wake_all(self) -> None:
        events, self._events = self._events, []
        for event in events:
            event.set()
        futs, self._futs = self._futs, []
        running = _running_loop()
        for loop, fut in futs:
            if loop is running:
                _resolve(fut)
            elif not loop.is_closed():
                loop.call_soon_threadsafe(_resolve, fut)


def _running_loop() -> Optional[asyncio.AbstractEventLoop]:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class _LookupInfo:
    """Stands in for a QueuedPodInfo when only its key is needed (kube's newQueuedPodInfoForLookup),
    without building a PodInfo."""

    __slots__ = ("key",)

    def __init__(self, pod: Pod) -> None:
        self.key = pod.key


def _lookup(pod: Pod) -> QueuedPodInfo:
    return _LookupInfo(pod)  # type: ignore[return-value]


class PriorityQueue(RuntimeNominator):
    """kube-scheduler's PriorityQueue. Thread-safe; `pop()` is a coroutine, `try_pop()` never blocks."""

    def __init__(self, less: LessFn, *, sort_key: Optional[SortKeyFn] = None,
                 pre_enqueue_plugins: Optional[Mapping[str, Sequence[PreEnqueuePlugin]]] = None,
                 queueing_hints: Optional[Mapping[str, QueueingHintMap]] = None,
                 clock: Optional[Clock] = None,
                 pod_initial_backoff_seconds: float = DEFAULT_POD_INITIAL_BACKOFF_SECONDS,
                 pod_max_backoff_seconds: float = DEFAULT_POD_MAX_BACKOFF_SECONDS,
                 pod_max_in_unschedulable_pods_duration: float = DEFAULT_POD_MAX_IN_UNSCHEDULABLE_PODS_DURATION,
                 pod_lister: Optional[PodLister] = None,
                 namespace_labels: Optional[NamespaceLabels] = None,
                 pop_from_backoff_q: bool = True,
                 on_incoming: Optional[IncomingHook] = None) -> None:
        self.clock: Clock = clock or RealClock()
        self.pod_max_in_unschedulable_pods_duration = pod_max_in_unschedulable_pods_duration
        self.pop_from_backoff_q = pop_from_backoff_q
        # schedulerName -> PreEnqueue plugins by name, in profile order.
        self.pre_enqueue_plugins: dict[str, dict[str, PreEnqueuePlugin]] = {
            prof: {p.name: p for p in plugins} for prof, plugins in (pre_enqueue_plugins or {}).items()}
        # schedulerName -> registered event -> hint functions.
        self.queueing_hints: dict[str, QueueingHintMap] = {k: dict(v) for k, v in (queueing_hints or {}).items()}
        self._plugin_events = plugin_to_events(self.queueing_hints.values())
        self._interest: dict[ClusterEvent, bool] = {}  # is_event_of_interest's answers
        # (profile, event) -> the hints whose registered event covers it, in the map's order, and
        # their plugins: one event is checked against every unschedulable pod, and matching
        # events (enum flags) per pod cost most of the queue-manager's time with 1,000 such pods.
        self._hints_for_event: dict[tuple[str, ClusterEvent], tuple[list, frozenset]] = {}
        self._last_match: Optional[tuple] = None
        self._namespace_labels = namespace_labels or (lambda ns: {})
        self._on_incoming = on_incoming

        self._lock = threading.RLock()
        self._waiters = _Waiters()
        self._active = ActiveQueue(less, sort_key)
        self._backoff = BackoffQueue(self.clock, pod_initial_backoff_seconds, pod_max_backoff_seconds, less,
                                     pop_from_backoff_q)
        self._unschedulable = UnschedulablePods()
        self._nominator = Nominator(pod_lister)
        self._tasks: list[asyncio.Task] = []

    @classmethod
    def from_frameworks(cls, frameworks: Mapping[str, "Framework"], **kwargs: Any) -> "PriorityQueue":
        """One queue for all profiles: less from the first profile's QueueSort (kube requires all
        profiles to use the same one), PreEnqueue plugins and hints from each pod's profile."""
        if not frameworks:
            raise ValueError("at least one profile is required")
        first = next(iter(frameworks.values()))
        return cls(first.queue_sort_less(), sort_key=first.queue_sort_key(),
                   pre_enqueue_plugins={name: list(fw.points["preEnqueue"]) for name, fw in frameworks.items()},
                   queueing_hints={name: build_queueing_hint_map(fw) for name, fw in frameworks.items()},
                   **kwargs)

    # ---- lifecycle -------------------------------------------------------------------------
    def run(self) -> None:
        """Start the flush loops on the running event loop: backoffQ every second (aligned to the
        ordering window), unschedulablePods every 30 seconds."""
        if self._tasks:
            return
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._backoff_flush_loop(), name="queue-flush-backoffQ"),
                       loop.create_task(self._unschedulable_flush_loop(), name="queue-flush-unschedulable")]

    def close(self) -> None:
        """Stop the flush loops and release pop(): it returns what is left, then None."""
        with self._lock:
            self._active.close()
            tasks, self._tasks = self._tasks, []
            self._waiters.wake_all()
        for t in tasks:
            loop = t.get_loop()
            if _running_loop() is loop:
                t.cancel()
            elif not loop.is_closed():
                loop.call_soon_threadsafe(t.cancel)

    @property
    def closed(self) -> bool:
        return self._active.closed

    async def _backoff_flush_loop(self) -> None:
        now = self.clock.now()
        # Align to the ordering window so whole windows are flushed at once.
        start = self._backoff.align_to_window(now + BACKOFF_Q_ORDERING_WINDOW)
        await self.clock.sleep(start - now)
        while not self.closed:
            self.flush_backoff_q_completed()
            now = self.clock.now()
            # Next tick of a ticker started at `start`; missed ticks are dropped, as Go's are.
            ticks = math.floor((now - start) / BACKOFF_Q_ORDERING_WINDOW) + 1
            await self.clock.sleep(start + ticks * BACKOFF_Q_ORDERING_WINDOW - now)

    async def _unschedulable_flush_loop(self) -> None:
        while not self.closed:
            self.flush_unschedulable_pods_leftover()
            await self.clock.sleep(UNSCHEDULABLE_FLUSH_INTERVAL)

    # ---- Pop / Done ------------------------------------------------------------------------
    async def pop(self) -> Optional[QueuedPodInfo]:
        """The head of activeQ (or, when it is empty, of backoffQ), waiting for one; None once closed."""
        while True:
            with self._lock:
                p = self._try_pop_locked()
                if p is not None or self._active.closed:
                    return p
                fut = self._waiters.new()
            try:
                await fut
            finally:
                self._waiters.discard(fut)

    def wait(self, timeout: float) -> bool:
        """Block the calling thread until pop() may find a pod (the wake-ups of pop()), the queue
        is closed, or ``timeout`` seconds pass; False when it timed out. For a scheduling loop on
        its own thread: polling try_pop every 20 ms was most of an idle queue-manager's CPU."""
        with self._lock:
            if self._active.closed or len(self._active) or (self.pop_from_backoff_q and self._backoff.len_backoff()):
                return True
            event = self._waiters.new_event()
        try:
            return event.wait(timeout)
        finally:
            with self._lock:
                self._waiters.discard_event(event)

    def try_pop(self) -> Optional[QueuedPodInfo]:
        """Pop without waiting: None when nothing can be popped."""
        with self._lock:
            return self._try_pop_locked()

    def _try_pop_locked(self) -> Optional[QueuedPodInfo]:
        return self._active.pop_head(self._pop_backoff if self.pop_from_backoff_q else None)

    def _pop_backoff(self) -> Optional[QueuedPodInfo]:
        p = self._backoff.pop_backoff()
        if p is not None:
            self._incoming("active", POP_FROM_BACKOFF_Q, p)
        return p

    def done(self, uid: str) -> None:
        """The pod returned by pop() is no longer in flight (bound, or handed back to the queue)."""
        with self._lock:
            self._active.done(uid)

    def scheduling_cycle(self) -> int:
        with self._lock:
            return self._active.sched_cycle

    def _broadcast(self) -> None:
        self._waiters.wake_all()

    def _incoming(self, queue: str, event: str, p: QueuedPodInfo) -> None:
        if self._on_incoming is not None:
            self._on_incoming(queue, event, p)

    # ---- PreEnqueue ------------------------------------------------------------------------
    def _run_pre_enqueue_plugins(self, p: QueuedPodInfo) -> None:
        """Sets p.gating_plugin to the first PreEnqueue plugin that rejects it ("" if none).
        The plugin that gated it last time runs first."""
        plugins = self.pre_enqueue_plugins.get(p.pod.scheduler_name, {})
        gating = p.gating_plugin
        self._unschedulable.invalidate()  # p may be pooled, and its rejectors change here
        if gating and gating in plugins:
            if not self._run_pre_enqueue_plugin(plugins[gating], p):
                return
        for name, pl in plugins.items():
            if gating and name == gating:
                continue
            if not self._run_pre_enqueue_plugin(pl, p):
                return
        p.gating_plugin = ""

    def _run_pre_enqueue_plugin(self, pl: PreEnqueuePlugin, p: QueuedPodInfo) -> bool:
        try:
            st: Optional[Status] = pl.pre_enqueue(p.pod)
        except Exception as e:  # a broken plugin gates the pod, as an Error status does in kube
            st = Status.as_error(e)
        if st is None or st.code == Code.SUCCESS:
            return True
        p.unschedulable_plugins.add(pl.name)
        p.gating_plugin = pl.name
        p.gating_plugin_events = list(self._plugin_events.get(pl.name, ()))
        if st.code == Code.ERROR:
            log.error("PreEnqueue plugin %s failed for pod %s: %s", pl.name, p.key, st.message(), extra={"pod": p})
        else:
            log.debug("pod %s gated by PreEnqueue plugin %s: %s", p.key, pl.name, st.message(), extra={"pod": p})
        return False

    # ---- moving pods between queues --------------------------------------------------------
    def _new_queued_pod_info(self, pod: Pod, *plugins: str) -> QueuedPodInfo:
        return QueuedPodInfo(PodInfo(pod), timestamp=self.clock.now(), unschedulable_plugins=set(plugins))

    def _move_to_active_q(self, p: QueuedPodInfo, event: str, moves_from_backoff_q: bool) -> bool:
        """Into activeQ unless a PreEnqueue plugin gates it (then into unschedulablePods)."""
        # With PopFromBackoffQ, PreEnqueue already ran when the pod entered backoffQ.
        if not (self.pop_from_backoff_q and moves_from_backoff_q):
            self._run_pre_enqueue_plugins(p)
        if p.gated:
            if self._active.has(p) or self._backoff.has(p) or self._unschedulable.get(p.pod) is not None:
                return False
            self._unschedulable.add_or_update(p)
            self._incoming("unschedulable", event, p)
            log.debug("pod %s gated by %s, kept in unschedulablePods (event %s)", p.key, p.gating_plugin, event,
                      extra={"pod": p})
            return False
        if p.initial_attempt_timestamp is None:
            p.initial_attempt_timestamp = self.clock.now()
        self._unschedulable.delete(p.pod)
        self._backoff.delete(p)
        self._active.add(p)
        self._incoming("active", event, p)
        if event in (_UNSCHEDULED_POD_ADD_LABEL, _UNSCHEDULED_POD_UPDATE_LABEL):
            self._nominator.add_nominated_pod(p.pod, None)
        return True

    def _move_to_backoff_q(self, p: QueuedPodInfo, event: str) -> bool:
        if self.pop_from_backoff_q:
            # Pods may be popped straight from backoffQ, so PreEnqueue runs on the way in.
            self._run_pre_enqueue_plugins(p)
            if p.gated:
                if self._unschedulable.get(p.pod) is None:
                    self._unschedulable.add_or_update(p)
                    self._incoming("unschedulable", event, p)
                return False
        self._unschedulable.delete(p.pod)
        self._backoff.add(p)
        self._incoming("backoff", event, p)
        return True

    def _requeue_with_strategy(self, p: QueuedPodInfo, strategy: QueueingStrategy, event: str) -> str:
        """kube's requeuePodWithQueueingStrategy; returns the queue the pod went to."""
        if strategy == QueueingStrategy.QUEUE_SKIP:
            if self._unschedulable.get(p.pod) is None:
                self._incoming("unschedulable", event, p)
            self._unschedulable.add_or_update(p)
            return UNSCHEDULABLE_Q
        # The backoff may have run out while the pod sat in unschedulablePods.
        if strategy == QueueingStrategy.QUEUE_AFTER_BACKOFF and self._backoff.is_pod_backing_off(p):
            return BACKOFF_Q if self._move_to_backoff_q(p, event) else UNSCHEDULABLE_Q
        return ACTIVE_Q if self._move_to_active_q(p, event, False) else UNSCHEDULABLE_Q

    def _wakes_pop(self, queue: str) -> bool:
        return queue == ACTIVE_Q or (self.pop_from_backoff_q and queue == BACKOFF_Q)

    # ---- queueing hints --------------------------------------------------------------------
    def is_event_of_interest(self, event: ClusterEvent) -> bool:
        # Asked on every pod and node change; the hints are fixed at construction.
        got = self._interest.get(event)
        if got is None:
            got = self._interest[event] = is_wildcard(event) or any(
                match_cluster_events(registered, event) for hints in self.queueing_hints.values() for registered in hints)
        return got

    def _matching_hints(self, profile: str, event: ClusterEvent) -> Optional[tuple[list, frozenset]]:
        last = self._last_match  # one event is asked about every pod in a row: skip even the hashing
        if last is not None and last[0] is event and last[1] == profile:
            return last[2]
        key = (profile, event)
        got = self._hints_for_event.get(key)
        if got is None:
            hint_map = self.queueing_hints.get(profile)
            if hint_map is None:
                return None
            fns = [f for registered, fs in hint_map.items() if match_cluster_events(registered, event) for f in fs]
            got = self._hints_for_event[key] = (fns, frozenset(f.plugin_name for f in fns))
        self._last_match = (event, profile, got)
        return got

    def is_pod_worth_requeuing(self, p: QueuedPodInfo, event: ClusterEvent, old_obj: Any, new_obj: Any
                               ) -> QueueingStrategy:
        """Ask the hints of the plugins that rejected p (only those) whether event may help it."""
        rejectors = p.unschedulable_plugins | p.pending_plugins
        if not rejectors:
            return QueueingStrategy.QUEUE_AFTER_BACKOFF
        if event.resource == EventResource.WILDCARD and is_wildcard(event):
            # A wildcard event carrying a pod (ForceActivate) is meant for that pod only.
            if new_obj is not None and (not isinstance(new_obj, Pod) or new_obj.meta.uid != p.pod.meta.uid):
                return QueueingStrategy.QUEUE_SKIP
            return QueueingStrategy.QUEUE_AFTER_BACKOFF
        matching = self._matching_hints(p.pod.scheduler_name, event)
        if matching is None:
            log.error("no queueing hints registered for profile %r (pod %s)", p.pod.scheduler_name, p.key,
                      extra={"pod": p})
            return QueueingStrategy.QUEUE_AFTER_BACKOFF
        fns, plugins = matching
        if plugins.isdisjoint(rejectors):
            return QueueingStrategy.QUEUE_SKIP
        strategy = QueueingStrategy.QUEUE_SKIP
        for f in fns:
            if f.plugin_name not in rejectors:
                continue
            try:
                hint = f.fn(p.pod, old_obj, new_obj)
            except Exception as e:  # an erroring hint must not strand the pod: Queue
                log.error("queueing hint of %s failed for pod %s on %s: %s", f.plugin_name, p.key,
                          event_label(event), e)
                hint = QueueingHint.QUEUE
            if hint == QueueingHint.QUEUE_SKIP:
                continue
            if f.plugin_name in p.pending_plugins:
                return QueueingStrategy.QUEUE_IMMEDIATELY
            if not p.pending_plugins:
                return QueueingStrategy.QUEUE_AFTER_BACKOFF
            strategy = QueueingStrategy.QUEUE_AFTER_BACKOFF
        return strategy

    def _hint_for_in_flight_pod(self, p: QueuedPodInfo) -> QueueingStrategy:
        """Did any event that arrived while p was being scheduled make it worth retrying?"""
        if not p.unschedulable_plugins and not p.pending_plugins:
            # Failed for an unexpected reason (an error): retry after backoff.
            return QueueingStrategy.QUEUE_AFTER_BACKOFF
        events = self._active.cluster_events_for_pod(p)
        if events is None:
            log.error("in-flight pod %s isn't found in the scheduling queue", p.key, extra={"pod": p})
            return QueueingStrategy.QUEUE_AFTER_BACKOFF
        strategy = QueueingStrategy.QUEUE_SKIP
        for e in events:
            s = self.is_pod_worth_requeuing(p, e.event, e.old_obj, e.new_obj)
            if s == QueueingStrategy.QUEUE_IMMEDIATELY:
                return s
            if s == QueueingStrategy.QUEUE_AFTER_BACKOFF:
                strategy = s
                if not p.pending_plugins:
                    return s
        return strategy

    # ---- SchedulingQueue API ---------------------------------------------------------------
    def add(self, pod: Pod) -> None:
        """A new unscheduled pod: into activeQ, or unschedulablePods if a PreEnqueue plugin gates it."""
        with self._lock:
            p = self._new_queued_pod_info(pod)
            if self._move_to_active_q(p, _UNSCHEDULED_POD_ADD_LABEL, False):
                self._broadcast()

    def activate(self, pods: Iterable[Pod]) -> None:
        """Move these pods to activeQ if they are in unschedulablePods or backoffQ; a pod in flight
        gets a ForceActivate event so it is requeued when it comes back."""
        with self._lock:
            activated = False
            for pod in pods:
                if self._activate(pod):
                    activated = True
                    continue
                self._active.add_events_if_pod_in_flight(None, pod, [EVENT_FORCE_ACTIVATE])
            if activated:
                self._broadcast()

    def _activate(self, pod: Pod) -> bool:
        p = self._unschedulable.get(pod)
        moves_from_backoff_q = False
        if p is None:
            p = self._backoff.get_by_key(pod.key)
            if p is None or not self._backoff.delete(p):
                return False
            moves_from_backoff_q = True
        return self._move_to_active_q(p, FORCE_ACTIVATE, moves_from_backoff_q)

    def add_unschedulable_if_not_present(self, p: QueuedPodInfo, pod_scheduling_cycle: int) -> None:
        """Hand back a pod whose attempt failed (rejected: set p.unschedulable_plugins /
        p.pending_plugins first; errored: leave both empty). It goes to backoffQ/activeQ if an event
        received during its attempt may help it, otherwise to unschedulablePods. Ends its flight.
        Raises QueueError if the pod is already queued."""
        with self._lock:
            try:
                pod = p.pod
                if self._unschedulable.get(pod) is not None:
                    raise QueueError(f"Pod {pod.key} is already present in unschedulable queue")
                if self._active.has(p):
                    raise QueueError(f"Pod {pod.key} is already present in the active queue")
                if self._backoff.has(p):
                    raise QueueError(f"Pod {pod.key} is already present in the backoff queue")
                if not p.unschedulable_plugins and not p.pending_plugins:
                    p.consecutive_errors_count += 1  # an error, e.g. the API server was unreachable
                else:
                    p.unschedulable_count += 1
                    p.consecutive_errors_count = 0
                p.timestamp = self.clock.now()
                p.backoff_expiration = None  # counts and timestamp changed
                strategy = self._hint_for_in_flight_pod(p)
                queue = self._requeue_with_strategy(p, strategy, SCHEDULE_ATTEMPT_FAILURE)
                log.debug("pod %s moved to %s after a failed attempt (cycle %d, hint %s, plugins %s)", pod.key, queue,
                          pod_scheduling_cycle, strategy.name, sorted(p.unschedulable_plugins | p.pending_plugins),
                          extra={"pod": pod})
                if self._wakes_pop(queue):
                    self._broadcast()
            finally:
                self._active.done(p.pod.meta.uid)

    def flush_backoff_q_completed(self) -> None:
        """Move every pod whose backoff is over to activeQ."""
        with self._lock:
            activated = False
            for p in self._backoff.pop_all_backoff_completed():
                if self._move_to_active_q(p, BACKOFF_COMPLETE, True):
                    activated = True
            if activated:
                self._broadcast()

    def flush_unschedulable_pods_leftover(self) -> None:
        """Pods in unschedulablePods for longer than the maximum move on (UnschedulableTimeout)."""
        with self._lock:
            now = self.clock.now()
            stale = [p for p in self._unschedulable
                     if now - p.timestamp > self.pod_max_in_unschedulable_pods_duration]
            if stale:
                self._move_pods(stale, EVENT_UNSCHEDULABLE_TIMEOUT, None, None)

    def update(self, old_pod: Optional[Pod], new_pod: Pod) -> None:
        """An unscheduled pod changed: update it where it is queued; a pod in unschedulablePods moves
        if its rejecting plugins' hints say the change may help (e.g. its scheduling gates were
        removed); a pod in flight records the change as in-flight events; an unknown pod is added."""
        with self._lock:
            events = (pod_scheduling_properties_change(new_pod, old_pod) if old_pod is not None
                      else [EVENT_UNSCHEDULED_POD_UPDATE])
            if self._active.add_events_if_pod_in_flight(old_pod, new_pod, events):
                log.debug("pod %s updated while in flight; it is requeued later if needed", new_pod.key,
                          extra={"pod": new_pod})
                return
            if old_pod is not None:
                lookup = _lookup(old_pod)
                p = self._active.update(new_pod, lookup) or self._backoff.update(new_pod, lookup)
                if p is not None:
                    self._nominator.update_nominated_pod(old_pod, p.pod)
                    return
            p = self._unschedulable.get(new_pod)
            if p is not None:
                p.update(new_pod)
                self._unschedulable.invalidate()
                self._nominator.update_nominated_pod(old_pod if old_pod is not None else new_pod, p.pod)
                for ev in events:
                    strategy = self.is_pod_worth_requeuing(p, ev, old_pod, new_pod)
                    queue = self._requeue_with_strategy(p, strategy, event_label(ev))
                    if queue != UNSCHEDULABLE_Q:
                        log.debug("pod %s moved to %s by its update (%s)", new_pod.key, queue, event_label(ev),
                                  extra={"pod": new_pod})
                    if self._wakes_pop(queue):
                        self._broadcast()
                        break
                return
            p = self._new_queued_pod_info(new_pod)
            if self._move_to_active_q(p, _UNSCHEDULED_POD_UPDATE_LABEL, False):
                self._broadcast()

    def delete(self, pod: Pod) -> None:
        with self._lock:
            self._nominator.delete(pod)
            lookup = _lookup(pod)
            if self._active.delete(lookup):
                return
            if self._backoff.delete(lookup):
                return
            self._unschedulable.delete(pod)

    def assigned_pod_added(self, pod: Pod) -> None:
        """A pod was bound: may help pods whose affinity terms match it, or rejected by PodTopologySpread.
        (v1.35's event handlers call move_all_to_active_or_backoff_queue(EVENT_ASSIGNED_POD_ADD) instead.)"""
        with self._lock:
            self._move_pods(self._pods_with_cross_topology_term(pod), EVENT_ASSIGNED_POD_ADD, None, pod)

    def assigned_pod_updated(self, old_pod: Optional[Pod], new_pod: Pod, event: ClusterEvent) -> None:
        with self._lock:
            if match_cluster_events(ClusterEvent(EventResource.POD, ActionType.UPDATE_POD_SCALE_DOWN), event):
                # A scale-down may help pods rejected by resource fit: consider every pod.
                self._move_all(event, old_pod, new_pod, None)
            else:
                self._move_pods(self._pods_with_cross_topology_term(new_pod), event, old_pod, new_pod)

    def _pods_with_cross_topology_term(self, pod: Pod) -> list[QueuedPodInfo]:
        ns_labels = self._namespace_labels(pod.meta.namespace)
        out = []
        for p in self._unschedulable:
            if POD_TOPOLOGY_SPREAD in p.unschedulable_plugins and pod.meta.namespace == p.pod.meta.namespace:
                out.append(p)
                continue
            if any(term.matches(pod, ns_labels) for term in p.pod_info.required_affinity_terms):
                out.append(p)
        return out

    def move_all_to_active_or_backoff_queue(self, event: ClusterEvent, old_obj: Any = None, new_obj: Any = None,
                                            pre_check: Optional[PreEnqueueCheck] = None) -> None:
        """A cluster event: every unschedulable pod (passing pre_check) whose rejecting plugins registered
        a matching event, and whose hint says Queue, moves to backoffQ/activeQ. Pods no plugin rejected
        (errors) move on any event; gated pods only on events their gating plugin registered."""
        with self._lock:
            self._move_all(event, old_obj, new_obj, pre_check)

    def _move_all(self, event: ClusterEvent, old_obj: Any, new_obj: Any, pre_check: Optional[PreEnqueueCheck]) -> None:
        if not self.is_event_of_interest(event):
            return  # nothing registered it: don't even run pre_check
        if not self._may_help_a_pooled_pod(event):
            # is_pod_worth_requeuing would say QUEUE_SKIP to every pod: skip asking each one.
            self._active.add_event_if_any_in_flight(old_obj, new_obj, event)
            return
        pods = [p for p in self._unschedulable if pre_check is None or pre_check(p.pod)]
        self._move_pods(pods, event, old_obj, new_obj)

    def _may_help_a_pooled_pod(self, event: ClusterEvent) -> bool:
        """False only when no pooled pod can pass is_pod_worth_requeuing for event: every pod was
        rejected, and by none of the plugins whose hints cover the event."""
        if is_wildcard(event):
            return True
        for profile, (rejectors, some_unrejected) in self._unschedulable.rejectors_by_profile().items():
            if some_unrejected:
                return True
            matching = self._matching_hints(profile, event)
            if matching is None or not matching[1].isdisjoint(rejectors):
                return True
        return False

    def _move_pods(self, pods: list[QueuedPodInfo], event: ClusterEvent, old_obj: Any, new_obj: Any) -> None:
        if not self.is_event_of_interest(event):
            return
        activated = False
        label = event_label(event)
        for p in pods:
            if p.gated and not match_any_cluster_event(event, p.gating_plugin_events):
                continue  # its gating plugin is not interested in this event
            strategy = self.is_pod_worth_requeuing(p, event, old_obj, new_obj)
            if strategy == QueueingStrategy.QUEUE_SKIP:
                continue
            self._unschedulable.delete(p.pod)
            if self._wakes_pop(self._requeue_with_strategy(p, strategy, label)):
                activated = True
        # Pods in flight may come back rejected later: remember the event for them.
        self._active.add_event_if_any_in_flight(old_obj, new_obj, event)
        if activated:
            self._broadcast()

    # ---- Nominator -------------------------------------------------------------------------
    def add_nominated_pod(self, pod_info: Union[PodInfo, Pod], nominating_info: Optional[NominatingInfo] = None) -> None:
        """Record a nomination (preemption). nominating_info None keeps the pod's .nominated_node_name."""
        pod = pod_info.pod if isinstance(pod_info, PodInfo) else pod_info
        with self._lock:
            self._nominator.add_nominated_pod(pod, nominating_info)

    def delete_nominated_pod_if_exists(self, pod: Pod) -> None:
        with self._lock:
            self._nominator.delete(pod)

    def update_nominated_pod(self, old_pod: Pod, new_pod_info: Union[PodInfo, Pod]) -> None:
        pod = new_pod_info.pod if isinstance(new_pod_info, PodInfo) else new_pod_info
        with self._lock:
            self._nominator.update_nominated_pod(old_pod, pod)

    def nominated_pods_for_node(self, node_name: str) -> list[PodInfo]:
        """Pods nominated to the node, in nomination order, as the queue currently has them (a pod
        not in any queue, e.g. in flight, is reported as a bare pod with its name and uid, as kube does)."""
        with self._lock:
            out = []
            for ref in self._nominator.nominated_refs_for_node(node_name):
                p = (self._active.get_by_key(ref.key) or self._unschedulable.get_by_key(ref.key)
                     or self._backoff.get_by_key(ref.key))
                out.append(p.pod_info if p is not None else
                           PodInfo(Pod(meta=ObjectMeta(name=ref.name, namespace=ref.namespace, uid=ref.uid))))
            return out

    def nominated_node_names(self) -> list[str]:
        with self._lock:
            return self._nominator.node_names()

    @property
    def nominator(self) -> Nominator:
        return self._nominator

    # ---- inspection ------------------------------------------------------------------------
    def pods_in_active_q(self) -> list[Pod]:
        with self._lock:
            return [p.pod for p in self._sorted_active()]

    def pods_in_backoff_q(self) -> list[Pod]:
        with self._lock:
            return [p.pod for p in self._backoff.sorted()]

    def unschedulable_pods(self) -> list[Pod]:
        with self._lock:
            return [p.pod for p in self._unschedulable]

    def in_flight_pods(self) -> list[Pod]:
        with self._lock:
            return self._active.list_in_flight_pods()

    def in_flight_events(self) -> list[Union[Pod, InFlightEvent]]:
        with self._lock:
            return self._active.list_in_flight_events()

    def get_pod(self, name: str, namespace: str) -> Optional[QueuedPodInfo]:
        key = f"{namespace}/{name}"
        with self._lock:
            return (self._backoff.get_by_key(key) or self._unschedulable.get_by_key(key)
                    or self._active.get_by_key(key))

    def queue_of(self, pod: Pod) -> Optional[str]:
        """Which queue the pod is in (ACTIVE_Q, BACKOFF_Q, UNSCHEDULABLE_Q, GATED), or None."""
        key = pod.key
        with self._lock:
            if self._active.get_by_key(key) is not None:
                return ACTIVE_Q
            if self._backoff.has_key(key):
                return BACKOFF_Q
            p = self._unschedulable.get_by_key(key)
            if p is not None:
                return GATED if p.gated else UNSCHEDULABLE_Q
            return None

    def pending_pods(self) -> list[PendingPod]:
        """Every queued pod with its queue: activeQ in pop order, backoffQ by expiry, then
        unschedulable and gated pods in the order they arrived."""
        with self._lock:
            out = [PendingPod(p.pod, ACTIVE_Q, p) for p in self._sorted_active()]
            out += [PendingPod(p.pod, BACKOFF_Q, p) for p in self._backoff.sorted()]
            out += [PendingPod(p.pod, GATED if p.gated else UNSCHEDULABLE_Q, p) for p in self._unschedulable]
            return out

    def pending_counts(self) -> dict[str, int]:
        """Pods per queue, as kube's scheduler_pending_pods gauge labels them."""
        with self._lock:
            gated = sum(1 for q in self._unschedulable.values() if q.gated)
            return {"active": len(self._active), "backoff": len(self._backoff),
                    "unschedulable": len(self._unschedulable) - gated, "gated": gated}

    def pending_pods_summary(self) -> str:
        with self._lock:
            return (f"activeQ:{len(self._active)}; backoffQ:{len(self._backoff)}; "
                    f"unschedulablePods:{len(self._unschedulable)}")

    def _sorted_active(self) -> list[QueuedPodInfo]:
        less = self._active.heap.less
        items = self._active.list()
        items.sort(key=functools.cmp_to_key(lambda a, b: -1 if less(a, b) else (1 if less(b, a) else 0)))
        return items

    def __len__(self) -> int:
        with self._lock:
            return len(self._active) + len(self._backoff) + len(self._unschedulable)

    def has_active(self) -> bool:
        """Whether activeQ holds a pod (a hint, read without the lock: the binding cycle's
        batching asks it between pods)."""
        return len(self._active) > 0

    def active_count(self) -> int:
        """How many pods activeQ holds (a hint, read without the lock, as has_active)."""
        return len(self._active)


_UNSCHEDULED_POD_ADD_LABEL = event_label(EVENT_UNSCHEDULED_POD_ADD)
_UNSCHEDULED_POD_UPDATE_LABEL = event_label(EVENT_UNSCHEDULED_POD_UPDATE)
