"""The static half of a lifted function: its graph of code and static captures.

A `Skeleton` describes a graph of nodes (functions, their cells, partials and
bound methods). Every captured value is a `Template`: a pytree structure whose
slots are dynamic leaf indices (`int`), references to other nodes (`Ref`) or
static values (`Static`). The skeleton is hashable, its hash computed once, and
is the pytree aux data of a `Lifted`: two skeletons are equal exactly when the
functions would behave the same given the same leaves.

`lift._rebuild.build` turns a skeleton and leaves back into plain Python
functions; `lift._paths` names where each leaf sits.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, TypeAlias

from . import _trees as jtu
from ._code import CodeInfo

__all__ = [
    "CellNode",
    "FunctionNode",
    "MethodNode",
    "Node",
    "PartialNode",
    "Ref",
    "Skeleton",
    "Slot",
    "Static",
    "Template",
    "root_function",
    "root_name",
]


class Ref:
    """A slot holding another node of the graph (a function, partial or method)."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __eq__(self, other: object) -> bool:
        return type(other) is Ref and other.index == self.index

    def __hash__(self) -> int:
        return hash(("ref", self.index))

    def __repr__(self) -> str:
        return f"Ref({self.index})"


class Static:
    """A slot holding a static value: compared by type and value when hashable,
    by identity otherwise."""

    __slots__ = ("_hash", "_key", "value")

    def __init__(self, value: Any) -> None:
        self.value = value
        t: type[Any] = type(value)  # pyright: ignore[reportUnknownVariableType]
        key: tuple[type[Any], Any] | int = (t, value)
        try:
            h = hash(key)
        except Exception:  # unhashable, or a `__hash__` that fails: by identity
            key = id(value)
            h = hash(("id", key))
            self._key = None
        else:
            self._key = key
        self._hash = h

    @property
    def by_identity(self) -> bool:
        return self._key is None

    def __eq__(self, other: object) -> bool:
        if type(other) is not Static:
            return False
        if self._key is None or other._key is None:
            return self.value is other.value
        if self._hash != other._hash:
            return False
        try:
            return bool(self._key == other._key)
        except Exception:  # an `__eq__` that fails: the same object or not
            return self.value is other.value

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"Static({self.value!r})"


Slot: TypeAlias = "int | Ref | Static"
# A capture that holds one atom (the common case) has no treedef: `treedef is None`.


class Template:
    """One captured value: a pytree structure and what stands in each slot.

    `owner` (the node holding the capture) and `label` (how to reach it from the
    owner, e.g. `("captures", "lr")`) are for messages and key paths only.
    """

    __slots__ = ("key", "label", "owner", "slots", "treedef")

    def __init__(
        self,
        treedef: jtu.TreeDef | None,
        slots: tuple[Slot, ...],
        owner: int,
        label: tuple[str, str | int | None],
    ) -> None:
        self.treedef = treedef
        self.slots = slots
        self.owner = owner
        self.label = label
        self.key = (treedef, slots)

    @property
    def name(self) -> str | None:
        """The captured variable's name, when the capture has one."""
        kind, name = self.label
        return name if kind == "captures" and isinstance(name, str) else None

    def materialize(self, leaves: Sequence[Any], objs: Sequence[Any]) -> Any:
        values: list[Any] = [
            leaves[s]
            if isinstance(s, int)
            else objs[s.index]
            if isinstance(s, Ref)
            else s.value
            for s in self.slots
        ]
        if self.treedef is None:
            return values[0]
        return self.treedef.unflatten(values)

    def leaf_indices(self) -> list[int]:
        return [s for s in self.slots if type(s) is int]


class CellNode:
    """A closure cell; `template is None` for an empty cell. Cells shared by several
    functions of one graph stay shared in the rebuilt graph."""

    __slots__ = ("key", "name", "owner", "template")

    def __init__(self, template: Template | None, name: str, owner: int) -> None:
        self.template = template
        self.name = name
        self.owner = owner
        self.key = ("cell", None if template is None else template.key)


class FunctionNode:
    """A `types.FunctionType`: code, globals, cells, defaults."""

    __slots__ = (
        "attrs",
        "cells",
        "defaults",
        "info",
        "key",
        "kwdefaults",
        "name",
        "qualname",
    )

    def __init__(
        self,
        info: CodeInfo,
        globals_: dict[str, Any],
        name: str,
        qualname: str,
        cells: tuple[int, ...],
        defaults: tuple[Template, ...] | None,
        kwdefaults: tuple[tuple[str, Template], ...] | None,
        attrs: dict[str, Any],
    ) -> None:
        self.info = info
        self.name = name
        self.qualname = qualname
        self.cells = cells
        self.defaults = defaults
        self.kwdefaults = kwdefaults
        # Carried along, not compared: `__doc__`, `__module__`, `__dict__`, ...
        self.attrs = attrs
        self.key = (
            "fn",
            _CodeKey(info),
            _Identity(globals_),
            name,
            qualname,
            cells,
            None if defaults is None else tuple(t.key for t in defaults),
            None if kwdefaults is None else tuple((k, t.key) for k, t in kwdefaults),
        )

    @property
    def globals(self) -> dict[str, Any]:
        return self.key[2].value  # type: ignore[union-attr]


