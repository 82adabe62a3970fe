"""evolve makes what dataclasses.replace makes."""
from __future__ import annotations

import dataclasses

import pytest

from schedmesh.api.evolve import evolve
from schedmesh.api.types import ObjectMeta, Pod, PodCondition


@dataclasses.dataclass
class Derived:
    a: int
    b: int = dataclasses.field(init=False, default=0)

    def __post_init__(self) -> None:
        self.b = self.a * 2


@pytest.mark.parametrize("changes", [
    {},
    {"node_name": "node-1"},
    {"phase": "Running", "start_time": 12.5, "conditions": [PodCondition("Ready", "True")]},
    {"meta": ObjectMeta(name="other", namespace="ns", uid="u2")},
])
def test_evolve_matches_replace_on_a_pod(changes) -> None:
    pod = Pod(ObjectMeta(name="p", namespace="ns", uid="u1", labels={"app": "web"}),
              conditions=[PodCondition("PodScheduled", "True")], priority=7)
    new, expected = evolve(pod, **changes), dataclasses.replace(pod, **changes)
    assert new is not pod
    assert [getattr(new, f.name) for f in dataclasses.fields(Pod)] == \
        [getattr(expected, f.name) for f in dataclasses.fields(Pod)]
    assert pod.node_name == "" and pod.phase == "Pending"  # the original is untouched


def test_evolve_refuses_an_unknown_field() -> None:
    with pytest.raises(TypeError, match="no field 'nodeName'"):
        evolve(Pod(ObjectMeta(name="p")), nodeName="n")


def test_a_class_with_post_init_goes_through_replace() -> None:
    assert evolve(Derived(3), a=5).b == 10
