"""The kubelet's node-pressure eviction over the usage model (eviction_manager_test.go and
helpers_test.go behaviour, re-expressed as tables and short scenarios)."""
from __future__ import annotations

from fractions import Fraction

import pytest

from schedmesh.api.types import NO_SCHEDULE, PodCondition, Toleration
from schedmesh.eviction.node_pressure import (ALLOCATABLE_MEMORY_AVAILABLE, BINARY_SI, DECIMAL_EXPONENT, DECIMAL_SI,
                                              DISK_PRESSURE, IMAGEFS_AVAILABLE, IMAGEFS_INODES_FREE,
                                              MEMORY_AVAILABLE, MEMORY_PRESSURE, NODEFS_AVAILABLE, NODEFS_INODES_FREE,
                                              PID_AVAILABLE, PID_PRESSURE, EvictionConfig, EvictionConfigError,
                                              EvictionManager, NodeCapacity, NodeUsage, Observation, SystemUsage,
                                              Threshold, ThresholdValue, effective_grace_period, observe,
                                              parse_go_duration, parse_threshold_config, pressure_conditions,
                                              quantity_string, rank_pods, spec_quantity_string, thresholds_met)
from schedmesh.eviction.testkit import T0, container, node, pod
from schedmesh.eviction.usage import PodUsage

Ki, Mi, Gi = 2**10, 2**20, 2**30


def config(**kubelet) -> EvictionConfig:
    return EvictionConfig.from_kubelet_configuration({"enforceNodeAllocatable": [], **kubelet})


# ---- quantities, durations, configuration ----------------------------------------------------

@pytest.mark.parametrize("value, fmt, want", [
    (0, BINARY_SI, "0"), (100 * Mi, BINARY_SI, "100Mi"), (1536 * Mi, BINARY_SI, "1536Mi"), (Gi, BINARY_SI, "1Gi"),
    (512, BINARY_SI, "512"), (1023, BINARY_SI, "1023"), (1024, BINARY_SI, "1Ki"), (1500, BINARY_SI, "1500"),
    (-50 * Mi, BINARY_SI, "-50Mi"), (Fraction(5, 2), BINARY_SI, "2500m"), (2**60, BINARY_SI, "1Ei"),
    (1000, DECIMAL_SI, "1k"), (1500, DECIMAL_SI, "1500"), (40000, DECIMAL_SI, "40k"), (2 * 10**6, DECIMAL_SI, "2M"),
    (Fraction(1, 10), DECIMAL_SI, "100m"), (Fraction(1, 10**9), DECIMAL_SI, "1n"), (10**9, DECIMAL_EXPONENT, "1e9"),
    (15 * 10**8, DECIMAL_EXPONENT, "1500e6"), (7, DECIMAL_EXPONENT, "7"),
])
def test_quantity_string(value, fmt, want):
    assert quantity_string(value, fmt) == want


@pytest.mark.parametrize("value, want", [(0, "0"), (100 * Mi, "100Mi"), (128 * 10**6, "128M"), (1000, "1k"),
                                         (1024, "1Ki"), (1000 * Ki, "1024k"), (12345, "12345")])
def test_spec_quantity_string(value, want):
    assert spec_quantity_string(value) == want


@pytest.mark.parametrize("text, want", [("0", 0.0), ("1m30s", 90.0), ("5m0s", 300.0), ("1.5h", 5400.0),
                                        ("300ms", 0.3), ("2h45m", 9900.0), ("-1s", -1.0), ("10us", 1e-5)])
def test_parse_go_duration(text, want):
    assert parse_go_duration(text) == pytest.approx(want)


@pytest.mark.parametrize("text, error", [("", "invalid duration"), ("5", "missing unit"), ("5d", 'unknown unit "d"'),
                                         ("m", "invalid duration"), (90, "must be a string")])
def test_parse_go_duration_errors(text, error):
    with pytest.raises(ValueError, match=error):
        parse_go_duration(text)


