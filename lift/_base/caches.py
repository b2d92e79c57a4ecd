"""lift's module-level caches, by their two eviction policies.

`BoundedDict` is a dict emptied when full. `per_class` is a memo per class,
forgotten with the class. It imports nothing of lift's."""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")
T = TypeVar("T", bound=type)


class BoundedDict(dict[K, V], Generic[K, V]):
    """A dict of at most `limit` entries, emptied when it is full.

    It suits entries each as cheap to make again as any other. Reads are the
    dict's own, in C; `add` stores."""

    __slots__ = ("limit",)

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def add(self, key: K, value: V) -> V:
        """Keep `value` for `key`, emptying the dict first if it is full.

        It returns the value kept: another thread's, if it stored one first."""
        if len(self) >= self.limit:
            self.clear()
        return self.setdefault(key, value)


def per_class(compute: Callable[[T], V]) -> Callable[[T], V]:
    """`compute(cls)`, computed once per class and kept while the class lives.

    The memo is weak: a class made at run time and dropped dies."""
    memo: weakref.WeakKeyDictionary[T, V] = weakref.WeakKeyDictionary()

    def cached(cls: T) -> V:
        try:
            return memo[cls]
        except KeyError:  # not seen yet
            pass
        found = memo[cls] = compute(cls)
        return found

    return functools.wraps(compute)(cached)
