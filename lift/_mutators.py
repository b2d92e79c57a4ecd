"""Which functions and methods mutate the container they are given, and how a
call in a function's code is resolved to one.

The methods of `list`, `dict` and `set` that change the container
(`MUTATORS`), the functions of the standard library and NumPy that mutate
their first argument (`heapq.heappush`, `bisect.insort`,
`numpy.random.shuffle`: `MUTATING_FUNCTIONS`), and unbound methods
(`list.append(buf, x)`). A call is resolved by the object its name is bound
to in the function's globals (an alias, an import inside the function), never
by running code: a class's attributes are read from its `__dict__` along its
MRO."""

from __future__ import annotations

import bisect
import builtins
import heapq
import operator
import random
import sys
import types
from collections.abc import Mapping
from typing import Any, Final, cast

import numpy.random

IMPORT: Final = "import"

# Methods of `list`, `dict` and `set` that change the container.
MUTATORS: Final = frozenset(
    {
        "append",
        "extend",
        "insert",
        "pop",
        "remove",
        "clear",
        "sort",
        "reverse",
        "update",
        "setdefault",
        "popitem",
        "add",
        "discard",
        "__setitem__",
        "__delitem__",
        "__iadd__",
        "__ior__",
        "__imul__",
    }
)

# Functions of the standard library that mutate their first argument, by the
# names their modules give them.
MUTATING_FUNCTIONS: Final = (
    (heapq, ("heappush", "heappop", "heapify", "heapreplace", "heappushpop")),
    (bisect, ("insort", "insort_left", "insort_right")),
    (random, ("shuffle",)),
    (numpy.random, ("shuffle",)),  # (a list too: `np.random.shuffle(x)`)
    (
        operator,
        (
            "setitem",
            "delitem",
            "iadd",
            "iconcat",
            "imul",
            "ior",
            "__setitem__",
            "__delitem__",
            "__iadd__",
            "__iconcat__",
            "__imul__",
            "__ior__",
        ),
    ),
)
# The builtin containers' mutating methods, called unbound (`list.append(buf,
# v)`, `app = dict.update`): by the chain that names each (`("list", "append")`).
MUTATING_METHODS: Final = tuple(
    (t, tuple(sorted(n for n in MUTATORS if n in vars(t)))) for t in (list, dict, set)
)
MUTATING: Final[dict[int, object]] = {
    id(f): f
    for owner, names in (*MUTATING_FUNCTIONS, *MUTATING_METHODS)
    for f in (vars(owner)[name] for name in names)
}
MUTATING_NAMES: Final = frozenset(n for _, names in MUTATING_FUNCTIONS for n in names)
METHOD_CHAINS: Final = frozenset(
    (t.__name__, n) for t, names in MUTATING_METHODS for n in names
)


NO_ALIASES: Final[frozenset[str]] = frozenset()


def aliases_in(names: frozenset[str], namespace: Mapping[str, Any]) -> frozenset[str]:
    """The names among `names` (those of a code object not named like a mutating
    function) that `namespace` binds to one (`from heapq import heappush as
    push`, `app = list.append`): the code's calls of them are followed."""
    out: list[str] = []
    for name in namespace.keys() & names:  # (in C: most names are attributes')
        value = namespace[name]
        if MUTATING.get(id(value)) is value:
            out.append(name)
    return frozenset(out) if out else NO_ALIASES


def named_like_a_mutator(callee: tuple[str, ...]) -> bool:
    """Whether a call's callee is named like a mutating function."""
    return callee[-1] in MUTATING_NAMES or callee[-2:] in METHOD_CHAINS


def resolves_to_a_mutator(
    callee: tuple[str, ...], namespace: Mapping[str, Any]
) -> bool:
    """Whether a callee is one of `MUTATING_FUNCTIONS` or `MUTATING_METHODS`:
    the global `callee[1]` (a builtin if `namespace` binds no such name), or the
    module the code imports, then attributes of modules and classes (read from
    their `__dict__`, a class's through its MRO: no code runs)."""
    kind, first, *rest = callee
    value: object
    if kind == IMPORT:
        value = sys.modules.get(first)
    elif first in namespace:
        value = namespace[first]
    else:
        table: object = namespace.get("__builtins__", builtins)
        if isinstance(table, types.ModuleType):
            table = table.__dict__
        value = (
            cast("dict[str, object]", table).get(first) if type(table) is dict else None
        )
    for name in rest:
        if isinstance(value, types.ModuleType):
            value = value.__dict__.get(name)
        elif isinstance(value, type):
            value = _class_attribute(value, name)
        else:
            return False
    return MUTATING.get(id(value)) is value


_MRO: Final[Any] = vars(type)["__mro__"]
_DICT: Final[Any] = vars(type)["__dict__"]


def _class_attribute(cls: type[Any], name: str) -> object:
    """`name` in the `__dict__` of `cls` or of a class in its MRO, read as
    `inspect.getattr_static` does: no code of theirs runs."""
    for klass in _MRO.__get__(cls):
        table = _DICT.__get__(klass)
        if name in table:
            return table[name]
    return None