def test_default_thresholds():
    got = [(t.signal, str(t.value), t.grace_period) for t in EvictionConfig.from_kubelet_configuration().thresholds]
    assert got == [(MEMORY_AVAILABLE, "100Mi", 0.0), (NODEFS_AVAILABLE, "10%", 0.0), (NODEFS_INODES_FREE, "5%", 0.0),
                   (IMAGEFS_AVAILABLE, "15%", 0.0), (IMAGEFS_INODES_FREE, "5%", 0.0),
                   (ALLOCATABLE_MEMORY_AVAILABLE, "100Mi", 0.0)]
    c = EvictionConfig.from_kubelet_configuration()
    assert (c.pressure_transition_period, c.max_pod_grace_period, c.local_storage_capacity_isolation) == (300.0, 0, True)


@pytest.mark.parametrize("kubelet, want", [
    ({"evictionHard": {"memory.available": "1Gi"}}, [(MEMORY_AVAILABLE, "1Gi", 0.0)]),
    ({"evictionHard": {}}, []),
    ({"evictionHard": {"memory.available": "1Gi"}, "mergeDefaultEvictionSettings": True},
     [(MEMORY_AVAILABLE, "1Gi", 0.0), (NODEFS_AVAILABLE, "10%", 0.0), (NODEFS_INODES_FREE, "5%", 0.0),
      (IMAGEFS_AVAILABLE, "15%", 0.0), (IMAGEFS_INODES_FREE, "5%", 0.0)]),
    ({"evictionHard": {"memory.available": "0%", "nodefs.available": "100%", "pid.available": "1k"}},
     [(PID_AVAILABLE, "1k", 0.0)]),
    ({"evictionHard": {"memory.available": "100Mi"}, "evictionSoft": {"memory.available": "300Mi"},
      "evictionSoftGracePeriod": {"memory.available": "1m30s"}},
     [(MEMORY_AVAILABLE, "100Mi", 0.0), (MEMORY_AVAILABLE, "300Mi", 90.0)]),
    ({"evictionHard": {}, "evictionSoft": {"memory.available": "300Mi"},
      "evictionSoftGracePeriod": {"memory.available": "0s"}}, [(MEMORY_AVAILABLE, "300Mi", 0.0)]),
])
def test_threshold_config(kubelet, want):
    assert [(t.signal, str(t.value), t.grace_period) for t in config(**kubelet).thresholds] == want


def test_allocatable_threshold_copies_the_hard_memory_threshold():
    got = parse_threshold_config({"memory.available": "200Mi"}, {"memory.available": "1Gi"},
                                 {"memory.available": "1m"}, {"memory.available": "50Mi"}, ["pods"])
    assert [(t.signal, str(t.value), t.grace_period, str(t.min_reclaim)) for t in got] == [
        (MEMORY_AVAILABLE, "200Mi", 0.0, "50Mi"), (MEMORY_AVAILABLE, "1Gi", 60.0, "50Mi"),
        (ALLOCATABLE_MEMORY_AVAILABLE, "200Mi", 0.0, "50Mi")]


@pytest.mark.parametrize("kubelet, error", [
    ({"evictionHard": {"cpu.available": "1"}}, "unsupported eviction signal cpu.available"),
    ({"evictionHard": {"memory.available": "-5%"}}, "must be >= 0%: -5%"),
    ({"evictionHard": {"memory.available": "150%"}}, "must be <= 100%: 150%"),
    ({"evictionHard": {"memory.available": "abc%"}}, "invalid syntax"),
    ({"evictionHard": {"memory.available": "0"}}, "eviction threshold memory.available must be positive: 0"),
    ({"evictionHard": {"memory.available": "lots"}}, "is not a quantity"),
    ({"evictionSoft": {"memory.available": "1Gi"}}, "grace period must be specified for the soft eviction threshold"),
    ({"evictionSoft": {"memory.available": "1Gi"}, "evictionSoftGracePeriod": {"memory.available": "-1s"}},
     "must be a positive value"),
    ({"evictionSoftGracePeriod": {"memory.available": "soon"}}, "invalid duration"),
    ({"evictionMinimumReclaim": {"memory.available": "-1Mi"}}, "negative eviction minimum reclaim"),
    ({"evictionMinimumReclaim": {"memory.available": "0%"}}, "minimum reclaim memory.available must be positive"),
    ({"evictionPressureTransitionPeriod": "later"}, "evictionPressureTransitionPeriod"),
    ({"evictionMaxPodGracePeriod": -1}, "evictionMaxPodGracePeriod"),
    ({"kind": "KubeProxyConfiguration"}, "is not KubeletConfiguration"),
    ({"evictionHard": ["memory.available<1Gi"]}, "must be a map"),
])
def test_config_errors(kubelet, error):
    with pytest.raises(EvictionConfigError, match=error):
        config(**kubelet)


