"""The standard library's holders that are not plain objects: what each holds.

NumPy object arrays, property-like descriptors, context variables and
finalizers. Weak containers, and objects opened through their referents
(`functools.cached_property`, `itertools` iterators). Suspended generators and
coroutines, and the entries of a `functools.lru_cache`. Slices, tracebacks,
finished frames and log records. JAX's `custom_jvp` and `custom_vjp` rules.
The capture and the leak scan read them through `STDLIB_HOLDERS` and the
functions here, by `Label`."""

from __future__ import annotations

import asyncio
import contextvars
import ctypes
import functools
import gc
import logging
import sys
import types
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final, cast

import jax
import numpy as np

from .._base.atoms import HOLD_NOTHING
from .._compat import frame_locals
from .attributes import static_attribute
from .closure import call_parts
from .labels import CACHE_KEY, CACHED, FIELD, LOCAL, METHOD_FUNC, SELF, WRAPPED, Label
from .reach import ITEMS


def array_items(a: np.ndarray[Any, Any]) -> Iterator[tuple[Any, Any]]:
    """The elements of a NumPy object array that may hold something.

    `None`, numbers and strings are skipped. Each is labelled by index (`[3]`,
    `[(1, 0)]`), spelled only when a path is reported. An array of numbers
    gives nothing."""
    if not a.dtype.hasobject:
        return
    shape = a.shape
    flat = len(shape) == 1
    atoms = HOLD_NOTHING
    for i, value in enumerate(a.tolist() if flat else a.ravel().tolist()):
        if type(value) not in atoms:  # pyright: ignore[reportUnknownArgumentType]
            yield (KEY, i if flat else _NdIndex(i, shape)), value


class _NdIndex:
    """An element's index in an array of several dimensions.

    Computed from its flat index when printed: `(1, 0)`."""

    __slots__ = ("flat", "shape")

    def __init__(self, flat: int, shape: tuple[int, ...]) -> None:
        self.flat = flat
        self.shape = shape

    def __repr__(self) -> str:
        return repr(tuple(map(int, np.unravel_index(self.flat, self.shape))))


_VALUE: Final = "<value>"  # a `ContextVar`'s value in the current context
# Item labels, `(format, key)`: spelled only for a report.
KEY: Final = "[{!r}]"
MEMBER: Final = "{{…}}"


def _descriptor_parts(d: Any) -> list[tuple[Any, Any]]:
    """The functions a method descriptor or property holds."""
    read = ((attr, getattr(d, attr, None)) for attr in _DESCRIPTOR_FUNCTIONS[type(d)])
    return [(Label.of(attr), fn) for attr, fn in read if fn is not None]


_DESCRIPTOR_FUNCTIONS: Final[dict[type, tuple[str, ...]]] = {
    staticmethod: (METHOD_FUNC,),
    classmethod: (METHOD_FUNC,),
    property: ("fget", "fset", "fdel"),
    functools.cached_property: ("func",),
    functools.partialmethod: ("func", "args", "keywords"),
}


def _context_var_parts(var: contextvars.ContextVar[Any]) -> Iterator[tuple[Any, Any]]:
    """A `ContextVar`'s value in the current context (its default otherwise)."""
    try:
        value = var.get()
    except LookupError:  # neither set nor given a default
        return
    yield Label.of(_VALUE), value


def _finalize_parts(f: weakref.finalize[Any, Any]) -> Iterator[tuple[Any, Any]]:
    """What a live `weakref.finalize` will call, and with what.

    `weakref.finalize`'s registry keeps them strongly until it runs."""
    info = f.peek()
    if info is None:
        return
    yield from call_parts(*info[1:])


# Modules whose C types hold references no attribute shows (iterators, `map`,
# `zip`, `itertools` objects, `operator.itemgetter`, dict views): opened by
# what the garbage collector says they hold.
_OPENED_BY_REFERENTS: Final = frozenset(
    {"builtins", "itertools", "operator", "_operator", "collections", "_collections"}
)
_REFERENT: Final = ".<referent {}>"


def opened_by_referents(cls: type) -> bool:
    """Whether instances of `cls` are opened by `referent_parts`.

    That is a C type of the builtins, `itertools` or `operator`. Not an
    exception: its traceback holds frames, no data of yours."""
    module = getattr(cls, "__module__", None)
    return (
        module in _OPENED_BY_REFERENTS
        and "__dict__" not in dir(cls)
        and not issubclass(cls, BaseException | type)
    )


def referent_parts(obj: Any) -> Iterator[tuple[Any, Any]]:
    """What a C object holds, as the garbage collector sees it, by position."""
    for i, value in enumerate(gc.get_referents(obj)):
        if type(value) not in HOLD_NOTHING:
            yield (_REFERENT, i), value


def _fields(*names: str) -> Callable[[Any], list[tuple[Any, Any]]]:
    """The reader of a holder's named fields, read as the C type keeps them.

    An `asyncio.Future`'s result, exception and callbacks; a slice's bounds;
    a traceback's frame and next entry; a `jax.custom_jvp`'s rules. A log
    record keeps its message, arguments and exception."""

    def parts(x: Any) -> list[tuple[Any, Any]]:
        read = ((Label.of(FIELD, name), static_attribute(x, name)) for name in names)
        return [(label, value) for label, value in read if value is not None]

    return parts


def frame_parts(frame: types.FrameType) -> list[tuple[Any, Any]]:
    """A kept frame's local variables (not its globals, nor its callers: the
    traceback entries beside it are read as such)."""
    return [(Label.of(LOCAL, name), value) for name, value in frame_locals(frame)]


