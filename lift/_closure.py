"""What a closure holds: the one description of a callable's parts.

A function holds cells, defaults, keyword-only defaults and attributes (its
`__dict__`: values set by the user, `__wrapped__` set by `functools.wraps`); a
`functools.partial` holds `func`, `args` and `keywords`; a bound method holds
`__func__` and `__self__`; a plain object holds its `__dict__` and `__slots__`.
This module is the only place that says so. Capture, the replay generator,
`lift.jit`'s watch on cells, rebuild, key paths, `repr`, `captures`, `diff` and
the leak scan all read these parts through `Label`s, so a new kind of holder is
one edit here.

It also says what "equal" means for a static value (`static_key`: by type and
value at every depth, so `0.0` is not `-0.0` and `1` is not `1.0`), and how code
is reached from a callable (`code_of`).
"""

from __future__ import annotations

import collections
import collections.abc
import contextvars
import ctypes
import functools
import gc
import sys
import types
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final, cast

import jax
import numpy as np

from . import _trees as jtu
from ._compat import LiveTraces, Tracer, valid_jaxtype

__all__ = [
    "Label",
    "code_of",
    "default_names",
    "function_parts",
    "object_parts",
    "partial_parts",
    "slot_names",
    "static_key",
    "aux_tracer",
    "hidden_tracer",
    "jax_dtype",
    "opaque",
]

# -- labels ------------------------------------------------------------------------

# The kinds of part, with how each reads on a holder `o` (for generated code).
CELL: Final = "cell"  # a free variable: `o.__closure__[i].cell_contents`
DEFAULT: Final = "default"  # `o.__defaults__[i]`
KWDEFAULT: Final = "kwdefault"  # `o.__kwdefaults__[name]`
ATTR: Final = "attr"  # a function attribute: `o.__dict__[name]`
FUNC: Final = "func"  # a partial's function: `o.func`
ARG: Final = "arg"  # `o.args[i]`
KEYWORD: Final = "keyword"  # `o.keywords[name]`
METHOD_FUNC: Final = "__func__"  # a bound method's function
SELF: Final = "__self__"  # a bound method's object
WRAPPED: Final = "__wrapped__"  # what a registered holder wraps
FIELD: Final = "field"  # an object's attribute or slot: `o.name`
ITEM: Final = "item"  # an element of an object array or a container: `o[key]`
CACHED: Final = "<cache>"  # what a `functools.lru_cache` keeps for a key
CACHE_KEY: Final = "<cache key>"  # a key of such a cache
LOCAL: Final = "<locals>"  # a local variable of a suspended generator
CLASS: Final = "__class__"  # the class an instance reads attributes from
STATIC: Final = "<static>"  # a pytree node's static (aux) data

# The parts `Lifted.captures` lists: a function's variables, a partial's keywords.
CAPTURES: Final = frozenset({CELL, DEFAULT, KWDEFAULT, KEYWORD})

# How a leak report says the holder keeps the value.
_ROLES: Final = {
    CELL: "captured variable",
    DEFAULT: "default of parameter",
    KWDEFAULT: "default of parameter",
    ATTR: "function attribute",
    ARG: "partial argument",
    KEYWORD: "partial argument",
    SELF: "bound object",
    LOCAL: "local variable of a suspended generator",
}