# ---- observations and thresholds -------------------------------------------------------------

def test_observations_with_shared_and_dedicated_imagefs():
    usage = NodeUsage(SystemUsage(memory=100 * Mi, nodefs_bytes=Gi, nodefs_inodes=10, imagefs_bytes=2 * Gi,
                                  imagefs_inodes=5, pids=50),
                      {"default/a": PodUsage(memory=200 * Mi, ephemeral_storage=Gi, pids=10, inodes=100),
                       "default/b": PodUsage(memory=100 * Mi, pids=5)})
    shared = observe(NodeCapacity(memory=Gi, nodefs_bytes=10 * Gi, nodefs_inodes=1000, max_pids=500), usage, T0)
    assert {s: o.available for s, o in shared.items()} == {
        MEMORY_AVAILABLE: 624 * Mi, NODEFS_AVAILABLE: 6 * Gi, NODEFS_INODES_FREE: 885,
        IMAGEFS_AVAILABLE: 6 * Gi, IMAGEFS_INODES_FREE: 885, PID_AVAILABLE: 435}
    dedicated = observe(NodeCapacity(nodefs_bytes=10 * Gi, imagefs_bytes=20 * Gi, imagefs_inodes=100), usage, T0)
    assert {s: o.available for s, o in dedicated.items()} == {
        NODEFS_AVAILABLE: 8 * Gi, IMAGEFS_AVAILABLE: 18 * Gi, IMAGEFS_INODES_FREE: 95}


def test_allocatable_observation_is_the_pods_cgroup():
    thresholds = config(evictionHard={"memory.available": "10%"}, enforceNodeAllocatable=["pods"]).thresholds
    obs = observe(NodeCapacity(memory=10 * Gi, allocatable_memory=8 * Gi), NodeUsage(
        SystemUsage(memory=Gi), {"default/a": PodUsage(memory=3 * Gi)}), T0, thresholds)
    assert obs[ALLOCATABLE_MEMORY_AVAILABLE] == Observation(8 * Gi + 1073741840 - 3 * Gi, 8 * Gi + 1073741840, T0)
    assert obs[MEMORY_AVAILABLE] == Observation(6 * Gi, 10 * Gi, T0)


@pytest.mark.parametrize("available, min_reclaim, enforce, met", [
    (1073741839, None, False, True),  # 10% of 10Gi in float32 is 1073741840
    (1073741840, None, False, False),
    (1073741840 + 100 * Mi - 1, "100Mi", True, True),
    (1073741840 + 100 * Mi, "100Mi", True, False),
    (1073741840 + 100 * Mi - 1, "100Mi", False, False),
])
def test_percentage_thresholds_are_float32(available, min_reclaim, enforce, met):
    t = Threshold(MEMORY_AVAILABLE, ThresholdValue(percentage=config(evictionHard={"memory.available": "10%"})
                                                   .thresholds[0].value.percentage),
                  min_reclaim=ThresholdValue(quantity=Fraction(100 * Mi), fmt=BINARY_SI) if min_reclaim else None)
    obs = {MEMORY_AVAILABLE: Observation(available, 10 * Gi, T0)}
    assert bool(thresholds_met([t], obs, enforce)) == met


# ---- ranking ---------------------------------------------------------------------------------

