# pyright: reportPrivateUsage=false
"""The static half of a lifted function: its graph of code and static captures.

A `Skeleton` describes a graph of functions, cells, partials and methods.
Every captured value is a `Template` (`lift._skeleton.nodes`). The skeleton
is hashable, its hash computed once. It is the pytree aux data of a `Lifted`.
Two are equal exactly when the functions behave alike on the same leaves.
Equal ones alive are one object (`interned`).

`lift._skeleton.rebuild.build` turns a skeleton and leaves back into functions.
`lift._skeleton.paths` names where each leaf sits.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import weakref
from collections import Counter
from collections.abc import Callable
from typing import Any, ClassVar, Final, Protocol, cast

from .._base.atoms import UNOPENED
from .._base.errors import static_str
from .._holders.closure import custom_data
from .._holders.labels import Label
from .nodes import CellNode, FunctionNode, HolderNode, Node, Ref, Static, Template

# A capture that holds one atom (the common case) has no treedef: `treedef is None`.


@dataclasses.dataclass(eq=False, repr=False, slots=True, weakref_slot=True)
class Skeleton:
    """The static description of a lifted function graph (pytree aux data).

    `nodes[0]` is the root. `order` lists holder nodes, each after those it
    refers to. `float_leaves` are the leaves captured as Python scalars.
    """

    # Its statics were checked for hidden tracers when it was captured: the scan
    # of static pytree data passes it by (`lift._holders.closure.aux_tracer`).
    vetted: ClassVar[bool] = True

    nodes: list[Node]
    order: tuple[int, ...]
    parents: list[tuple[Template, int] | None]
    nleaves: int
    float_leaves: frozenset[int]
    key: tuple[Any, ...] = dataclasses.field(init=False)
    _hash: int = dataclasses.field(init=False)
    # Derived facts, each computed once per skeleton (none is compared):
    # what the full walk found (`lift._capture.walk`): the names of the captured
    # variables; a live tracer its statics hold, described (a skeleton made
    # inside a transform).
    names: frozenset[str] = dataclasses.field(init=False, default=frozenset())
    live: str | None = dataclasses.field(init=False, default=None)
    # The ids of your own objects it keeps: lists, dicts, sets, empty cells.
    own: tuple[int, ...] = dataclasses.field(init=False, default=())
    # Whether a function of the graph has attributes of its own, which a
    # call may set (`lift._copies.copies.copies_in`): the walk says
    # (`FunctionNode.own_attribute`).
    has_attributes: bool = dataclasses.field(init=False, default=False)
    # The options lifted with, `(static names, dynamic)`, and the function's
    # name, qualified name, docstring and module (`lift._lifted.lifted`).
    options: tuple[frozenset[str], Any] | None = dataclasses.field(
        init=False, default=None
    )
    attrs: dict[str, Any] | None = dataclasses.field(init=False, default=None)
    # Each leaf's key path (`lift._skeleton.paths`).
    paths: tuple[Any, ...] | None = dataclasses.field(init=False, default=None)

    def __post_init__(self) -> None:
        self.key = tuple([n.key for n in self.nodes])
        self._hash = hash(self.key)

    def __eq__(self, other: object) -> bool:
        if other is self:  # interned (`interned`): JAX's check of a cached treedef
            return True
        if type(other) is not Skeleton:
            return False
        return self._hash == other._hash and self.key == other.key

    def __hash__(self) -> int:
        return self._hash

    # Immutable static data (code, globals, static values): a copy is the same
    # skeleton, as a `Lifted`'s copies share it (flax's nnx deep-copies the
    # treedefs in its graph definitions; a module among the statics cannot be).
    def __copy__(self) -> Skeleton:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Skeleton:
        return self

    def __repr__(self) -> str:
        # The code and the static values (bounded), so that two treedefs that
        # differ print differently where JAX explains a cache miss.
        return skeleton_repr(self)

    # -- where things are ----------------------------------------------------

    def templates(self) -> list[Template]:
        """Every template of the graph, in node order."""
        return [t for node in self.nodes for _, t in node.parts()]

    def parts_of(self, index: int) -> list[tuple[Label, Template | None]]:
        """Node `index`'s parts as its captures are listed.

        A function's cells come first (`None` for an empty one), then its
        other parts."""
        node = self.nodes[index]
        cells = node.cells if isinstance(node, FunctionNode) else ()
        own: list[tuple[Label, Template | None]] = [
            (cell.label, cell.template)
            for cell in (cast(CellNode, self.nodes[c]) for c in cells)
        ]
        return own + list(node.parts())

    def function_of(self, template: Template) -> int:
        """The node holding `template`: for a cell, the function that owns it."""
        node = self.nodes[template.owner]
        return node.owner if isinstance(node, CellNode) else template.owner

    def leaf_owner(self) -> list[tuple[int, str | None]]:
        """For every leaf: the function node holding it and the variable name."""
        owners: list[tuple[int, str | None]] = [(0, None)] * self.nleaves
        for template in self.templates():
            owner = self.function_of(template)
            for slot in template.slots:
                if type(slot) is int:
                    owners[slot] = (owner, template.label.variable)
        return owners


def root_function(skeleton: Skeleton) -> FunctionNode | None:
    """The function at the root, seen through partials and bound methods."""
    # The root is a function or a holder, and a holder's function another of
    # them (a partial holding itself is refused when lifted): this ends.
    node = skeleton.nodes[0]
    while not isinstance(node, FunctionNode):
        slots = cast(HolderNode, node).func.slots
        if len(slots) != 1 or type(slots[0]) is not Ref:
            return None  # a `Lifted` or a callable pytree: see `root_name`
        node = skeleton.nodes[slots[0].index]
    return node


def root_name(skeleton: Skeleton, which: str) -> str:
    """The root's name (`which="name"`) or qualified name (`"qualname"`)."""
    root = root_function(skeleton)
    if root is not None:
        return root.name if which == "name" else root.qualname
    node = skeleton.nodes[0]
    if isinstance(node, HolderNode):
        slots, treedef = node.func.slots, node.func.treedef
        if len(slots) == 1 and isinstance(slots[0], Static):
            return getattr(slots[0].value, f"__{which}__", "partial")
        data = treedef.node_data() if treedef is not None else None
        if data is not None and type(data[1]) is Skeleton:  # a partial of a `Lifted`
            return root_name(data[1], which)
    return "partial"


