"""What a closure holds: the one description of a callable's parts.

A function holds cells, defaults, keyword-only defaults and attributes. Its
attributes are its `__dict__`: values you set, and `__wrapped__` from
`functools.wraps`. A `functools.partial` holds `func`, `args` and
`keywords`. A bound method holds `__func__` and `__self__`. A plain object
holds its `__dict__` and `__slots__` (`lift._holders.attributes`). This
module is the only place that says so. Capture, `lift.jit`'s watch, rebuild,
key paths, `repr`, `captures`, `diff` and the leak scan read these parts
through `Label`s. A new kind of holder is one edit here, or in
`lift._holders.stdlib` for the standard library's holders.

It also says which classes are yours: their attributes are read, and their
methods' closures followed. `Holder` says how a partial, a bound method or a
`lift.jit` function is rebuilt; `function_of`, a `Lifted`. The parts' names
are `lift._holders.labels`; the static rule is `lift._rule.static`.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import operator
import types
from collections.abc import Callable, Iterable, Iterator
from itertools import chain
from typing import Any, Final, cast

from .._base.atoms import SCALARS
from .._base.caches import BoundedDict, per_class
from .._base.owners import is_user_module
from .._compat import has_custom_nodes
from . import trees as jtu
from .labels import (
    ARG,
    ATTR,
    CELL,
    CLASS,
    DEFAULT,
    FIELD,
    FUNC,
    KEYWORD,
    KWDEFAULT,
    METHOD_FUNC,
    SELF,
    STATIC,
    Label,
)
from .reach import reach

# -- the parts of each holder ------------------------------------------------------


def function_held(fn: types.FunctionType) -> tuple[Any, ...]:
    """What a function holds besides its cells, read once.

    Its code, defaults and keyword-only defaults (`None` and empty differ).
    Then its parts: defaults, keyword-only defaults and attributes, labelled.
    Compared by identity with a later reading, it says whether the function
    changed (`lift.jit` watches it)."""
    code, defaults, kwdefaults = held = fn.__code__, fn.__defaults__, fn.__kwdefaults__
    attrs = fn.__dict__
    if not (defaults or kwdefaults or attrs):
        return held
    parts: list[Any] = [*held]
    if defaults:
        parts += zip(_default_labels(code, len(defaults)), defaults, strict=True)
    if kwdefaults:
        parts += [(Label.of(KWDEFAULT, k), v) for k, v in kwdefaults.items()]
    if attrs:
        parts += [(Label.of(ATTR, k), v) for k, v in list(attrs.items())]
    return tuple(parts)


# The labels of a code's defaults, by `id(code)` and count (the code kept beside).
_DEFAULT_LABELS: BoundedDict[tuple[int, int], tuple[Any, tuple[Label, ...]]] = (
    BoundedDict(512)
)
# The labels of a code's cells.
_CELL_LABELS: BoundedDict[types.CodeType, tuple[Label, ...]] = BoundedDict(512)


def _default_labels(code: types.CodeType, count: int) -> tuple[Label, ...]:
    """The labels of `count` positional defaults, named by their parameters.

    `co_argcount` already counts positional-only parameters. Defaults assigned
    beyond the parameters (`f.__defaults__ = ...` by hand) are named by index.
    """
    key = (id(code), count)
    found = _DEFAULT_LABELS.get(key)
    if found is None or found[0] is not code:
        n = code.co_argcount
        names = code.co_varnames[max(n - count, 0) : n]
        names += tuple(f"__defaults__[{i}]" for i in range(len(names), count))
        labels = tuple(Label.of(DEFAULT, i, name) for i, name in enumerate(names))
        _DEFAULT_LABELS.pop(key, None)  # a code that died, its id reused
        found = _DEFAULT_LABELS.add(key, (code, labels))
    return found[1]


def cells(
    fn: types.FunctionType, labels: tuple[Label, ...]
) -> Iterable[tuple[Label, types.CellType]]:
    """A function's closure cells, each labelled by its free variable.

    `labels` are the code's cell labels, which each caller keeps per code."""
    return zip(labels, fn.__closure__ or (), strict=True)