def ranked(signal, specs, **capacity_kw):
    """specs: (name, priority, requests, usage dict)."""
    pods = [pod(name, priority=prio, requests=req) for name, prio, req, _ in specs]
    usage = NodeUsage(pods={f"default/{name}": PodUsage(**u) for name, _, _, u in specs})
    return [p.name for p in rank_pods(pods, signal, usage, **capacity_kw)]


def test_memory_ranking():
    assert ranked(MEMORY_AVAILABLE, [
        ("guaranteed-under", 0, {"memory": "100Mi"}, {"memory": 50 * Mi}),
        ("be-low", 0, None, {"memory": 10 * Mi}),
        ("burst-over-high-priority", 100, {"memory": "10Mi"}, {"memory": 100 * Mi}),
        ("be-high", 0, None, {"memory": 50 * Mi}),
        ("burst-under-low-priority", -10, {"memory": "100Mi"}, {"memory": 90 * Mi}),
    ]) == ["be-high", "be-low", "burst-over-high-priority", "burst-under-low-priority", "guaranteed-under"]


def test_disk_ranking():
    assert ranked(NODEFS_AVAILABLE, [
        ("under", 0, {"ephemeral-storage": "10Gi"}, {"ephemeral_storage": 5 * Gi}),
        ("over-small", 0, {"ephemeral-storage": "1Gi"}, {"ephemeral_storage": 2 * Gi}),
        ("over-big", 0, None, {"ephemeral_storage": 3 * Gi}),
        ("over-important", 10, None, {"ephemeral_storage": 30 * Gi}),
    ]) == ["over-big", "over-small", "over-important", "under"]


def test_inode_ranking_subtracts_the_ephemeral_storage_request():
    assert ranked(NODEFS_INODES_FREE, [
        ("big-with-request", 0, {"ephemeral-storage": "1Gi"}, {"inodes": 500_000}),
        ("small", 0, None, {"inodes": 460_000}),
        ("none", 0, None, {}),
    ]) == ["small", "big-with-request", "none"]


def test_dedicated_imagefs_ranks_by_priority():
    specs = [("a", 5, None, {"ephemeral_storage": 9 * Gi}), ("b", 1, None, {"ephemeral_storage": Gi})]
    assert ranked(IMAGEFS_AVAILABLE, specs, dedicated_imagefs=True) == ["b", "a"]
    assert ranked(IMAGEFS_AVAILABLE, specs) == ["b", "a"]
    assert ranked(NODEFS_AVAILABLE, specs, dedicated_imagefs=True) == ["b", "a"]


def test_pid_ranking():
    assert ranked(PID_AVAILABLE, [("a", 0, None, {"pids": 500}), ("b", 0, None, {"pids": 450}),
                                  ("c", -1, None, {"pids": 10})]) == ["c", "a", "b"]


# ---- the eviction manager ----------------------------------------------------------------------

MEM_NODE = NodeCapacity(memory=Gi, allocatable_memory=Gi)


def mem_pods():
    return [pod("a", requests={"memory": "100Mi"}, usage={"memory": "500Mi"}),
            pod("b", requests={"memory": "600Mi"}, usage={"memory": "450Mi"})]


def test_hard_memory_eviction():
    m = EvictionManager(config(evictionHard={"memory.available": "100Mi"}), MEM_NODE)
    r = m.synchronize(T0, pods=mem_pods())
    assert r.pressure == (MEMORY_PRESSURE,) and r.reclaiming == "memory"
    assert [str(t) for t in r.thresholds_met] == ["memory.available<100Mi"]
    (ev,) = r.evictions
    msg = ("The node was low on resource: memory. Threshold quantity: 100Mi, available: 74Mi. "
           "Container c was using 500Mi, request is 100Mi, has larger consumption of memory. ")
    assert (ev.pod.name, ev.grace_period_seconds, ev.message, ev.signal, ev.reason) == (
        "a", 1, msg, MEMORY_AVAILABLE, "Evicted")
    assert ev.annotations == {"offending_containers": "c", "offending_containers_usage": "500Mi",
                              "starved_resource": "memory"}
    assert ev.condition == PodCondition("DisruptionTarget", "True", "TerminationByKubelet", msg)
    assert m.pressure == (MEMORY_PRESSURE,)