def node_head(node: Any) -> str:
    return node.qualname if isinstance(node, FunctionNode) else node.kind


# How much of its static data a skeleton's repr spells out.
_SKELETON_CHARS: Final = 160


def skeleton_repr(skeleton: Skeleton) -> str:
    """`Skeleton(qualname (file:line), nodes=3, leaves=1, static: ... #1a2b3c4d)`.

    `jax_explain_cache_misses` prints it twice when a static value changed.
    It is short, and leads with what most often differs. Statics are named by
    their variable (`nesterov=True`); `lift.diff` gives whole key paths. Those
    not `None` come first, equal ones counted once (`params=None (x5)`). At
    most `_SKELETON_CHARS` characters are shown. The fingerprint (`#1a2b3c4d`)
    tells apart two skeletons whose shown statics agree.
    """
    root = skeleton.nodes[0]
    head = node_head(root)
    if isinstance(root, FunctionNode):
        code = root.info.code
        head += f" ({os.path.basename(code.co_filename)}:{code.co_firstlineno})"
    counts = Counter(
        (slot.value is None, _static_item(t, pos, slot.value))
        for t in skeleton.templates()
        for pos, slot in enumerate(t.slots)
        if type(slot) is Static
    )
    statics: list[str] = []
    used = 0
    # Stable: source order within each group, values that are not `None` first.
    ordered = sorted(counts.items(), key=lambda kv: kv[0][0])
    for shown, ((_, item), n) in enumerate(ordered):
        if used > _SKELETON_CHARS:
            statics.append(f"...({sum(c for _, c in ordered[shown:])} more)")
            break
        text = item if n == 1 else f"{item} (x{n})"
        statics.append(text)
        used += len(text) + 2
    text = f"{head}, nodes={len(skeleton.nodes)}, leaves={skeleton.nleaves}"
    if statics:
        text += ", static: " + ", ".join(statics)
    return f"Skeleton({text} #{hash(skeleton) & 0xFFFFFFFF:08x})"


def _static_item(template: Template, pos: int, value: Any) -> str:
    """One static as the repr shows it: `nesterov=True`, `fns[0]=...`."""
    from .._holders.trees import slot_path

    variable = template.label.variable
    name = variable if isinstance(variable, str) else template.label.text
    return f"{name}{slot_path(template.treedef, pos)}={static_str(value, 40)}"


