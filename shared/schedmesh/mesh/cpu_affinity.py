"""Which CPUs each process of a local mesh runs on: the queue-manager on a CPU of its own, every
other process (broker, binder, agent, controllers, shards, the queue-manager's admission worker,
the CLI) on the others.

Why: the queue-manager is one interpreter and sets the mesh's pace. Left to the OS on this
2-vCPU VM, its scheduling thread was taken off its CPU about every other pod (0.46-0.50 times a
pod) and moved between CPUs with the other processes' work; on a CPU of its own, 0.23-0.31
times, and the queue-manager took 0.49-0.53 ms of CPU a pod instead of 0.54-0.62 (a warm cache).
SchedulingBasic went from 1,700-1,820 to 1,970-2,250 pods/s in alternated runs (README, "Where the
time goes"). Kubernetes gives a container CPUs of its own the same way (Guaranteed QoS with whole
CPUs under the static CPU manager policy).

The supervisor decides (`plan`) and tells each child in its environment: SCHEDMESH_CPUS, the CPUs
of that process (each service pins itself as it starts, `pin_from_env`), and for the
queue-manager SCHEDMESH_HELPER_CPUS, those of the worker processes it starts. Linux only (where
os.sched_setaffinity exists); with fewer than two CPUs, or SCHEDMESH_CPU_PINNING=off
(`--cpu-pinning off`), nothing is pinned.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterable, Optional

CPUS_ENV = "SCHEDMESH_CPUS"
HELPER_CPUS_ENV = "SCHEDMESH_HELPER_CPUS"
PINNING_ENV = "SCHEDMESH_CPU_PINNING"
PINNING_CHOICES = ("auto", "off")


def parse_cpus(text: str, what: str = CPUS_ENV) -> set[int]:
    """Linux's CPU list syntax ("0", "1-3", "0,2-3"); ValueError naming `what` and the reason."""
    cpus: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        try:
            first, last = int(lo), int(hi if sep else lo)
        except ValueError:
            raise ValueError(f"{what}={text!r}: {part!r} is not a CPU number or range (e.g. 0,2-3)") from None
        if first < 0 or last < first:
            raise ValueError(f"{what}={text!r}: {part!r} is not a range of CPU numbers (e.g. 0,2-3)")
        cpus.update(range(first, last + 1))
    return cpus


def format_cpus(cpus: Iterable[int]) -> str:
    """The shortest CPU list: {0, 1, 2, 5} -> "0-2,5"."""
    runs: list[list[int]] = []
    for c in sorted(set(cpus)):
        if runs and c == runs[-1][-1] + 1:
            runs[-1].append(c)
        else:
            runs.append([c])
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


def supported() -> bool:
    return hasattr(os, "sched_setaffinity") and hasattr(os, "sched_getaffinity")


# The CPUs this process could use when it started: a process that pinned itself (the bench's
# client) still plans the next mesh over all of them.
_STARTED_WITH: frozenset[int] = frozenset(os.sched_getaffinity(0)) if supported() else frozenset()


@dataclass(frozen=True)
class CpuPlan:
    scheduler: frozenset[int]  # the queue-manager's own
    others: frozenset[int]  # every other process of the mesh

    def env(self, scheduler: bool = False) -> dict[str, str]:
        """A child's variables: the queue-manager's (with its helpers' CPUs), or another's."""
        if scheduler:
            return {CPUS_ENV: format_cpus(self.scheduler), HELPER_CPUS_ENV: format_cpus(self.others)}
        return {CPUS_ENV: format_cpus(self.others)}

    def as_dict(self) -> dict[str, list[int]]:
        """For a process started with the plan on its command line (the detached supervisor)."""
        return {"scheduler": sorted(self.scheduler), "others": sorted(self.others)}

    @classmethod
    def from_dict(cls, d: dict) -> "CpuPlan":
        return cls(frozenset(d["scheduler"]), frozenset(d["others"]))

    def describe(self) -> str:
        return (f"the queue-manager on CPU {format_cpus(self.scheduler)}, every other process on "
                f"{'CPU' if len(self.others) == 1 else 'CPUs'} {format_cpus(self.others)}")


def plan(pinning: Optional[str] = None, available: Optional[Iterable[int]] = None) -> Optional[CpuPlan]:
    """The local mesh's CPUs: the last available CPU for the queue-manager, the rest for the others.
    None (nothing pinned) with `pinning` "off", on a system without affinity, or with fewer than
    two CPUs. `pinning` defaults to $SCHEDMESH_CPU_PINNING, else "auto"."""
    pinning = (pinning or os.environ.get(PINNING_ENV) or "auto").strip().lower()
    if pinning not in PINNING_CHOICES:
        raise ValueError(f"{PINNING_ENV} / --cpu-pinning: {pinning!r} is not one of {', '.join(PINNING_CHOICES)}")
    if pinning == "off" or (available is None and not supported()):
        return None
    cpus = sorted(set(available) if available is not None else _STARTED_WITH)
    if len(cpus) < 2:
        return None
    return CpuPlan(frozenset(cpus[-1:]), frozenset(cpus[:-1]))


def pin_process(cpus: set[int]) -> None:
    """Every thread of this process on `cpus` (threads started later inherit it from theirs)."""
    try:
        threads = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        threads = [0]
    for tid in threads:
        try:
            os.sched_setaffinity(tid, cpus)
        except ProcessLookupError:  # a thread that ended meanwhile
            pass


def unpin_process() -> None:
    """Every thread of this process back on the CPUs it started with (a bench that pinned itself
    with one mesh must not hand that to the processes of the next: they inherit it)."""
    if supported() and _STARTED_WITH:
        pin_process(set(_STARTED_WITH))


def pin_from_env(variable: str = CPUS_ENV) -> Optional[set[int]]:
    """Pin this process to the CPUs `variable` names, if set (and supported): those CPUs, else
    None. A list that cannot be used is an error naming the variable and why."""
    text = os.environ.get(variable, "").strip()
    if not text or not supported():
        return None
    cpus = parse_cpus(text, variable)
    try:
        pin_process(cpus)
    except OSError as e:
        raise ValueError(f"{variable}={text!r}: cannot run on these CPUs ({e.strerror}); this system has "
                         f"{os.cpu_count()} CPUs") from None
    return cpus
