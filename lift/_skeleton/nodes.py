"""The nodes of a skeleton: what the walk records for each holder it meets.

A function, its cells, a partial, a bound method and a `lift.jit` function
are each a node. Every captured value is a `Template`: a pytree structure
with slots. A slot is a leaf index (`int`), another node (`Ref`) or a static
value (`Static`). Each node's `key` is what two skeletons compare."""

from __future__ import annotations

import types
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeAlias, cast
from weakref import ref

from .._base.caches import BoundedDict
from .._base.errors import LiftError
from .._holders import trees as jtu
from .._holders.closure import Holder, custom_data
from .._holders.held import read_inside
from .._holders.labels import ATTR, Label
from .._rule.code import CodeInfo
from .._rule.static import ById, aux_key, scanned, static_key


class Ref:
    """A slot holding another node of the graph (a function, partial or method).

    It is immutable: one per index serves every skeleton (`ref_to`)."""

    __slots__ = ("index", "slot_key")

    def __init__(self, index: int) -> None:
        self.index = index
        self.slot_key: tuple[str, int] = ("ref", index)


class Static:
    """A slot holding a static value.

    A hashable one compares by type and value at every depth
    (`lift._rule.static.static_key`). Any other compares by identity."""

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

# One `Static` per exact scalar seen lately (`None`, `True`, `0`, a name).
_ATOM_STATICS: BoundedDict[tuple[type[Any], Any], Static] = BoundedDict(512)


def atom_static(value: Any) -> Static:
    """The `Static` of a value of an exact scalar type (`EXACT`), shared."""
    key: tuple[type[Any], Any] = (type(value), value)  # pyright: ignore[reportUnknownVariableType]
    found = _ATOM_STATICS.get(key)
    if found is None:
        found = _ATOM_STATICS.add(key, Static(value, key))
    return found


class Template:
    """One captured value: a pytree structure and what stands in each slot.

    `treedef` is JAX's, dicts in sorted key order; `slots` follow its leaves.
    `order` is `None` unless a dict's keys are unsorted or not all strings.
    Then it holds a treedef rebuilding each dict in insertion order, the
    permutation of slots, and the keys by type and value. (JAX compares keys
    with `==`, so `1` and `1.0` would mix.)

    `owner` is the node holding the capture. `label` says how the owner
    reaches it. Both serve messages and key paths only.
    """

    __slots__ = ("aux", "copies", "key", "label", "order", "owner", "slots", "treedef")
    key: tuple[Any, ...]

    def __init__(
        self,
        treedef: jtu.TreeDef | None,
        slots: tuple[Slot, ...],
        owner: int,
        label: Label,
        order: tuple[jtu.TreeDef, tuple[int, ...], Any] | None = None,
        aux: Any = ...,
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
        held: tuple[Any, ...] = slots  # each an int, a `Ref` or a `Static`
        if treedef is None:  # one slot: the common case
            one = held[0]
            self.aux = None
            self.key = (None, held if type(one) is int else (one.slot_key,))
            return
        keys = tuple(s if type(s) is int else s.slot_key for s in held)
        # The treedef's static data by its exact key (JAX compares it with `==`).
        self.aux = aux_key(treedef) if aux is ... else aux
        self.key = (treedef, keys) if order is None else (treedef, keys, order)
        if self.aux is not None:
            self.key += (self.aux,)

    def slot_values(self, leaves: Sequence[Any], objs: Sequence[Any]) -> list[Any]:
        """What fills each slot: a leaf, a rebuilt node or a static value."""
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
        """The captured value with `values` in its slots.

        Dicts keep their insertion order."""
        if self.treedef is None:
            return values[0]
        if self.order is not None:
            ordered, perm, _ = self.order
            return ordered.unflatten([values[p] for p in perm])
        return self.treedef.unflatten(values)


Part: TypeAlias = tuple[Label, Template]


class CellNode:
    """A closure cell; `template is None` for an empty cell.

    Cells shared by several functions stay shared in the rebuilt graph.

    An empty cell is the user's own (`cell`, compared by identity). Python
    binds it later: `super()`'s `__class__`, a decorated function's own name.
    The rebuilt function reads it then, as the original does.
    """

    kind: Final = "cell"  # what a node is called in messages and reprs

    __slots__ = ("cell", "key", "label", "owner", "template")

    def __init__(
        self, template: Template | None, label: Label, owner: int, cell: Any = None
    ) -> None:
        self.template = template
        self.label = label
        self.owner = owner
        self.cell = cell
        self.key = ("cell", template.key if template is not None else _UserCell(cell))

    @property
    def name(self) -> str:
        return cast(str, self.label.key)

    def parts(self) -> tuple[Part, ...]:
        return () if self.template is None else ((self.label, self.template),)


class FunctionNode:
    """A `types.FunctionType`: code, globals, cells and its other parts.

    The other parts are defaults, keyword-only defaults and attributes
    (`lift._holders.closure.function_held`). `has_defaults` and
    `has_kwdefaults` tell `None` from empty. Name, qualified name, docstring
    and module are compared too: a rebuilt function has them.
    """

    kind: Final = "function"

    # A plain class: a fresh lift builds one per function, and a dataclass's
    # `__post_init__` would add a call to each.
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
        meta: Static,  # (`__doc__`, `__module__`, `__annotations__`)
    ) -> None:
        self.info = info
        self.name = name
        self.qualname = qualname
        self.cells = cells
        self._parts = parts
        self.has_defaults = has_defaults
        self.has_kwdefaults = has_kwdefaults
        self.meta = meta
        self.key = (
            "fn",
            info,
            ById(globals_),
            name,
            qualname,
            cells,
            tuple([(label.ident, t.key) for label, t in parts]) if parts else (),
            has_defaults,
            has_kwdefaults,
            meta,
        )

    @property
    def globals(self) -> dict[str, Any]:
        return self.key[2].value

    def parts(self) -> tuple[Part, ...]:
        return self._parts

    def own_attribute(self) -> Part | None:
        """The first attribute of the function's own, which a call may set.

        An example is `f.calls = f.calls + 1`; `functools.wraps`'s dunders
        do not count."""
        for label, t in self._parts:
            if label.kind == ATTR and not str(label.key).startswith("__"):
                return label, t
        return None


