"""`jax.tree_util`, typed once for the type checker, and what lift flattens with.

JAX's own annotations of these leave parts unknown (`PyTreeDef` is a runtime
alias of a C++ class); strict type checking of `lift/` needs them precise.
`is_function_like` is the `is_leaf` of every capture (functions become nodes of
their own); `is_cyclic` guards JAX's recursive flattening.
"""

from __future__ import annotations

import collections.abc
import functools
import types
import weakref
from collections.abc import Callable, Iterable
from typing import Any, Final, TypeAlias, cast

import jax.tree_util as _jtu

__all__ = [
    "flatten_checked",
    "ITERATORS",
    "MAX_CONTAINER_DEPTH",
    "is_cyclic",
    "is_function_like",
    "DictKey",
    "GetAttrKey",
    "SequenceKey",
    "TreeDef",
    "keystr",
    "register_pytree_with_keys",
    "tree_flatten",
    "tree_flatten_with_path",
    "tree_leaves",
    "tree_map",
    "tree_structure",
    "treedef_is_leaf",
]

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


def unflatten(treedef: TreeDef, leaves: Iterable[Any]) -> Any:
    """`treedef.unflatten(leaves)`."""
    return treedef.unflatten(leaves)


# Weak: a `functools.partial` subclass may be made at run time and dropped.
_partial_is_leaf: weakref.WeakKeyDictionary[type, bool] = weakref.WeakKeyDictionary(
    {functools.partial: True}
)


def is_function_like(x: Any) -> bool:
    """A function, bound method, or `functools.partial` that is not a pytree."""
    t: type[Any] = type(x)  # pyright: ignore[reportUnknownVariableType]
    if t is types.FunctionType or t is types.MethodType:
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
    """Whether lists, tuples and dicts nested in `value` contain themselves or nest
    deeper than `MAX_CONTAINER_DEPTH`.

    JAX's C++ flattening recurses: on a cyclic value it never returns, and deep
    values exhaust the interpreter's recursion budget (jax 0.10.2 then leaves a
    `SystemError` behind). So the value is checked first, iteratively.
    """
    t: type[Any] = type(value)  # pyright: ignore[reportUnknownVariableType]
    if not issubclass(t, _CONTAINERS):
        return False
    # The common case, a flat container (a tuple of functions), costs one pass.
    for child in value.values() if issubclass(t, dict) else value:
        if issubclass(type(child), _CONTAINERS):  # pyright: ignore[reportUnknownArgumentType]
            break
    else:
        return False
    on_path: set[int] = set()
    done: set[int] = set()
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        x, depth = stack.pop()
        key = id(x)
        if depth < 0:  # leaving `x`
            on_path.discard(key)
            done.add(key)
            continue
        if key in on_path or depth > MAX_CONTAINER_DEPTH:
            return True
        if key in done:
            continue
        on_path.add(key)
        stack.append((x, -1))
        children = x.values() if isinstance(x, dict) else x  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
        for child in children:  # pyright: ignore[reportUnknownVariableType]
            if isinstance(child, (list, tuple, dict)):
                stack.append((cast(Any, child), depth + 1))
    return False


def flatten_checked(
    value: Any, is_leaf: Callable[[Any], bool]
) -> tuple[list[Any], TreeDef] | None:
    """`tree_flatten(value, is_leaf=is_leaf)`, or `None` for a value JAX's
    flattening cannot take (one that contains itself or nests too deeply)."""
    if is_cyclic(value):
        return None
    try:
        return tree_flatten(value, is_leaf=is_leaf)
    except RecursionError:
        return None
