"""kube-scheduler's helper.DefaultNormalizeScore, in place over an int64 NumPy array.

Shared by TaintToleration (reversed), NodeAffinity and DynamicResources; kept here until the
lead moves it to a framework-level helpers module.
"""
from __future__ import annotations

import numpy as np

from schedmesh.framework.interface import MAX_NODE_SCORE


def default_normalize_score(scores: np.ndarray, reverse: bool, max_priority: int = MAX_NODE_SCORE) -> None:
    """Scale [0, max(scores)] to [0, max_priority] (integer division, as Go's int64 does).

    With `reverse`, each score becomes max_priority - score; when every score is 0 a reversed
    normalisation gives max_priority everywhere and a plain one leaves the zeros.
    Division truncates toward zero, as Go's does, even for (unexpected) negative scores.
    """
    if scores.size == 0:
        return
    max_count = int(scores.max())
    if max_count <= 0:
        # Go starts maxCount at 0, so negative inputs behave like an all-zero list.
        if reverse:
            scores[:] = max_priority
        return
    num = max_priority * scores
    scaled = num // max_count
    scaled += (num < 0) & (num % max_count != 0)  # floor -> truncation for negatives
    if reverse:
        scaled = max_priority - scaled
    scores[:] = scaled