class Label:
    """How one part of a holder is reached, and what it is called.

    - `kind`: one of the kinds above; `key`: the name or index within it.
    - `variable`: the name `static=` and messages use (free variables, parameter
      names of defaults, function attributes, partial keywords), or `None`.
    - `entries`: the `jax.tree_util` key entries of the part (`.captures['lr']`);
      `str(label)` is their text.
    - `role`: how a leak report describes the holding (`"captured variable"`), or
      `None` for parts that hold no variable of the user's.

    Labels are interned: `Label.of(kind, key)` returns one object per part name.
    """

    __slots__ = ("entries", "ident", "key", "kind", "role", "text", "variable")

    def __init__(self, kind: str, key: str | int | None, name: str | None) -> None:
        self.kind = kind
        self.key = key
        self.role = _ROLES.get(kind)
        if name is None and kind in (CELL, KWDEFAULT, ATTR, KEYWORD, LOCAL):
            name = key  # type: ignore[assignment]
        self.variable: str | None = name
        if kind in (CELL, DEFAULT, KWDEFAULT):
            entries = (jtu.GetAttrKey("captures"), jtu.DictKey(name))
        elif kind == ATTR:
            entries = (jtu.GetAttrKey("__dict__"), jtu.DictKey(key))
        elif kind == ARG:
            entries = (jtu.GetAttrKey("args"), jtu.SequenceKey(key))  # type: ignore[arg-type]
        elif kind == KEYWORD:
            entries = (jtu.GetAttrKey("keywords"), jtu.DictKey(key))
        elif kind == FIELD:
            entries = (jtu.GetAttrKey(str(key)),)
        elif kind == ITEM:
            entries = (jtu.DictKey(key),)
        elif kind == CACHED:
            entries = (jtu.GetAttrKey(CACHED), jtu.DictKey(key))
        elif kind == LOCAL:
            entries = (jtu.GetAttrKey(LOCAL), jtu.GetAttrKey(str(key)))
        else:
            entries = (jtu.GetAttrKey(kind),)
        self.entries: tuple[Any, ...] = entries
        self.text = "".join(str(e) for e in entries)
        # What the label is compared by, as a tuple (skeleton keys hold this).
        self.ident = (kind, key, name)

    @classmethod
    def of(
        cls, kind: str, key: str | int | None = None, name: str | None = None
    ) -> Label:
        """The label of a part (`name`: a default's parameter name)."""
        label = _interned.get((kind, key, name))
        if label is None:
            if len(_interned) >= _INTERNED_MAX:
                _interned.clear()  # labels compare by value: a new one is as good
            label = _interned.setdefault((kind, key, name), cls(kind, key, name))
        return label

    def source(self, holder: str) -> str:
        """Python source reading this part from the holder named `holder`."""
        kind, key = self.kind, self.key
        if kind == DEFAULT:
            return f"{holder}.__defaults__[{key}]"
        if kind == KWDEFAULT:
            return f"{holder}.__kwdefaults__[{key!r}]"
        if kind == ATTR:
            return f"{holder}.__dict__[{key!r}]"
        if kind == ARG:
            return f"{holder}.args[{key}]"
        if kind == KEYWORD:
            return f"{holder}.keywords[{key!r}]"
        if kind == FIELD:
            return f"{holder}.{key}"
        if kind == CELL:
            raise ValueError("cells are read by the function that holds them")
        return f"{holder}.{kind}"

    def read(self, holder: Any) -> Any:
        """This part of a live holder (for a cell's label, the holder is the
        cell)."""
        kind, key = self.kind, self.key
        if kind == CELL:
            return holder.cell_contents
        if kind == DEFAULT:
            return holder.__defaults__[key]
        if kind == KWDEFAULT:
            return holder.__kwdefaults__[key]
        if kind == ATTR:
            return holder.__dict__[key]
        if kind == ARG:
            return holder.args[key]
        if kind == KEYWORD:
            return holder.keywords[key]
        return getattr(holder, str(key) if kind == FIELD else kind)

    def __eq__(self, other: object) -> bool:
        return self is other or (type(other) is Label and self.ident == other.ident)

    def __hash__(self) -> int:
        return hash(self.ident)

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"Label({self.text})"


_interned: dict[tuple[str, Any, Any], Label] = {}
_INTERNED_MAX: Final = 4096


# -- the parts of each holder ------------------------------------------------------


def default_names(code: types.CodeType, count: int) -> tuple[str, ...]:
    """The parameters that `count` positional defaults belong to.

    `co_argcount` already counts positional-only parameters. Defaults assigned
    beyond the parameters (`f.__defaults__ = ...` by hand) are named by index.
    """
    n = code.co_argcount
    names = code.co_varnames[max(n - count, 0) : n]
    return names + tuple(f"__defaults__[{i}]" for i in range(len(names), count))


def function_parts(fn: types.FunctionType) -> Iterator[tuple[Label, Any]]:
    """A function's parts other than its cells: defaults, keyword-only defaults,
    attributes, in that order."""
    defaults = fn.__defaults__
    if defaults:
        names = default_names(fn.__code__, len(defaults))
        for i, (name, value) in enumerate(zip(names, defaults, strict=True)):
            yield Label.of(DEFAULT, i, name), value
    kwdefaults = fn.__kwdefaults__
    if kwdefaults:
        for name, value in kwdefaults.items():
            yield Label.of(KWDEFAULT, name), value
    attrs = fn.__dict__
    if attrs:
        for name, value in list(attrs.items()):
            yield Label.of(ATTR, name), value