class PartialNode:
    """A `functools.partial` (or subclass that is not a registered pytree)."""

    __slots__ = ("args", "cls", "func", "key", "keywords")

    def __init__(
        self,
        cls: type[functools.partial[Any]],
        func: Template,
        args: tuple[Template, ...],
        keywords: tuple[tuple[str, Template], ...],
    ) -> None:
        self.cls = cls
        self.func = func
        self.args = args
        self.keywords = keywords
        self.key = (
            "partial",
            cls,
            func.key,
            tuple(t.key for t in args),
            tuple((k, t.key) for k, t in keywords),
        )


class MethodNode:
    """A bound method: `__func__` and `__self__`."""

    __slots__ = ("func", "key", "self_")

    def __init__(self, func: Template, self_: Template) -> None:
        self.func = func
        self.self_ = self_
        self.key = ("method", func.key, self_.key)


Node: TypeAlias = "FunctionNode | CellNode | PartialNode | MethodNode"


class _Identity:
    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return type(other) is _Identity and other.value is self.value

    def __hash__(self) -> int:
        return id(self.value)


class _CodeKey:
    """Compares code objects by value (two lambdas that differ in a constant never
    compare equal) while hashing with the hash computed once per code object."""

    __slots__ = ("info",)

    def __init__(self, info: CodeInfo) -> None:
        self.info = info

    def __eq__(self, other: object) -> bool:
        if type(other) is not _CodeKey:
            return False
        a, b = self.info, other.info
        return a is b or (a.hash == b.hash and a.code == b.code)

    def __hash__(self) -> int:
        return self.info.hash


class Skeleton:
    """The static description of a lifted function graph (pytree aux data).

    `nodes[0]` is the root. `order` lists partial and method nodes so that each
    comes after the nodes it refers to. `float_leaves` are the indices of leaves
    captured as Python scalars (for messages about Python control flow).
    """

    __slots__ = (
        "__weakref__",
        "_hash",
        "cache",
        "float_leaves",
        "key",
        "leaf_types",
        "nleaves",
        "nodes",
        "order",
        "parents",
    )

    def __init__(
        self,
        nodes: list[Node],
        order: tuple[int, ...],
        parents: list[tuple[Template, int] | None],
        nleaves: int,
        float_leaves: frozenset[int],
        leaf_types: tuple[type, ...] = (),
    ) -> None:
        self.nodes = nodes
        self.order = order
        self.parents = parents
        self.nleaves = nleaves
        self.float_leaves = float_leaves
        # The type of each leaf when captured (not compared): lets a re-capture of a
        # same-shaped closure check classification by type alone.
        self.leaf_types = leaf_types
        self.key = tuple(n.key for n in nodes)
        self._hash = hash(self.key)
        # Derived facts other modules compute once per skeleton (not compared).
        self.cache: dict[str, Any] = {}

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if type(other) is not Skeleton:
            return False
        return self._hash == other._hash and self.key == other.key

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        root = self.nodes[0]
        name = root.qualname if isinstance(root, FunctionNode) else type(root).__name__
        return f"Skeleton({name}, nodes={len(self.nodes)}, leaves={self.nleaves})"

    # -- where things are ----------------------------------------------------

    def templates(self) -> list[Template]:
        """Every template of the graph, in node order."""
        out: list[Template] = []
        for node in self.nodes:
            if isinstance(node, CellNode):
                if node.template is not None:
                    out.append(node.template)
            elif isinstance(node, FunctionNode):
                out.extend(node.defaults or ())
                out.extend(t for _, t in node.kwdefaults or ())
            elif isinstance(node, PartialNode):
                out.append(node.func)
                out.extend(node.args)
                out.extend(t for _, t in node.keywords)
            else:
                out.extend((node.func, node.self_))
        return out

    def function_of(self, template: Template) -> int:
        """The node holding `template`: for a cell, the function that owns it."""
        node = self.nodes[template.owner]
        return node.owner if isinstance(node, CellNode) else template.owner

    def leaf_owner(self) -> list[tuple[int, str | None]]:
        """For every leaf: the function node holding it and the variable name."""
        owners: list[tuple[int, str | None]] = [(0, None)] * self.nleaves
        for template in self.templates():
            owner = self.function_of(template)
            for i in template.leaf_indices():
                owners[i] = (owner, template.name)
        return owners


def root_function(skeleton: Skeleton) -> FunctionNode | None:
    """The function at the root, seen through partials and bound methods."""
    node = skeleton.nodes[0]
    for _ in range(len(skeleton.nodes)):
        if isinstance(node, FunctionNode):
            return node
        if isinstance(node, (PartialNode, MethodNode)):
            slot = node.func.slots[0]
            if type(slot) is not Ref:
                return None
            node = skeleton.nodes[slot.index]
        else:
            return None
    return None


def root_name(skeleton: Skeleton, which: str) -> str:
    root = root_function(skeleton)
    if root is not None:
        return root.name if which == "name" else root.qualname
    node = skeleton.nodes[0]
    if isinstance(node, (PartialNode, MethodNode)):
        slot = node.func.slots[0]
        if isinstance(slot, Static):
            return getattr(
                slot.value, "__name__" if which == "name" else "__qualname__", "partial"
            )
    return "partial"
