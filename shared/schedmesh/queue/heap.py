"""A keyed binary heap (kube-scheduler's backend/heap), with Go's container/heap algorithm.

Items are found by key (namespace/name for pods) and ordered by a less function. The sift
operations are exactly Go's `up`/`down`/`Fix`/`Remove`, so items that compare equal come out in
the same order as in kube-scheduler.

A less function that is a comparison of keys (`less(a, b)` exactly when `sort_key(a) <
sort_key(b)`, as PrioritySort's is) may come with that `sort_key`: the heap then keeps each
item's key beside it and compares keys, the same comparisons in the same places (so the same
order), without a Python call per comparison: a pop from an activeQ of thousands of pods made
about two dozen such calls.
"""
from __future__ import annotations

from typing import Any, Callable, Generic, Iterator, Optional, TypeVar

T = TypeVar("T")
KeyFn = Callable[[T], str]
LessFn = Callable[[T, T], bool]
SortKeyFn = Callable[[T], Any]


class Heap(Generic[T]):
    __slots__ = ("_key", "_less", "_sort_key", "_queue", "_sort_keys", "_items")

    def __init__(self, key_fn: KeyFn, less_fn: LessFn, sort_key: Optional[SortKeyFn] = None) -> None:
        self._key = key_fn
        self._less = less_fn
        self._sort_key = sort_key
        self._queue: list[str] = []  # keys in heap order
        self._sort_keys: list = []  # with sort_key: each item's sort key, in heap order
        self._items: dict[str, list] = {}  # key -> [obj, index in _queue]

    # ---- the heap invariant (Go's container/heap) ------------------------------------------
    def _lt(self, i: int, j: int) -> bool:
        if self._sort_key is not None:
            return self._sort_keys[i] < self._sort_keys[j]
        return self._less(self._items[self._queue[i]][0], self._items[self._queue[j]][0])

    def _swap(self, i: int, j: int) -> None:
        q = self._queue
        q[i], q[j] = q[j], q[i]
        self._items[q[i]][1] = i
        self._items[q[j]][1] = j
        if self._sort_key is not None:
            k = self._sort_keys
            k[i], k[j] = k[j], k[i]

    def _up(self, j: int) -> None:
        if self._sort_key is not None:
            self._up_keyed(j)
            return
        while j > 0:
            i = (j - 1) // 2
            if not self._lt(j, i):
                break
            self._swap(i, j)
            j = i

    def _down(self, i0: int, n: int) -> bool:
        if self._sort_key is not None:
            return self._down_keyed(i0, n)
        i = i0
        while True:
            j1 = 2 * i + 1
            if j1 >= n:
                break
            j = j1
            j2 = j1 + 1
            if j2 < n and self._lt(j2, j1):
                j = j2
            if not self._lt(j, i):
                break
            self._swap(i, j)
            i = j
        return i > i0

    # With sort keys: the same sifts, comparing the same positions, written out with the moving
    # item held aside (a chain of swaps leaves the arrays as moving each passed item by one and
    # putting the moving item last): a pop sifts through a dozen levels of a large activeQ, and
    # a method call per comparison and per swap was most of its cost.
    def _up_keyed(self, j: int) -> None:
        keys, queue, items = self._sort_keys, self._queue, self._items
        key, name = keys[j], queue[j]
        start = j
        while j > 0:
            i = (j - 1) // 2
            if not key < keys[i]:
                break
            keys[j] = keys[i]
            queue[j] = queue[i]
            items[queue[j]][1] = j
            j = i
        if j != start:
            keys[j], queue[j] = key, name
            items[name][1] = j

    def _down_keyed(self, i0: int, n: int) -> bool:
        keys, queue, items = self._sort_keys, self._queue, self._items
        key, name = keys[i0], queue[i0]
        i = i0
        while True:
            j = 2 * i + 1
            if j >= n:
                break
            j2 = j + 1
            if j2 < n and keys[j2] < keys[j]:
                j = j2
            if not keys[j] < key:
                break
            keys[i] = keys[j]
            queue[i] = queue[j]
            items[queue[i]][1] = i
            i = j
        if i != i0:
            keys[i], queue[i] = key, name
            items[name][1] = i
        return i > i0

    def _pop_last(self) -> T:
        key = self._queue.pop()
        if self._sort_key is not None:
            self._sort_keys.pop()
        return self._items.pop(key)[0]

    # ---- public API ------------------------------------------------------------------------
    @property
    def less(self) -> LessFn:
        return self._less

    def add_or_update(self, obj: T) -> None:
        key = self._key(obj)
        item = self._items.get(key)
        if item is not None:
            item[0] = obj
            idx = item[1]
            if self._sort_key is not None:
                self._sort_keys[idx] = self._sort_key(obj)
            if not self._down(idx, len(self._queue)):  # heap.Fix
                self._up(idx)
            return
        self._items[key] = [obj, len(self._queue)]
        self._queue.append(key)
        if self._sort_key is not None:
            self._sort_keys.append(self._sort_key(obj))
        self._up(len(self._queue) - 1)

    def delete(self, obj: T) -> bool:
        """Remove obj's key; False when it is not in the heap (kube returns an error)."""
        return self.delete_by_key(self._key(obj))

    def delete_by_key(self, key: str) -> bool:
        item = self._items.get(key)
        if item is None:
            return False
        i = item[1]
        n = len(self._queue) - 1
        if n != i:  # heap.Remove
            self._swap(i, n)
            if not self._down(i, n):
                self._up(i)
        self._pop_last()
        return True

    def peek(self) -> Optional[T]:
        return self._items[self._queue[0]][0] if self._queue else None

    def pop(self) -> Optional[T]:
        if not self._queue:
            return None
        n = len(self._queue) - 1
        self._swap(0, n)
        self._down(0, n)
        return self._pop_last()

    def get(self, obj: T) -> Optional[T]:
        return self.get_by_key(self._key(obj))

    def get_by_key(self, key: str) -> Optional[T]:
        item = self._items.get(key)
        return None if item is None else item[0]

    def has(self, obj: T) -> bool:
        return self._key(obj) in self._items

    def has_key(self, key: str) -> bool:
        return key in self._items

    def list(self) -> list[T]:
        """All items, in heap-array order (not sorted)."""
        return [self._items[k][0] for k in self._queue]

    def __len__(self) -> int:
        return len(self._queue)

    def __iter__(self) -> Iterator[T]:
        return iter(self.list())
