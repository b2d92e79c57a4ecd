"""What anything holds: the one description that every walk reads.

A walk passes `held` to `lift._holders.reach.reach` as its policy, or
filters it. Capture, the copy check, the callback search and `lift.jit`'s
watch then follow the same parts."""

from __future__ import annotations

import types
import weakref
from collections.abc import Iterable
from typing import Any, Final

import jax
import numpy as np

from .._base.atoms import UNOPENED
from .attributes import NotRun, own_attributes
from .closure import (
    function_parts,
    holder_of,
    slots_of,
)
from .reach import items, reach
from .stdlib import STDLIB_HOLDERS, weakref_parts

__all__ = ["held", "read_inside"]


def held(x: Any) -> Iterable[Any] | None:
    """What `x` holds, by the one description of holders; `None` for an atom.

    - A function: its cells and its parts.
    - A cell: its value.
    - A partial, a bound method, a builtin one (`losses.append`): its parts.
    - A container: its items.
    - A weak reference: its referent and callback.
        - Another object: its attributes, read without running its code.
    """
    t: type[Any] = type(x)  # pyright: ignore[reportUnknownVariableType]
    if t in UNOPENED or issubclass(t, _ATOMS):
        return None
    if t is types.FunctionType:
        return [*(x.__closure__ or ()), *(v for _, v in function_parts(x))]
    if t is types.CellType:
        return [_value(x)]  # an empty cell: itself, seen already
    holder = holder_of(x)
    if holder is not None:
        return [v for _, v in holder.parts(x)]
    reader = STDLIB_HOLDERS.get(t)
    if reader is not None:
        return [v for _, v in reader(x)]
    inside = items(x)
    if inside is not None:
        return inside
    if issubclass(t, weakref.ReferenceType):
        return [x(), *(v for _, v in weakref_parts(x))]
    try:
        return [v for _, v in own_attributes(x, slots_of(t))]
    except NotRun:
        return None


_ATOMS: Final = (type, np.ndarray, np.generic, jax.Array)


def _value(cell: types.CellType) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell: itself
        return cell


def read_inside(value: Any, limit: int = 2_000) -> list[tuple[Any, Any]]:
    """The cells `value` reaches, each with its value (itself when empty).

    What the walk reads of a static value's functions: `lift.jit` watches it."""
    cells = {id(x): x for x in reach([value], held, limit) if type(x) is types.CellType}
    return [(c, _value(c)) for c in cells.values()]
