"""What the walk makes of each leaf: static, dynamic or a node.

`Leaves` holds the walk's state of leaves and nodes, and the one statement of
the static rule per leaf (`kind`). `lift._capture.walk.Walk` is one."""

from __future__ import annotations

import types
from collections import deque
from collections.abc import Callable
from typing import Any, Final

from .._base.caches import BoundedDict
from .._base.errors import code_of, describe
from .._compat import Tracer
from .._copies.own import own_static
from .._holders import trees as jtu
from .._holders.closure import user_class
from .._holders.labels import Label, variable_str
from .._holders.trees import is_function_like
from .._rule.code import Branches
from .._rule.floats import python_number, scalar_leaf
from .._rule.scope import Scope
from .._rule.static import (
    ALWAYS_DYNAMIC,
    DYNAMIC_ATOMS,
    PY_SCALARS,
    STATIC_ATOMS,
    DynamicNames,
    branch_static,
    check_opaque,
    default_dynamic,
    is_jax_value,
)
from .._skeleton.nodes import Node, Slot, Static, Template, followed
from .._skeleton.shared import ref_to
from .flatten import int_leaf, not_traceable, static_tracer

# What `Leaves.kind` says of a leaf.
STATIC: Final = "static"
DYNAMIC: Final = "dynamic"
NODE: Final = "node"


