"""DefaultBinder: delegates to the injected binder and turns failures into Error statuses."""
from __future__ import annotations

import pytest

from schedmesh.api.types import ObjectMeta, Pod
from schedmesh.framework.interface import Code, CycleState
from schedmesh.plugins.default_binder import DefaultBinder

POD = Pod(meta=ObjectMeta(name="p", namespace="ns", uid="u"))


class Recorder:
    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple[str, str]] = []
        self.fail = fail

    def __call__(self, pod: Pod, node_name: str) -> None:
        if self.fail:
            raise RuntimeError("binding rejected: pod already assigned")
        self.calls.append((pod.key, node_name))


class ServicesHandle:
    def __init__(self, binder) -> None:
        self.services = {"binder": binder}


@pytest.mark.parametrize("where", ["services", "args"])
def test_binds_through_injected_binder(where):
    rec = Recorder()
    if where == "services":
        pl = DefaultBinder(None, ServicesHandle(rec))
    else:
        pl = DefaultBinder({"binder": rec})
    assert pl.bind(CycleState(), POD, "node-1") is None
    assert rec.calls == [("ns/p", "node-1")]


def test_binder_failure_is_an_error_status():
    st = DefaultBinder({"binder": Recorder(fail=True)}).bind(CycleState(), POD, "n")
    assert st.code == Code.ERROR and st.message() == "binding rejected: pod already assigned"


def test_no_binder_is_an_error_status():
    st = DefaultBinder().bind(CycleState(), POD, "n")
    assert st.code == Code.ERROR


def test_non_callable_binder_rejected():
    with pytest.raises(ValueError):
        DefaultBinder({"binder": "not callable"})