def cells(
    fn: types.FunctionType, labels: tuple[Label, ...] | None = None
) -> Iterable[tuple[Label, types.CellType]]:
    """A function's closure cells, each labelled by its free variable (`labels`:
    the code's cell labels, when the caller has them at hand)."""
    closure = fn.__closure__
    if not closure:
        return ()
    if labels is None:
        labels = tuple(Label.of(CELL, name) for name in fn.__code__.co_freevars)
    return zip(labels, closure, strict=True)


def function_state(fn: types.FunctionType) -> tuple[Any, Any, tuple[Any, ...]]:
    """What a function holds besides its cells, as objects to compare by identity
    later (`lift.jit` watches them): its defaults, keyword-only defaults, and
    attributes."""
    return fn.__defaults__, fn.__kwdefaults__, tuple(fn.__dict__.items())


def same_state(fn: types.FunctionType, state: tuple[Any, Any, tuple[Any, ...]]) -> bool:
    """Whether `fn` holds what `function_state` recorded: the same objects."""
    defaults, kwdefaults, items = state
    if fn.__defaults__ is not defaults or fn.__kwdefaults__ is not kwdefaults:
        return False
    attrs = fn.__dict__
    missing = _MISSING
    return len(attrs) == len(items) and all(
        attrs.get(k, missing) is v for k, v in items
    )


_MISSING: Final = object()


def has_defaults(fn: types.FunctionType) -> tuple[bool, bool]:
    """Whether `fn.__defaults__` and `fn.__kwdefaults__` are set (`None` and an
    empty tuple or dict are different functions)."""
    return fn.__defaults__ is not None, fn.__kwdefaults__ is not None


def set_function_parts(
    fn: types.FunctionType, parts: Iterable[tuple[Label, Any]], has: tuple[bool, bool]
) -> None:
    """Give a rebuilt function the parts `function_parts` read from another."""
    defaults: list[Any] = []
    kwdefaults: dict[str, Any] = {}
    for label, value in parts:
        if label.kind == DEFAULT:
            defaults.append(value)
        elif label.kind == KWDEFAULT:
            kwdefaults[cast(str, label.key)] = value
        else:
            fn.__dict__[cast(str, label.key)] = value
    if has[0]:
        fn.__defaults__ = tuple(defaults)
    if has[1]:
        fn.__kwdefaults__ = kwdefaults


def make_partial(
    cls: type[functools.partial[Any]], parts: Iterable[tuple[Label, Any]]
) -> functools.partial[Any]:
    """A partial of class `cls` from the parts `partial_parts` read from another."""
    func: Any = None
    args: list[Any] = []
    keywords: dict[str, Any] = {}
    attrs: dict[Any, Any] = {}
    for label, value in parts:
        if label.kind == FUNC:
            func = value
        elif label.kind == ARG:
            args.append(value)
        elif label.kind == KEYWORD:
            keywords[cast(str, label.key)] = value
        else:
            attrs[label.key] = value
    p = cls(func, *args, **keywords)
    if attrs:
        p.__dict__.update(attrs)
    return p


def partial_parts(p: functools.partial[Any]) -> Iterator[tuple[Label, Any]]:
    """A partial's function, arguments, keywords and attributes (its `__dict__`:
    `functools.update_wrapper` sets `__wrapped__`, `__name__`, ...)."""
    yield Label.of(FUNC), p.func
    for i, value in enumerate(p.args):
        yield Label.of(ARG, i), value
    for name, value in p.keywords.items():
        yield Label.of(KEYWORD, name), value
    attrs = getattr(p, "__dict__", None)
    if attrs:
        for name, value in list(attrs.items()):
            yield Label.of(ATTR, name), value


def method_parts(m: types.MethodType) -> Iterator[tuple[Label, Any]]:
    yield Label.of(METHOD_FUNC), m.__func__
    yield Label.of(SELF), m.__self__


