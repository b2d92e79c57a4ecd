"""The static half of a lifted function: its graph of code and static captures.

A `Skeleton` describes a graph of nodes (functions, their cells, partials and
bound methods). Every captured value is a `Template`: a pytree structure whose
slots are dynamic leaf indices (`int`), references to other nodes (`Ref`) or
static values (`Static`). The skeleton is hashable, its hash computed once, and
is the pytree aux data of a `Lifted`: two skeletons are equal exactly when the
functions would behave the same given the same leaves.

`build` turns a skeleton and leaves back into plain Python functions with fresh
cells; nothing of the function the skeleton was captured from is reused.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeAlias, cast

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
    "build",
    "is_cyclic",
    "is_function_like",
]


_partial_is_leaf: dict[type, bool] = {functools.partial: True}


def is_function_like(x: Any) -> bool:
    """A function, bound method, or `functools.partial` that is not a pytree."""
    t: type[Any] = type(x)  # pyright: ignore[reportUnknownVariableType]
    if t is types.FunctionType or t is types.MethodType:
        return True
    if isinstance(x, functools.partial):
        leaf = _partial_is_leaf.get(t)
        if leaf is None:
            # `jax.tree_util.Partial` and other registered subclasses are pytrees.
            leaf = _partial_is_leaf[t] = jtu.treedef_is_leaf(jtu.tree_structure(x))
        return leaf
    return False


MAX_CONTAINER_DEPTH: Final = 400


def is_cyclic(value: Any) -> bool:
    """Whether lists, tuples and dicts nested in `value` contain themselves or nest
    deeper than `MAX_CONTAINER_DEPTH`.

    JAX's C++ flattening recurses: on a cyclic value it never returns, and deep
    values exhaust the interpreter's recursion budget (jax 0.10.2 then leaves a
    `SystemError` behind). So the value is checked first, iteratively.
    """
    if not isinstance(value, (list, tuple, dict)):
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
        except TypeError:
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
        return self._hash == other._hash and self._key == other._key

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
        "_paths",
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
        self._paths: tuple[CapturePath, ...] | None = None
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

    def node_path(self, index: int) -> tuple[Any, ...]:
        """Key entries from the root to node `index` (where it was first found)."""
        entries: list[tuple[Any, ...]] = []
        seen = 0
        while (parent := self.parents[index]) is not None and seen <= len(self.nodes):
            seen += 1
            template, slot = parent
            entries.append(
                _template_entries(self, template) + _slot_entries(template, slot)
            )
            index = template.owner
            if isinstance(self.nodes[index], CellNode):
                index = self.nodes[index].owner  # type: ignore[union-attr]
        return tuple(e for part in reversed(entries) for e in part)

    def leaf_paths(self) -> tuple[CapturePath, ...]:
        """A key path for every leaf, e.g. `.captures['inner'].captures['lr']`.

        Computed once, top-down, in time and memory linear in the graph: a path
        longer than `2 * _PATH_KEEP` entries (a closure nested thousands deep)
        keeps its first and last `_PATH_KEEP` entries around an `Elided` entry.
        """
        if self._paths is None:
            # Per function node: (head, tail, length) of its path from the root.
            spans: dict[int, tuple[tuple[Any, ...], tuple[Any, ...], int]] = {
                0: ((), (), 0)
            }
            for index in range(1, len(self.nodes)):
                parent = self.parents[index]
                if parent is None:
                    continue
                template, slot = parent
                owner = self.function_of(template)
                spans[index] = _extend(
                    spans[owner],
                    _template_entries(self, template) + _slot_entries(template, slot),
                )
            paths: list[CapturePath | None] = [None] * self.nleaves
            for template in self.templates():
                span = spans[self.function_of(template)]
                entries = _template_entries(self, template)
                for pos, slot in enumerate(template.slots):
                    if type(slot) is int:
                        paths[slot] = CapturePath(
                            _materialize(
                                _extend(span, entries + _slot_entries(template, pos))
                            )
                        )
            self._paths = tuple(p if p is not None else CapturePath(()) for p in paths)
        return self._paths

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


def _template_entries(skeleton: Skeleton, template: Template) -> tuple[Any, ...]:
    kind, name = template.label
    if kind in ("captures", "keywords"):
        return (jtu.GetAttrKey(kind), jtu.DictKey(name))
    if kind == "args":
        return (jtu.GetAttrKey("args"), jtu.SequenceKey(name))  # type: ignore[arg-type]
    return (jtu.GetAttrKey(kind),)


def _slot_entries(template: Template, pos: int) -> tuple[Any, ...]:
    if template.treedef is None:
        return ()
    return _treedef_paths(template.treedef)[pos]


@functools.lru_cache(maxsize=4096)
def _treedef_paths(treedef: jtu.TreeDef) -> tuple[tuple[Any, ...], ...]:
    dummy = treedef.unflatten([_Marker()] * treedef.num_leaves)
    pairs, _ = jtu.tree_flatten_with_path(dummy, is_leaf=_is_marker)
    return tuple(tuple(p) for p, _ in pairs)


def _is_marker(x: object) -> bool:
    return isinstance(x, _Marker)


class _Marker:
    __slots__ = ()


_PATH_KEEP: Final = 16


def _extend(
    span: tuple[tuple[Any, ...], tuple[Any, ...], int], entries: tuple[Any, ...]
) -> tuple[tuple[Any, ...], tuple[Any, ...], int]:
    head, tail, length = span
    if len(head) < _PATH_KEEP:
        head = (head + entries)[:_PATH_KEEP]
    return head, (tail + entries)[-_PATH_KEEP:], length + len(entries)


def _materialize(span: tuple[tuple[Any, ...], tuple[Any, ...], int]) -> tuple[Any, ...]:
    head, tail, length = span
    if length <= 2 * _PATH_KEEP:
        return (
            (head + tail[len(tail) - (length - len(head)) :])
            if length > len(head)
            else head
        )
    return (*head, Elided(length - 2 * _PATH_KEEP), *tail)


class Elided:
    """Stands for the middle of a key path too long to spell out."""

    __slots__ = ("count",)

    def __init__(self, count: int) -> None:
        self.count = count

    def __str__(self) -> str:
        return f"...({self.count} more)..."

    def __repr__(self) -> str:
        return f"Elided({self.count})"

    def __eq__(self, other: object) -> bool:
        return type(other) is Elided and other.count == self.count

    def __hash__(self) -> int:
        return hash(("elided", self.count))


class CapturePath:
    """One pytree key entry standing for the whole way from a `Lifted` to a leaf.

    `str()` reads like `.captures['inner'].captures['lr']`; `entries` holds the
    standard `jax.tree_util` keys (`GetAttrKey`, `DictKey`, `SequenceKey`, ...).
    """

    __slots__ = ("entries",)

    def __init__(self, entries: tuple[Any, ...]) -> None:
        self.entries = entries

    def __str__(self) -> str:
        return "".join(str(e) for e in self.entries)

    def __repr__(self) -> str:
        return f"CapturePath({self})"

    def __eq__(self, other: object) -> bool:
        return type(other) is CapturePath and other.entries == self.entries

    def __hash__(self) -> int:
        return hash(self.entries)


CapturePath.__module__ = "lift"

_EMPTY: Final = object()


def build(skeleton: Skeleton, leaves: Sequence[Any]) -> Callable[..., Any]:
    """Plain Python objects for the graph, with fresh cells; returns the root."""
    nodes = skeleton.nodes
    objs: list[Any] = [None] * len(nodes)
    for i, node in enumerate(nodes):
        if type(node) is CellNode:
            objs[i] = types.CellType()
    for i, node in enumerate(nodes):
        if type(node) is FunctionNode:
            closure = tuple(objs[c] for c in node.cells) if node.cells else None
            fn = types.FunctionType(
                node.info.code, node.globals, node.name, None, closure
            )
            fn.__qualname__ = node.qualname
            attrs = node.attrs
            if attrs:
                for k, v in attrs.items():
                    setattr(fn, k, v)
            objs[i] = fn
    for i in skeleton.order:
        node = nodes[i]
        if type(node) is PartialNode:
            func = node.func.materialize(leaves, objs)
            args = [t.materialize(leaves, objs) for t in node.args]
            kwargs = {k: t.materialize(leaves, objs) for k, t in node.keywords}
            objs[i] = node.cls(func, *args, **kwargs)
        elif type(node) is MethodNode:
            objs[i] = types.MethodType(
                node.func.materialize(leaves, objs),
                node.self_.materialize(leaves, objs),
            )
    for i, node in enumerate(nodes):
        if type(node) is CellNode:
            if node.template is not None:
                objs[i].cell_contents = node.template.materialize(leaves, objs)
        elif type(node) is FunctionNode:
            if node.defaults is not None:
                objs[i].__defaults__ = tuple(
                    t.materialize(leaves, objs) for t in node.defaults
                )
            if node.kwdefaults is not None:
                objs[i].__kwdefaults__ = {
                    k: t.materialize(leaves, objs) for k, t in node.kwdefaults
                }
    return objs[0]