class Leaves:
    """State of one capture: the nodes found so far and the leaves collected.

    `branched_cells` maps the ids of cells that some function sharing them
    branches on to the keys the branches read. A first walk finds them
    (`capture`). Their scalars there stay static, whichever function reached
    them first.

    With `dynamic=` names (`DynamicNames`), nodes reached from a named capture
    are in its `scope` (`lift._rule.scope`).

    `frozen` holds the ids of the functions and cells a static capture holds
    too (a registry's, found by a first walk: `held`). The call may reach them
    through that capture, so they are static.
    """

    def __init__(
        self,
        root: Any,
        static: frozenset[str],
        dynamic: Callable[[Any], bool] | DynamicNames | None,
        branched_cells: dict[int, Branches] | None = None,
        scoped_ids: frozenset[int] = frozenset(),
        frozen: frozenset[int] = frozenset(),
    ) -> None:
        self.root = root
        self.static = static
        self.named: frozenset[str] | None = None
        if isinstance(dynamic, DynamicNames):
            self.named, dynamic = dynamic.names, None
        self.dynamic: Callable[[Any], bool] | None = dynamic
        self.branched_cells = branched_cells or {}
        self.frozen = frozen
        # Functions and cells the static captures hold (`check_opaque`).
        self.held: set[int] = set()
        self.scope = Scope(self.named, scoped_ids)
        self.nodes: list[Node | None] = []
        self.parents: list[tuple[Template, int] | None] = []
        self.ids: dict[int, int] = {}
        self.leaves: list[Any] = []
        self.float_leaves: list[int] = []
        self.names: set[str] = set()
        self.queue: deque[tuple[int, Any]] = deque()
        self.shared: set[int] = set()  # cells held by several functions
        self.attributes = False  # whether a function has attributes of its own
        # What static capture holds a tracer of a transform still running, if
        # any: a `Lifted` of it refuses to be flattened, and no cache keeps its
        # skeleton (it would keep the tracer alive).
        self.live: str | None = None
        # Cells whose capture put a scalar among the leaves: (cell, cell index,
        # whether it is a boolean).
        self.scalar_cells: list[tuple[types.CellType, int, bool]] = []
        # Each cell, function and partial as the walk read it (`lift.jit` watches it).
        self.read: list[tuple[Any, Any]] = []
        # The ids of your own objects it keeps: lists, dicts, sets, empty cells.
        self.own: list[int] = []
        # The holder and label each node was first reached from (for errors).
        self.reached_from: dict[int, tuple[Any, Label]] = {}
        # No `static=`/`dynamic=` and no redo: the common walk, whose floats and
        # arrays are leaves and whose functions are nodes, wherever they are.
        self.fast = (
            dynamic is None
            and self.named is None
            and not (static or self.branched_cells or frozen)
        )

    def mine(self, value: Any, key: Any = None) -> Static:
        """`value` kept as your own object (`own_static`), its id recorded."""
        self.own.append(id(value))
        return own_static(value, key, code_of(self.root))

    def opaque(self, value: Any, t: Any, holder: Any, label: Label, *at: Any) -> None:
        """Scan a static capture (`check_opaque`), noting the functions it holds."""
        live = check_opaque(value, t, holder, label, *at, held=self.held)
        if live is not None and self.live is None:
            self.live = live

    # -- nodes -------------------------------------------------------------------

    def new_node(self, obj: Any) -> int:
        index = len(self.nodes)
        self.nodes.append(None)
        self.parents.append(None)
        self.ids[id(obj)] = index
        self.queue.append((index, obj))
        if id(obj) in self.scope.ids:
            self.scope.add(index, obj)
        return index

    def captured_as(self, i: int) -> str:
        """How an error names node `i`: the function capturing it and the
        variable, or the function lifted, where the walk first reached it."""
        owner, label = self.reached_from.get(i, (None, None))
        if owner is None or label is None:
            return describe(self.root)
        return f"{describe(owner)} captures {variable_str(label)}"

    def functions(self, value: Any, t: type[Any]) -> Any:
        """The treedef of a tuple or NamedTuple of plain functions, else `None`.

        Lift takes apart none of these (`taken_apart`): an optax `MultiSteps`
        holds bound methods."""
        if t is list or not jtu.read_as_tuple(t) or not value:
            return None
        for x in value:
            if type(x) is not types.FunctionType:
                return None
        treedef = _TUPLES.get(shape := (t, len(value)))
        if treedef is None:
            treedef = _TUPLES.add(
                shape, jtu.tree_structure(value, is_leaf=is_function_like)
            )
        return treedef

    def kind(
        self, leaf: Any, forced: bool, branched: bool, pinned: bool = False
    ) -> str:
        """What the walk makes of one leaf: `STATIC`, `DYNAMIC` or `NODE`.

        A `NODE` is function-like, walked as a node of its own. This is the one
        statement of `dynamic=`, `static=` and branch analysis. `pinned` marks a
        leaf outside the `dynamic=` names. `slot` records what it says. `slot`
        raises where it cannot keep it."""
        t: type[Any] = type(leaf)  # pyright: ignore[reportUnknownVariableType]
        if forced or (t in STATIC_ATOMS and self.dynamic is None):
            return STATIC
        if is_function_like(leaf):
            return STATIC if id(leaf) in self.frozen else NODE
        if self.dynamic is not None:
            dyn = bool(self.dynamic(leaf))
        else:
            dyn = t in ALWAYS_DYNAMIC or default_dynamic(leaf)
            dyn = dyn and not (pinned and python_number(t))
        if dyn and branched and branch_static(leaf, t):
            # `if b2 != 1.0:` in Python: a traced b2 could not run. Keep it
            # static, unless `dynamic=` names it: then it is dynamic as asked,
            # and the branch is refused when traced, naming the capture.
            dyn = self.named is not None and not pinned
        return DYNAMIC if dyn else STATIC

    def slot(
        self,
        leaf: Any,
        forced: bool,
        branched: bool,
        holder: Any,
        label: Label,
        new_nodes: list[tuple[int, int]],
        at: tuple[Any, int],
        owned: frozenset[int] = frozenset(),
        pinned: bool = False,
    ) -> Slot:
        t: type[Any] = type(leaf)  # pyright: ignore[reportUnknownVariableType]
        if t in STATIC_ATOMS and (forced or self.dynamic is None):
            if t is type and user_class(leaf):
                self.opaque(leaf, t, holder, label, at)
            return Static(leaf)
        if owned and id(leaf) in owned:
            # A list or dict nested in the capture that holds no dynamic leaf
            # and no function: the user's own object, as at the top (`own_static`).
            self.opaque(leaf, t, holder, label, at)
            return self.mine(leaf)
        what = self.kind(leaf, forced, branched, pinned)
        if what is NODE:
            index = self.ids.get(id(leaf))
            if index is None:
                index = self.new_node(leaf)
                self.reached_from[index] = (holder, label)
                new_nodes.append((index, at[1]))
                if not pinned and self.named is not None:
                    self.scope.add(index, leaf)
            else:
                self.scope.reached(index, leaf, pinned)
            return ref_to(index)
        if what is DYNAMIC:
            if self.dynamic is not None and not forced and not is_jax_value(leaf):
                raise not_traceable(holder, label, t, at)
            if t is int:  # as `dynamic=` by name makes one (`int_leaf`)
                int_leaf(holder, label, leaf)
            index = len(self.leaves)
            if issubclass(t, PY_SCALARS):
                self.float_leaves.append(index)
                if t not in DYNAMIC_ATOMS:  # `class Rate(float)`: as a float
                    leaf = scalar_leaf(leaf, t)
            self.leaves.append(leaf)
            return index
        if issubclass(t, Tracer):
            raise static_tracer(holder, label, leaf, at)
        self.opaque(leaf, t, holder, label, at)
        if t is set:  # a leaf to JAX: the user's own, as a list is
            return self.mine(leaf)
        return followed(leaf, self.read)


# The treedef of a tuple or NamedTuple of functions, by its type and length.
_TUPLES: BoundedDict[tuple[type[Any], int], Any] = BoundedDict(64)