def builtin_method_parts(m: types.BuiltinMethodType) -> Iterator[tuple[Label, Any]]:
    """The object a bound builtin method holds (`stash.append` holds `stash`);
    nothing for a module's function (`len`, `math.sqrt`)."""
    owner = m.__self__
    if owner is not None and type(owner) is not types.ModuleType:
        yield Label.of(SELF), owner


# Values that hold nothing: an object array's `None`s, numbers and strings are
# not parts (a scan would visit, and label, each of them for nothing).
_ATOMS: Final = frozenset({type(None), bool, int, float, complex, str, bytes})


def array_items(
    a: np.ndarray[Any, Any], limit: int | None = None
) -> Iterator[tuple[Any, Any]]:
    """The elements of a NumPy object array that may hold something (not `None`,
    numbers or strings), labelled by index (`[3]`, `[(1, 0)]`, spelled only
    when a path is reported), at most `limit` of them; nothing for an array of
    numbers."""
    if not a.dtype.hasobject or limit == 0:
        return
    shape = a.shape
    flat = len(shape) == 1
    atoms = _ATOMS
    found = 0
    for i, value in enumerate(a.tolist() if flat else a.ravel().tolist()):
        if type(value) in atoms:  # pyright: ignore[reportUnknownArgumentType]
            continue
        yield (_ITEM_FORMAT, i if flat else _NdIndex(i, shape)), value
        found += 1
        if found == limit:
            return


_ITEM_FORMAT: Final = "[{!r}]"


class _NdIndex:
    """An element's index in an array of several dimensions, from its flat index
    (`(1, 0)`), computed when printed."""

    __slots__ = ("flat", "shape")

    def __init__(self, flat: int, shape: tuple[int, ...]) -> None:
        self.flat = flat
        self.shape = shape

    def __repr__(self) -> str:
        return repr(tuple(map(int, np.unravel_index(self.flat, self.shape))))


# -- holders of the standard library that are not plain objects ------------------

_VALUE: Final = "<value>"  # a `ContextVar`'s value in the current context
_KEY_FORMAT: Final = "[{!r}]"
_MEMBER_FORMAT: Final = "{{…}}"


def _descriptor_parts(d: Any) -> Iterator[tuple[Any, Any]]:
    """The functions a method descriptor or property holds."""
    for attr in _DESCRIPTOR_FUNCTIONS[type(d)]:
        fn = getattr(d, attr, None)
        if fn is not None:
            yield Label.of(attr), fn


_DESCRIPTOR_FUNCTIONS: Final[dict[type, tuple[str, ...]]] = {
    staticmethod: (METHOD_FUNC,),
    classmethod: (METHOD_FUNC,),
    property: ("fget", "fset", "fdel"),
    functools.cached_property: ("func",),
    functools.partialmethod: ("func", "args", "keywords"),
}


def _context_parts(ctx: contextvars.Context) -> Iterator[tuple[Any, Any]]:
    """A `contextvars.Context`'s values, by variable name."""
    for var, value in list(ctx.items()):
        yield (_KEY_FORMAT, var.name), value


def _context_var_parts(var: contextvars.ContextVar[Any]) -> Iterator[tuple[Any, Any]]:
    """A `ContextVar`'s value in the current context (its default otherwise)."""
    try:
        value = var.get()
    except LookupError:  # neither set nor given a default
        return
    yield Label.of(_VALUE), value


def _finalize_parts(f: weakref.finalize[Any, Any]) -> Iterator[tuple[Any, Any]]:
    """What a live `weakref.finalize` will call, and with what (kept strongly
    in `weakref.finalize`'s registry until it runs)."""
    info = f.peek()
    if info is None:
        return
    _, func, args, kwargs = info
    yield Label.of(FUNC), func
    for i, value in enumerate(args):
        yield Label.of(ARG, i), value
    for name, value in kwargs.items():
        yield Label.of(KEYWORD, name), value


def _weak_value_parts(
    d: weakref.WeakValueDictionary[Any, Any],
) -> Iterator[tuple[Any, Any]]:
    for key, value in list(d.items()):
        yield (_KEY_FORMAT, key), value


def _weak_set_parts(s: weakref.WeakSet[Any]) -> Iterator[tuple[Any, Any]]:
    for value in list(s):
        yield (_MEMBER_FORMAT, None), value