def test_no_pressure_no_eviction():
    m = EvictionManager(config(), NodeCapacity(memory=4 * Gi, nodefs_bytes=100 * Gi))
    r = m.synchronize(T0, pods=mem_pods())
    assert (r.pressure, r.thresholds_met, r.evictions, r.reclaiming) == ((), (), (), None)


def test_one_eviction_per_sync_and_only_on_new_stats():
    m = EvictionManager(config(evictionHard={"memory.available": "100Mi"}), MEM_NODE)
    assert len(m.synchronize(T0, pods=mem_pods()).evictions) == 1
    again = m.synchronize(T0, pods=mem_pods())  # same observation time: nothing new to act on
    assert again.evictions == () and again.reclaiming is None and again.pressure == (MEMORY_PRESSURE,)
    assert m.synchronize(T0 + 10, pods=mem_pods()).evictions[0].pod.name == "a"


def test_soft_threshold_waits_for_its_grace_period():
    m = EvictionManager(config(evictionHard={}, evictionSoft={"memory.available": "200Mi"},
                               evictionSoftGracePeriod={"memory.available": "1m"}, evictionMaxPodGracePeriod=20),
                        MEM_NODE)
    pods = [pod("hog", usage={"memory": "900Mi"}, grace=30)]
    first = m.synchronize(T0, pods=pods)
    assert (first.pressure, first.thresholds_met, first.evictions) == ((MEMORY_PRESSURE,), (), ())
    assert m.synchronize(T0 + 59, pods=pods).evictions == ()
    (ev,) = m.synchronize(T0 + 60, pods=pods).evictions
    assert ev.grace_period_seconds == 20 and ev.effective_grace_period_seconds == 20
    assert ev.message == ("The node was low on resource: memory. Threshold quantity: 200Mi, available: 124Mi. "
                          "Container c was using 900Mi, request is 0, has larger consumption of memory. ")


@pytest.mark.parametrize("max_grace, pod_grace, want, effective", [(20, 30, 20, 20), (60, 30, 30, 30), (0, 30, 0, 30),
                                                                  (0, 0, 0, 1)])
def test_soft_grace_is_the_smaller_of_max_and_pods(max_grace, pod_grace, want, effective):
    m = EvictionManager(config(evictionHard={}, evictionSoft={"memory.available": "200Mi"},
                               evictionSoftGracePeriod={"memory.available": "0.5s"},
                               evictionMaxPodGracePeriod=max_grace), MEM_NODE)
    pods = [pod("hog", usage={"memory": "900Mi"}, grace=pod_grace)]
    m.synchronize(T0, pods=pods)
    (ev,) = m.synchronize(T0 + 1, pods=pods).evictions
    assert (ev.grace_period_seconds, ev.effective_grace_period_seconds) == (want, effective)


def test_pressure_lasts_the_transition_period():
    m = EvictionManager(config(evictionHard={"memory.available": "100Mi"}), MEM_NODE)
    m.synchronize(T0, pods=mem_pods())
    calm = [pod("a", usage={"memory": "10Mi"})]
    assert m.synchronize(T0 + 299, pods=calm).pressure == (MEMORY_PRESSURE,)
    r = m.synchronize(T0 + 300, pods=calm)
    assert (r.pressure, r.thresholds_met) == ((), ())
    assert [c.status for c in m.node_conditions()] == ["False", "False", "False"]


def test_zero_transition_period_never_reports_pressure():
    m = EvictionManager(config(evictionHard={"memory.available": "100Mi"}, evictionPressureTransitionPeriod="0s"),
                        MEM_NODE)
    r = m.synchronize(T0, pods=mem_pods())
    assert r.pressure == () and len(r.evictions) == 1


