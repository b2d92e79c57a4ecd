"""The one static rule: what of a capture is a leaf, and what is static.

`default_dynamic` states the default rule. `static_key` says what "equal"
means for a static value: type and value at every depth. So `0.0` is not
`-0.0`, and `1` is not `1.0`. A value that cannot be compared compares by
identity. `scanned` says which statics are looked into for a hidden tracer.
The full walk states each decision by calling these.
"""

from __future__ import annotations

import enum
import functools
import struct
import types
import typing
import warnings
from collections.abc import Callable
from itertools import chain
from typing import Any, Final, cast

import jax
import numpy as np

from .._base.atoms import EXACT, INEXACT
from .._base.caches import per_class
from .._base.errors import LiftError, describe
from .._compat import Tracer as _Tracer, live_traces
from .._holders.attributes import own_attributes
from .._holders.closure import custom_data, slots_of
from .._holders.labels import Label, variable_str
from .._holders.reach import containers, reach
from .._holders.trees import (
    one_level,
    slot_path,
    tree_structure,
    treedef_is_leaf,
)
from .floats import only_a_number
from .hidden import aux_tracer, hidden_tracer, jax_dtype, opaque

# Compared by type and value as they are (floats by their bits: `0.0` is not
# `-0.0`, nor `nan` `-nan`).
_PLAIN: Final = EXACT
# Small NumPy arrays compare by content; larger ones by identity.
_ARRAY_BYTES: Final = 4096
_MAX_DEPTH: Final = 64
_bits: Final = struct.Struct("<d").pack


class ById:
    """Stands for a value compared by identity, and keeps it alive.

    It is a static key, or a skeleton's key of what compares by identity: a
    function's globals, an unhashable static.
    """

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return type(other) is ById and other.value is self.value

    def __hash__(self) -> int:
        return id(self.value)


def _is_namedtuple(t: type[Any]) -> bool:
    return issubclass(t, tuple) and "_fields" in t.__dict__


def static_key(value: Any, depth: int = 0, loose: bool = False) -> Any:
    """What a static value is compared and hashed by: its type and value.

    Both count at every depth. Floats compare by their bits: `0.0` and
    `-0.0` differ, `nan` and `-nan` too. So do `1`, `1.0` and `True`, and
    `frozenset({1})` and `frozenset({1.0})`, and `range(0)` and
    `range(1, 1)`. Raises `TypeError` for a value that is not hashable.

    With `loose`, as for static data JAX takes unhashable, lists are keyed by
    their items. Whatever else cannot be hashed is keyed by identity.
    """
    t: type[Any] = type(value)  # pyright: ignore[reportUnknownVariableType]
    if t in _PLAIN:
        return (t, value)
    if t is float:
        return (t, _bits(value))
    if t is complex:
        return (t, _bits(value.real), _bits(value.imag))
    if depth > _MAX_DEPTH:
        return ById(value)
    if t is tuple or t is frozenset or _is_namedtuple(t) or (loose and t is list):
        items = [static_key(v, depth + 1, loose) for v in value]  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
        return (t, frozenset(items) if t is frozenset else tuple(items))
    if t is range:
        return (t, value.start, value.stop, value.step)
    # By the dtype itself: its `str` is `'<V1'` for every 1-byte ml_dtype
    # (`int4` and `uint4` alike).
    if issubclass(t, np.generic):
        return (t, value.dtype, value.tobytes())
    if t is np.ndarray:
        if value.dtype.hasobject or value.nbytes > _ARRAY_BYTES:
            return ById(value)
        return (t, value.dtype, value.shape, value.tobytes())
    if t is dict:
        # Annotations reach here: a dict compared by its items, in order.
        flat = chain.from_iterable(value.items())  # key, value, key, value, ...
        return (t, tuple(static_key(x, depth + 1, loose) for x in flat))
    try:
        hash(value)
    except TypeError:
        if loose:
            return ById(value)
        raise
    if t.__module__ == "typing" or issubclass(t, (types.GenericAlias, types.UnionType)):
        # Type expressions compare their arguments loosely (`int | str ==
        # str | int`, `Literal["a", "b"] == Literal["b", "a"]`, `list[1] ==
        # list[True]`): by their origin and arguments, in order, instead.
        args = typing.get_args(value)
        if args:
            origin = static_key(typing.get_origin(value), depth + 1)
            return (t, origin, tuple(_arg_key(a, depth + 1) for a in args))
        return (t, value)  # `Any`, a `TypeVar`: by identity
    base = _builtin_base(t)
    if base is not None:
        # A subclass of a built-in value that keeps the built-in's `==` (`class
        # F(float)`, `F(0.0) == F(-0.0)`): by its type, the built-in value's
        # own key and its attributes' (its `__dict__`'s and its slots';
        # unhashable ones by their items, as static data is: `loose`).
        attributes = own_attributes(value, slots_of(t))
        keys = tuple((k, static_key(v, depth + 1, True)) for k, v in attributes)
        return (t, static_key(base(value), depth + 1), keys)
    # By identity, or by the class's own `__eq__`.
    return (t, value)


