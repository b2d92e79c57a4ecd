"""lift's module caches share two policies (`lift._base.caches`): a dict emptied when
full, and a memo per class that does not keep the class alive."""

from __future__ import annotations

import gc
import weakref

from lift._base import caches as _caches
from lift._holders import closure as _closure, labels as _labels
from lift._jit import programs as _programs
from lift._rule import hidden as _hidden


def test_a_bounded_dict_is_emptied_when_full() -> None:
    cache: _caches.BoundedDict[int, str] = _caches.BoundedDict(2)
    assert cache.add(1, "a") == "a"
    assert cache.add(1, "b") == "a"  # the first value stored is kept
    cache.add(2, "b")
    assert cache == {1: "a", 2: "b"}
    cache.add(3, "c")
    assert cache == {3: "c"}
    assert type(cache).get is dict.get  # read as a plain dict


def test_a_memo_per_class_computes_once_and_keeps_no_class() -> None:
    calls: list[type] = []

    @_caches.per_class
    def name_of(cls: type) -> str:
        """The class's name."""
        calls.append(cls)
        return cls.__name__

    class Made:
        pass

    assert name_of(Made) == name_of(Made) == "Made"
    assert calls == [Made]
    assert name_of.__doc__ == "The class's name."
    gone = weakref.ref(Made)
    calls.clear()
    del Made
    gc.collect()
    assert gone() is None
    assert name_of(int) == name_of(int) == "int"
    assert calls == [int]


def test_the_caches_that_share_a_policy_use_the_helper() -> None:
    assert type(_labels._interned) is _caches.BoundedDict  # pyright: ignore[reportPrivateUsage]
    assert type(_hidden._PLAIN_TREEDEFS) is _caches.BoundedDict  # pyright: ignore[reportPrivateUsage]
    assert type(_programs._programs) is _caches.BoundedDict  # pyright: ignore[reportPrivateUsage]
    for memo in (_closure.user_class, _closure.slots_of):
        assert memo.__wrapped__  # pyright: ignore[reportFunctionMemberAccess]