# Modules whose C types hold references no attribute shows (iterators, `map`,
# `zip`, `itertools` objects, `operator.itemgetter`, dict views): opened by
# what the garbage collector says they hold.
_OPENED_BY_REFERENTS: Final = frozenset(
    {"builtins", "itertools", "operator", "_operator", "collections", "_collections"}
)
_REFERENT: Final = ".<referent {}>"


def opened_by_referents(cls: type) -> bool:
    """Whether instances of `cls` are opened by `referent_parts`: a C type of
    the builtins, `itertools` or `operator` (not an exception: its traceback
    holds frames, no data of the user's)."""
    module = getattr(cls, "__module__", None)
    return (
        module in _OPENED_BY_REFERENTS
        and "__dict__" not in dir(cls)
        and not issubclass(cls, BaseException | type)
    )


def referent_parts(obj: Any) -> Iterator[tuple[Any, Any]]:
    """What a C object holds, as the garbage collector sees it, by position."""
    for i, value in enumerate(gc.get_referents(obj)):
        if type(value) not in _ATOMS:
            yield (_REFERENT, i), value


# Standard-library holders whose contents no attribute or `__dict__` shows: the
# leak scan and the hidden-tracer check open each through its own reader.
STDLIB_HOLDERS: Final[dict[type, Callable[[Any], Iterator[tuple[Any, Any]]]]] = {
    **dict.fromkeys(_DESCRIPTOR_FUNCTIONS, _descriptor_parts),
    contextvars.Context: _context_parts,
    contextvars.ContextVar: _context_var_parts,
    weakref.finalize: _finalize_parts,
    weakref.WeakValueDictionary: _weak_value_parts,
    weakref.WeakSet: _weak_set_parts,
}


def suspended_parts(x: Any) -> Iterator[tuple[Label, Any]]:
    """A suspended generator's or coroutine's local variables."""
    for name, value in suspended_locals(x):
        yield Label.of(LOCAL, name), value


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
    """A `functools.lru_cache` function's parts: what it wraps, each result it
    keeps (labelled by its key) and each key (a list: the cache may change
    while a caller walks it)."""
    parts: list[tuple[Any, Any]] = [(Label.of(WRAPPED), fn.__wrapped__)]
    attrs = getattr(fn, "__dict__", None)
    keys = Label.of(CACHE_KEY)
    atoms = _ATOMS
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


# Modules whose classes hold no data of the user's: their class attributes are
# not walked (an instance of theirs may still be, by its own attributes).
_LIBRARY_MODULES: Final = frozenset(
    {"jax", "jaxlib", "numpy", "builtins", "ml_dtypes", "lift", "_pytest", "pytest"}
    | set(sys.stdlib_module_names)
)
_user_classes: weakref.WeakKeyDictionary[type, bool] = weakref.WeakKeyDictionary()


def user_class(cls: type) -> bool:
    """Whether `cls` is defined outside JAX, NumPy, pytest, lift and the standard
    library: a class whose attributes may hold the user's values."""
    try:
        return _user_classes[cls]
    except (KeyError, TypeError):
        pass
    module = getattr(cls, "__module__", None)
    mine = (module if type(module) is str else "builtins").partition(".")[0]
    found = mine not in _LIBRARY_MODULES
    try:
        _user_classes[cls] = found
    except TypeError:  # a class that cannot be weakly referenced
        pass
    return found


# Class attributes that hold nothing of the user's: the descriptors CPython
# makes for slots and builtin methods. (A user's methods, static and class
# methods and properties are parts: their closures and defaults may hold values.)
_METHODS: Final = (
    types.MethodDescriptorType,
    types.WrapperDescriptorType,
    types.MemberDescriptorType,
    types.GetSetDescriptorType,
)


def class_parts(cls: type) -> list[tuple[Label, Any]]:
    """What a user's class holds, along its MRO's user classes: its data
    (`registry = []`), its methods, static and class methods and properties
    (whose closures and defaults may hold values); not dunder names. Nothing
    for a library's class."""
    mro = cls.__mro__
    plan = _class_plans.get(cls)
    if plan is not None:
        parts = _read_plan(plan, mro)
        if parts is not None:
            return parts
    plan = _class_plan(cls)
    try:
        _class_plans[cls] = plan
    except TypeError:  # a class that cannot be weakly referenced
        pass
    return _read_plan(plan, mro) or []