class HolderNode:
    """A partial, a bound method or a `lift.jit` function.

    It keeps the holder (`lift._holders.closure.Holder`), its static part (a
    partial's class) and its parts. The first part is its function."""

    __slots__ = ("_parts", "func", "holder", "key", "kind", "static")

    def __init__(self, holder: Holder, static: Any, parts: tuple[Part, ...]) -> None:
        self.holder = holder
        self.kind = holder.name  # what it is called in messages and reprs
        self.static = static
        self._parts = parts
        self.func = parts[0][1]
        self.key = (
            holder.name,
            Static(static),
            tuple((label.ident, t.key) for label, t in parts),
        )

    def parts(self) -> tuple[Part, ...]:
        return self._parts


Node: TypeAlias = "FunctionNode | CellNode | HolderNode"


# Statics whose key says everything about their value.


class _UserCell:
    """The key of a user's cell, empty when captured.

    Two are equal while both are empty, or when they are the same cell. A
    cell bound since differs from every other. A program that read one is
    never served for another."""

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


def function_meta(fn: types.FunctionType) -> Static:
    """A function's docstring, module and annotations, as one static.

    Its key is the docstring and module only. Annotations never change what
    the code computes. They are new objects at every `def` (jaxtyping's
    `Float[Array, "n"]`). Keying on them would compile every new closure anew.
    Skeletons with other annotations are never one object (`interned`), so
    each rebuilds its own signature."""
    doc, annotations = fn.__doc__, fn.__annotations__
    module = cast(object, fn.__module__)  # `None` for code exec'd without `__name__`
    if not annotations:  # the common case: one per code, docstring and module
        found = _METAS.get(id(code := fn.__code__))
        if found and found[0] is code and found[1] is doc and found[2] is module:
            return found[3]
    value = (doc, module, dict(annotations) if annotations else None)
    if (doc is None or type(doc) is str) and (module is None or type(module) is str):
        meta = Static(value, ("meta", doc, module))
        if not annotations:
            _METAS.add(id(fn.__code__), (fn.__code__, doc, module, meta))
        return meta
    return Static(value, Static((doc, module)).slot_key)


# The last meta of a function without annotations, by `id(code)`; the entry holds
# its code, so the id is not reused while it lives.
_METAS: BoundedDict[int, tuple[types.CodeType, Any, Any, Static]] = BoundedDict(512)


def rebuild_order(nodes: list[Node], where: Callable[[int], str]) -> tuple[int, ...]:
    """The holder nodes, each after the holder nodes it refers to.

    Holders are partials, methods and `lift.jit` functions. A cycle of them
    is refused. `where` names each: the function capturing it and the
    variable."""
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
