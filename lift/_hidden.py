"""What no pytree reaches: a tracer hidden in a static capture's attributes,
slots, containers or object-array elements, or in a pytree node's static data.

Neither lift nor JAX can make such a tracer a leaf: capture refuses it once its
transform has exited, and `lift.closure_convert` is the way to lift it. The
scan is bounded and safe on hostile objects."""

from __future__ import annotations

import collections.abc
import functools
import types
from collections import deque
from collections.abc import Iterator
from typing import Any, Final

import jax
import numpy as np

from ._atoms import HOLD_NOTHING
from ._caches import BoundedDict
from ._closure import (
    builtin_method_parts,
    cells,
    class_parts,
    function_parts,
    method_parts,
    partial_parts,
    slots_of,
    user_class,
)
from ._compat import LiveTraces, Tracer, has_custom_nodes, valid_jaxtype
from ._labels import CLASS, STATIC, Label
from ._stdlib_holders import (
    LRU_WRAPPER,
    STDLIB_HOLDERS,
    SUSPENDED_FRAMES,
    array_items,
    cache_parts,
    opened_by_referents,
    referent_parts,
    suspended_parts,
)

__all__ = ["aux_parts", "aux_tracer", "has_aux", "hidden_tracer", "jax_dtype", "opaque"]


def aux_parts(treedef: Any) -> Iterator[tuple[Label, Any]]:
    """The static (aux) data of a pytree node flattened one level (`treedef` its
    treedef), when it could hold a tracer: a `jax.tree_util.Partial`'s function,
    an equinox `static=True` or flax `pytree_node=False` field."""
    if has_aux(treedef):
        node = treedef.node_data()
        if node is not None:
            yield Label.of(STATIC), node[1]


_Tracer: Final = Tracer
# NumPy dtype kinds JAX cannot hold: objects, bytes, strings, dates, durations.
_NOT_JAX_KINDS: Final = frozenset("OSUMm")
# Objects the hidden-tracer scan does not look inside.
_OPAQUE_SKIP: Final = (
    types.ModuleType,
    types.CodeType,
    str,
    bytes,
    int,
    float,
    complex,
    np.dtype,
    np.ndarray,
    jax.Array,
)
# Objects one scan visits at most: a static object graph larger than this is
# looked into in part (breadth-first, the nearest objects first).
_SCAN_LIMIT: Final = 100_000


def jax_dtype(dtype: np.dtype[Any]) -> bool:
    """Whether JAX can hold NumPy values of `dtype` (not strings, objects, dates
    or structured records, nor `longdouble`, `void` or the ml_dtypes JAX has no
    type for, such as `complex32`: asked of JAX once per dtype)."""
    known = _JAX_DTYPES.get(dtype)
    if known is None:
        known = dtype.kind not in _NOT_JAX_KINDS and dtype.names is None
        if known:
            try:
                known = bool(valid_jaxtype(np.zeros((), dtype)))
            except Exception:  # a dtype NumPy cannot make a zero of
                known = False
        _JAX_DTYPES[dtype] = known
    return known


_JAX_DTYPES: dict[np.dtype[Any], bool] = {}


def hidden_tracer(obj: Any, live: LiveTraces | None = None) -> str | None:
    """Path to a tracer hidden inside `obj`'s attributes, slots, containers or
    object-array elements, if any: what neither lift nor JAX can see as a leaf.
    Given `live`, only a tracer whose trace has exited (not one of `live`'s).

    Bounded (`_SCAN_LIMIT` objects), and safe on hostile objects: types are read
    with `type()`, and an object whose attributes cannot be read is opaque. The
    full walk and the replay both ask this of every opaque static capture.
    """
    t: type[Any] = type(obj)  # pyright: ignore[reportUnknownVariableType]
    # The common static captures, answered without a walk: a module's function
    # (`len`), a library's class (`jnp.float32`).
    if t is types.BuiltinMethodType:
        owner = obj.__self__
        if owner is None or type(owner) is types.ModuleType:
            return None
    elif issubclass(t, type) and not user_class(obj):
        return None
    # (value, its parent's entry, its label): paths are spelled only when found.
    queue: deque[tuple[Any, int, Any]] = deque([(obj, -1, "")])
    entries: list[tuple[int, Any]] = []
    seen = {id(obj)}
    count = 0
    while queue and count < _SCAN_LIMIT:
        x, parent, label = queue.popleft()
        count += 1
        t = type(x)  # pyright: ignore[reportUnknownVariableType]
        if issubclass(t, _Tracer):
            if live is None or not live.is_live(x):
                return _path(entries, parent, label)
            continue
        if t is np.ndarray:
            if not x.dtype.hasobject:
                continue
            children = list(array_items(x, _SCAN_LIMIT - count - len(queue)))
        elif issubclass(t, _OPAQUE_SKIP):
            continue
        else:
            try:
                children = _children(x, t)
            except Exception:  # a broken proxy, a mock: nothing to look into
                continue
        entries.append((parent, label))
        me = len(entries) - 1
        room = _SCAN_LIMIT - count - len(queue)  # what the scan can still visit
        for child_label, child in children:
            if type(child) in HOLD_NOTHING or id(child) in seen:  # pyright: ignore[reportUnknownArgumentType]
                continue
            if room <= 0:
                break
            room -= 1
            seen.add(id(child))
            queue.append((child, me, child_label))
    return None