def builtin_method_parts(m: types.BuiltinMethodType) -> Iterator[tuple[Label, Any]]:
    """The object a bound builtin method holds: `stash.append` holds `stash`.

    A module's function (`len`, `math.sqrt`) holds nothing."""
    owner = m.__self__
    if owner is not None and type(owner) is not types.ModuleType:
        yield Label.of(SELF), owner


def weakref_parts(r: weakref.ReferenceType[Any]) -> Iterator[tuple[Any, Any]]:
    """The callback a weak reference keeps strongly.

    What it refers to is not its part: another holder keeps that alive, if
    anything does."""
    callback = r.__callback__
    if callback is not None:
        yield Label.of(FIELD, "__callback__"), callback


# The builtin containers: their items are all they hold. (A subclass's own
# attributes are `own_attributes`'; a dict's keys and factory `dict_static`'s.)
BUILTIN_CONTAINERS: Final = frozenset(ITEMS)


# What the scans for tracers open, of what other walks never open (the
# interpreter's machinery, slices of indices): only through the readers above.
OPENED_BY_SCANS: Final = frozenset({slice, types.TracebackType, types.FrameType})


# Holders that refer to their contents weakly: what they reach is alive only
# while something else holds it, or until the garbage collector frees a cycle.
WEAK_HOLDERS: Final = (
    weakref.ReferenceType,
    weakref.WeakValueDictionary,
    weakref.WeakSet,
)


LRU_WRAPPER: Final[type] = type(functools.lru_cache(lambda: None))  # pyright: ignore[reportUnknownArgumentType]
_UNREAD: Final = object()
# CPython's `lru_list_elem` (Modules/_functoolsmodule.c, 3.8 to 3.13): after the
# object header, `prev`, `next`, `hash`, `key`, `result`; no Python attribute
# reads them. Read only where the layout is checked: the `key` slot must hold
# the very key the cache's dict maps to this element.
_WORD: Final = ctypes.sizeof(ctypes.c_void_p)
_LRU_KEY: Final = object.__basicsize__ + 3 * _WORD
_LRU_READABLE: Final = getattr(sys, "_is_gil_enabled", lambda: True)() and (
    object.__basicsize__ == 2 * _WORD
)


def _lru_result(elem: Any, key: Any) -> Any:
    """The result a bounded `lru_cache` keeps in `elem` for `key`, if readable."""
    if not _LRU_READABLE:
        return _UNREAD
    base = id(elem)
    if ctypes.c_void_p.from_address(base + _LRU_KEY).value != id(key):
        return _UNREAD
    return ctypes.cast(base + _LRU_KEY + _WORD, ctypes.POINTER(ctypes.py_object))[0]


def cache_parts(fn: Any) -> list[tuple[Any, Any]]:
    """A `functools.lru_cache` function's parts.

    What it wraps, each result it keeps (labelled by its key) and each key. A
    list: the cache may change while a caller walks it."""
    parts: list[tuple[Any, Any]] = [(Label.of(WRAPPED), fn.__wrapped__)]
    attrs = getattr(fn, "__dict__", None)
    keys = Label.of(CACHE_KEY)
    atoms = HOLD_NOTHING
    for ref in gc.get_referents(fn):
        if type(ref) is not dict or ref is attrs:
            continue
        for key, value in list(cast(dict[Any, Any], ref).items()):
            if type(value).__name__ == "_lru_list_elem":  # a bounded cache
                value = _lru_result(value, key)
                if value is _UNREAD:
                    continue
            # Labels spelled only when a path is reported (a cache may hold
            # millions of entries); numbers, strings and `None` hold nothing.
            if type(value) not in atoms:
                parts.append(((_CACHED_FORMAT, key), value))
            if type(key) not in atoms:
                parts.append((keys, key))
    return parts


_CACHED_FORMAT: Final = f".{CACHED}[{{!r}}]"


# The frame attribute of each kind of suspended function.
SUSPENDED_FRAMES: Final[dict[type, str]] = {
    types.GeneratorType: "gi_frame",
    types.CoroutineType: "cr_frame",
    types.AsyncGeneratorType: "ag_frame",
}


def _suspended_parts(x: Any) -> list[tuple[Any, Any]]:
    """A suspended generator's local variables; none once it has finished."""
    frame = getattr(x, SUSPENDED_FRAMES[type(x)])
    return [] if frame is None else frame_parts(frame)


# Standard-library holders whose contents no attribute or `__dict__` shows: the
# leak scan and the hidden-tracer check open each through its own reader.
STDLIB_HOLDERS: Final[dict[type, Callable[[Any], Iterable[tuple[Any, Any]]]]] = {
    asyncio.Future: _fields("_result", "_exception", "_callbacks"),
    asyncio.Task: _fields("_result", "_exception", "_callbacks"),
    **dict.fromkeys(_DESCRIPTOR_FUNCTIONS, _descriptor_parts),
    # A context's values by variable name; a weak dict's by key.
    contextvars.Context: lambda c: [((KEY, k.name), v) for k, v in list(c.items())],
    contextvars.ContextVar: _context_var_parts,
    weakref.finalize: _finalize_parts,
    weakref.WeakValueDictionary: lambda d: [((KEY, k), v) for k, v in list(d.items())],
    weakref.WeakSet: lambda s: [((MEMBER, None), v) for v in list(s)],
    slice: _fields("start", "stop", "step"),
    types.TracebackType: _fields("tb_frame", "tb_next"),
    types.FrameType: frame_parts,
    types.BuiltinMethodType: builtin_method_parts,
    logging.LogRecord: _fields("msg", "args", "exc_info"),
    jax.custom_jvp: _fields("fun", "jvp", "fwd", "bwd"),
    jax.custom_vjp: _fields("fun", "jvp", "fwd", "bwd"),
    LRU_WRAPPER: cache_parts,
    **dict.fromkeys(SUSPENDED_FRAMES, _suspended_parts),
}
