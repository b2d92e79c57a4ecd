"""The nodes of a skeleton: what the walk records for each holder it meets.

A function, its cells, a partial, a bound method and a registered holder
(`lift.jit` functions) are each a node; every captured value is a `Template`,
a pytree structure whose slots are dynamic leaf indices (`int`), references to
other nodes (`Ref`) or static values (`Static`). Each node's `key` is what
two skeletons compare."""

from __future__ import annotations

import types
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeAlias, cast
from weakref import ref

from .._base.errors import LiftError
from .._holders import trees as jtu
from .._holders.closure import Holder, custom_data
from .._holders.held import read_inside
from .._holders.labels import ATTR, Label
from .._rule.code import CodeInfo
from .._rule.static import ById, aux_key, scanned, static_key

__all__ = [
    "rebuild_order",
    "CellNode",
    "FunctionNode",
    "HolderNode",
    "Node",
    "Part",
    "Ref",
    "Slot",
    "Static",
    "Template",
    "aux_followed",
    "followed",
]


class Ref:
    """A slot holding another node of the graph (a function, partial or method)."""

    __slots__ = ("index", "slot_key")

    def __init__(self, index: int) -> None:
        self.index = index
        self.slot_key: tuple[str, int] = ("ref", index)


class Static:
    """A slot holding a static value: compared by type and value at every depth
    (`lift._holders.closure.static_key`) when hashable, by identity otherwise."""

    __slots__ = ("_hash", "_key", "slot_key", "value")

    def __init__(self, value: Any, key: Any = None) -> None:
        self.value = value
        try:
            if key is None:
                key = static_key(value)
            h = hash(key)
        except Exception:  # unhashable, or a `__hash__` that fails: by identity
            self._key = None
            self.slot_key: Any = ById(value)
            h = hash(("id", id(value)))
        else:
            self._key = key
            self.slot_key = key
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


def followed(value: Any, read: list[tuple[Any, Any]]) -> Static:
    """A static value, keyed too by what the cells inside it hold (`_inside`).

    The cells are added to `read`, which `lift.jit` watches. A rebinding there
    makes another key, so another program."""
    inside = _inside(value)
    if not inside:
        return Static(value)
    read += inside
    return Static(value, (Static(value).slot_key, _key(inside)))


def aux_followed(treedef: jtu.TreeDef, read: list[tuple[Any, Any]]) -> tuple[Any, ...]:
    """As `followed`, for the static data of `treedef`'s custom nodes: their key."""
    inside = [r for _, aux in custom_data(treedef) for r in _inside(aux)]
    read += inside
    return _key(inside)


def _inside(value: Any) -> list[tuple[Any, Any]]:
    """The cells inside a static compared by identity (`read_inside`).

    A value whose class says when two are equal (`__eq__`) is that class's
    word, as for JAX's static arguments: its cells are not followed."""
    t: type[Any] = type(value)  # pyright: ignore[reportUnknownVariableType]
    follow = t.__hash__ is None or t.__eq__ is object.__eq__ or issubclass(t, ref)
    return read_inside(value) if follow and scanned(t) else []  # pyright: ignore[reportUnknownArgumentType]


def _key(read: list[tuple[Any, Any]]) -> tuple[Any, ...]:
    return tuple(Static(held).slot_key for _, held in read)


Slot: TypeAlias = "int | Ref | Static"


