"""normalize_and_weigh: kube's RunScorePlugins tail. Every plugin's scores are normalized, then
weighed and checked to lie in [MinNodeScore, MaxNodeScore]; a plugin outside that range fails the
cycle naming itself and the score, and a NormalizeScore failure comes before any range failure
(kube normalizes every plugin before it weighs and checks any)."""
from __future__ import annotations

import itertools
from typing import Optional

import numpy as np
import pytest

from schedmesh.framework.interface import CycleState, PluginError, ScorePlugin, Status
from schedmesh.framework.profile import MULTI_POINT, PluginRef, PluginSet, Profile
from schedmesh.framework.registry import default_registry
from schedmesh.framework.runtime import Framework

_names = itertools.count()


def plugin(normalized: Optional[list[int]] = None, fails: bool = False, weight: int = 1):
    """A score plugin whose NormalizeScore sets the scores to `normalized` (or fails)."""
    n = next(_names)

    class Scored(ScorePlugin):
        name = f"Scored{n}"
        has_normalize = normalized is not None or fails

        def score(self, state, pod, node_info):
            return 0, None

        def normalize_score(self, state, pod, scores):
            if fails:
                return Status.as_error(RuntimeError("cannot normalize"))
            scores[:] = normalized
            return None

    return Scored, weight


def framework(*plugins) -> Framework:
    reg = default_registry()
    for cls, _w in plugins:
        reg.register(cls)
    prof = Profile(scheduler_name=f"normalize-{next(_names)}", plugins={
        "queueSort": PluginSet([PluginRef("PrioritySort")]),
        "bind": PluginSet([PluginRef("DefaultBinder")]),
        MULTI_POINT: PluginSet([PluginRef(cls.name, weight=w) for cls, w in plugins])})
    return Framework(prof, reg)


def run(fw: Framework, nodes: int = 3) -> dict[str, list[int]]:
    raw = {p.name: np.zeros(nodes, np.int64) for p in fw.points["score"]}
    out = fw.normalize_and_weigh(CycleState(record_plugin_metrics=False), None, raw)
    return {k: v.tolist() for k, v in out.items()}


@pytest.mark.parametrize("plugins, want", [
    # weighed after normalizing
    ([([0, 50, 100], 1), ([10, 20, 30], 3)], [[0, 50, 100], [30, 60, 90]]),
    # the bounds themselves are in range
    ([([0, 0, 100], 2)], [[0, 0, 200]]),
])
def test_normalized_scores_are_weighed(plugins, want):
    specs = [plugin(normalized=n, weight=w) for n, w in plugins]
    fw = framework(*specs)
    got = run(fw)
    assert [got[cls.name] for cls, _w in specs] == want


@pytest.mark.parametrize("scores, bad", [([0, 101, 5], 101), ([0, -1, 100], -1), ([-5, 200, 0], 200)])
def test_a_score_out_of_range_names_the_plugin_and_the_score(scores, bad):
    fine, out = plugin(normalized=[1, 2, 3]), plugin(normalized=scores)
    fw = framework(fine, out)
    with pytest.raises(PluginError) as e:
        run(fw)
    assert str(e.value.status.message()) == (f'plugin "{out[0].name}" returns an invalid score {bad}, it should in '
                                             f'the range of [0, 100] after normalizing')
    assert e.value.status.plugin == out[0].name


def test_the_first_plugin_out_of_range_is_the_one_named():
    first, second = plugin(normalized=[0, 0, 101]), plugin(normalized=[0, 0, 300])
    with pytest.raises(PluginError) as e:
        run(framework(plugin(normalized=[5, 5, 5]), first, second))
    assert f'"{first[0].name}" returns an invalid score 101' in e.value.status.message()


def test_a_normalize_failure_comes_before_a_range_failure():
    out_of_range, failing = plugin(normalized=[0, 0, 101]), plugin(fails=True)
    with pytest.raises(PluginError) as e:
        run(framework(out_of_range, failing))
    assert e.value.status.message() == f'plugin "{failing[0].name}" failed with: cannot normalize'
