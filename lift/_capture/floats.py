"""Floats become arrays once: the Python scalars a `Lifted` captured, converted
to weakly typed arrays the first time it is flattened or called.

All of a `Lifted`'s scalars of one type are converted by one `jax.device_put`
of their list: each gets its own buffer, weakly typed at the default width,
placed as `jax.device_put` places a scalar."""

from __future__ import annotations

from typing import Any, Final

import jax

from .. import _compat
from .._base import gc as _gc

_SCALARS: Final = frozenset({float, complex, int, bool})


def _to_arrays(values: list[Any]) -> list[jax.Array]:
    """`values` (Python scalars of one type) as weakly typed 0-d arrays, one
    buffer each."""
    with _gc.paused():
        return jax.device_put(values)  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType, reportUnknownArgumentType]


def as_arrays(leaves: tuple[Any, ...]) -> tuple[Any, ...]:
    """The leaves with Python scalars as weakly typed 0-d arrays, one buffer each.

    A `Lifted` converts its own scalars, once, the first time it is called or
    flattened, whichever comes first: so it computes the same before and after a
    flatten, its leaves are arrays for every `jit` (`eqx.filter_jit` included),
    the default float width follows `jax_enable_x64` at that moment, and no
    buffer is shared with another `Lifted` (donating one never deletes
    another's). Scalars of one type are converted together (`_to_arrays`).
    """
    groups: dict[type, list[int]] = {}
    for i, leaf in enumerate(leaves):
        t = type(leaf)  # pyright: ignore[reportUnknownVariableType]
        if t in _SCALARS:
            groups.setdefault(t, []).append(i)  # pyright: ignore[reportUnknownArgumentType]
    if not groups:
        return leaves
    out = list(leaves)
    if _compat.eager():
        _convert_by_type(out, groups)
    else:
        # Concrete even when a trace is active: these arrays outlive any trace.
        with jax.ensure_compile_time_eval():
            _convert_by_type(out, groups)
    return tuple(out)


def _convert_by_type(out: list[Any], groups: dict[type, list[int]]) -> None:
    """Replace `out`'s scalars, at the positions `groups` lists for each type,
    by arrays."""
    for where in groups.values():
        arrays = _to_arrays([out[i] for i in where])
        for i, arr in zip(where, arrays, strict=True):
            out[i] = arr