def labelled(fn: types.FunctionType) -> Iterable[tuple[Label, Any]]:
    """A function's parts: its cells, each labelled by its free variable,
    then the labelled parts of `function_held`."""
    closure, code = fn.__closure__, fn.__code__
    labels = _CELL_LABELS.get(code) if closure else ()
    if labels is None:
        labels = tuple(Label.of(CELL, name) for name in code.co_freevars)
        labels = _CELL_LABELS.add(code, labels)
    cells = zip(labels, closure or (), strict=True)
    if fn.__defaults__ or fn.__kwdefaults__ or fn.__dict__:
        return [*cells, *function_held(fn)[3:]]
    return cells


def set_function_parts(
    fn: types.FunctionType, parts: Iterable[tuple[Label, Any]], has: tuple[bool, bool]
) -> None:
    """Give a rebuilt function the parts `function_held` read from another."""
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
    # As `copy` makes one: the class's own `__new__` and `__init__` (a
    # subclass's may take other arguments) are not run again.
    p = functools.partial.__new__(cls, func, *args, **keywords)
    for name, value in attrs.items():
        object.__setattr__(p, name, value)  # its `__dict__` or a slot
    return p


def call_parts(
    func: Any, args: Iterable[Any], keywords: dict[str, Any]
) -> Iterator[tuple[Label, Any]]:
    """A call's parts: its function, arguments and keywords (a partial's, a
    finalizer's)."""
    yield Label.of(FUNC), func
    for i, value in enumerate(args):
        yield Label.of(ARG, i), value
    for name, value in keywords.items():
        yield Label.of(KEYWORD, name), value


def partial_parts(p: functools.partial[Any]) -> Iterator[tuple[Label, Any]]:
    """A partial's function, arguments, keywords and attributes.

    The attributes are its `__dict__` and a subclass's slots
    (`functools.update_wrapper` sets `__wrapped__`, `__name__`, ...)."""
    yield from call_parts(p.func, p.args, p.keywords)
    attrs: dict[str, Any] = getattr(p, "__dict__", None) or {}
    yield from [(Label.of(ATTR, name), value) for name, value in list(attrs.items())]
    cls = type(p)
    for name in () if cls is functools.partial else slots_of(cls):
        value = getattr(p, name, _UNSET)  # a member descriptor, in C
        if value is not _UNSET and name not in _PARTIAL_MEMBERS:
            yield Label.of(FIELD, name), value


# `functools.partial`'s own members, read as its function, args and keywords.
_PARTIAL_MEMBERS: Final = frozenset(vars(functools.partial))
_UNSET: Final = object()


def method_parts(m: types.MethodType) -> Iterator[tuple[Label, Any]]:
    yield Label.of(METHOD_FUNC), m.__func__
    yield Label.of(SELF), m.__self__


# -- classes: the user's, and what an instance reads from its class --------------


@per_class
def user_class(cls: type) -> bool:
    """Whether `cls` is yours: defined outside JAX, NumPy, pytest, lift and the
    standard library (`lift._base.owners`).

    Its attributes may hold your values. A library's class attributes are not
    walked, though an instance's own attributes may be."""
    module = getattr(cls, "__module__", None)
    return type(module) is str and is_user_module(module)


# Class attributes that hold nothing of the user's: CPython's descriptors for
# slots and builtin methods. (A user's methods and properties are parts.)
_METHODS: Final = (
    types.MethodDescriptorType,
    types.WrapperDescriptorType,
    types.MemberDescriptorType,
    types.GetSetDescriptorType,
)


def class_parts(cls: type) -> list[tuple[Label, Any]]:
    """What your class holds, along the user classes of its MRO.

    Its data (`registry = []`) and its methods, static and class methods and
    properties, whose closures and defaults may hold values. Not dunder names,
    nor a name an earlier class in the MRO defines. Nothing for a library's
    class. Read anew at every scan: a class may gain, lose or replace one."""
    attrs: dict[str, Any] = {}
    for klass in filter(user_class, cls.__mro__):
        for name, value in list(vars(klass).items()):
            attrs.setdefault(name, value)
    return [
        (Label.of(FIELD, name), value)
        for name, value in attrs.items()
        if not (name.startswith("__") and name.endswith("__"))
        and not isinstance(value, _METHODS)
    ]