class LiftedParts(Protocol):
    """A `lift.Lifted` as every module but its class's own reads it.

    The class (`lift._lifted.lifted`) and its pytree registration
    (`lift._lifted.pytree`) read its slots; every other module calls the
    accessors below.
    """

    _skeleton: Skeleton
    _leaves: tuple[Any, ...]
    _flat: tuple[Any, ...] | None
    _built: Any

    __qualname__: str

    @property
    def captures(self) -> dict[str, Any]: ...

    @property
    def __wrapped__(self) -> Callable[..., Any]: ...

    def _arrays(self) -> tuple[Any, ...]: ...

    def _explain(self, err: Exception) -> None: ...


def skeleton_of(x: LiftedParts) -> Skeleton:
    """`x`'s skeleton: its treedef's static half."""
    return x._skeleton


def leaves_of(x: LiftedParts) -> tuple[Any, ...]:
    """`x`'s leaves as captured (Python scalars not converted)."""
    return x._leaves


def arrays_of(x: LiftedParts) -> tuple[Any, ...]:
    """`x`'s leaves, its Python scalars converted (once)."""
    return x._arrays()


def leaves_as_shown(x: LiftedParts) -> tuple[Any, ...]:
    """`x`'s leaves as they are now: converted if they were, else as captured."""
    return x._flat if x._flat is not None else x._leaves


def drop_built(x: LiftedParts, built: Any) -> None:
    """Forget `built`, if `x`'s calls still share it: the next call builds anew."""
    if x._built is built:
        x._built = None


def explain(x: LiftedParts, err: Exception) -> None:
    """Raise the error naming the capture, for JAX's concretization errors."""
    x._explain(err)


# -- one skeleton for equal ones ---------------------------------------------------

# Alive skeletons by hash, weakly: equal ones are one object, so JAX's check
# of a cached treedef is an identity.
_INTERNED: dict[int, weakref.ref[Skeleton]] = {}


def interned(skeleton: Skeleton) -> Skeleton:
    """The skeleton alive equal to `skeleton` in all it holds, else `skeleton`.

    Equal means equal keys, options and Python-scalar leaves. Your own
    objects it keeps (lists, dicts, empty cells) and annotations must be the
    very same. One holding a live tracer is never shared.
    """
    if skeleton.live is not None:
        return skeleton
    ref = _INTERNED.get(h := skeleton._hash)
    old = ref() if ref is not None else None
    if old is None:
        _INTERNED[h] = weakref.ref(skeleton, functools.partial(_forget, h))
    # A hash shared by unequal ones: the first stays.
    return old if old is not None and _same(old, skeleton) else skeleton


def _forget(h: int, ref: weakref.ref[Skeleton]) -> None:
    if _INTERNED.get(h) is ref:
        _INTERNED.pop(h, None)


def _same(a: Skeleton, b: Skeleton) -> bool:
    return (
        (a.own, a.options, a.float_leaves) == (b.own, b.options, b.float_leaves)
        and a == b
        and _annotations(a) == _annotations(b)
        and _objects(a, b)
    )


# Statics whose equal values are interchangeable: equal ones compute alike.
_INTERCHANGEABLE: Final = UNOPENED | {type}


def _objects(a: Skeleton, b: Skeleton) -> bool:
    """Whether the other statics are the very same objects.

    So are the pytree nodes' static data. Equal by a user's `__eq__` is not
    the same: a new trace runs with each `Lifted`'s own object, as `jax.jit`
    does with a static argument."""
    for ta, tb in zip(a.templates(), b.templates(), strict=True):
        if ta.aux is not None and not all(
            map(_alike, _aux_data(ta.treedef), _aux_data(tb.treedef))
        ):
            return False
        for s, r in zip(ta.slots, tb.slots, strict=True):
            if type(s) is Static and not _alike(s.value, cast(Static, r).value):
                return False
    return True


def _aux_data(treedef: Any) -> list[Any]:
    """The static data of `treedef`'s custom nodes, as objects."""
    return [aux for _, aux in custom_data(treedef)]


def _alike(x: Any, y: Any) -> bool:
    """The same object, or equal values that compute alike (tuples of them too)."""
    if x is y or type(x) in _INTERCHANGEABLE:
        return True
    return (
        type(x) is tuple
        and type(y) is tuple
        and len(x) == len(y)  # pyright: ignore[reportUnknownArgumentType]
        and all(map(_alike, x, y))  # pyright: ignore[reportUnknownArgumentType]
    )


def _annotations(skeleton: Skeleton) -> list[list[tuple[str, int]]]:
    """Each function's annotations by name and identity: equal ones are the
    very same objects, so each rebuilt function keeps its own signature."""
    return [
        [(k, id(v)) for k, v in cast("dict[str, Any]", n.meta.value[2] or {}).items()]
        for n in skeleton.nodes
        if type(n) is FunctionNode
    ]
