"""`jax.tree_util`, typed once for the type checker, and what lift flattens with.

JAX's own annotations leave parts unknown: `PyTreeDef` is a runtime alias of
a C++ class. Strict type checking of `lift/` needs them precise.
`is_function_like` is the `is_leaf` of every capture: functions become nodes
of their own. `is_cyclic` guards JAX's recursive flattening.
"""

from __future__ import annotations

import collections
import collections.abc
import functools
import types
import weakref
from collections.abc import Callable, Iterable
from typing import Any, Final, TypeAlias, cast

import jax.tree_util as _jtu

from .. import _compat
from .._base.atoms import SCALARS
from . import trees as jtu
from .reach import containers, items, reach

TreeDef: TypeAlias = Any

tree_flatten = cast("Callable[..., tuple[list[Any], TreeDef]]", _jtu.tree_flatten)  # pyright: ignore[reportUnknownMemberType]
tree_flatten_with_path = cast(
    "Callable[..., tuple[list[tuple[tuple[Any, ...], Any]], TreeDef]]",
    _jtu.tree_flatten_with_path,  # pyright: ignore[reportUnknownMemberType]
)
tree_leaves = cast("Callable[..., list[Any]]", _jtu.tree_leaves)  # pyright: ignore[reportUnknownMemberType]
tree_map = cast("Callable[..., Any]", _jtu.tree_map)  # pyright: ignore[reportUnknownMemberType]
tree_structure = cast("Callable[..., TreeDef]", _jtu.tree_structure)  # pyright: ignore[reportUnknownMemberType]
treedef_is_leaf = cast("Callable[[TreeDef], bool]", _jtu.treedef_is_leaf)  # pyright: ignore[reportUnknownMemberType]
keystr = cast("Callable[..., str]", _jtu.keystr)  # pyright: ignore[reportUnknownMemberType]
register_pytree_with_keys = cast("Callable[..., None]", _jtu.register_pytree_with_keys)  # pyright: ignore[reportUnknownMemberType]
GetAttrKey = cast("Callable[[str], Any]", _jtu.GetAttrKey)
DictKey = cast("Callable[[Any], Any]", _jtu.DictKey)
SequenceKey = cast("Callable[[int], Any]", _jtu.SequenceKey)
FlattenedIndexKey = cast("Callable[[int], Any]", _jtu.FlattenedIndexKey)


def one_level(x: Any) -> Callable[[Any], bool]:
    """`is_leaf` that flattens `x` one level.

    `x` itself is flattened, once; everything under it is a leaf, `x` again too.
    A node that holds itself needs this: `y is not x` alone recurses without end
    in C++. That is a `RecursionError` on Python 3.11 and 3.12, and a broken
    interpreter on 3.13."""
    first = True

    def is_leaf(y: Any) -> bool:
        nonlocal first
        if first and y is x:
            first = False
            return False
        return True

    return is_leaf


def unflatten(treedef: TreeDef, leaves: Iterable[Any]) -> Any:
    """`treedef.unflatten(leaves)`."""
    return treedef.unflatten(leaves)


# Per subclass of `functools.partial` (the class itself is in `HOLDERS`).
# Weak: a subclass may be made at run time and dropped.
_partial_is_leaf: weakref.WeakKeyDictionary[type, bool] = weakref.WeakKeyDictionary()


# The callables walked as nodes of a closure graph besides functions, by type:
# bound methods, `functools.partial`, `lift.jit` functions (see
# `lift._holders.closure.holder_of`).
HOLDERS: dict[type, Any] = {}


def is_function_like(x: Any) -> bool:
    """A function, bound method, `functools.partial` that is not a pytree, or a
    registered holder (a `lift.jit` function)."""
    t: type[Any] = type(x)  # pyright: ignore[reportUnknownVariableType]
    if t is types.FunctionType or t in HOLDERS:
        return True
    # By the real type: `isinstance` would believe a `__class__` that lies (a mock).
    if issubclass(t, functools.partial):
        leaf = _partial_is_leaf.get(t)  # pyright: ignore[reportUnknownArgumentType]
        if leaf is None:
            # `jax.tree_util.Partial` and other registered subclasses are pytrees.
            leaf = _partial_is_leaf[t] = treedef_is_leaf(tree_structure(x))
        return leaf
    return False