def instance_class(t: type) -> Iterator[tuple[Label, Any]]:
    """The class of an instance of `t`, as a part, when it may hold data."""
    if user_class(t):
        yield Label.of(CLASS), t


@dataclasses.dataclass(eq=False, slots=True)
class Holder:
    """A callable that holds a function, walked as a node of a closure graph.

    A `functools.partial` (`PARTIAL`), a bound method (`METHOD`), and types
    registered elsewhere in lift (`register_holder`). A `lift.jit` function is
    one: a captured helper's captures are watched, and a `lift.jit` closure can
    call itself.

    - `static(obj)`: the part compared as a static value.
    - `parts(obj)`: its parts, as `(Label, value)`, its function first.
    - `rebuild(static, parts)`: a new holder from the static part and the
      parts, in order.
    """

    cls: type
    name: str
    static: Callable[[Any], Any]
    parts: Callable[[Any], Iterator[tuple[Label, Any]]]
    rebuild: Callable[[Any, list[tuple[Label, Any]]], Any]


# A partial's class is its static part (a subclass that is not a pytree too).
PARTIAL: Final = Holder(
    functools.partial, "functools.partial", type, partial_parts, make_partial
)
METHOD: Final = Holder(
    types.MethodType,
    "bound method",
    lambda _: None,
    method_parts,
    lambda _, parts: types.MethodType(parts[0][1], parts[1][1]),
)


def register_holder(holder: Holder) -> None:
    jtu.HOLDERS[holder.cls] = holder


register_holder(PARTIAL)
register_holder(METHOD)


def holder_of(obj: Any) -> Holder | None:
    """The holder `obj` is, if it is a callable holding a function.

    A bound method, a `functools.partial` (a subclass too), a `lift.jit`
    function. This is the one dispatch of the closure graph's holders. Capture
    walks them as nodes; the leak scan opens them. A partial that is a pytree
    (`jax.tree_util.Partial`) is walked as a pytree (`is_function_like`)."""
    t: type[Any] = type(obj)  # pyright: ignore[reportUnknownVariableType]
    holder = jtu.HOLDERS.get(t)
    if holder is None and issubclass(t, functools.partial):
        return PARTIAL
    return holder


# Types whose instances stand for a function they rebuild from their leaves
# (`lift.Lifted`): the leak scan opens one as that function.
_FUNCTION_OF: dict[type, Callable[[Any], Any]] = {}


def register_function_of(cls: type, function_of: Callable[[Any], Any]) -> None:
    _FUNCTION_OF[cls] = function_of


def function_of(obj: Any) -> Callable[[Any], Any] | None:
    """How to rebuild the function `obj` stands for, if it is a `Lifted`."""
    return _FUNCTION_OF.get(type(obj))  # pyright: ignore[reportUnknownArgumentType]


@per_class
def slots_of(cls: type) -> tuple[str, ...]:
    """Every slot an instance of `cls` may hold, along the MRO (once per class).

    These are the member descriptors `__slots__` made, whatever form it took: a
    string, a tuple, an iterator since consumed. Names are mangled as Python
    mangles them."""
    members = (m for klass in cls.__mro__ for m in vars(klass).items())
    slots = (name for name, m in members if type(m) is types.MemberDescriptorType)
    return tuple(dict.fromkeys(slots))


# -- the static (aux) data of a pytree node -----------------------------------------


# The dict nodes: JAX keeps their keys (and a defaultdict's `default_factory`)
# in the treedef, as static data.
_DICT_NODES: Final = frozenset({dict, collections.OrderedDict, collections.defaultdict})
_BUILTIN_NODES: Final = _DICT_NODES | {tuple, list, type(None)}


def dict_static(d: dict[Any, Any]) -> list[tuple[Any, Any]]:
    """What a dict holds besides its values: JAX keeps it in the treedef.

    A defaultdict's `default_factory`, and the keys that may hold an object (not
    `None`, numbers, strings or tuples of them), labelled by position
    (`.keys()[0]`). This is the one statement of it. The leak scan opens a dict
    by it; capture checks a treedef's dict nodes by it (`static_data`). The
    common dict costs an empty list."""
    return _dict_parts(default_factory(d), cast("Iterable[Any]", d))


