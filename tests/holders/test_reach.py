"""The one walk of containers (`lift._holders.reach`) and the one description
of what anything holds (`lift._holders.held`): deep nesting, cycles, and each
holder kind a callback or a static value may hide a function or a copy in."""

from __future__ import annotations

import collections
import functools
import weakref
from typing import Any

import jax
import pytest

from lift._holders import reach as reach_module
from lift._holders.held import held, read_inside
from lift._holders.reach import containers, items, reach


def test_the_walk_goes_thousands_deep_without_recursion() -> None:
    deep: list[Any] = [1.5]
    for _ in range(50_000):
        deep = [deep]
    assert [x for x in reach([deep], items) if type(x) is float] == [1.5]


def test_the_walk_ends_on_a_cycle_and_looks_into_each_object_once() -> None:
    a: list[Any] = [1, (2, {"k": 3})]
    a.append(a)
    assert sorted(x for x in reach([a], items) if type(x) is int) == [1, 2, 3]
    assert [x for x in reach([a], items) if x is a] == [a, a]  # met twice, entered once


def test_a_policy_chooses_the_containers_it_goes_into() -> None:
    value = [1, (2,), {3}]
    assert [x for x in reach([value], containers(list)) if type(x) is int] == [1]
    assert sorted(x for x in reach([value], items) if type(x) is int) == [1, 2, 3]


def test_the_walk_stops_at_its_limit() -> None:
    assert len(list(reach([list(range(100))], items, limit=10))) == 10


def test_a_new_container_kind_is_one_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    class Bag:
        def __init__(self, *xs: Any) -> None:
            self.xs = xs

    monkeypatch.setitem(reach_module.ITEMS, Bag, lambda b: b.xs)
    assert list(items(Bag(1, 2)) or ()) == [1, 2]
    assert [x for x in reach([[Bag(1.5)]], items) if type(x) is float] == [1.5]


class _Recorder:
    def __init__(self, log: list[Any]) -> None:
        self.log = log

    def record(self, v: Any) -> None:
        self.log.append(v)


def _reaches(root: Any, target: Any) -> bool:
    return any(x is target for x in reach([root], held))


@pytest.mark.parametrize(
    "make",
    [
        lambda log: log.append,
        lambda log: _Recorder(log),
        lambda log: _Recorder(log).record,
        lambda log: (lambda table: lambda v: table["log"].append(v))({"log": log}),
        lambda log: functools.partial(print, log),
        lambda log: collections.OrderedDict(a=(log,)),
    ],
    ids=[
        "bound builtin",
        "object",
        "bound method",
        "lambda via dict",
        "partial",
        "odict",
    ],
)
def test_what_a_callable_or_object_holds_is_described_once(make: Any) -> None:
    log: list[Any] = []
    assert _reaches(make(log), log)


def test_a_static_holder_reads_the_cells_of_its_functions() -> None:
    scale = 2.0

    def helper(x: Any) -> Any:
        return x * scale

    r = weakref.ref(helper)
    holders = [r, jax.custom_jvp(helper), {int: helper, float: helper}]
    for holder in holders:
        contents = [held for obj, held in read_inside(holder) if obj is not helper]
        assert 2.0 in contents, holder


class _Key:
    def __init__(self, log: list[Any]) -> None:
        self.log = log

    def __hash__(self) -> int:
        return 0


def _suspended(log: list[Any]) -> Any:
    def gen() -> Any:
        kept = log
        yield kept

    g = gen()
    next(g)
    return g


def _cached(log: list[Any]) -> Any:
    f = functools.lru_cache(maxsize=None)(lambda n: [n])
    log.append(f(1))  # the cache keeps its result alone
    return f


@pytest.mark.parametrize(
    "make",
    [
        _suspended,
        _cached,
        lambda log: {_Key(log): 1},
        lambda log: collections.defaultdict(lambda: log),
    ],
    ids=["suspended generator", "lru_cache result", "dict key", "default factory"],
)
def test_a_walk_follows_what_the_leak_scan_follows(make: Any) -> None:
    log: list[Any] = []
    holder = make(log)
    target = log[0] if log else log
    assert _reaches(holder, target)
