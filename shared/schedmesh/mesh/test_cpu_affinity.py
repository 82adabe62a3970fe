"""CPU lists read and written as Linux writes them; the local mesh's plan (the queue-manager on a
CPU of its own); a process pinned with its threads; a bad list refused naming the variable."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from schedmesh.mesh import cpu_affinity
from schedmesh.mesh.cpu_affinity import CpuPlan, format_cpus, parse_cpus, plan


@pytest.mark.parametrize("text, cpus", [
    ("0", {0}), ("1-3", {1, 2, 3}), ("0,2-3", {0, 2, 3}), (" 5 , 7-8 ", {5, 7, 8}), ("4-4", {4}),
])
def test_cpu_lists_read_as_linux_writes_them(text: str, cpus: set[int]) -> None:
    assert parse_cpus(text) == cpus
    assert parse_cpus(format_cpus(cpus)) == cpus


@pytest.mark.parametrize("text, reason", [
    ("", "is not a CPU number"), ("a", "is not a CPU number"), ("3-1", "is not a range"), ("-1", "is not a"),
    ("1,,2", "is not a CPU number"), ("0-x", "is not a CPU number"),
])
def test_a_bad_cpu_list_names_the_variable_and_why(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=f"SCHEDMESH_HELPER_CPUS={text!r}: .*{reason}"):
        parse_cpus(text, "SCHEDMESH_HELPER_CPUS")


def test_format_cpus_writes_ranges() -> None:
    assert format_cpus([5, 0, 1, 2]) == "0-2,5"
    assert format_cpus({3}) == "3"
    assert format_cpus([0, 2, 4]) == "0,2,4"


def test_the_plan_gives_the_queue_manager_a_cpu_of_its_own() -> None:
    p = plan("auto", available=[0, 1])
    assert p == CpuPlan(frozenset({1}), frozenset({0}))
    assert p.env(scheduler=True) == {"SCHEDMESH_CPUS": "1", "SCHEDMESH_HELPER_CPUS": "0"}
    assert p.env() == {"SCHEDMESH_CPUS": "0"}
    assert p.describe() == "the queue-manager on CPU 1, every other process on CPU 0"
    assert plan("auto", available=[2, 3, 6, 7]).describe() == \
        "the queue-manager on CPU 7, every other process on CPUs 2-3,6"
    assert plan("auto", available=[0]) is None  # one CPU: nothing to share out
    assert plan("off", available=[0, 1, 2]) is None


def test_the_plan_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCHEDMESH_CPU_PINNING", "off")
    assert plan(available=[0, 1]) is None
    assert plan("auto", available=[0, 1]) is not None  # the option wins
    monkeypatch.setenv("SCHEDMESH_CPU_PINNING", "always")
    with pytest.raises(ValueError, match="SCHEDMESH_CPU_PINNING / --cpu-pinning: 'always' is not one of auto, off"):
        plan(available=[0, 1])


needs_affinity = pytest.mark.skipif(not cpu_affinity.supported() or len(os.sched_getaffinity(0)) < 2,
                                    reason="needs Linux CPU affinity and two CPUs")


@needs_affinity
def test_a_process_is_pinned_with_every_thread_and_later_ones() -> None:
    """In a child process (pinning this one would pin the test run): the threads started before
    and after `pin_from_env` all run on the CPU it names."""
    cpu = sorted(os.sched_getaffinity(0))[-1]
    code = (
        "import os, threading, time\n"
        "from schedmesh.mesh import cpu_affinity\n"
        "seen = {}\n"
        "stop = threading.Event()\n"
        "def record(name):\n"
        "    seen[name] = os.sched_getaffinity(0)\n"
        "    stop.wait(5)\n"
        "early = threading.Thread(target=lambda: stop.wait(5)); early.start()\n"
        "cpus = cpu_affinity.pin_from_env()\n"
        "late = threading.Thread(target=record, args=('late',)); late.start()\n"
        "time.sleep(0.1)\n"
        "print(sorted(cpus), sorted(os.sched_getaffinity(early.native_id)), sorted(seen['late']),"
        " sorted(os.sched_getaffinity(0)))\n"
        "stop.set()\n")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "SCHEDMESH_CPUS": str(cpu)},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[0] == " ".join([f"[{cpu}]"] * 4)


@needs_affinity
def test_an_unusable_cpu_list_is_refused_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCHEDMESH_CPUS", "4096")
    with pytest.raises(ValueError, match=r"SCHEDMESH_CPUS='4096': cannot run on these CPUs"):
        cpu_affinity.pin_from_env()


def test_nothing_is_pinned_without_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SCHEDMESH_CPUS", raising=False)
    assert cpu_affinity.pin_from_env() is None


def test_a_plan_crosses_to_the_detached_supervisor_as_it_is() -> None:
    p = plan("auto", available=[0, 1, 2])
    assert CpuPlan.from_dict(p.as_dict()) == p


@needs_affinity
def test_a_pinned_process_plans_the_next_mesh_over_all_its_cpus_and_unpins() -> None:
    """The bench pins itself beside a mesh's other processes; the next mesh it starts is still
    planned over every CPU it started with, and unpinned, it hands its children all of them (a
    second run's mesh once inherited one CPU for everything)."""
    code = (
        "import os\n"
        "from schedmesh.mesh import cpu_affinity\n"
        "start = sorted(os.sched_getaffinity(0))\n"
        "p = cpu_affinity.plan('auto')\n"
        "cpu_affinity.pin_process(set(p.others))\n"
        "pinned = sorted(os.sched_getaffinity(0))\n"
        "again = cpu_affinity.plan('auto')\n"
        "cpu_affinity.unpin_process()\n"
        "print(again == p, pinned == sorted(p.others), sorted(os.sched_getaffinity(0)) == start)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True", "True"]