class Template:
    """One captured value: a pytree structure and what stands in each slot.

    `treedef` is JAX's (dicts in sorted key order), and `slots` follow its leaf
    order. `order` is `None`, or for values holding dicts whose keys are not in
    sorted order or not all strings: a treedef that rebuilds each dict in its
    insertion order, the permutation of slots it takes, and the dict keys by
    type and value (JAX compares them with `==`, so `1` and `1.0` would mix).

    `owner` (the node holding the capture) and `label` (how it is reached from
    the owner) are for messages and key paths only.
    """

    __slots__ = ("aux", "copies", "key", "label", "order", "owner", "slots", "treedef")

    def __init__(
        self,
        treedef: jtu.TreeDef | None,
        slots: tuple[Slot, ...],
        owner: int,
        label: Label,
        order: tuple[jtu.TreeDef, tuple[int, ...], Any] | None = None,
    ) -> None:
        self.treedef = treedef
        self.slots = slots
        self.owner = owner
        self.label = label
        self.order = order
        # Whether materializing it may rebuild a list or dict (`lift._copies.copies`):
        # `False` once a rebuild found none.
        self.copies = treedef is not None
        # Compared and hashed in C: a static by its key, a reference by index.
        keys: tuple[Any, ...] = (
            slots
            if len(slots) == 1 and type(slots[0]) is int  # one leaf: the common case
            else tuple(
                s if type(s) is int else cast("Ref | Static", s).slot_key for s in slots
            )
        )
        # The treedef's static data by its exact key (JAX compares it with `==`).
        self.aux = None if treedef is None else aux_key(treedef)
        self.key: tuple[Any, ...] = (
            (treedef, keys) if order is None else (treedef, keys, order)
        )
        if self.aux is not None:
            self.key += (self.aux,)

    @property
    def name(self) -> str | None:
        """The captured variable's name, when the capture has one."""
        return self.label.variable

    def slot_values(self, leaves: Sequence[Any], objs: Sequence[Any]) -> list[Any]:
        """What fills each slot: a leaf of `leaves`, a rebuilt node of `objs`
        or a static value."""
        return [
            leaves[s]
            if type(s) is int
            else objs[s.index]
            if type(s) is Ref
            else cast(Static, s).value
            for s in self.slots
        ]

    def materialize(self, leaves: Sequence[Any], objs: Sequence[Any]) -> Any:
        return self.unflatten(self.slot_values(leaves, objs))

    def unflatten(self, values: Sequence[Any]) -> Any:
        """The captured value's structure with `values` in its slots (slot
        order), dicts in their insertion order."""
        if self.treedef is None:
            return values[0]
        if self.order is not None:
            ordered, perm, _ = self.order
            return ordered.unflatten([values[p] for p in perm])
        return self.treedef.unflatten(values)

    def leaf_indices(self) -> list[int]:
        return [s for s in self.slots if type(s) is int]


Part: TypeAlias = tuple[Label, Template]


class CellNode:
    """A closure cell; `template is None` for an empty cell. Cells shared by several
    functions of one graph stay shared in the rebuilt graph.

    An empty cell is the user's own (`cell`, compared by identity): Python binds
    it later (`super()`'s `__class__` once the class exists, a decorated
    function's own name once the decorator returns), and the rebuilt function
    reads it then, as the original does.
    """

    kind: Final = "cell"  # what a node is called in messages and reprs

    __slots__ = ("cell", "key", "label", "owner", "template")

    def __init__(
        self,
        template: Template | None,
        label: Label,
        owner: int,
        cell: Any = None,
    ) -> None:
        self.template = template
        self.label = label
        self.owner = owner
        self.cell = cell
        self.key = (
            "cell",
            template.key if template is not None else _UserCell(cell),
        )

    @property
    def name(self) -> str:
        return cast(str, self.label.key)

    def parts(self) -> tuple[Part, ...]:
        return () if self.template is None else ((self.label, self.template),)


class FunctionNode:
    """A `types.FunctionType`: code, globals, cells and its other parts (defaults,
    keyword-only defaults, attributes: see `lift._holders.closure.function_parts`).

    `has_defaults`/`has_kwdefaults` tell `None` from empty. Name, qualified name,
    docstring, module and annotations are compared too: a rebuilt function has
    them, so two functions that differ in them are not interchangeable.
    """

    kind: Final = "function"

    __slots__ = (
        "_parts",
        "cells",
        "has_defaults",
        "has_kwdefaults",
        "info",
        "key",
        "meta",
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
        parts: tuple[Part, ...],
        has_defaults: bool,
        has_kwdefaults: bool,
        meta: Static,
    ) -> None:
        self.info = info
        self.name = name
        self.qualname = qualname
        self.cells = cells
        self._parts = parts
        self.has_defaults = has_defaults
        self.has_kwdefaults = has_kwdefaults
        # (`__doc__`, `__module__`, `__annotations__`)
        self.meta = meta
        self.key = (
            "fn",
            _CodeKey(info),
            ById(globals_),
            name,
            qualname,
            cells,
            tuple((label.ident, t.key) for label, t in parts),
            has_defaults,
            has_kwdefaults,
            meta,
        )

    @property
    def globals(self) -> dict[str, Any]:
        return self.key[2].value  # type: ignore[union-attr]

    def parts(self) -> tuple[Part, ...]:
        return self._parts

    def own_attribute(self) -> Part | None:
        """The first attribute the function has of its own, which a call may
        set (`f.calls = f.calls + 1`): not `functools.wraps`'s dunders."""
        for label, t in self._parts:
            if label.kind == ATTR and not str(label.key).startswith("__"):
                return label, t
        return None


