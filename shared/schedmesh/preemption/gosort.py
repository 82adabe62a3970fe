"""Go's `sort.Slice` (pattern-defeating quicksort, go >= 1.19), re-implemented.

kube-scheduler orders potential victims with `sort.Slice`, which is not stable: when two pods
are equally important (same priority, same start time) their final order, and therefore which
of them is reprieved first, is whatever this algorithm produces. Slices of up to 12 elements are
insertion-sorted (stable); longer ones go through pdqsort, whose pattern breaking is seeded by
the slice length only, so the result is deterministic and reproducible here.
"""
from __future__ import annotations

from typing import Callable, MutableSequence, TypeVar

T = TypeVar("T")

_MASK64 = (1 << 64) - 1
_MAX_INSERTION = 12
_UNKNOWN_HINT, _INCREASING_HINT, _DECREASING_HINT = 0, 1, 2


def go_sort_slice(items: MutableSequence[T], less: Callable[[T, T], bool]) -> None:
    """Sort `items` in place exactly as Go's sort.Slice(items, less) would."""
    n = len(items)
    if n <= 1:
        return
    _Sorter(items, less).pdqsort(0, n, n.bit_length())


class _Sorter:
    __slots__ = ("a", "lt")

    def __init__(self, items: MutableSequence, less: Callable) -> None:
        self.a = items
        self.lt = less

    # Less(i, j) / Swap(i, j) over positions, as Go's lessSwap.
    def less(self, i: int, j: int) -> bool:
        return self.lt(self.a[i], self.a[j])

    def swap(self, i: int, j: int) -> None:
        a = self.a
        a[i], a[j] = a[j], a[i]

    def insertion_sort(self, lo: int, hi: int) -> None:
        for i in range(lo + 1, hi):
            j = i
            while j > lo and self.less(j, j - 1):
                self.swap(j, j - 1)
                j -= 1

    def sift_down(self, lo: int, hi: int, first: int) -> None:
        root = lo
        while True:
            child = 2 * root + 1
            if child >= hi:
                return
            if child + 1 < hi and self.less(first + child, first + child + 1):
                child += 1
            if not self.less(first + root, first + child):
                return
            self.swap(first + root, first + child)
            root = child

    def heap_sort(self, lo: int, hi: int) -> None:
        first, n = lo, hi - lo
        for i in range((n - 1) // 2, -1, -1):
            self.sift_down(i, n, first)
        for i in range(n - 1, -1, -1):
            self.swap(first, first + i)
            self.sift_down(0, i, first)

    def pdqsort(self, a: int, b: int, limit: int) -> None:
        was_balanced = True
        was_partitioned = True
        while True:
            length = b - a
            if length <= _MAX_INSERTION:
                self.insertion_sort(a, b)
                return
            if limit == 0:
                self.heap_sort(a, b)
                return
            if not was_balanced:
                self.break_patterns(a, b)
                limit -= 1
            pivot, hint = self.choose_pivot(a, b)
            if hint == _DECREASING_HINT:
                self.reverse_range(a, b)
                pivot = (b - 1) - (pivot - a)
                hint = _INCREASING_HINT
            if was_balanced and was_partitioned and hint == _INCREASING_HINT:
                if self.partial_insertion_sort(a, b):
                    return
            if a > 0 and not self.less(a - 1, pivot):
                a = self.partition_equal(a, b, pivot)
                continue
            mid, already = self.partition(a, b, pivot)
            was_partitioned = already
            left, right = mid - a, b - mid
            threshold = length // 8
            if left < right:
                was_balanced = left >= threshold
                self.pdqsort(a, mid, limit)
                a = mid + 1
            else:
                was_balanced = right >= threshold
                self.pdqsort(mid + 1, b, limit)
                b = mid

    def partition(self, a: int, b: int, pivot: int) -> tuple[int, bool]:
        self.swap(a, pivot)
        i, j = a + 1, b - 1
        while i <= j and self.less(i, a):
            i += 1
        while i <= j and not self.less(j, a):
            j -= 1
        if i > j:
            self.swap(j, a)
            return j, True
        self.swap(i, j)
        i += 1
        j -= 1
        while True:
            while i <= j and self.less(i, a):
                i += 1
            while i <= j and not self.less(j, a):
                j -= 1
            if i > j:
                break
            self.swap(i, j)
            i += 1
            j -= 1
        self.swap(j, a)
        return j, False

    def partition_equal(self, a: int, b: int, pivot: int) -> int:
        self.swap(a, pivot)
        i, j = a + 1, b - 1
        while True:
            while i <= j and not self.less(a, i):
                i += 1
            while i <= j and self.less(a, j):
                j -= 1
            if i > j:
                return i
            self.swap(i, j)
            i += 1
            j -= 1

    def partial_insertion_sort(self, a: int, b: int) -> bool:
        max_steps, shortest_shifting = 5, 50
        i = a + 1
        for _ in range(max_steps):
            while i < b and not self.less(i, i - 1):
                i += 1
            if i == b:
                return True
            if b - a < shortest_shifting:
                return False
            self.swap(i, i - 1)
            if i - a >= 2:  # shift the smaller one to the left
                j = i - 1
                while j >= 1:
                    if not self.less(j, j - 1):
                        break
                    self.swap(j, j - 1)
                    j -= 1
            if b - i >= 2:  # shift the greater one to the right
                j = i + 1
                while j < b:
                    if not self.less(j, j - 1):
                        break
                    self.swap(j, j - 1)
                    j += 1
        return False

    def break_patterns(self, a: int, b: int) -> None:
        length = b - a
        if length < 8:
            return
        state = length  # xorshift seeded with the length, as Go does
        modulus = 1 << length.bit_length()
        for idx in range(a + (length // 4) * 2 - 1, a + (length // 4) * 2 + 2):
            state ^= (state << 13) & _MASK64
            state ^= state >> 17
            state ^= (state << 5) & _MASK64
            other = state & (modulus - 1)
            if other >= length:
                other -= length
            self.swap(idx, a + other)

    def choose_pivot(self, a: int, b: int) -> tuple[int, int]:
        shortest_ninther, max_swaps = 50, 4 * 3
        n = b - a
        swaps = [0]
        i, j, k = a + n // 4 * 1, a + n // 4 * 2, a + n // 4 * 3
        if n >= 8:
            if n >= shortest_ninther:
                i = self.median(i - 1, i, i + 1, swaps)
                j = self.median(j - 1, j, j + 1, swaps)
                k = self.median(k - 1, k, k + 1, swaps)
            j = self.median(i, j, k, swaps)
        if swaps[0] == 0:
            return j, _INCREASING_HINT
        if swaps[0] == max_swaps:
            return j, _DECREASING_HINT
        return j, _UNKNOWN_HINT

    def order2(self, a: int, b: int, swaps: list[int]) -> tuple[int, int]:
        if self.less(b, a):
            swaps[0] += 1
            return b, a
        return a, b

    def median(self, a: int, b: int, c: int, swaps: list[int]) -> int:
        a, b = self.order2(a, b, swaps)
        b, c = self.order2(b, c, swaps)
        a, b = self.order2(a, b, swaps)
        return b

    def reverse_range(self, a: int, b: int) -> None:
        i, j = a, b - 1
        while i < j:
            self.swap(i, j)
            i += 1
            j -= 1