def _path(entries: list[tuple[int, Any]], parent: int, label: Any) -> str:
    labels = [label]
    while parent >= 0:
        parent, label = entries[parent]
        labels.append(label)
    return "".join(
        lb if type(lb) is str else lb.text if type(lb) is Label else lb[0].format(lb[1])
        for lb in reversed(labels)
    )


_BUILTIN_NODES: Final = frozenset(
    {tuple, list, dict, type(None), collections.OrderedDict, collections.defaultdict}
)


def _plain_aux(aux: Any) -> bool:
    """Static data that cannot hold a tracer (a NamedTuple's `None`, field names),
    or that lift vetted when it made it (a closure-converted program)."""
    t: type[Any] = type(aux)  # pyright: ignore[reportUnknownVariableType]
    if aux is None or t in (str, int, type) or getattr(t, "vetted", False) is True:
        return True
    return t is tuple and all(type(a) in (str, int, type(None)) for a in aux)


def _static_data(treedef: Any) -> Iterator[tuple[Any, Any]]:
    """`(node type, static data)` of `treedef`'s custom nodes whose static data
    could hold a tracer."""
    if not has_custom_nodes(treedef):
        return
    stack = [treedef]
    while stack:
        td = stack.pop()
        node = td.node_data()
        if (
            node is not None
            and node[0] not in _BUILTIN_NODES
            and not _plain_aux(node[1])
        ):
            yield node
        stack.extend(td.children())


def has_aux(treedef: Any) -> bool:
    """Whether `treedef` has a custom node whose static data could hold a tracer."""
    return next(_static_data(treedef), None) is not None


# Treedefs `has_aux` said no to.
_PLAIN_TREEDEFS: BoundedDict[Any, None] = BoundedDict(1024)


def aux_tracer(treedef: Any, live: LiveTraces | None = None) -> str | None:
    """Path to a tracer in the static (aux) data of `treedef`'s custom nodes: a
    `jax.tree_util.Partial`'s function, an equinox static field, a flax
    `pytree_node=False` field. Checked only for treedefs that have such data.
    Given `live`, only a tracer whose trace has exited (`hidden_tracer`)."""
    if treedef in _PLAIN_TREEDEFS:
        return None
    found = False
    for kind, aux in _static_data(treedef):
        found = True
        where = hidden_tracer(aux, live)
        if where is not None:
            return f"<static data of {getattr(kind, '__name__', kind)}>{where}"
    if not found:
        _PLAIN_TREEDEFS.add(treedef, None)
    return None


def _children(x: Any, t: type[Any]) -> list[tuple[Any, Any]]:
    """`(label, value)` of what `x` holds, for `hidden_tracer`: a `Label`, or
    `(format, key)` spelled when a path is reported."""
    if issubclass(t, type):
        return class_parts(x)  # pyright: ignore[reportUnknownArgumentType]
    if t is types.FunctionType:
        parts: list[tuple[Any, Any]] = [
            (label, cell.cell_contents) for label, cell in _full_cells(x)
        ]
        parts.extend(function_parts(x))
        return parts
    if t is types.MethodType:
        return list(method_parts(x))
    if issubclass(t, functools.partial):
        return list(partial_parts(x))
    if t in SUSPENDED_FRAMES:
        return list(suspended_parts(x))
    reader = STDLIB_HOLDERS.get(t)
    if reader is not None:
        return list(reader(x))
    if issubclass(t, collections.abc.Mapping):
        return [(("[{!r}]", k), v) for k, v in list(x.items())]
    if issubclass(t, (list, tuple, set, frozenset, collections.deque)):
        return [(("[{}]", i), v) for i, v in enumerate(list(x))]
    if t is types.BuiltinMethodType:
        return list(builtin_method_parts(x))
    if t is LRU_WRAPPER:
        return cache_parts(x)
    if opened_by_referents(t):
        return list(referent_parts(x))
    slots = slots_of(t)
    # `object_parts`, labels spelled only when a path is reported (an object
    # may have many attributes), and without what holds nothing.
    attrs = getattr(x, "__dict__", None)
    atoms = HOLD_NOTHING
    parts: list[tuple[Any, Any]] = (
        [
            ((".{}", k), v)
            for k, v in list(attrs.items())  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
            if type(v) not in atoms  # pyright: ignore[reportUnknownArgumentType]
        ]
        if type(attrs) is dict
        else []
    )
    for name in slots:
        try:
            parts.append(((".{}", name), getattr(x, name)))
        except Exception:  # an unset slot, or a descriptor that raises
            continue
    if user_class(t):
        parts.append((Label.of(CLASS), t))
    return parts


def _full_cells(fn: types.FunctionType) -> Iterator[tuple[Label, types.CellType]]:
    for label, cell in cells(fn):
        try:
            cell.cell_contents  # noqa: B018
        except ValueError:  # empty
            continue
        yield label, cell


def opaque(t: type[Any]) -> bool:
    """Whether a static value of type `t` can hold nothing lift must look into."""
    return issubclass(t, _OPAQUE_SKIP) and t is not np.ndarray
