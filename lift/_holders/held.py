"""What anything holds: the one description that every walk reads.

`parts(x)` gives each part with its label. `held(x)` gives the parts alone:
a walk passes it to `lift._holders.reach.reach` as its policy. Capture, the
copy check, the callback search, `lift.jit`'s watch and the leak scan follow
the same parts."""

from __future__ import annotations

import types
import weakref
from collections.abc import Iterable
from typing import Any, Final

import jax
import numpy as np

from .._base.atoms import UNOPENED
from .attributes import NotRun, own_attributes, static_attribute
from .closure import dict_static, holder_of, labelled, slots_of
from .reach import items, reach
from .stdlib import KEY, MEMBER, STDLIB_HOLDERS, weakref_parts

# A container's item labels, `(format, key)` (and `stdlib.KEY`, `MEMBER`).
INDEX: Final = "[{}]"
ATTR: Final = ".{}"


def parts(x: Any) -> Iterable[tuple[Any, Any]] | None:
    """What `x` holds, each part with its label; `None` for another object.

    - A function: its cells, then its defaults and attributes.
    - A cell: its value (an empty cell holds nothing).
    - A partial, a bound method, a builtin one (`losses.append`): its parts.
    - A suspended generator: its local variables.
    - A `functools.lru_cache` function: what it wraps and keeps.
    - A container: its items, a dict's keys holding objects too.
    - A weak reference: its referent and callback."""
    t: type[Any] = type(x)  # pyright: ignore[reportUnknownVariableType]
    if t is types.FunctionType:
        return labelled(x)
    if t is types.CellType:
        try:
            return [(".cell_contents", x.cell_contents)]
        except ValueError:  # an empty cell
            return ()
    holder = holder_of(x)
    if holder is not None:
        return holder.parts(x)
    reader = STDLIB_HOLDERS.get(t)
    if reader is not None:
        return reader(x)
    inside = items(x)
    if inside is not None:
        return _labelled(x, inside)
    if issubclass(t, weakref.ReferenceType):
        return [("()", x()), *weakref_parts(x)]
    return None


def _labelled(x: Any, inside: Iterable[Any]) -> Iterable[tuple[Any, Any]]:
    """A container's items, labelled as its kind names them.

    A dict's by key, with what `dict_static` names; a NamedTuple's by field."""
    if isinstance(x, dict | types.MappingProxyType):
        pairs = dict.items(x) if isinstance(x, dict) else x.items()  # pyright: ignore
        return [*(((KEY, k), v) for k, v in pairs), *dict_static(x)]  # pyright: ignore
    if isinstance(x, tuple) and isinstance(
        fields := static_attribute(x, "_fields"), tuple
    ):
        return [((ATTR, f), v) for f, v in zip(fields, inside, strict=True)]  # pyright: ignore
    if isinstance(x, set | frozenset):
        return [((MEMBER, None), v) for v in inside]
    return [((INDEX, i), v) for i, v in enumerate(inside)]


def held(x: Any) -> Iterable[Any] | None:
    """What `x` holds, by `parts`; `None` for an atom.

    Another object holds its attributes, read without running its code."""
    t: type[Any] = type(x)  # pyright: ignore[reportUnknownVariableType]
    if t in UNOPENED or issubclass(t, _ATOMS):
        return None
    inside = parts(x)
    if inside is None:
        try:
            inside = own_attributes(x, slots_of(t))
        except NotRun:
            return None
    return [v for _, v in inside]


_ATOMS: Final = (type, np.ndarray, np.generic, jax.Array)


def read_inside(value: Any, limit: int = 2_000) -> list[tuple[Any, Any]]:
    """The cells `value` reaches, each with its value (itself when empty).

    What the walk reads of a static value's functions: `lift.jit` watches it."""
    cells = {id(x): x for x in reach([value], held, limit) if type(x) is types.CellType}
    # An empty cell has no part: itself stands for its value.
    return [(c, next((v for _, v in parts(c)), c)) for c in cells.values()]  # pyright: ignore[reportOptionalIterable]
