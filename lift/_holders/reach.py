"""The one walk of containers: each caller gives its policy.

`reach` walks iteratively, so nesting thousands deep is fine. It looks into
each object once, so a cycle ends. `into(x)` is the policy: what of `x` to go
into, or `None` for nothing. `ITEMS` says what each container kind holds;
`containers` makes the common policy from a few of its kinds. A new container
kind is one entry of `ITEMS`."""

# pyright: reportUnknownMemberType=false
# (`ITEMS` reads the builtin containers' own methods, unbound.)
from __future__ import annotations

import collections
import types
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final

from .._base.caches import per_class

Into = Callable[[Any], "Iterable[Any] | None"]

# What each container holds, read as its base class keeps it.
ITEMS: Final[dict[type, Callable[[Any], Iterable[Any]]]] = {
    list: list.__iter__,
    tuple: tuple.__iter__,
    dict: dict.values,
    collections.OrderedDict: dict.values,
    collections.defaultdict: dict.values,
    set: set.__iter__,
    frozenset: frozenset.__iter__,
    collections.deque: collections.deque.__iter__,
    types.MappingProxyType: types.MappingProxyType.values,
}


def items(x: Any) -> Iterable[Any] | None:
    """The items of a container, a subclass's as its base keeps them; else `None`."""
    read = ITEMS.get(type(x)) or _base_items(type(x))  # pyright: ignore[reportUnknownArgumentType]
    return None if read is None else read(x)


@per_class
def _base_items(t: type) -> Callable[[Any], Iterable[Any]] | None:
    return next((ITEMS[b] for b in ITEMS if issubclass(t, b)), None)


def containers(*kinds: type) -> Into:
    """The policy that goes into the containers of `kinds` (subclasses too)."""
    return lambda x: items(x) if isinstance(x, kinds) else None


def reach(roots: Iterable[Any], into: Into, limit: int = 0) -> Iterator[Any]:
    """Each object reached from `roots`, depth first.

    The roots come in order; an object's items, last first. An object is
    looked into once; a leaf is yielded each time it is met. With a `limit`,
    the walk stops after that many objects."""
    stack = list(roots)[::-1]
    seen: dict[int, Any] = {}  # keeps what it saw alive: ids stay unique
    count = 0
    while stack:
        x = stack.pop()
        yield x
        count += 1
        if count == limit:
            return
        if id(x) not in seen:
            inner = into(x)
            if inner is not None:
                seen[id(x)] = x
                stack.extend(inner)