# Stateful iterables: static by identity (flattening one would warn, and
# iterating it would consume it).
ITERATORS: Final = (
    collections.abc.Iterator,
    collections.abc.AsyncIterator,
    collections.abc.Coroutine,
)

MAX_CONTAINER_DEPTH: Final = 400
_CONTAINERS: Final = (list, tuple, dict)


def is_cyclic(value: Any) -> bool:
    """Whether lists, tuples and dicts nested in `value` contain themselves.

    Nesting deeper than `MAX_CONTAINER_DEPTH` counts too. JAX's C++ flattening
    recurses: on a cyclic value it never returns. Deep values exhaust the
    interpreter's recursion budget (jax 0.10.2 then leaves a `SystemError`
    behind). So the value is checked first, by `reach`: each container's items
    come before the mark that it is left.
    """
    if not issubclass(type(value), _CONTAINERS):  # pyright: ignore[reportUnknownArgumentType]
        return False
    open_ids: set[int] = set()  # the containers on the path to where the walk is

    def into(x: Any) -> list[Any] | None:
        if type(x) is int:  # the mark that the walk left a container: `~id`
            return None
        open_ids.add(id(x))
        inside = x.values() if isinstance(x, dict) else x  # pyright: ignore
        return [~id(x), *(c for c in inside if isinstance(c, _CONTAINERS))]  # pyright: ignore

    for x in reach([value], into):
        if type(x) is int:
            open_ids.discard(~x)
        elif id(x) in open_ids or len(open_ids) >= MAX_CONTAINER_DEPTH:
            return True
    return False


# Dict types JAX flattens in sorted key order (`OrderedDict` keeps its own).
_SORTED_DICTS: Final = (dict, collections.defaultdict)


def _loose_dict(d: dict[Any, Any]) -> bool:
    """Whether JAX's flattening of `d` loses its order or compares keys by `==`.

    It does for keys that are not all strings. It does for keys out of sorted
    order, in the dict types JAX sorts."""
    keys = list(d)
    if not all(type(k) is str for k in keys):
        return True
    return type(d) in _SORTED_DICTS and keys != sorted(keys)


def irregular(value: Any) -> bool:
    """Whether `value` is cyclic or holds a dict JAX's flattening would not keep.

    Such a dict is in `value`'s lists, tuples and dicts, and its order or keys
    are lost (`_loose_dict`). These values are captured with their order and keys
    recorded (`ordered`)."""
    t: type[Any] = type(value)  # pyright: ignore[reportUnknownVariableType]
    if t is tuple or t is list or issubclass(t, (tuple, list)):
        # The common case, a flat tuple (of functions), costs one pass (a loop:
        # `any` over a generator costs a fresh lift 1 %).
        for child in value:
            if isinstance(child, _CONTAINERS):
                break
        else:
            return False
    elif not issubclass(t, _CONTAINERS):
        return False
    if is_cyclic(value):
        return True
    into = containers(*_CONTAINERS)
    return any(isinstance(x, dict) and _loose_dict(x) for x in reach([value], into))  # pyright: ignore[reportUnknownArgumentType]


