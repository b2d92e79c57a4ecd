"""Floats become arrays once.

A `Lifted` converts its Python scalars to weakly typed arrays when first
flattened or called. Its scalars of one type take one `jax.device_put` of
their list. Each gets its own buffer, at the default width, placed as a
scalar is.

Also here: which subclasses of `float` and `complex` are only the number
they hold (`only_a_number`), and such a leaf as that number (`scalar_leaf`).
"""

from __future__ import annotations

import contextlib
import enum
from typing import Any, Final

import jax
import numpy as np

from .. import _compat
from .._base import gc as _gc
from .._base.caches import per_class

_SCALARS: Final = frozenset({float, complex, int, bool})


def _to_arrays(values: list[Any]) -> list[jax.Array]:
    """`values`, scalars of one type, as weakly typed 0-d arrays."""
    with _gc.paused():
        return jax.device_put(values)  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType, reportUnknownArgumentType]


def as_arrays(leaves: tuple[Any, ...]) -> tuple[Any, ...]:
    """The leaves with Python scalars as weakly typed 0-d arrays.

    A `Lifted` converts its own scalars once, when first called or flattened.
    So it computes the same before and after a flatten. Its leaves are arrays
    for every `jit`, `eqx.filter_jit` included. The float width follows
    `jax_enable_x64` at that moment. No buffer is shared with another
    `Lifted`: donating one never deletes another's. Scalars of one type are
    converted together (`_to_arrays`).
    """
    groups: dict[type, list[int]] = {}
    for i, leaf in enumerate(leaves):
        t = type(leaf)  # pyright: ignore[reportUnknownVariableType]
        if t in _SCALARS:
            groups.setdefault(t, []).append(i)  # pyright: ignore[reportUnknownArgumentType]
    if not groups:
        return leaves
    out = list(leaves)
    # Concrete even when a trace is active: these arrays outlive any trace.
    eager = _compat.eager()
    with contextlib.nullcontext() if eager else jax.ensure_compile_time_eval():
        for where in groups.values():
            arrays = _to_arrays([out[i] for i in where])
            for i, arr in zip(where, arrays, strict=True):
                out[i] = arr
    return tuple(out)


# What Python writes in a class body (and `__slots__`, whose names are added as
# descriptors): not something a subclass adds to the number.
_CLASS_BODY: Final = frozenset(
    {
        "__module__",
        "__qualname__",
        "__doc__",
        "__dict__",
        "__weakref__",
        "__slots__",
        "__annotations__",
        "__annotate__",
        "__annotate_func__",
        "__annotations_cache__",
        "__firstlineno__",
        "__static_attributes__",
        "__orig_bases__",
        "__parameters__",
    }
)


@per_class
def only_a_number(t: type[Any]) -> bool:
    """Whether `t`, a subclass of `float` or `complex`, adds nothing to it.

    Its class bodies define nothing new. An `Enum` adds its members.
    """
    base = float if issubclass(t, float) else complex
    mro = t.__mro__
    return not issubclass(t, enum.Enum) and all(
        set(vars(k)) <= _CLASS_BODY for k in mro[: mro.index(base)]
    )


def scalar_leaf(leaf: Any, t: type[Any]) -> Any:
    """A dynamic leaf of type `t` as the built-in number it holds.

    `t` subclasses `float` or `complex` (`class Rate(float)`). The value is
    read without the subclass's own methods. It then becomes an array as a
    `float` does: a sweep of them compiles once. A static one keeps its type
    (`static_key`). A NumPy scalar stays the NumPy value it is.
    """
    if not python_number(t):
        return leaf
    return float.__float__(leaf) if issubclass(t, float) else complex.__complex__(leaf)


def python_number(t: type[Any]) -> bool:
    """Whether `t` is a Python `float` or `complex`, or a subclass of one.

    A NumPy scalar is not: `np.float64` subclasses `float`, yet it is a NumPy
    value. `scalar_leaf` reads this, and so does `dynamic=` by names: outside
    the named captures, such numbers stay static.
    """
    return issubclass(t, (float, complex)) and not issubclass(t, np.generic)
