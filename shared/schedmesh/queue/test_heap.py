"""The keyed heap: ordering, update in place, delete, and Go's container/heap tie order."""
from __future__ import annotations

import random

import pytest

from schedmesh.queue.heap import Heap


def _heap() -> Heap[tuple[str, int]]:
    return Heap(lambda x: x[0], lambda a, b: a[1] < b[1])


def _drain(h: Heap) -> list:
    out = []
    while (x := h.pop()) is not None:
        out.append(x)
    return out


@pytest.mark.parametrize("ops, want", [
    pytest.param([("add", ("a", 3)), ("add", ("b", 1)), ("add", ("c", 2))], ["b", "c", "a"], id="ordered-by-less"),
    pytest.param([("add", ("a", 3)), ("add", ("b", 1)), ("add", ("a", 0))], ["a", "b"], id="update-moves-up"),
    pytest.param([("add", ("a", 1)), ("add", ("b", 2)), ("add", ("a", 9))], ["b", "a"], id="update-moves-down"),
    pytest.param([("add", ("a", 1)), ("add", ("b", 2)), ("del", ("a", 0))], ["b"], id="delete-head"),
    pytest.param([("add", ("a", 1)), ("del", ("zz", 0))], ["a"], id="delete-missing-is-noop"),
    pytest.param([], [], id="empty"),
])
def test_heap_operations(ops, want):
    h = _heap()
    for op, item in ops:
        if op == "add":
            h.add_or_update(item)
        else:
            h.delete(item)
    assert [k for k, _ in _drain(h)] == want


def test_heap_get_has_peek_and_missing_delete():
    h = _heap()
    assert h.peek() is None and h.pop() is None
    h.add_or_update(("a", 5))
    h.add_or_update(("b", 4))
    assert h.peek() == ("b", 4)
    assert h.get(("a", 0)) == ("a", 5) and h.get_by_key("zz") is None
    assert h.has(("a", 0)) and not h.has(("zz", 0))
    assert h.delete(("a", 0)) is True and h.delete(("a", 0)) is False
    assert len(h) == 1


def test_heap_matches_a_sorted_reference_under_random_operations():
    rng = random.Random(7)
    h = _heap()
    ref: dict[str, int] = {}
    for _ in range(2000):
        k = f"k{rng.randrange(50)}"
        r = rng.random()
        if r < 0.5:
            v = rng.randrange(1000)
            h.add_or_update((k, v))
            ref[k] = v
        elif r < 0.7:
            assert h.delete((k, 0)) == (k in ref)
            ref.pop(k, None)
        elif r < 0.85 and ref:
            got = h.pop()
            assert got is not None and got[1] == min(ref.values())
            del ref[got[0]]
        assert len(h) == len(ref)
    assert [v for _, v in _drain(h)] == sorted(ref.values())


def test_ties_pop_in_go_container_heap_order():
    # Equal keys: Go's heap.Pop swaps the head with the last element and sifts down, so equal items
    # do not come out FIFO. kube inherits that order; so do we.
    h: Heap[tuple[str, int]] = Heap(lambda x: x[0], lambda a, b: a[1] < b[1])
    for k in "abcde":
        h.add_or_update((k, 0))
    assert [k for k, _ in _drain(h)] == ["a", "e", "d", "c", "b"]


def test_sort_keys_give_the_same_order_as_less_ties_included():
    """PrioritySort's sort_key in place of its less: the same heap array after every operation
    (the same comparisons in the same places), so ties come out in Go's order too."""
    from types import SimpleNamespace

    from schedmesh.plugins.queue_sort.plugin import PrioritySort

    plugin = PrioritySort()
    by_less = Heap(lambda q: q.key, plugin.less)
    by_key = Heap(lambda q: q.key, plugin.less, plugin.sort_key)
    rng = random.Random(7)
    names = [f"p{i}" for i in range(40)]
    popped_less, popped_key = [], []
    for step in range(3000):
        op = rng.random()
        if op < 0.55:  # add or update: few priorities and timestamps, so ties are common
            name = rng.choice(names)
            q = SimpleNamespace(key=name, pod=SimpleNamespace(priority=rng.choice([None, 0, 5, 10])),
                                timestamp=float(rng.randrange(4)))
            by_less.add_or_update(q)
            by_key.add_or_update(q)
        elif op < 0.75:
            name = rng.choice(names)
            assert by_less.delete_by_key(name) == by_key.delete_by_key(name)
        else:
            a, b = by_less.pop(), by_key.pop()
            assert a is b, step
            popped_less.append(a)
            popped_key.append(b)
        assert [q.key for q in by_less.list()] == [q.key for q in by_key.list()], step
        # each item knows its place (update and delete find items by it)
        for h in (by_less, by_key):
            assert all(h._items[k][1] == i for i, k in enumerate(h._queue)), step
    assert popped_less == popped_key and len(popped_less) > 500


def test_the_framework_offers_a_sort_key_only_with_the_less_it_matches():
    from schedmesh.framework.runtime import Framework
    from schedmesh.plugins.queue_sort.plugin import PrioritySort

    class Reversed(PrioritySort):  # changes less alone: its inherited sort_key no longer matches
        def less(self, a, b):
            return super().less(b, a)

    for plugin, has_key in ((PrioritySort(), True), (Reversed(), False)):
        fw = Framework.__new__(Framework)
        fw.points = {"queueSort": [plugin]}
        assert (fw.queue_sort_key() is not None) == has_key
