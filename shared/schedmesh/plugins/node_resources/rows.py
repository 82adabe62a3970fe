"""Gathering snapshot columns for a set of node rows."""
from __future__ import annotations

import numpy as np


class Rows:
    """Column values for the given node rows, without a copy when the rows are every node in
    order (the common case: Filter over all nodes, Score over all feasible ones)."""

    __slots__ = ("rows", "identity")

    def __init__(self, rows: np.ndarray, n: int) -> None:
        self.rows = rows
        self.identity = len(rows) == n and (
            n == 0 or (rows[0] == 0 and rows[-1] == n - 1 and bool(np.all(rows[1:] > rows[:-1]))))

    def of(self, col: np.ndarray) -> np.ndarray:
        return col if self.identity else col[self.rows]