def _read_plan(
    plan: _ClassPlan, mro: tuple[type, ...]
) -> list[tuple[Label, Any]] | None:
    """The data `plan` names, or `None` if a class changed its names since."""
    parts: list[tuple[Label, Any]] = []
    for i, keys, names in plan:
        attrs = mro[i].__dict__
        if tuple(attrs) != keys:
            return None
        for name, label in names:
            value = attrs.get(name, _MISSING)
            if value is not _MISSING and not isinstance(value, _METHODS):
                parts.append((label, value))
    return parts


# Per class, the user classes of its MRO (by index: the plan must not keep a
# class alive) with the names in their `__dict__` when read (a class that gains,
# loses or reorders an attribute is read again) and those that are not dunder
# names, each read again at every scan (a method may be replaced by data under
# the same name): what `class_parts` reads, decided once.
_ClassPlan = tuple[tuple[int, tuple[str, ...], tuple[tuple[str, Label], ...]], ...]
_class_plans: weakref.WeakKeyDictionary[type, _ClassPlan] = weakref.WeakKeyDictionary()


def _class_plan(cls: type) -> _ClassPlan:
    seen: set[str] = set()
    plan: list[tuple[int, tuple[str, ...], tuple[tuple[str, Label], ...]]] = []
    for index, klass in enumerate(cls.__mro__):
        if not user_class(klass):
            continue
        keys = tuple(vars(klass))
        names: list[tuple[str, Label]] = []
        for name in keys:
            if name in seen or (name.startswith("__") and name.endswith("__")):
                continue
            seen.add(name)
            names.append((name, Label.of(FIELD, name)))
        plan.append((index, keys, tuple(names)))
    return tuple(plan)


def instance_class(t: type) -> Iterator[tuple[Label, Any]]:
    """The class of an instance of `t`, as a part of the instance, when the class
    may hold data (`user_class`)."""
    if user_class(t):
        yield Label.of(CLASS), t


def aux_parts(treedef: Any) -> Iterator[tuple[Label, Any]]:
    """The static (aux) data of a pytree node flattened one level (`treedef` its
    treedef), when it could hold a tracer: a `jax.tree_util.Partial`'s function,
    an equinox `static=True` or flax `pytree_node=False` field."""
    if has_aux(treedef):
        node = treedef.node_data()
        if node is not None:
            yield Label.of(STATIC), node[1]


class Holder:
    """A callable type defined elsewhere in lift and walked as a node of a closure
    graph, like a partial: `lift.jit` functions, so that a captured helper's own
    captures are watched and a `lift.jit` closure can call itself.

    - `static(obj)`: the part compared as a static value (held by identity).
    - `parts(obj)`: its parts, as `(Label, value)`.
    - `rebuild(static, values)`: a new holder from the static part and the parts'
      values, in order.
    """

    __slots__ = ("cls", "name", "parts", "rebuild", "static")

    def __init__(
        self,
        cls: type,
        name: str,
        static: Callable[[Any], Any],
        parts: Callable[[Any], Iterator[tuple[Label, Any]]],
        rebuild: Callable[[Any, list[Any]], Any],
    ) -> None:
        self.cls = cls
        self.name = name
        self.static = static
        self.parts = parts
        self.rebuild = rebuild


def register_holder(holder: Holder) -> None:
    jtu.HOLDERS[holder.cls] = holder


def holder_of(obj: Any) -> Holder | None:
    return jtu.HOLDERS.get(type(obj))  # pyright: ignore[reportUnknownArgumentType]


# Types whose instances stand for a function they rebuild from their leaves:
# `lift.Lifted` and each subclass, registered as the class is made. The leak scan
# opens one as the function it rebuilds (and names it in a report).
_FUNCTION_OF: dict[type, Callable[[Any], Any]] = {}


def register_function_of(cls: type, function_of: Callable[[Any], Any]) -> None:
    _FUNCTION_OF[cls] = function_of


def function_of(obj: Any) -> Callable[[Any], Any] | None:
    """How to rebuild the function `obj` stands for, if it is a `Lifted`."""
    return _FUNCTION_OF.get(type(obj))  # pyright: ignore[reportUnknownArgumentType]