def aux_key(treedef: Any) -> tuple[Any, ...] | None:
    """The static (aux) data of `treedef`'s custom nodes by `static_key`.

    It is `None` for a treedef without any. JAX compares such data with `==`:
    `0.0 == -0.0`, `1 == True`. So equal treedefs may rebuild different
    objects, and a template's key holds this too.
    """
    parts = [aux for _, aux in custom_data(treedef) if aux is not None]
    if not parts:
        return None
    return tuple(static_key(aux, loose=True) for aux in parts)


def _arg_key(arg: Any, depth: int) -> Any:
    """A type expression's argument's key (`Callable[[int], str]` has a list)."""
    if type(arg) is list:
        return (list, tuple(_arg_key(a, depth + 1) for a in arg))  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
    return static_key(arg, depth)


# The built-in value types whose subclasses `static_key` keys as the built-in.
_BUILTIN_VALUES: Final[tuple[type[Any], ...]] = (
    float,
    int,
    complex,
    str,
    bytes,
    tuple,
    frozenset,
)


@per_class
def _builtin_base(t: type[Any]) -> type[Any] | None:
    """The built-in value type that `t`, a strict subclass of it, compares as.

    `None` where `t` has an `__eq__` or `__hash__` of its own, or is an `Enum`.
    """
    base = next((b for b in _BUILTIN_VALUES if issubclass(t, b)), None)
    if base is None or issubclass(t, enum.Enum):
        return None
    sub, own = cast(Any, t), cast(Any, base)  # (pyright narrows `t` to the bases)
    return base if sub.__eq__ is own.__eq__ and sub.__hash__ is own.__hash__ else None


# Static captures never scanned, by exact type: the exact scalars and `...`
# (floats and complex numbers, static only when asked, are `opaque`'s).
_UNSCANNED: Final = EXACT | {type(Ellipsis)}


def scanned(t: type[Any]) -> bool:
    """Whether a static capture of type `t` is scanned for a hidden tracer.

    Atoms and NumPy scalars are not, nor what `opaque` says holds nothing. A
    class is scanned: `hidden_tracer` answers at once for a library's.
    """
    return not (t in _UNSCANNED or issubclass(t, np.generic) or opaque(t))


def attributes_by_global(fn: types.FunctionType, global_names: frozenset[str]) -> bool:
    """Whether `fn` reads its own attributes through its module global.

    A module-level `def f` reading `f.scale` does. Leaves there would be dead
    in the rebuilt function, so its attributes are static. `global_names` are
    the names its code looks up as globals.
    """
    return fn.__name__ in global_names and fn.__globals__.get(fn.__name__) is fn


# Objects that are not pytrees which lift takes apart into functions where it
# meets them, at the top or captured (`optax.MultiSteps`: registered by
# `lift._lifted.multisteps`), so that what they hold is walked.
TAKES_APART: list[Callable[[Any], Any | None]] = []