def test_minimum_reclaim_keeps_evicting_until_reclaimed():
    m = EvictionManager(config(evictionHard={"memory.available": "100Mi"},
                               evictionMinimumReclaim={"memory.available": "50Mi"}), MEM_NODE)
    assert m.synchronize(T0, pods=mem_pods()).evictions
    # 124Mi available: above the threshold, below threshold + minimum reclaim.
    still = [pod("b", requests={"memory": "600Mi"}, usage={"memory": "900Mi"})]
    r = m.synchronize(T0 + 1, pods=still)
    assert [e.pod.name for e in r.evictions] == ["b"]
    done = [pod("b", requests={"memory": "600Mi"}, usage={"memory": "870Mi"})]  # 154Mi available
    assert m.synchronize(T0 + 2, pods=done).evictions == ()


def test_critical_pods_are_skipped():
    m = EvictionManager(config(evictionHard={"memory.available": "100Mi"}), MEM_NODE)
    pods = [pod("static", usage={"memory": "700Mi"}, annotations={"kubernetes.io/config.source": "file"}),
            pod("mirror", usage={"memory": "200Mi"}, annotations={"kubernetes.io/config.mirror": "x"}),
            pod("system", usage={"memory": "100Mi"}, priority=2_000_001_000),
            pod("api-sourced", usage={"memory": "50Mi"}, annotations={"kubernetes.io/config.source": "api"})]
    assert [e.pod.name for e in m.synchronize(T0, pods=pods).evictions] == ["api-sourced"]
    r = m.synchronize(T0 + 1, pods=pods[:3])
    assert r.evictions == () and r.reclaiming == "memory"


def test_terminal_and_terminating_pods_are_not_candidates():
    m = EvictionManager(config(evictionHard={"memory.available": "100Mi"}), MEM_NODE)
    pods = [pod("going", usage={"memory": "900Mi"}, terminating=True),
            pod("done", usage={"memory": "50Mi"}, phase="Failed"), pod("ok", usage={"memory": "10Mi"})]
    assert [e.pod.name for e in m.synchronize(T0, pods=pods).evictions] == ["ok"]


def test_pod_level_resources_in_the_message():
    m = EvictionManager(config(evictionHard={"memory.available": "900Mi"}), MEM_NODE)
    p = pod("p", containers=[container("c")], pod_requests={"memory": "100Mi"}, usage={"memory": "300Mi"})
    (ev,) = m.synchronize(T0, pods=[p]).evictions
    assert ev.message == ("The node was low on resource: memory. Threshold quantity: 900Mi, available: 724Mi. "
                          "Pod p was using 300Mi, request is 100Mi, has larger consumption of memory. "
                          "Container c was using 300Mi, request is 0, has larger consumption of memory. ")
    assert ev.annotations["offending_pod"] == "p" and ev.annotations["offending_pod_usage"] == "300Mi"


def test_only_containers_over_their_request_are_named():
    m = EvictionManager(config(evictionHard={"memory.available": "900Mi"}), MEM_NODE)
    p = pod("p", containers=[container("app", {"memory": "100Mi"}), container("log", {"memory": "100Mi"})],
            init_containers=[container("proxy", sidecar=True)],
            usage="app.memory=200Mi,log.memory=50Mi,proxy.memory=1Mi")
    (ev,) = m.synchronize(T0, pods=[p]).evictions
    assert ev.message.endswith("Container app was using 200Mi, request is 100Mi, has larger consumption of memory. "
                               "Container proxy was using 1Mi, request is 0, has larger consumption of memory. ")
    assert ev.annotations["offending_containers"] == "app,proxy"


def test_allocatable_memory_eviction():
    m = EvictionManager(config(enforceNodeAllocatable=["pods"]),
                        NodeCapacity(memory=4 * Gi, allocatable_memory=3 * Gi))
    r = m.synchronize(T0, pods=[pod("hog", usage={"memory": "3300Mi"})])
    (ev,) = r.evictions
    assert ev.signal == ALLOCATABLE_MEMORY_AVAILABLE and r.pressure == (MEMORY_PRESSURE,)
    assert ev.message.startswith("The node was low on resource: memory. Threshold quantity: 100Mi, available: -128Mi. ")