def slot_names(cls: type) -> tuple[str, ...]:
    """Every slot an instance of `cls` may hold, along the MRO: the member
    descriptors `__slots__` made, whatever form it was given in (a string, a
    tuple, an iterator since consumed), names mangled as Python mangles them."""
    names: list[str] = []
    for klass in cls.__mro__:
        for name, member in vars(klass).items():
            if type(member) is types.MemberDescriptorType:
                names.append(name)
    return tuple(dict.fromkeys(names))


def object_parts(obj: Any, slots: tuple[str, ...]) -> Iterator[tuple[Label, Any]]:
    """An object's `__dict__` entries and set slots (`slots` from `slot_names`)."""
    attrs = getattr(obj, "__dict__", None)
    if type(attrs) is dict:
        for name, value in list(attrs.items()):  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
            yield Label.of(FIELD, name), value  # pyright: ignore[reportUnknownArgumentType]
    for name in slots:
        try:
            value = getattr(obj, name)
        except Exception:  # an unset slot, or a descriptor that raises
            continue
        yield Label.of(FIELD, name), value


def code_of(obj: Any) -> types.CodeType | None:
    """The code a callable runs: through bound methods, partials, `Lifted` and
    `lift.jit` functions (their `__wrapped__`), a bounded number of steps."""
    for _ in range(100):
        t: type[Any] = type(obj)  # pyright: ignore[reportUnknownVariableType]
        if t is types.FunctionType:
            return obj.__code__
        if t is types.MethodType:
            obj = obj.__func__
        elif issubclass(t, functools.partial):
            obj = obj.func
        else:
            try:
                code = getattr(obj, "__code__", None)
                if isinstance(code, types.CodeType):
                    return code
                wrapped = getattr(obj, "__wrapped__", None)
            except Exception:  # a proxy whose attributes fail
                return None
            if wrapped is None or wrapped is obj:
                return None
            obj = wrapped
    return None


# -- static equality ---------------------------------------------------------------

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


# -- what no pytree reaches ----------------------------------------------------------

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
            if type(child) in _ATOMS or id(child) in seen:  # pyright: ignore[reportUnknownArgumentType]
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
    if "CustomNode" not in str(treedef):
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


_PLAIN_TREEDEFS: dict[Any, None] = {}  # treedefs `has_aux` said no to (bounded)


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
        if len(_PLAIN_TREEDEFS) >= 1024:
            _PLAIN_TREEDEFS.clear()
        _PLAIN_TREEDEFS[treedef] = None
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
    slots = _slots.get(t)
    if slots is None:
        slots = _slots[t] = slot_names(t)
    # `object_parts`, labels spelled only when a path is reported (an object
    # may have many attributes), and without what holds nothing.
    attrs = getattr(x, "__dict__", None)
    atoms = _ATOMS
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


_slots: weakref.WeakKeyDictionary[type, tuple[str, ...]] = weakref.WeakKeyDictionary()
# The frame attribute of each kind of suspended function.
SUSPENDED_FRAMES: Final[dict[type, str]] = {
    types.GeneratorType: "gi_frame",
    types.CoroutineType: "cr_frame",
    types.AsyncGeneratorType: "ag_frame",
}


def suspended_locals(x: Any) -> list[tuple[str, Any]]:
    """The local variables of a suspended generator or coroutine (none once it
    has finished)."""
    frame = getattr(x, SUSPENDED_FRAMES[type(x)], None)
    if frame is None:
        return []
    snapshot = frame.f_locals
    items = list(snapshot.items())
    if sys.version_info < (3, 13) and sys.getrefcount(snapshot) <= _ONLY_THE_FRAME:
        # Before 3.13 the snapshot stays on the frame and would keep values the
        # generator later drops alive: emptied, when the frame alone holds it
        # (the next reader rebuilds it). One the generator holds itself (`ns =
        # locals()` is that very dict) is its own data, and left as it is.
        snapshot.clear()
    return items


# A frame's `f_locals` snapshot held by the frame alone: the frame, the local
# name, `getrefcount`'s argument.
_ONLY_THE_FRAME: Final = 3


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


# -- decisions the full walk and the replay share -----------------------------------
#
# Each states one decision of the walk; the replay's generator reads the same
# function (at compile time, or in the code it emits), so the two cannot drift.

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
