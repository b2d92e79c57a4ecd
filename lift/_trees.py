"""`jax.tree_util`, typed once for the type checker.

JAX's own annotations of these leave parts unknown (`PyTreeDef` is a runtime
alias of a C++ class); strict type checking of `lift/` needs them precise.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeAlias, cast

import jax.tree_util as _jtu

__all__ = [
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