def taken_apart(value: Any) -> Any | None:
    """`value` as the pytree of functions lift takes it apart into, or `None`."""
    for take in TAKES_APART:  # a loop: a generator costs a fresh lift 0.5 %
        if (apart := take(value)) is not None:
            return apart
    return None


def default_dynamic(x: Any) -> bool:
    """The default rule: what is a leaf.

    Arrays, tracers, and NumPy values of dtypes JAX can hold are leaves. So
    are Python `float` and `complex`, and a subclass that is only the number
    (`class Rate(float): pass`). An `Enum` member valued as one is not: a
    tracer in its place would lose its identity. Nor is a subclass that adds
    to the number: a method, a property, a slot, an attribute of the value.
    Code may use those (`WarmRate(0.1).warm(5)`), so it stays static.
    """
    t: type[Any] = type(x)  # pyright: ignore[reportUnknownVariableType]
    if issubclass(t, (np.ndarray, np.generic)):
        return jax_dtype(x.dtype)
    if issubclass(t, _Tracer):
        return True
    if issubclass(t, (float, complex)):
        return t in INEXACT or (only_a_number(t) and not getattr(x, "__dict__", None))
    try:
        return isinstance(x, jax.Array)
    except Exception:  # an object whose attribute access fails: static
        return False


class DynamicNames:
    """`dynamic=` given as names.

    The named captures, and everything nested in them, follow the default
    rule. A named `int` or `bool` is an integer or boolean leaf. Elsewhere
    only arrays, tracers and NumPy values are leaves. Python floats stay
    static there (`python_number`). So the function computes bitwise what the
    original does, but for the named values. It is kept with a skeleton's
    options: pickle re-lifts with it.
    """

    __slots__ = ("names",)

    def __init__(self, names: frozenset[str]) -> None:
        self.names = names

    def __repr__(self) -> str:
        return f"dynamic={tuple(sorted(self.names))!r}"

    def __reduce__(self) -> tuple[Any, ...]:
        # By its names, at every protocol: 0 and 1 cannot read slots.
        return (DynamicNames, (self.names,))


def unsortable_registry(value: Any) -> bool:
    """Whether `value` holds a dict whose keys do not sort, and nothing dynamic.

    Types as keys, as in a `functools.singledispatch` registry: static as a
    whole, compared by its items. Walked through dicts, lists and tuples, at
    most `_REGISTRY_VISITS` objects."""
    unsortable = False
    for seen, x in enumerate(reach([value], _REGISTRY_ITEMS, _REGISTRY_VISITS)):
        if seen == _REGISTRY_VISITS - 1 or default_dynamic(x):
            return False
        if type(x) is dict and not unsortable:
            try:
                sorted(x)  # pyright: ignore[reportUnknownArgumentType]
            except TypeError:
                unsortable = True
    return unsortable


_REGISTRY_ITEMS: Final = containers(dict, list, tuple)
_REGISTRY_VISITS: Final = 1_000


def is_jax_value(x: Any) -> bool:
    """What a dynamic leaf may be: something `jax.jit` takes as an argument."""
    return default_dynamic(x) or type(x) in (int, bool)  # pyright: ignore[reportUnknownArgumentType]


def check_aux(treedef: Any, holder: Any, label: Label) -> str | None:
    """As `check_opaque`, for the static (aux) data of a captured pytree."""
    return _live_or_refuse(
        functools.partial(aux_tracer, treedef),
        lambda: (
            f"{describe(holder)} captures {variable_str(label)}, a pytree whose "
            f"static data holds a tracer at {label.variable or label.text}"
        ),
        "A treedef's static data is part of the compiled program's key, so the "
        "tracer would leak.\nFix: make the traced value a child of the pytree "
        "(not a static field), or pass it as an argument.",
        "tracer-in-static-pytree-data",
    )


