"""What a frame's locals hold: the tracers among them and what they reach, for
the frame look of `trace_exits` at a trace's exit.

Bounded (`FRAME_DEPTH` deep, a budget of objects and items), and safe: types
are read with `type()`; a container is read in C; an object is opened by its
`__dict__` and slots, or by the leak scan's opener (`lift._leaks.scan`) for
what only it knows; code outside the user's modules is not looked into."""

from __future__ import annotations

import collections
import functools
import sys
import types
from collections.abc import Callable, Iterable
from typing import Any, Final, cast

import jax
import numpy as np

from .._base.atoms import UNOPENED
from .traces import Tracer

FRAME_DEPTH: Final = 64

# How `tracers_of` opens each type of object, decided once per type (and
# forgotten when the last block watching frames ends, so that no class is kept).
_SKIP, _TRACER, _ITEMS, _VALUES, _OBJECT, _FUNCTION, _METHOD, _OPEN, _ARRAY = range(9)


KINDS: dict[Any, tuple[int, Any]] = {}
_UNDECIDED: Final = (-1, None)


# Objects whose parts are never the user's data: what the leak scan never opens,
# and subclasses of it too (the look is bounded: a subclass of `int` that holds
# a tracer is the leak scan's to find); and also classes (the leak scan opens a
# user's class, whose attributes are a place to leak to: not a frame's local
# data), NumPy scalars and JAX's arrays (no tracer inside).
_ATOMIC: Final = (*UNOPENED, type, np.generic, jax.Array)


_CONTAINERS: Final = (dict, list, tuple, set, frozenset, collections.deque)
_EXACT_CONTAINERS: Final = frozenset(_CONTAINERS)
_LRU_WRAPPER: Final[type] = type(functools.lru_cache(lambda: None))  # pyright: ignore[reportUnknownArgumentType]


def _container_subclass(t: type) -> bool:
    return t not in _EXACT_CONTAINERS and issubclass(t, _CONTAINERS)


def _kind(t: Any) -> tuple[int, Any]:
    found = KINDS.get(t)
    if found is None:
        found = KINDS[t] = _decide_kind(t)
    return found


def _decide_kind(t: Any) -> tuple[int, Any]:
    if issubclass(t, Tracer):
        return _TRACER, None
    if _container_subclass(t):
        # A subclass may keep attributes of its own (`history.best`), a
        # `defaultdict` its factory: opened as the leak scan opens them.
        return _OPEN, None
    if t is _LRU_WRAPPER:  # its cache: opened as the leak scan opens it
        return _OPEN, None
    if issubclass(t, dict):
        return _VALUES, cast(Any, dict).values
    bases: tuple[Any, ...] = (list, tuple, set, frozenset, collections.deque)
    for base in bases:
        if issubclass(t, base):
            return _ITEMS, base.__iter__  # a subclass's own `__iter__` is not run
    if t is types.FunctionType:
        return _FUNCTION, None
    if t is types.MethodType:
        return _METHOD, None
    if t is np.ndarray:
        return _ARRAY, None
    if issubclass(t, _ATOMIC):
        return _SKIP, None
    if issubclass(t, BaseException):
        return _OPEN, None
    module: object = getattr(t, "__module__", None) or "builtins"
    if not isinstance(module, str):
        module = ""  # a class whose `__module__` is a property of its own
    if (
        t.__flags__ & _HEAP_TYPE  # a class of Python's: not a C type's parts
        and module.partition(".")[0] not in _CLOSED_PACKAGES
        and not issubclass(t, functools.partial)
        and not _slotted(t)
    ):
        # An instance `__dict__` as Python makes it (no property to run).
        for klass in t.__mro__:
            descriptor = klass.__dict__.get("__dict__")
            if descriptor is not None:
                if type(descriptor) in _PLAIN_DICT:
                    return _OBJECT, None
                break
    return _OPEN, None  # as the leak scan opens it (subclasses of lists too)


_HEAP_TYPE: Final = 1 << 9  # Py_TPFLAGS_HEAPTYPE
_CLOSED_PACKAGES: Final = frozenset(
    {"jax", "jaxlib", "numpy", "lift", "builtins", "ml_dtypes", "_pytest", "pytest"}
)


def _slotted(t: type) -> bool:
    """Whether a class of its MRO declares `__slots__` (values outside the
    instance `__dict__`)."""
    for klass in t.__mro__[:-1]:
        slots = vars(klass).get("__slots__", ())
        names = (slots,) if isinstance(slots, str) else slots
        if any(n not in ("__dict__", "__weakref__") for n in names):
            return True
    return False


