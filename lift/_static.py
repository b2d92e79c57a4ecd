"""The one static rule: what of a capture is a leaf and what is static, and
what "equal" means for a static value.

`leaf_class` says what becomes a leaf, `scanned` which statics are looked
into for a hidden tracer, `attributes_by_global` which module-level functions
are compared by identity; the full walk states each decision by calling these,
and the replay reads the walk's record of them. `static_key` compares statics
by type and value at every depth (so `0.0` is not `-0.0` and `1` is not
`1.0`), and by identity where a value cannot be compared."""

from __future__ import annotations

import types
from typing import Any, Final

import numpy as np

from ._hidden import jax_dtype, opaque

__all__ = ["attributes_by_global", "is_exact", "leaf_class", "scanned", "static_key"]


_PLAIN: Final = frozenset({int, bool, str, bytes, type(None)})
# Small NumPy arrays compare by content; larger ones by identity.
_ARRAY_BYTES: Final = 4096
_MAX_DEPTH: Final = 64


class _ById:
    """Stands for a value compared by identity (it holds the value alive)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return type(other) is _ById and other.value is self.value

    def __hash__(self) -> int:
        return id(self.value)


def _is_namedtuple(t: type[Any]) -> bool:
    return issubclass(t, tuple) and "_fields" in t.__dict__


def static_key(value: Any, depth: int = 0) -> Any:
    """What a static value is compared and hashed by: its type and value, at every
    depth (`0.0` vs `-0.0`, `1` vs `1.0` vs `True`, `frozenset({1})` vs
    `frozenset({1.0})`, `range(0)` vs `range(1, 1)` all differ). Raises
    `TypeError` for a value that is not hashable."""
    t: type[Any] = type(value)  # pyright: ignore[reportUnknownVariableType]
    if t in _PLAIN:
        return (t, value)
    if t is float:
        return (t, value.hex())
    if t is complex:
        return (t, value.real.hex(), value.imag.hex())
    if depth > _MAX_DEPTH:
        return _ById(value)
    if t is tuple or t is frozenset or _is_namedtuple(t):
        items = [static_key(v, depth + 1) for v in value]  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
        return (t, frozenset(items) if t is frozenset else tuple(items))
    if t is range:
        return (t, value.start, value.stop, value.step)
    # By the dtype itself: its `str` is `'<V1'` for every 1-byte ml_dtype
    # (`int4` and `uint4` alike).
    if issubclass(t, np.generic):
        return (t, value.dtype, value.tobytes())
    if t is np.ndarray:
        if value.dtype.hasobject or value.nbytes > _ARRAY_BYTES:
            return _ById(value)
        return (t, value.dtype, value.shape, value.tobytes())
    if t is dict:
        # Annotations reach here: a dict compared by its items, in order.
        return (
            t,
            tuple(
                (static_key(k, depth + 1), static_key(v, depth + 1))
                for k, v in value.items()
            ),
        )
    hash(value)
    # Compared by the class's own `__eq__`: equal keys may hold different values
    # (`is_exact` is false), so such a static is never swapped for an equal one.
    if (
        t.__eq__ is object.__eq__
        or issubclass(t, _BY_IDENTITY)
        or t.__module__ == "typing"  # annotations: equal ones are interchangeable
    ):
        return (t, value)
    return (_Loose, t, value)


class _Loose:
    """Marks a static key that compares with a class's own `__eq__`."""


_BY_IDENTITY: Final = (
    type,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.ModuleType,
    types.GenericAlias,
    types.UnionType,
    np.dtype,
)


def is_exact(key: Any) -> bool:
    """Whether a `static_key` determines its value (no class's own `__eq__` in it)."""
    stack = [key]
    while stack:
        k = stack.pop()
        if type(k) is tuple:
            if k and k[0] is _Loose:
                return False
            stack.extend(k)  # pyright: ignore[reportUnknownArgumentType]
        elif type(k) is frozenset:
            stack.extend(k)  # pyright: ignore[reportUnknownArgumentType]
    return True


_UNSCANNED: Final = frozenset({int, bool, str, bytes, type(None), type(Ellipsis)})


def scanned(t: type[Any]) -> bool:
    """Whether a static capture of type `t` is scanned for a hidden tracer
    (`hidden_tracer`): not atoms, NumPy scalars, nor what `opaque` says holds
    nothing. (A class is scanned: `hidden_tracer` answers at once for a
    library's.)"""
    return not (t in _UNSCANNED or issubclass(t, np.generic) or opaque(t))


def leaf_class(leaf: Any) -> Any:
    """Everything the walk's rule (`_Walk.kind`, with branch analysis) reads of
    a dynamic leaf: its type, and for a NumPy array whether JAX holds its
    dtype, whether it is 0-d and whether it is boolean. Two dynamic leaves of
    one class are decided alike; the replay checks each leaf's class."""
    t: type[Any] = type(leaf)  # pyright: ignore[reportUnknownVariableType]
    if t is np.ndarray:
        return (t, leaf.ndim == 0, bool(leaf.dtype == np.bool_), jax_dtype(leaf.dtype))
    return t


def attributes_by_global(fn: types.FunctionType, global_names: frozenset[str]) -> bool:
    """Whether `fn` reads its own attributes through the module global naming it
    (a module-level `def f` reading `f.scale`): leaves there would be dead in
    the rebuilt function, so its attributes are static (`global_names`: the
    names its code looks up as globals)."""
    return fn.__name__ in global_names and fn.__globals__.get(fn.__name__) is fn