def ordered(
    value: Any, treedef: TreeDef, key: Callable[[Any], Any]
) -> tuple[TreeDef, tuple[int, ...], tuple[Any, ...]]:
    """How to keep the dicts' order in a value that `irregular` flags.

    The value is not cyclic. Returns a treedef that rebuilds every dict in
    `value`'s lists, tuples and dicts in its insertion order. With it come the
    permutation from `treedef`'s leaf order to its own, and every such dict's
    keys as `key(k)` (by type and value)."""
    counter = iter(range(treedef.num_leaves))
    keys: list[Any] = []

    def walk(x: Any, td: TreeDef) -> tuple[TreeDef, list[int]]:
        # Depth is bounded: `irregular` refused values nested deeper than
        # MAX_CONTAINER_DEPTH.
        node: Any = td.node_data()
        t: type[Any] = type(x)  # pyright: ignore[reportUnknownVariableType]
        if node is None or not issubclass(t, _CONTAINERS) or node[0] is not t:
            return td, [next(counter) for _ in range(td.num_leaves)]
        children = td.children()
        if isinstance(x, dict):
            # dict: (dict, sorted keys); defaultdict: (defaultdict, (factory,
            # sorted keys)); OrderedDict: (OrderedDict, keys in order).
            aux = node[1]
            canonical = list(aux[1] if t is collections.defaultdict else aux)
            mapping = cast("dict[Any, Any]", x)
            done = [
                walk(mapping[k], c) for k, c in zip(canonical, children, strict=True)
            ]
            order: list[Any] = list(mapping)
            keys.extend(key(k) for k in order)
            where = {id(k): i for i, k in enumerate(canonical)}
            picked = [
                done[where[id(k)]] if id(k) in where else done[canonical.index(k)]
                for k in order
            ]
            aux = (aux[0], order) if t is collections.defaultdict else order
            node = (t, aux)
        else:
            picked = [walk(v, c) for v, c in zip(items(x) or (), children, strict=True)]
        new = from_node(node, [p[0] for p in picked])
        return new, [i for p in picked for i in p[1]]

    new, perm = walk(value, treedef)
    return new, tuple(perm), tuple(keys)


def from_node(node: Any, children: list[TreeDef]) -> TreeDef:
    """A treedef from one node's data and its children's treedefs."""
    registry: Any = _jtu.default_registry  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    return _jtu.PyTreeDef.from_node_data_and_children(registry, node, children)  # pyright: ignore


_NODE_TYPES: Final = frozenset(
    {list, tuple, dict, collections.OrderedDict, collections.defaultdict}
)
# Types never pytree nodes (the scalars, and functions: leaves to JAX): nothing
# below them to cycle through.
_ATOMS: Final = SCALARS | {types.FunctionType}
# How often one node may be met in one flatten before it is taken for a cycle. A
# cycle through a registered pytree node (which `is_cyclic` cannot follow) meets
# each of its nodes once per turn; JAX's recursion would otherwise run out of
# interpreter stack and leave the interpreter broken (jax 0.10.2).
_MAX_VISITS: Final = 64


# Every type registered with `jax.tree_util`.
_CUSTOM_NODES: Final = _compat.CUSTOM_NODES


_tuple_iter: Final = cast("Callable[[Any], Iterable[Any]]", tuple.__iter__)  # pyright: ignore[reportUnknownMemberType]


def _is_namedtuple(t: type[Any]) -> bool:
    return issubclass(t, tuple) and hasattr(cast(Any, t), "_fields")


def read_as_tuple(t: type[Any]) -> bool:
    """Whether JAX's flattening reads a value of type `t` as a tuple or list.

    Tuples, lists, and NamedTuples not registered as nodes of their own (those
    flatten as they like)."""
    return t is tuple or t is list or (_is_namedtuple(t) and t not in _CUSTOM_NODES)


def _check_keys(value: Any) -> None:
    """A `ValueError` for a dict in `value` whose keys do not sort.

    Raised before JAX's flattening runs: an exception inside its recursion
    leaves the interpreter's depth counted up (jax 0.10.2). The walk goes
    through lists, tuples, dicts and registered nodes. A function-like is a
    leaf: a `lift.jit` function in a registry it reads."""

    def into(x: Any) -> Iterable[Any] | None:
        # By the real type: `isinstance` reads `__class__`, which may raise.
        t: type[Any] = type(x)  # pyright: ignore[reportUnknownVariableType]
        if x is not value and is_function_like(x):
            return None
        if issubclass(t, dict):
            if t is not collections.OrderedDict:
                try:
                    sorted(x)  # pyright: ignore[reportUnknownArgumentType]
                except Exception as err:
                    raise ValueError(
                        f"dict keys {list(x)!r:.80} cannot be sorted ({err})"  # pyright: ignore[reportUnknownArgumentType]
                    ) from None
            return dict.values(x)  # pyright: ignore[reportUnknownArgumentType, reportUnknownMemberType, reportUnknownVariableType]
        if t in _CUSTOM_NODES:
            return tree_flatten(x, is_leaf=one_level(x))[0]
        return items(x) if issubclass(t, (list, tuple)) else None

    collections.deque(reach([value], into), maxlen=0)  # the walk, for its checks


