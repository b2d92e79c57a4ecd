"""A tracer no pytree reaches.

It hides in a static capture's attributes, slots, containers or object-array
elements, or in a pytree node's static data. Neither lift nor JAX can make it
a leaf. Capture refuses it once its transform has exited; `lift.closure_convert`
lifts it. The scan is the leak scan's walk (`lift._leaks.scan.first_tracer`),
bounded, stopping at the first tracer. So capture and leak checking share
one description of what an object holds. The scan also notes the functions it
passes, but for a class's methods: a function a static capture holds stays
static.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import Any, Final, cast

import jax
import numpy as np

from .._base.atoms import SCALARS
from .._base.caches import BoundedDict
from .._compat import LiveTraces, valid_jaxtype
from .._holders.closure import static_data, user_class
from .._holders.stdlib import builtin_method_parts
from .._leaks.report import label_text
from .._leaks.scan import first_tracer

# Static captures that hold no tracer to look for, by subclass (`opaque`): the
# scalars, modules and code, dtypes, JAX's arrays, and NumPy's (but for an
# array of objects, which `opaque` leaves to the scan).
_OPAQUE_SKIP: Final = (
    *SCALARS,
    types.ModuleType,
    types.CodeType,
    np.dtype,
    np.ndarray,
    jax.Array,
)
# Objects one scan visits at most: a static object graph larger than this is
# looked into in part (breadth-first, the nearest objects first).
_SCAN_LIMIT: Final = 100_000


@functools.cache
def jax_dtype(dtype: np.dtype[Any]) -> bool:
    """Whether JAX can hold NumPy values of `dtype`, asked once per dtype.

    It cannot hold strings, objects, dates or records. Nor `longdouble`,
    `void`, or an ml_dtype JAX has no type for, such as `complex32`.
    """
    try:
        zero = np.zeros((), dtype)
        # jax 0.12.1 calls `complex32` a valid type but cannot put it on a
        # device: asked of the device too.
        return bool(valid_jaxtype(zero)) and _put(zero) is not None
    except Exception:  # a dtype NumPy cannot make a zero of, or JAX hold
        return False


_put: Final = cast("Callable[[Any], Any]", jax.device_put)  # pyright: ignore[reportUnknownMemberType]


def hidden_tracer(
    obj: Any, live: LiveTraces | None = None, held: set[int] | None = None
) -> str | None:
    """Path to a tracer hidden inside `obj`, if any.

    It looks in attributes, slots, containers and object-array elements.
    Given `live`, it finds only a tracer whose trace has exited. `held` gets
    the ids of the functions and cells it passes. The scan is bounded
    (`_SCAN_LIMIT` objects) and safe on hostile objects. It reads types with
    `type()` and passes by what cannot be opened. The full walk asks this of
    every opaque static capture.
    """
    t: type[Any] = type(obj)  # pyright: ignore[reportUnknownVariableType]
    # The common static captures, answered without a walk: a module's function
    # (`len`), a library's class (`jnp.float32`).
    if t is types.BuiltinMethodType and next(builtin_method_parts(obj), None) is None:
        return None
    if issubclass(t, type) and not user_class(obj):
        return None
    return first_tracer(obj, _SCAN_LIMIT, live, held)


# Treedefs `static_data` gives nothing for. Small, as `treedef_paths`' cache:
# treedefs of dicts differing only in their keys share one hash.
_PLAIN_TREEDEFS: BoundedDict[Any, None] = BoundedDict(256)


def plain_treedef(treedef: Any) -> bool:
    """Whether `treedef` is known to have no static data: one lookup."""
    return treedef in _PLAIN_TREEDEFS


def aux_tracer(treedef: Any, live: LiveTraces | None = None) -> str | None:
    """Path to a tracer in the static (aux) data of `treedef`'s custom nodes.

    Such data is a `jax.tree_util.Partial`'s function, an equinox static
    field, a flax `pytree_node=False` field. Given `live`, only a tracer whose
    trace has exited counts (`hidden_tracer`).
    """
    if treedef in _PLAIN_TREEDEFS:
        return None
    data = list(static_data(treedef))
    if not data:
        _PLAIN_TREEDEFS.add(treedef, None)
    for kind, part, aux in data:
        where = hidden_tracer(aux, live)
        if where is not None:
            if part:  # a dict's key or default factory
                return f"{label_text(part)}{where}"
            return f"<static data of {getattr(kind, '__name__', kind)}>{where}"
    return None


def opaque(t: type[Any]) -> bool:
    """Whether a static value of type `t` can hold nothing lift must look into."""
    return issubclass(t, _OPAQUE_SKIP) and t is not np.ndarray