class HolderNode:
    """A partial, a bound method or a `lift.jit` function: a holder
    (`lift._holders.closure.Holder`), its static part (a partial's class) and
    its parts, the first its function."""

    __slots__ = ("_parts", "func", "holder", "key", "static")

    def __init__(self, holder: Holder, static: Any, parts: tuple[Part, ...]) -> None:
        self.holder = holder
        self.static = static
        self._parts = parts
        self.func = parts[0][1]
        self.key = (
            holder.name,
            Static(static),
            tuple((label.ident, t.key) for label, t in parts),
        )

    @property
    def kind(self) -> str:
        return self.holder.name

    def parts(self) -> tuple[Part, ...]:
        return self._parts


Node: TypeAlias = "FunctionNode | CellNode | HolderNode"


# Statics whose key says everything about their value.


class _UserCell:
    """The key of a user's cell, empty when captured. Two are equal while both
    are still empty (a program traced then never read either) or when they are
    the same cell; a cell Python has bound since differs from every other, so a
    program that read one is never served for another."""

    __slots__ = ("cell",)

    def __init__(self, cell: Any) -> None:
        self.cell = cell

    def __eq__(self, other: object) -> bool:
        if type(other) is not _UserCell:
            return False
        return self.cell is other.cell or (_empty(self.cell) and _empty(other.cell))

    def __hash__(self) -> int:
        return hash("empty cell")


def _empty(cell: Any) -> bool:
    try:
        _ = cell.cell_contents
    except ValueError:
        return True
    return False


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


def function_meta(fn: types.FunctionType) -> Static:
    """A function's docstring, module and annotations, as one static keyed by
    the docstring and module only: annotations never change what the code
    computes, and are new objects at every `def` (jaxtyping's `Float[Array,
    "n"]`, 3.12's type parameters), so keying on them would compile every new
    closure anew. Each `Lifted` keeps its own skeleton, so it rebuilds its own
    function's signature."""
    doc, annotations = fn.__doc__, fn.__annotations__
    module = cast(object, fn.__module__)  # `None` for code exec'd without `__name__`
    value = (doc, module, dict(annotations) if annotations else None)
    if (doc is None or type(doc) is str) and (module is None or type(module) is str):
        return Static(value, ("meta", doc, module))
    return Static(value, Static((doc, module)).slot_key)


def rebuild_order(
    nodes: list[Node], where: Callable[[int], str] = lambda i: f"node {i}"
) -> tuple[int, ...]:
    """The holder nodes (partials, methods, `lift.jit` functions), each after
    the holder nodes it refers to. A cycle of them is refused, each named by
    `where` (the function capturing it and the variable)."""
    pending = {
        i: {
            s.index
            for _, t in n.parts()
            for s in t.slots
            if type(s) is Ref and type(nodes[s.index]) is HolderNode
        }
        for i, n in enumerate(nodes)
        if type(n) is HolderNode
    }
    out: list[int] = []
    done: set[int] = set()
    while pending:
        ready = [i for i, deps in pending.items() if deps <= done]
        if not ready:
            cycle = "; ".join(where(i) for i in sorted(pending))
            raise LiftError(
                "the captured partials or bound methods refer to each other in a "
                f"cycle, which cannot be rebuilt: {cycle}.\nFix: break the "
                "cycle through a function (a closure can refer to itself).",
                anchor="partial-cycle",
            )
        for i in sorted(ready):
            out.append(i)
            done.add(i)
            del pending[i]
    return tuple(out)