def flatten_checked(
    value: Any, is_leaf: Callable[[Any], bool]
) -> tuple[list[Any], TreeDef] | None:
    """`tree_flatten(value, is_leaf=is_leaf)`, or `None` when JAX cannot.

    JAX's flattening cannot take a value that contains itself or nests too
    deeply."""
    t: type[Any] = type(value)  # pyright: ignore[reportUnknownVariableType]
    if t in _ATOMS:
        return tree_flatten(value, is_leaf=is_leaf)
    if read_as_tuple(t):
        # The common case (an optimizer's `init` and `update`): items that are
        # leaves for `is_leaf` or atoms, so nothing below them to cycle through
        # (a NamedTuple registered as a node of its own flattens as it likes:
        # guarded below).
        # By `tuple`'s own iteration, as JAX reads a NamedTuple's items.
        children: Iterable[Any] = value if t is list else _tuple_iter(value)
        for child in children:
            if type(child) not in _ATOMS and not is_leaf(child):
                break
        else:
            return tree_flatten(value, is_leaf=is_leaf)
    if is_cyclic(value):
        return None
    _check_keys(value)
    visits: dict[int, int] = {}
    cut: list[bool] = []

    def guarded(x: Any) -> bool:
        if is_leaf(x):
            return True
        t: type[Any] = type(x)  # pyright: ignore[reportUnknownVariableType]
        # Only a pytree node can close a cycle: a leaf met many times (one
        # array in a list a hundred times) is sharing, not a cycle.
        if t in _NODE_TYPES or t in _CUSTOM_NODES or _is_namedtuple(t):
            n = visits.get(id(x), 0) + 1
            if n > _MAX_VISITS:
                # Cut here, as a leaf, rather than raise: an exception raised
                # inside JAX's recursive flattening leaves the interpreter's
                # recursion depth counted up by the frames it unwinds (jax
                # 0.10.2), until a later call fails with `RecursionError`.
                cut.append(True)
                return True
            visits[id(x)] = n
        return False

    try:
        flat = tree_flatten(value, is_leaf=guarded)
    except RecursionError:
        return None
    return None if cut else flat


# Small: a treedef's hash leaves out dict keys (jax 0.8 to 0.12), so treedefs
# of dicts that differ only in their keys share one hash, and a lookup compares
# the new one with each of them (at 4 096 such entries, 1.5 ms a lookup).
@functools.lru_cache(maxsize=256)
def treedef_paths(treedef: jtu.TreeDef) -> tuple[tuple[Any, ...], ...]:
    """The key paths of `treedef`'s leaves, as `tree_flatten_with_path` gives them.

    They are read from a tree of that structure, rebuilt around placeholders. A
    node's class may refuse placeholders (an `__init__` that checks its
    children). Then its children are keyed by position (`FlattenedIndexKey`), as
    JAX keys a node registered without keys. A `jax.jit` of a `Lifted` holding
    one flattens it with keys."""
    try:
        dummy = treedef.unflatten([_Marker()] * treedef.num_leaves)
    except Exception:  # the class's own check, whatever it raises
        return tuple(
            (FlattenedIndexKey(i), *path)
            for i, child in enumerate(treedef.children())
            for path in treedef_paths(child)
        )
    pairs, _ = jtu.tree_flatten_with_path(dummy, is_leaf=_is_marker)
    return tuple(tuple(p) for p, _ in pairs)


def slot_path(treedef: jtu.TreeDef | None, pos: int) -> str:
    """The text of leaf `pos`'s key path within `treedef` (`[0].w`), or `""`
    for a value that is one leaf (no treedef)."""
    return "" if treedef is None else "".join(map(str, treedef_paths(treedef)[pos]))


def _is_marker(x: object) -> bool:
    return isinstance(x, _Marker)


class _Marker:
    __slots__ = ()
