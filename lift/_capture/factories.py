"""A defaultdict's default factory, captured as a part rather than static data.

JAX keeps a defaultdict's `default_factory` in the treedef, compared with `==`:
a factory made afresh with each closure (`defaultdict(lambda: 0.0)`) is a new
treedef each time, so a sweep over such closures compiled once per closure,
and what the factory captures stayed static. Capture instead flattens a
defaultdict whose factory is a function as a `Factored`: the factory a child
(a node of the graph, compared by its code, its captures leaves as any
function's), the values children, the keys static in insertion order (by type
and value: the template's `aux_key`). Its unflattening builds the very
defaultdict JAX would, so what the function holds is unchanged."""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable
from typing import Any, cast

from .._holders import trees as jtu
from .._holders.closure import FACTORY, default_factory, static_data
from .._holders.trees import DictKey, GetAttrKey, from_node, is_function_like

__all__ = ["Factored", "flatten_factored", "has_function_factory"]


class Factored:
    """A defaultdict whose `default_factory` is function-like, as capture
    flattens it. Unflattened with a factory, it is that defaultdict; with a
    placeholder in the factory's place (JAX's key paths, lift's repr), it
    stays a `Factored` standing for one."""

    __slots__ = ("factory", "items")

    def __init__(self, factory: Any, items: dict[Any, Any]) -> None:
        self.factory = factory
        self.items = items

    def __repr__(self) -> str:
        return f"defaultdict({self.factory!r}, {self.items!r})"


def _flatten(f: Factored) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    return (f.factory, *f.items.values()), tuple(f.items)


def _flatten_with_keys(
    f: Factored,
) -> tuple[tuple[tuple[Any, Any], ...], tuple[Any, ...]]:
    children = ((GetAttrKey("default_factory"), f.factory),)
    children += tuple((DictKey(k), v) for k, v in f.items.items())
    return children, tuple(f.items)


def _unflatten(keys: tuple[Any, ...], children: Iterable[Any]) -> Any:
    factory, *values = children
    items = dict(zip(keys, values, strict=True))
    if factory is None or callable(factory):
        return collections.defaultdict(factory, items)
    return Factored(factory, items)


jtu.register_pytree_with_keys(Factored, _flatten_with_keys, _unflatten, _flatten)


def _factored(x: Any) -> bool:
    return type(x) is collections.defaultdict and is_function_like(
        default_factory(cast("dict[Any, Any]", x))
    )


def has_function_factory(treedef: jtu.TreeDef) -> bool:
    """Whether `treedef` has a defaultdict node whose factory is function-like."""
    return any(
        where == FACTORY and is_function_like(data)
        for _, where, data in static_data(treedef)
    )


def flatten_factored(
    value: Any, is_leaf: Callable[[Any], bool]
) -> tuple[list[Any], jtu.TreeDef]:
    """`tree_flatten(value, is_leaf)` with each defaultdict whose factory is
    function-like flattened as a `Factored` (its factory a leaf for `is_leaf`),
    at any depth: the leaves are the value's own objects, the treedef JAX's
    with a `Factored` node in each such defaultdict's place. For a value
    `flatten_checked` took (with the same leaves): one that holds itself, or
    nests too deep, it refused already."""
    root = value

    def stop(x: Any) -> bool:
        return (x is not root and _factored(x)) or is_leaf(x)

    if _factored(value):
        root = Factored(default_factory(value), dict(value))
    leaves, treedef = jtu.tree_flatten(root, is_leaf=stop)
    subs: dict[int, jtu.TreeDef] = {}
    out: list[Any] = []
    for i, leaf in enumerate(leaves):
        if leaf is not root and _factored(leaf):
            sub_leaves, subs[i] = flatten_factored(leaf, is_leaf)
            out.extend(sub_leaves)
        else:
            out.append(leaf)
    if not subs:
        return leaves, treedef
    return out, _graft(treedef, subs, iter(range(treedef.num_leaves)))


def _graft(
    treedef: jtu.TreeDef, subs: dict[int, jtu.TreeDef], positions: Any
) -> jtu.TreeDef:
    """`treedef` with the leaf at each position of `subs` replaced by its
    treedef (`positions`: the leaf positions, consumed in order)."""
    if treedef.num_nodes == 1 and treedef.num_leaves == 1 and not treedef.children():
        return subs.get(next(positions), treedef)
    children = [_graft(c, subs, positions) for c in treedef.children()]
    return from_node(treedef, treedef.node_data(), children)
