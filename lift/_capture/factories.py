"""A defaultdict's default factory, captured as a part, not static data.

JAX keeps a defaultdict's `default_factory` in the treedef, compared with
`==`. A factory made afresh per closure (`defaultdict(lambda: 0.0)`) would
make a new treedef each time. Capture flattens such a defaultdict as a
`Factored`. The factory is a child: a node, compared by its code. Its
captures are leaves, as any function's are. The values are children. The keys
are static, in insertion order. Unflattening builds the very defaultdict JAX
would."""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable
from typing import Any, cast

from .._holders import trees as jtu
from .._holders.closure import FACTORY, default_factory, static_data
from .._holders.trees import DictKey, GetAttrKey, from_node, is_function_like


class Factored:
    """A defaultdict whose `default_factory` is function-like, as flattened.

    Unflattened with a factory, it is that defaultdict. With a placeholder in
    the factory's place, it stays a `Factored`. JAX's key paths and lift's
    repr do so."""

    __slots__ = ("factory", "items")

    def __init__(self, factory: Any, items: dict[Any, Any]) -> None:
        self.factory = factory
        self.items = items

    def __repr__(self) -> str:
        return f"defaultdict({self.factory!r}, {self.items!r})"


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


jtu.register_pytree_with_keys(Factored, _flatten_with_keys, _unflatten)


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
    """`tree_flatten(value, is_leaf)`, each defaultdict with a function factory
    flattened as a `Factored`.

    The leaves are the value's own objects. The treedef is JAX's, with a
    `Factored` node in each such defaultdict's place. It is for a value that
    `flatten_checked` took. That refused a value that holds itself or nests too
    deep."""
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
    """`treedef` with the leaf at each position replaced by a treedef of `subs`.

    `positions` are the leaf positions, consumed in order."""
    if treedef.num_nodes == 1 and treedef.num_leaves == 1 and not treedef.children():
        return subs.get(next(positions), treedef)
    children = [_graft(c, subs, positions) for c in treedef.children()]
    return from_node(treedef.node_data(), children)
