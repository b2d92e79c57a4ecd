"""Rebuilding plain Python functions from a skeleton and leaves.

Every function is made afresh with `types.FunctionType` and new cells.
Nothing of the captured function is reused but an empty cell, which Python
fills later. The user's function, cells and defaults are never touched. Cells
shared by several functions stay shared. Every cell is made empty first and
filled last, which closes recursion and cycles.
"""

from __future__ import annotations

import functools
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any, cast

from .._base.errors import LiftError, describe
from .._holders.closure import set_function_parts
from .nodes import CellNode, FunctionNode, HolderNode, Template
from .skeleton import Skeleton


def build(skeleton: Skeleton, leaves: Sequence[Any]) -> Callable[..., Any]:
    """The root of the graph rebuilt, its captures `leaves`.

    It is a plain function, a partial or a bound method."""
    return build_nodes(skeleton, leaves)[0]


def build_nodes(
    skeleton: Skeleton,
    leaves: Sequence[Any],
    made: list[tuple[Template, Any]] | None = None,
) -> list[Any]:
    """Every node of the graph rebuilt, cells included, as `skeleton.nodes`.

    `made` gets each capture that may rebuild a list or dict, with its value."""
    nodes = skeleton.nodes
    objs: list[Any] = [None] * len(nodes)

    def materialize(t: Template) -> Any:
        value = t.materialize(leaves, objs)
        if made is not None and t.copies:
            made.append((t, value))
        return value

    for i, node in enumerate(nodes):
        if type(node) is CellNode:
            # An empty cell is the user's (bound later, read when called).
            objs[i] = types.CellType() if node.cell is None else node.cell
    for i, node in enumerate(nodes):
        if type(node) is FunctionNode:
            closure = tuple(objs[c] for c in node.cells) if node.cells else None
            fn = types.FunctionType(
                node.info.code, node.globals, node.name, None, closure
            )
            fn.__qualname__ = node.qualname
            doc, module, annotations = node.meta.value
            fn.__doc__ = doc
            fn.__module__ = module
            if annotations:
                fn.__annotations__ = dict(annotations)
            objs[i] = fn
    for i in skeleton.order:
        node = cast(HolderNode, nodes[i])
        objs[i] = node.holder.rebuild(
            node.static, [(label, materialize(t)) for label, t in node.parts()]
        )
    for i, node in enumerate(nodes):
        if type(node) is CellNode:
            if node.template is not None:
                objs[i].cell_contents = materialize(node.template)
        elif type(node) is FunctionNode:
            set_function_parts(
                objs[i],
                ((label, materialize(t)) for label, t in node.parts()),
                (node.has_defaults, node.has_kwdefaults),
            )
    return objs


def importable(rebuilt: Callable[..., Any]) -> Any:
    """A rebuilt function as pickle can find it.

    That is the module-level function of the same code, or a partial of it."""
    target = rebuilt.func if isinstance(rebuilt, functools.partial) else rebuilt
    module = sys.modules.get(getattr(target, "__module__", None) or "")
    found: Any = module
    for part in str(getattr(target, "__qualname__", "<>")).split("."):
        found = getattr(found, part, None)
    if found is None or getattr(found, "__code__", None) is not getattr(
        target, "__code__", False
    ):
        raise LiftError(
            f"pickle needs the function {describe(target)} importable by name, "
            "and this `Lifted` was rebuilt from leaves (by a transform or "
            "`tree_map`), which keeps no original.\nFix: pickle the `Lifted` made "
            "from a module-level function, or its leaves (`jax.tree.leaves`).",
            anchor="pickle-rebuilt",
        )
    if isinstance(rebuilt, functools.partial):
        partial = cast("functools.partial[Any]", rebuilt)
        return type(partial)(found, *partial.args, **partial.keywords)
    return found