def test_disk_eviction_with_the_default_thresholds():
    m = EvictionManager(config(), NodeCapacity(nodefs_bytes=100 * Gi))
    pods = [pod("writer", usage={"ephemeral-storage": "88Gi"}), pod("quiet", usage={"ephemeral-storage": "1Mi"})]
    r = m.synchronize(T0, pods=pods)  # 12Gi free: below imagefs's 15%, above nodefs's 10%
    assert r.pressure == (DISK_PRESSURE,) and [t.signal for t in r.thresholds_met] == [IMAGEFS_AVAILABLE]
    (ev,) = r.evictions
    assert ev.message == ("The node was low on resource: ephemeral-storage. Threshold quantity: 16106128000, "
                          "available: 12287Mi. Container c was using 88Gi, request is 0, has larger consumption of "
                          "ephemeral-storage. ")
    worse = m.synchronize(T0 + 1, pods=[pod("writer", usage={"ephemeral-storage": "95Gi"})])
    assert [t.signal for t in worse.thresholds_met] == [NODEFS_AVAILABLE, IMAGEFS_AVAILABLE]
    assert "Threshold quantity: 10737418400, available: 5Gi. " in worse.evictions[0].message


def test_inode_eviction_message():
    m = EvictionManager(config(), NodeCapacity(nodefs_inodes=1_000_000))
    (ev,) = m.synchronize(T0, pods=[pod("many-files", usage={"inodes": 960_000})]).evictions
    assert ev.message == "The node was low on resource: inodes. Threshold quantity: 50000, available: 40k. "
    assert ev.annotations == {"offending_containers": "", "offending_containers_usage": "",
                              "starved_resource": "inodes"}


def test_pid_eviction():
    m = EvictionManager(config(evictionHard={"pid.available": "100"}), NodeCapacity(max_pids=1000))
    pods = [pod("a", usage={"pids": 500}), pod("b", usage={"pids": 450}), pod("c", usage={"pids": 10}, priority=-1)]
    r = m.synchronize(T0, pods=pods)
    assert r.pressure == (PID_PRESSURE,)
    (ev,) = r.evictions
    assert ev.pod.name == "c"
    assert ev.message == "The node was low on resource: pids. Threshold quantity: 100, available: 40. "


def test_memory_is_reclaimed_before_disk():
    m = EvictionManager(config(), NodeCapacity(memory=Gi, nodefs_bytes=10 * Gi))
    pods = [pod("disk", usage={"ephemeral-storage": "9.5Gi"}, priority=-5), pod("mem", usage={"memory": "1000Mi"})]
    r = m.synchronize(T0, pods=pods)
    assert r.pressure == (MEMORY_PRESSURE, DISK_PRESSURE) and r.reclaiming == "memory"
    # The memory ranking: "mem" uses more than its (zero) request; priority comes second.
    assert r.evictions[0].pod.name == "mem"


@pytest.mark.parametrize("the_pod, signal, message", [
    (pod("p", limits={"ephemeral-storage": "1Gi"}, usage={"ephemeral-storage": "2Gi"}), "ephemeralpodfs.limit",
     "Pod ephemeral local storage usage exceeds the total limit of containers 1Gi. "),
    (pod("p", containers=[container("app", limits={"ephemeral-storage": "1Gi"}),
                          container("side", limits={"ephemeral-storage": "1Gi"})],
         usage="app.ephemeral-storage=1.5Gi,side.ephemeral-storage=100Mi"), "ephemeralcontainerfs.limit",
     'Container app exceeded its local ephemeral storage limit "1Gi". '),
])
def test_local_storage_limits(the_pod, signal, message):
    m = EvictionManager(config(evictionHard={}), NodeCapacity())
    r = m.synchronize(T0, pods=[the_pod, pod("fine", limits={"ephemeral-storage": "1Gi"},
                                             usage={"ephemeral-storage": "1Gi"})])
    (ev,) = r.evictions
    assert (ev.pod.name, ev.signal, ev.message, ev.grace_period_seconds, ev.condition) == (
        "p", signal, message, 1, None)