def check_opaque(
    leaf: Any, t: Any, holder: Any, label: Label, at: Any = (None, 0), held: Any = None
) -> str | None:
    """Refuse a static capture that hides a tracer of an exited transform.

    `at` is the captured value's treedef and the leaf's position in it. A
    tracer whose transform still runs is kept, as the function keeps it. The
    answer then says where (`Skeleton.live`). `held` gets the ids of the
    functions and cells the capture holds.
    """
    if not scanned(t):
        return None
    return _live_or_refuse(
        functools.partial(hidden_tracer, leaf, held=held),
        lambda: (
            f"{describe(holder)} captures {variable_str(label)}, {_a_value(leaf, t)} "
            "that is not a pytree and holds a tracer at "
            f"{label.variable or label.text}{slot_path(*at)}"
        ),
        "lift cannot make that tracer a leaf, and keeping it would leak it.\n"
        "Fix: convert the function with `lift.closure_convert(f, "
        "*example_args)` inside the transform, register the class as a pytree, "
        "or pass the value as an argument.",
        "hidden-tracer",
    )


def _a_value(value: Any, t: type[Any]) -> str:
    """`value` as a message names it: `a Box`, `the class Config`.

    A pytree whose leaf is the object is `a list holding an object`.
    """
    if isinstance(value, type):
        return f"the class {value.__qualname__}"
    with warnings.catch_warnings():  # JAX's notice that a generator is a leaf
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            node = not treedef_is_leaf(tree_structure(value, is_leaf=one_level(value)))
        except ValueError:  # `{int: f, float: g}`
            return f"a {t.__name__} with keys JAX cannot sort"
    return f"a {t.__name__} holding an object" if node else f"a {t.__name__}"


def _live_or_refuse(
    find: Callable[..., str | None],
    what: Callable[[], str],
    why_and_fix: str,
    anchor: str,
) -> str | None:
    """What a scan for a tracer finds, said or refused.

    `None` when `find()` finds no tracer, the common case. What it found,
    when the tracer's transform still runs: `find(live_traces())` finds
    none of the exited. Else a `LiftError`: `what()`, where the exited tracer
    is, and `why_and_fix`.
    """
    first = find()
    if first is None:
        return None
    where = find(live_traces())
    if where is None:
        return f"{what()}{first}"
    raise LiftError(
        f"{what()}{where}, from a transform that has exited. {why_and_fix}",
        anchor=anchor,
    )


# Leaf types that Python control flow can read (`if b2 != 1.0`, `if mask`).
# Python scalars: a branch on one makes it static.
PY_SCALARS: Final = (float, complex, int)
BRANCHABLE: Final = (float, complex, int, np.generic, np.ndarray)


def branch_static(leaf: Any, t: type[Any]) -> bool:
    """Whether a dynamic `leaf` stays static where code branches on it.

    Python scalars, NumPy scalars and 0-d NumPy arrays do. Python can read
    their value.
    """
    if issubclass(t, PY_SCALARS):
        return True
    return issubclass(t, (np.generic, np.ndarray)) and leaf.ndim == 0


def is_bool(leaf: Any) -> bool:
    """A NumPy boolean Python can read."""
    return branch_static(leaf, type(leaf)) and getattr(leaf, "dtype", None) == np.bool_  # pyright: ignore[reportUnknownArgumentType]


ArrayImpl: Final[type[Any]] = type(jax.device_put(np.zeros(())))  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType, reportUnknownVariableType]

# Leaves decided by type alone (the fast path of a sweep re-lifting optimizers):
# the exact scalars and what is static by identity, or holds no tracer, and is
# common in an optimizer's state (`...`, classes, modules, dtypes). Floats and
# complex numbers are not: they become leaves.
STATIC_ATOMS: Final = EXACT | {type(Ellipsis), type, types.ModuleType, np.dtype}
DYNAMIC_ATOMS: Final = INEXACT | {ArrayImpl, np.ndarray}
# Dynamic by type alone (a NumPy array also needs a dtype JAX can hold).
ALWAYS_DYNAMIC: Final = INEXACT | {ArrayImpl}
