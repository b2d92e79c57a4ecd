"""lift's module-level caches, by their two eviction policies: a dict emptied
when full (`BoundedDict`), and a memo per class, forgotten with the class
(`per_class`). Beneath every other module of `lift`: it imports nothing of
lift's."""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["BoundedDict", "per_class"]

K = TypeVar("K")
V = TypeVar("V")
T = TypeVar("T", bound=type)


class BoundedDict(dict[K, V], Generic[K, V]):
    """A dict of at most `limit` entries, emptied when it is full: for entries
    each as cheap to make again as any other (no order is kept). A plain dict
    to read (`get`, `in` and `[]` are the dict's own, in C); `add` stores."""

    __slots__ = ("limit",)

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def add(self, key: K, value: V) -> V:
        """Keep `value` for `key`, emptying the dict first if it is full; the
        value kept (another thread's, if it stored one for `key` first)."""
        if len(self) >= self.limit:
            self.clear()
        return self.setdefault(key, value)


def per_class(compute: Callable[[T], V]) -> Callable[[T], V]:
    """`compute(cls)`, computed once per class and kept while the class lives
    (weakly: a class made at run time and dropped is not kept alive)."""
    memo: weakref.WeakKeyDictionary[T, V] = weakref.WeakKeyDictionary()

    def cached(cls: T) -> V:
        try:
            return memo[cls]
        except KeyError:  # not seen yet
            pass
        found = compute(cls)
        memo[cls] = found
        return found

    return functools.wraps(compute)(cached)
