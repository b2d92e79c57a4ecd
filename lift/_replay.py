"""Re-capturing a closure shaped like one seen before, without building a skeleton.

A sweep lifts a fresh optimizer per learning rate: the same code objects, the
same static captures, new leaves. `replay` walks the new object in the order the
skeleton records, checks at every step that it would capture to the very same
skeleton (same code object, globals, names, container structure, static values,
leaf types, sharing of nodes and cells), and collects the leaves. It allocates
no nodes or templates; the first mismatch returns `None` and the caller takes the
full walk.
"""

from __future__ import annotations

import types
from typing import Any, Final

import jax
import jax.tree_util as jtu

from ._skeleton import (
    CellNode,
    FunctionNode,
    MethodNode,
    PartialNode,
    Ref,
    Skeleton,
    Static,
    Template,
    is_cyclic,
    is_function_like,
)

__all__ = ["replay"]

_Tracer: Final = jax.core.Tracer


class _Mismatch(Exception):
    pass




def replay(skeleton: Skeleton, obj: Any) -> list[Any] | None:
    """The leaves of `obj` if it captures to exactly `skeleton`, else `None`."""
    try:
        return _Replay(skeleton).run(obj)
    except (_Mismatch, AttributeError, TypeError, ValueError):
        return None


class _Replay:
    __slots__ = ("ids", "leaves", "objs", "skeleton", "types")

    def __init__(self, skeleton: Skeleton) -> None:
        self.skeleton = skeleton
        self.objs: list[Any] = [None] * len(skeleton.nodes)
        self.ids: dict[int, int] = {}
        self.leaves: list[Any] = []
        self.types = skeleton.leaf_types

    def run(self, root: Any) -> list[Any]:
        nodes = self.skeleton.nodes
        objs = self.objs
        objs[0] = root
        self.ids[id(root)] = 0
        for i, node in enumerate(nodes):
            obj = objs[i]
            kind = type(node)
            if kind is FunctionNode:
                self.function(node, obj)  # type: ignore[arg-type]
            elif kind is CellNode:
                continue  # visited from the function that owns it
            elif kind is MethodNode:
                if type(obj) is not types.MethodType:
                    raise _Mismatch
                self.template(node.func, obj.__func__)  # type: ignore[union-attr]
                self.template(node.self_, obj.__self__)  # type: ignore[union-attr]
            else:
                assert isinstance(node, PartialNode)
                if type(obj) is not node.cls or len(obj.args) != len(node.args):
                    raise _Mismatch
                self.template(node.func, obj.func)
                for t, a in zip(node.args, obj.args, strict=True):
                    self.template(t, a)
                keywords = obj.keywords
                if len(keywords) != len(node.keywords):
                    raise _Mismatch
                for k, t in node.keywords:
                    self.template(t, keywords[k])
        if len(self.leaves) != self.skeleton.nleaves:
            raise _Mismatch
        return self.leaves

    def function(self, node: FunctionNode, fn: Any) -> None:
        if (
            type(fn) is not types.FunctionType
            or fn.__code__ is not node.info.code
            or fn.__globals__ is not node.globals
            or fn.__name__ != node.name
            or fn.__qualname__ != node.qualname
        ):
            raise _Mismatch
        closure = fn.__closure__ or ()
        objs, ids, nodes = self.objs, self.ids, self.skeleton.nodes
        for c, cell in zip(node.cells, closure, strict=True):
            seen = objs[c]
            if seen is not None:
                if seen is not cell:
                    raise _Mismatch
                continue
            if id(cell) in ids:
                raise _Mismatch
            objs[c] = cell
            ids[id(cell)] = c
            template = nodes[c].template  # type: ignore[union-attr]
            try:
                contents = cell.cell_contents
            except ValueError:
                if template is not None:
                    raise _Mismatch from None
                continue
            if template is None:
                raise _Mismatch
            self.template(template, contents)
        defaults = fn.__defaults__
        if node.defaults is None:
            if defaults is not None:
                raise _Mismatch
        else:
            for t, v in zip(node.defaults, defaults, strict=True):
                self.template(t, v)
        kwdefaults = fn.__kwdefaults__
        if node.kwdefaults is None:
            if kwdefaults:
                raise _Mismatch
        else:
            if len(kwdefaults) != len(node.kwdefaults):
                raise _Mismatch
            for k, t in node.kwdefaults:
                self.template(t, kwdefaults[k])

    def template(self, template: Template, value: Any) -> None:
        if template.treedef is None:
            self.slot(template.slots[0], value)
            return
        if is_cyclic(value):
            raise _Mismatch
        values, treedef = jtu.tree_flatten(value, is_leaf=is_function_like)
        if treedef != template.treedef:
            raise _Mismatch
        for slot, v in zip(template.slots, values, strict=True):
            self.slot(slot, v)

    def slot(self, slot: Any, value: Any) -> None:
        kind = type(slot)
        if kind is int:
            if slot != len(self.leaves) or type(value) is not self.types[slot]:
                raise _Mismatch
            self.leaves.append(value)
        elif kind is Ref:
            index = slot.index
            seen = self.objs[index]
            if seen is not None:
                if seen is not value:
                    raise _Mismatch
            else:
                if id(value) in self.ids:
                    raise _Mismatch
                self.objs[index] = value
                self.ids[id(value)] = index
        else:
            assert isinstance(slot, Static)
            expected = slot.value
            if value is expected:
                return
            if (
                slot.by_identity
                or type(value) is not type(expected)
                or isinstance(value, _Tracer)
            ):
                raise _Mismatch
            # Same type, hashable: equal values capture to the same key. Objects
            # other than plain atoms take the full walk (it scans them for tracers).
            if type(value) not in _ATOMS or not (value == expected):
                raise _Mismatch


_ATOMS: Final = frozenset({int, bool, str, bytes, float, complex, type(None), type})