def test_local_storage_isolation_can_be_off():
    m = EvictionManager(config(evictionHard={}, localStorageCapacityIsolation=False), NodeCapacity())
    assert m.synchronize(T0, pods=[pod("p", limits={"ephemeral-storage": "1Gi"},
                                       usage={"ephemeral-storage": "2Gi"})]).evictions == ()


MEMORY_TOLERATION = Toleration("node.kubernetes.io/memory-pressure", "Exists", "", NO_SCHEDULE)


@pytest.mark.parametrize("usage, the_pod, admit, message", [
    (None, pod("best-effort"), True, ""),
    ("memory=1000Mi", pod("burstable", requests={"memory": "1Mi"}), True, ""),
    ("memory=1000Mi", pod("best-effort"), False, "The node had condition: [MemoryPressure]. "),
    ("memory=1000Mi", pod("tolerant", tolerations=[MEMORY_TOLERATION]), True, ""),
    ("memory=1000Mi", pod("critical", priority=2_000_000_000), True, ""),
    ("ephemeral-storage=9.9Gi", pod("burstable", requests={"memory": "1Mi"}), False,
     "The node had condition: [DiskPressure]. "),
    ("memory=1000Mi,ephemeral-storage=9.9Gi", pod("tolerant", tolerations=[MEMORY_TOLERATION]), False,
     "The node had condition: [MemoryPressure DiskPressure]. "),
])
def test_admit(usage, the_pod, admit, message):
    m = EvictionManager(config(), NodeCapacity(memory=Gi, nodefs_bytes=10 * Gi))
    m.synchronize(T0, pods=[pod("running", usage=usage)])
    got = m.admit(the_pod)
    assert (got.admit, got.message, got.reason) == (admit, message, "" if admit else "Evicted")


def test_pressure_conditions():
    got = pressure_conditions([DISK_PRESSURE])
    assert [(c.type, c.status, c.reason, c.message) for c in got] == [
        ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        ("DiskPressure", "True", "KubeletHasDiskPressure", "kubelet has disk pressure"),
        ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available")]


@pytest.mark.parametrize("override, pod_grace, want", [(1, 30, 1), (0, 30, 30), (0, 0, 1), (10, 30, 10), (45, 30, 45)])
def test_effective_grace_period(override, pod_grace, want):
    assert effective_grace_period(pod("p", grace=pod_grace), override) == want


def test_clock_is_injected_and_capacity_from_the_node():
    n = node(capacity={"memory": "1Gi", "ephemeral-storage": "10Gi"}, allocatable={"memory": "900Mi"})
    cap = NodeCapacity.from_node(n, max_pids=4096)
    assert cap == NodeCapacity(memory=Gi, allocatable_memory=900 * Mi, nodefs_bytes=10 * Gi, max_pids=4096)
    now = [T0]
    m = EvictionManager(config(evictionHard={"memory.available": "100Mi"}), cap, clock=lambda: now[0])
    r = m.synchronize(pods=mem_pods())
    assert r.observations[MEMORY_AVAILABLE].time == T0 and len(r.evictions) == 1


def test_settled_until_a_threshold_is_met_and_while_pressure_lasts():
    m = EvictionManager(config(evictionHard={}, evictionSoft={"memory.available": "200Mi"},
                               evictionSoftGracePeriod={"memory.available": "1m"},
                               evictionPressureTransitionPeriod="10s"), MEM_NODE)
    assert m.settled
    calm, hog = [pod("a", usage={"memory": "10Mi"})], [pod("a", usage={"memory": "900Mi"})]
    m.synchronize(T0, pods=calm)
    assert m.settled
    m.synchronize(T0 + 1, pods=hog)  # met, its grace period running: not settled
    assert not m.settled and m.pressure == (MEMORY_PRESSURE,)
    m.synchronize(T0 + 2, pods=calm)  # no longer met, but MemoryPressure lasts the transition period
    assert not m.settled
    m.synchronize(T0 + 12, pods=calm)
    assert m.settled and m.pressure == ()