def default_factory(d: dict[Any, Any]) -> Any:
    """A defaultdict's `default_factory`, or `None` for any other dict.

    JAX keeps it in the treedef, and code may set it. This is the one reading
    of it. Capture walks a function-like factory as a node
    (`lift._capture.factories`). The copy check compares it; the leak scan
    opens it (`dict_static`)."""
    return d.default_factory if isinstance(d, collections.defaultdict) else None


def _dict_parts(factory: Any, keys: Iterable[Any]) -> list[tuple[Any, Any]]:
    out: list[tuple[Any, Any]] = []
    if factory is not None and not (type(factory) is type and not user_class(factory)):
        out.append((FACTORY, factory))
    kinds = set(map(type, keys))
    if kinds == _TUPLE and _PLAIN_KEYS.issuperset(map(type, chain.from_iterable(keys))):
        return out  # tuples of scalars (a cache's `(name, size)` keys), in one pass
    if not _PLAIN_KEYS.issuperset(kinds):
        out.extend(
            ((_KEY_AT, i), key)
            for i, key in enumerate(keys)
            if type(key) not in _PLAIN_KEYS
            # not a tuple of scalars, which holds no object
            and not (type(key) is tuple and _PLAIN_KEYS.issuperset(map(type, key)))  # pyright: ignore
        )
    return out


FACTORY: Final = ".default_factory"
_KEY_AT: Final = ".keys()[{}]"
# Keys that hold no object.
_PLAIN_KEYS: Final = SCALARS
_TUPLE: Final = {tuple}


def _node_static(kind: Any, aux: Any) -> Iterator[tuple[Any, Any]]:
    """The static data of one treedef node that may hold your objects.

    `kind` and `aux` are its `node_data()`. A dict node gives `dict_static`'s
    parts, read from the node. A custom node gives its aux data, labelled `""`."""
    if kind in _DICT_NODES:
        factory, keys = aux if kind is collections.defaultdict else (None, aux)
        yield from _dict_parts(factory, keys)
    elif kind not in _BUILTIN_NODES and not _plain_aux(aux):
        yield "", aux


def _plain_aux(aux: Any) -> bool:
    """Whether static data cannot hold a tracer.

    A NamedTuple's `None` and field names cannot. Nor can what lift vetted when
    it made it (a closure-converted program)."""
    t: type[Any] = type(aux)  # pyright: ignore[reportUnknownVariableType]
    if aux is None or t in (str, int, type) or getattr(t, "vetted", False) is True:
        return True
    return t is tuple and all(type(a) in (str, int, type(None)) for a in aux)


def custom_data(treedef: Any) -> list[tuple[Any, Any]]:
    """`(node type, static data)` of each custom node of `treedef`, in order."""
    nodes = _nodes(treedef) if has_custom_nodes(treedef) else ()
    return [node for node in nodes if node[0] not in _BUILTIN_NODES]


def static_data(treedef: Any) -> Iterator[tuple[Any, Any, Any]]:
    """`(node type, where, static data)` of what in `treedef` may hold a tracer.

    Custom nodes' static data (`where` empty), dicts' keys and defaultdicts'
    factories (`where` a label of `dict_static`'s)."""
    for kind, aux in _nodes(treedef):
        for where, data in _node_static(kind, aux):
            yield kind, where, data


def _nodes(treedef: Any) -> Iterator[tuple[Any, Any]]:
    """The `node_data()` of each node of `treedef` but its leaves."""
    return filter(None, (td.node_data() for td in reach([treedef], _CHILDREN)))


_CHILDREN: Final = operator.methodcaller("children")


def aux_parts(treedef: Any) -> Iterator[tuple[Label, Any]]:
    """The static (aux) data of a node flattened one level, when it may hold a tracer.

    `treedef` is its treedef. Examples: a `jax.tree_util.Partial`'s function,
    an equinox `static=True` field, a flax `pytree_node=False` field. It may
    hold one when `static_data` gives anything."""
    if next(static_data(treedef), None) is not None:
        node = treedef.node_data()
        if node is not None:
            yield Label.of(STATIC), node[1]