# How Python classes (getset) and C types such as `SimpleNamespace` (member)
# give their instances' `__dict__`: no code of the class's own runs.
_PLAIN_DICT: Final = (types.GetSetDescriptorType, types.MemberDescriptorType)


def tracers_of(
    trace: Any,
    names: list[tuple[str, Any]],
    budget: int,
    opener: Callable[[Any], Iterable[Any]] | None = None,
    seen: set[int] | None = None,
) -> tuple[list[tuple[str, Any]], int]:
    """The tracers of `trace` that `names` hold, breadth-first, at most
    `FRAME_DEPTH` deep and `budget` objects and items; with the budget left.
    What the look does not open itself `opener` opens (if given)."""
    found: list[tuple[str, Any]] = []
    kinds = KINDS
    # Breadth-first: a list read from `at` on (numbers and strings not queued).
    queue = [
        (value, 0, name)
        for name, value in names
        if kinds.get(type(value), _UNDECIDED)[0] != _SKIP
    ]
    at = 0
    if seen is None:
        seen = set()
    while at < len(queue) and budget > 0:
        obj, depth, name = queue[at]
        at += 1
        budget -= 1
        kind, how = kinds.get(type(obj)) or _kind(type(obj))
        if kind == _SKIP:
            continue
        if kind == _TRACER:
            if getattr(obj, "_trace", None) is trace and all(
                t is not obj for _, t in found
            ):
                found.append((name, obj))
            continue
        if depth >= FRAME_DEPTH or id(obj) in seen:
            continue
        seen.add(id(obj))
        if kind in (_ITEMS, _VALUES):
            children: Iterable[Any] = how(obj)
            if len(obj) > 4:
                # Numbers, strings, arrays: told apart by their types, in C.
                budget -= len(obj) // 8
                held = set(map(type, how(obj)))
                if all(kinds.get(k, _UNDECIDED)[0] == _SKIP for k in held):
                    continue
        elif kind == _OBJECT:
            children = object.__getattribute__(obj, "__dict__").values()
        elif kind == _FUNCTION:
            if opener is not None and depth == 0 and is_user_function(obj):
                # A frame's local: its cells, defaults and the globals its
                # code names. Not every function met deeper (a library's
                # tables of functions: each exit would walk them all).
                children = _opened(opener, obj)
            else:
                children = []
                for cell in obj.__closure__ or ():
                    try:
                        children.append(cell.cell_contents)
                    except ValueError:  # an empty cell
                        pass
        elif kind == _METHOD:  # a bound method
            children = (obj.__self__,)
        elif opener is None or (kind == _ARRAY and obj.dtype.kind != "O"):
            continue
        else:
            children = _opened(opener, obj)
        # Numbers and strings are not queued, and cost an eighth of an object
        # (as a container's items above): a list of a thousand floats beside
        # the tracer does not hide it.
        room = budget * 8
        for child in children:
            room -= 1
            if room <= 0:
                break
            known = kinds.get(type(child)) or _kind(type(child))
            if known[0] != _SKIP:
                budget -= 1
                if budget <= 0:
                    break
                queue.append((child, depth + 1, name))
    return found, budget


def _opened(opener: Callable[[Any], Iterable[Any]], obj: Any) -> Iterable[Any]:
    try:
        return opener(obj)
    except Exception:  # what cannot be opened holds nothing the look can see
        return ()


def is_user_module(name: object) -> bool:
    """Whether code of the module called `name` is the user's: not JAX's,
    jaxlib's, lift's, NumPy's, pytest's, pluggy's nor the standard library's.
    Decided by the module's name, never by where its file lies: the project
    under test, and any library besides those, is the user's installed
    editable, as a wheel, on `PYTHONPATH` or in a Bazel tree alike; code
    without a module (`exec`'d, interactive) is the user's. The one rule of
    lift's scans: the leak scan opens the globals of the user's functions,
    the frame look at a trace's exit the user's frames."""
    if type(name) is not str:
        return True
    top = name.partition(".")[0]
    return top not in _NOT_USERS and top not in sys.stdlib_module_names


_NOT_USERS: Final = frozenset(
    {"jax", "jaxlib", "lift", "numpy", "ml_dtypes", "_pytest", "pytest", "pluggy"}
)


def is_user_function(fn: types.FunctionType) -> bool:
    """Whether `fn` is the user's: by the module whose globals it runs in."""
    return is_user_module(fn.__globals__.get("__name__"))
