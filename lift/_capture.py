"""Capturing a closure: walk a function's graph into a `Skeleton` and its leaves.

The walk is iterative (a queue of nodes), visits each function, cell, partial and
bound method once (cycles and recursion included), and walks every captured
value as a pytree whose function leaves become nodes in turn. It reads the user's
objects and never writes to them.
"""

from __future__ import annotations

import difflib
import enum
import functools
import operator
import threading
import types
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, Final, cast

import jax
import numpy as np

from . import _gc
from ._closure import (
    cells,
    code_of,
    function_parts,
    has_defaults,
    holder_of,
    method_parts,
    partial_parts,
    user_class,
)
from ._code import CodeInfo, code_info
from ._compat import CUSTOM_NODES, Tracer, live_traces
from ._errors import LiftError, describe, static_fix
from ._hidden import aux_tracer, hidden_tracer, jax_dtype
from ._labels import ARG, ATTR, KEYWORD, SELF, Label
from ._mutation import ANY, ATTR_STEP, Path, mutated_paths
from ._nodes import (
    COMPOSITES,
    CellNode,
    FunctionNode,
    HolderNode,
    MethodNode,
    Node,
    PartialNode,
    Ref,
    Slot,
    Static,
    Template,
)
from ._replay import replay, walked
from ._skeleton import Skeleton
from ._static import attributes_by_global, leaf_class, scanned, static_key
from ._trees import (
    ITERATORS,
    MAX_CONTAINER_DEPTH,
    flatten_checked,
    irregular,
    is_function_like,
    ordered,
    read_as_tuple,
)
from ._verify import STATE, disagree, same_leaves

__all__ = [
    "capture",
    "check_opaque",
    "check_static_names",
    "default_dynamic",
    "hidden_tracer",
    "is_function_like",
]

_Tracer: Final = Tracer
# The skeleton cache's mark of a skeleton whose statics hold a live tracer.
LIVE: Final = "live tracers"
# Its mark of a skeleton holding a user's empty cell (only that closure has it).
USER_CELLS: Final = "user cells"
_ArrayImpl: Final[type[Any]] = type(jax.device_put(np.zeros(())))  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType, reportUnknownVariableType]

# Leaves decided by type alone (the fast path of a sweep re-lifting optimizers).
_STATIC_ATOMS: Final = frozenset(
    {
        int,
        bool,
        str,
        bytes,
        type(None),
        type(Ellipsis),
        type,
        types.ModuleType,
        np.dtype,
    }
)
_DYNAMIC_ATOMS: Final = frozenset({float, complex, _ArrayImpl, np.ndarray})
# Dynamic by type alone (a NumPy array also needs a dtype JAX can hold).
_ALWAYS_DYNAMIC: Final = frozenset({float, complex, _ArrayImpl})

_PY_SCALARS: Final = (float, complex, int)

# What `_Walk.kind` says of a leaf.
STATIC: Final = "static"
DYNAMIC: Final = "dynamic"
NODE: Final = "node"

_tuple_iter: Final = cast("Callable[[Any], Iterable[Any]]", tuple.__iter__)  # pyright: ignore[reportUnknownMemberType]


def _children(x: Any) -> Iterable[Any]:
    """The items of a list, tuple or NamedTuple (by `tuple`'s own iteration, as
    JAX reads them), or a dict's values."""
    if type(x) is dict:
        return cast("dict[Any, Any]", x).values()
    return _tuple_iter(x) if isinstance(x, tuple) else cast("list[Any]", x)


def _plain_reach(value: Any) -> set[int]:
    """The lists and dicts below `value` (not `value` itself: `template` keeps
    it whole itself) reached through lists, tuples, dicts and NamedTuples
    alone, by id; empty, cheaply, for a value nesting none."""
    t: type[Any] = type(value)  # pyright: ignore[reportUnknownVariableType]
    if not (t is list or t is dict or read_as_tuple(t)):
        return set()
    reach: set[int] = set()
    seen = {id(value)}
    stack = [value]
    while stack:
        for child in _children(stack.pop()):
            c: type[Any] = type(child)  # pyright: ignore[reportUnknownVariableType]
            if (c is list or c is dict or read_as_tuple(c)) and id(child) not in seen:
                seen.add(id(child))
                stack.append(child)
                if c is list or c is dict:
                    reach.add(id(child))
    return reach


def default_dynamic(x: Any) -> bool:
    """The default rule: arrays, tracers, NumPy values of dtypes JAX can hold,
    Python `float`/`complex` (not an `Enum` member valued as one: a tracer in
    its place would lose its identity)."""
    t: type[Any] = type(x)  # pyright: ignore[reportUnknownVariableType]
    if issubclass(t, (np.ndarray, np.generic)):
        return jax_dtype(x.dtype)
    if issubclass(t, _Tracer):
        return True
    if issubclass(t, (float, complex)):
        return not issubclass(t, enum.Enum)
    try:
        return isinstance(x, jax.Array)
    except Exception:  # an object whose attribute access fails: static
        return False


def unsortable_registry(value: Any) -> bool:
    """Whether `value` holds a dict whose keys do not sort (types, as in a
    `functools.singledispatch` registry) and nothing dynamic by the default
    rule: static as a whole, compared by its items. Walked iteratively through
    dicts, lists and tuples, at most `_REGISTRY_VISITS` of them."""
    stack = [value]
    unsortable = False
    seen = 0
    while stack:
        x = stack.pop()
        t: type[Any] = type(x)  # pyright: ignore[reportUnknownVariableType]
        if t is dict:
            seen += 1
            if seen > _REGISTRY_VISITS:
                return False
            if not unsortable:
                try:
                    sorted(x)  # pyright: ignore[reportUnknownArgumentType]
                except TypeError:
                    unsortable = True
            stack.extend(x.values())  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
        elif t is list or t is tuple:
            seen += 1
            if seen > _REGISTRY_VISITS:
                return False
            stack.extend(x)  # pyright: ignore[reportUnknownArgumentType]
        elif default_dynamic(x):
            return False
    return unsortable


_REGISTRY_VISITS: Final = 1_000


def is_jax_value(x: Any) -> bool:
    """What a dynamic leaf may be: something `jax.jit` takes as an argument."""
    return default_dynamic(x) or type(x) in (int, bool)  # pyright: ignore[reportUnknownArgumentType]


class _Walk:
    """State of one capture: the nodes found so far and the leaves collected.

    `branched_cells` holds the ids of cells that some function sharing them
    branches on in Python (found by a first walk, see `capture`): their scalar
    captures stay static whichever function reached them first.
    """

    def __init__(
        self,
        root: Any,
        static: frozenset[str],
        dynamic: Callable[[Any], bool] | None,
        branched_cells: frozenset[int] = frozenset(),
    ) -> None:
        self.root = root
        self.static = static
        self.dynamic = dynamic
        self.branched_cells = branched_cells
        self.nodes: list[Node | None] = []
        self.parents: list[tuple[Template, int] | None] = []
        self.ids: dict[int, int] = {}
        self.leaves: list[Any] = []
        self.float_leaves: list[int] = []
        self.names: set[str] = set()
        self.queue: deque[tuple[int, Any]] = deque()
        self.shared = False  # whether some cell is held by several functions
        # What static capture holds a tracer of a transform still running, if
        # any: the skeleton is then never cached (it would keep the tracer
        # alive), and a `Lifted` of it refuses to be flattened.
        self.live: str | None = None
        # Cells whose capture put a scalar among the leaves: (cell, cell index,
        # whether it is a boolean).
        self.scalar_cells: list[tuple[types.CellType, int, bool]] = []
        # Whether the skeleton holds a user's empty cell (by identity): never
        # kept for another closure to replay.
        self.user_cells = False

    def kept(self, live: str | None) -> None:
        if live is not None and self.live is None:
            self.live = live

    # -- nodes -------------------------------------------------------------------

    def new_node(self, obj: Any) -> int:
        index = len(self.nodes)
        self.nodes.append(None)
        self.parents.append(None)
        self.ids[id(obj)] = index
        self.queue.append((index, obj))
        return index

    def run(self) -> tuple[Skeleton, list[Any]]:
        self.new_node(self.root)
        queue = self.queue
        while queue:
            index, obj = queue.popleft()
            t: type[Any] = type(obj)  # pyright: ignore[reportUnknownVariableType]
            if t is types.FunctionType:
                self.nodes[index] = self.function(index, obj)
            elif t is types.MethodType:
                parts = self.parts(method_parts(obj), index, obj)
                _refuse_part_mutations(
                    obj.__func__, parts, [obj.__func__, obj.__self__], self.leaves
                )
                self.nodes[index] = MethodNode(parts)
            elif (holder := holder_of(obj)) is not None:
                self.nodes[index] = HolderNode(
                    holder,
                    holder.static(obj),
                    self.parts(holder.parts(obj), index, obj),
                )
            else:
                parts = self.parts(partial_parts(obj), index, obj)
                _refuse_part_mutations(
                    obj.func, parts, [v for _, v in partial_parts(obj)], self.leaves
                )
                self.nodes[index] = PartialNode(t, parts)
        nodes: list[Node] = self.nodes  # type: ignore[assignment]
        skeleton = Skeleton(
            nodes,
            self.order(nodes),
            self.parents,
            len(self.leaves),
            frozenset(self.float_leaves),
            tuple(map(leaf_class, self.leaves)),
        )
        skeleton.cache["names"] = frozenset(self.names)
        if self.live is not None:
            skeleton.cache[LIVE] = self.live
        if self.user_cells:
            skeleton.cache[USER_CELLS] = True
        return skeleton, self.leaves

    def parts(
        self, parts: Iterable[tuple[Label, Any]], index: int, holder: Any
    ) -> tuple[tuple[Label, Template], ...]:
        return tuple(
            (label, self.template(value, index, label, holder))
            for label, value in parts
        )

    def function(self, index: int, fn: types.FunctionType) -> FunctionNode:
        info = code_info(fn.__code__)
        indices: list[int] = []
        ids = self.ids
        nodes, leaves = self.nodes, self.leaves
        # A cell holding a float or an array, read by no branch and not rebound,
        # with no `static=`/`dynamic=` (the common capture, thousands in a wide
        # closure): `cell` inlined.
        fast = self.dynamic is None and not self.static and not self.branched_cells
        unplain = info.unplain
        for label, cell in cells(fn, info.cell_labels):
            cell_index = ids.get(id(cell))
            if cell_index is None:
                cell_index = len(nodes)
                ids[id(cell)] = cell_index
                self.parents.append(None)
                if fast:
                    try:
                        contents = cell.cell_contents
                    except ValueError:
                        contents = cell  # an empty cell: `cell` says so
                    t = type(contents)  # pyright: ignore[reportUnknownVariableType]
                    name = label.variable
                    if t in _ALWAYS_DYNAMIC and name not in unplain:
                        self.names.add(name)  # pyright: ignore[reportArgumentType]
                        leaf = len(leaves)
                        leaves.append(contents)
                        if t is not _ArrayImpl:
                            self.float_leaves.append(leaf)
                            self.scalar_cells.append((cell, cell_index, False))
                        nodes.append(
                            CellNode(
                                Template(None, (leaf,), index, label), label, index
                            )
                        )
                        indices.append(cell_index)
                        continue
                nodes.append(None)
                nodes[cell_index] = self.cell(cell, cell_index, label, fn, info, index)
            else:
                self.shared = True  # a cell of several functions
            indices.append(cell_index)
        defaults, kwdefaults = has_defaults(fn)
        parts: tuple[tuple[Label, Template], ...] = ()
        if defaults or kwdefaults or fn.__dict__:
            # A module-level `def f` reading `f.scale` reaches its attributes
            # through the module global, not through the rebuilt function:
            # leaves there would be dead, so its attributes are static instead.
            by_global = attributes_by_global(fn, info.global_names)
            parts = tuple(
                (
                    label,
                    self.template(
                        value, index, label, fn, forced=by_global and label.kind == ATTR
                    ),
                )
                for label, value in function_parts(fn)
            )
            for (label, template), (_, value) in zip(
                parts, function_parts(fn), strict=True
            ):
                if template.treedef is None:
                    continue
                if label.kind != ATTR:
                    _refuse_mutation(fn, label.variable, value, template, self.leaves)
                elif fn.__name__ in fn.__code__.co_freevars:
                    # `f.log.append(...)` in `f`, which names itself by a cell.
                    _refuse_mutation(
                        fn,
                        fn.__name__,
                        value,
                        template,
                        self.leaves,
                        ((ATTR_STEP, label.key),),
                    )
        return FunctionNode(
            info,
            fn.__globals__,
            fn.__name__,
            fn.__qualname__,
            tuple(indices),
            parts,
            defaults,
            kwdefaults,
            _meta(fn),
        )

    def cell(
        self,
        cell: types.CellType,
        index: int,
        label: Label,
        fn: types.FunctionType,
        info: CodeInfo,
        owner: int,
    ) -> CellNode:
        name = cast(str, label.key)
        try:
            contents = cell.cell_contents
        except ValueError:
            # An empty cell: the user's own, which Python binds later (a
            # decorator's function named in its own body, `super()`'s class).
            self.names.add(name)
            self.user_cells = True
            return CellNode(None, label, owner, cell)
        branched = name in info.branched or id(cell) in self.branched_cells
        before = len(self.leaves)
        template = self.template(contents, index, label, fn, branched)
        if name in info.rebound and any(type(s) is not Static for s in template.slots):
            raise LiftError(
                f"{describe(fn)} rebinds the captured variable {name!r} "
                f"(`nonlocal {name}; {name} = ...`), which holds "
                f"{_what(template, self.leaves)}. A lifted function's "
                "dynamic captures are pytree leaves and cannot be "
                "reassigned from inside it.\n"
                f"Fix: pass {name!r} as an argument and return its new "
                f"value, or keep it static with {static_fix((name,))} if it is "
                "not an array.",
                anchor="rebinds-a-dynamic-capture",
                static=(name,),
            )
        if template.treedef is not None:
            _refuse_mutation(fn, name, contents, template, self.leaves)
        added = len(self.leaves) - before
        if added == 1:  # the common case, one value: no generator
            leaf = self.leaves[before]
            if issubclass(type(leaf), _BRANCHABLE):  # pyright: ignore[reportUnknownArgumentType]
                self.scalar_cells.append((cell, index, _is_bool(leaf)))
        elif added:
            values = self.leaves[before:]
            if any(issubclass(type(leaf), _BRANCHABLE) for leaf in values):  # pyright: ignore[reportUnknownArgumentType]
                self.scalar_cells.append((cell, index, any(map(_is_bool, values))))
        return CellNode(template, label, owner)

    # -- values ------------------------------------------------------------------

    def template(
        self,
        value: Any,
        owner: int,
        label: Label,
        holder: Any,
        branched: bool = False,
        forced: bool = False,
    ) -> Template:
        name = label.variable
        if type(name) is str:
            self.names.add(name)
        forced = forced or (name is not None and name in self.static)
        t: type[Any] = type(value)  # pyright: ignore[reportUnknownVariableType]
        if t in _STATIC_ATOMS and self.dynamic is None:
            # A user's class holds data (`registry = [...]`) as an instance of
            # it does: a tracer there is refused alike.
            if t is type and user_class(value):
                self.kept(check_opaque(value, t, holder, label))
            return Template(None, (Static(value),), owner, label)
        if (
            t in _ALWAYS_DYNAMIC
            and not forced
            and self.dynamic is None
            and not (branched and _branch_static(value, t))
        ):
            # A float or an array (the common capture): what `slot` makes of it.
            index = len(self.leaves)
            self.leaves.append(value)
            if t is not _ArrayImpl:
                self.float_leaves.append(index)
            return Template(None, (index,), owner, label)
        if issubclass(t, ITERATORS):
            # Static by identity; a suspended frame's locals may hold a tracer.
            self.kept(check_opaque(value, type(value), holder, label))  # pyright: ignore[reportUnknownArgumentType]
            return Template(None, (Static(value),), owner, label)
        order = None
        owned: dict[int, bool] = {}
        if forced or t not in _DYNAMIC_ATOMS or self.dynamic is not None:
            if is_function_like(value):
                leaves = [value]
                treedef = None
            else:
                try:
                    flat = flatten_checked(
                        value, self.own_leaf(value, forced, branched, owned)
                    )
                except (TypeError, ValueError) as err:
                    # JAX cannot flatten it (dict keys it cannot sort, a node
                    # whose flatten fails): whole and static, or refused.
                    if forced:
                        return Template(None, (Static(value),), owner, label)
                    if unsortable_registry(value):
                        self.kept(check_opaque(value, t, holder, label))
                        return Template(None, (Static(value),), owner, label)
                    raise LiftError(
                        f"{describe(holder)} captures {_variable(label)}, which "
                        f"JAX's pytree flattening refuses ({err}).\nFix: use dict "
                        f"keys of one type, or keep it static with "
                        f"{static_fix((name or 'name',))}.",
                        anchor="capture-flattening-refused",
                        static=(name or "name",),
                    ) from err
                if flat is None:
                    if forced:  # kept whole, by identity, as the fix says
                        return Template(None, (Static(value),), owner, label)
                    raise LiftError(
                        f"{describe(holder)} captures {_variable(label)}, a "
                        "container that contains itself or nests more than "
                        f"{MAX_CONTAINER_DEPTH} levels deep, which JAX's pytree "
                        "flattening cannot take.\nFix: pass it as an argument, or "
                        f"keep it static with {static_fix((name or 'name',))}.",
                        anchor="container-cycle",
                        static=(name or "name",),
                    )
                leaves, treedef = flat
                if treedef.num_nodes == 1 and treedef.num_leaves == 1:
                    treedef = None
                else:
                    if irregular(value):
                        order = ordered(value, treedef, static_key)
                    self.kept(_check_aux(treedef, holder, label))
        else:
            leaves = [value]
            treedef = None
        slots: list[Slot] = []
        new_nodes: list[tuple[int, int]] = []
        frozen = frozenset(k for k, v in owned.items() if v)
        for pos, leaf in enumerate(leaves):
            slots.append(
                self.slot(leaf, forced, branched, holder, label, new_nodes, pos, frozen)
            )
        if (
            t in _OWN_CONTAINERS
            and all(type(s) is Static for s in slots)
            and _plain(value)
        ):
            # A list or dict holding no dynamic leaf and no function (a log, a
            # cache, a counter): the user's own object, its contents the key.
            return Template(None, (_own(value),), owner, label)
        template = Template(treedef, tuple(slots), owner, label, order)
        for node_index, pos in new_nodes:
            self.parents[node_index] = (template, pos)
        return template

    def kind(self, leaf: Any, forced: bool, branched: bool) -> str:
        """What the walk makes of one leaf of a captured value: `STATIC`,
        `DYNAMIC` or `NODE` (a function-like, walked as a node of its own). The
        one statement of the `dynamic=` rule, `static=` names and branch
        analysis; `slot` records what it says and raises where it cannot be
        kept (a tracer made static, a `dynamic=` leaf JAX cannot trace)."""
        t: type[Any] = type(leaf)  # pyright: ignore[reportUnknownVariableType]
        if t in _STATIC_ATOMS and (forced or self.dynamic is None):
            return STATIC
        if not forced and is_function_like(leaf):
            return NODE
        if forced:
            return STATIC
        if self.dynamic is not None:
            dyn = bool(self.dynamic(leaf))
        else:
            dyn = t in _ALWAYS_DYNAMIC or default_dynamic(leaf)
        if dyn and branched and _branch_static(leaf, t):
            # `if b2 != 1.0:` in Python: a traced b2 could not run. Keep it static.
            dyn = False
        return DYNAMIC if dyn else STATIC

    def slot(
        self,
        leaf: Any,
        forced: bool,
        branched: bool,
        holder: Any,
        label: Label,
        new_nodes: list[tuple[int, int]],
        pos: int,
        owned: frozenset[int] = frozenset(),
    ) -> Slot:
        t: type[Any] = type(leaf)  # pyright: ignore[reportUnknownVariableType]
        if t in _STATIC_ATOMS and (forced or self.dynamic is None):
            if t is type and user_class(leaf):
                self.kept(check_opaque(leaf, t, holder, label))
            return Static(leaf)
        if owned and id(leaf) in owned:
            # A list or dict nested in the capture that holds no dynamic leaf
            # and no function: the user's own object, as at the top (`_own`).
            self.kept(check_opaque(leaf, t, holder, label))
            return _own(leaf)
        what = self.kind(leaf, forced, branched)
        if what is NODE:
            index = self.ids.get(id(leaf))
            if index is None:
                index = self.new_node(leaf)
                new_nodes.append((index, pos))
            return Ref(index)
        name = label.variable
        if what is DYNAMIC:
            if self.dynamic is not None and not forced and not is_jax_value(leaf):
                raise LiftError(
                    f"{describe(holder)} captures {_variable(label)}, a "
                    f"{t.__name__}, which your `dynamic=` predicate made a leaf, but "
                    "JAX cannot trace it.\nFix: make the predicate accept only "
                    "arrays and numbers, or keep it static with "
                    f"{static_fix((name or 'name',))}.",
                    anchor="dynamic-predicate",
                    static=(name or "name",),
                )
            index = len(self.leaves)
            self.leaves.append(leaf)
            if issubclass(t, _PY_SCALARS):
                self.float_leaves.append(index)
            return index
        if issubclass(t, _Tracer):
            raise LiftError(
                f"{describe(holder)} captures {_variable(label)} as static, "
                f"but it holds a tracer ({_aval(leaf)}). A static capture becomes "
                "part of the compiled program's key and would leak the tracer.\n"
                "Fix: let it be dynamic (remove it from `static=`, or make your "
                "`dynamic=` predicate accept tracers).",
                anchor="static-capture-holds-a-tracer",
            )
        self.kept(check_opaque(leaf, t, holder, label))
        if t is set:  # a leaf to JAX: the user's own, as a list is
            return _own(leaf)
        return Static(leaf)

    def own_leaf(
        self, value: Any, forced: bool, branched: bool, owned: dict[int, bool]
    ) -> Callable[[Any], bool]:
        """The `is_leaf` a capture is flattened with: function-likes, and the
        lists and dicts nested in `value` through lists, tuples, dicts and
        NamedTuples that hold no dynamic leaf and no function, each kept whole,
        the user's own object (`_own`), so that code appending to it or filling
        it acts on it. (One inside a registered node is rebuilt with the node,
        whose unflatten may demand a container there: mutating it is refused,
        `_refuse_mutation`.) `owned` records the answer for each list or dict
        met."""
        reach = _plain_reach(value)
        if not reach:
            return is_function_like

        def is_leaf(x: Any) -> bool:
            t: type[Any] = type(x)  # pyright: ignore[reportUnknownVariableType]
            if (t is not list and t is not dict) or id(x) not in reach:
                return is_function_like(x)
            found = owned.get(id(x))
            if found is None:
                flat = flatten_checked(x, is_function_like)
                found = owned[id(x)] = (
                    flat is not None
                    and _plain(x)
                    and all(
                        not issubclass(type(leaf), _Tracer)  # pyright: ignore[reportUnknownArgumentType]
                        and self.kind(leaf, forced, branched) is STATIC
                        for leaf in flat[0]
                    )
                )
            return found

        return is_leaf

    @staticmethod
    def order(nodes: list[Node]) -> tuple[int, ...]:
        """Partial and method nodes, each after the partials/methods it refers to."""
        pending = {
            i: {
                s.index
                for _, t in n.parts()
                for s in t.slots
                if type(s) is Ref and isinstance(nodes[s.index], COMPOSITES)
            }
            for i, n in enumerate(nodes)
            if isinstance(n, COMPOSITES)
        }
        out: list[int] = []
        done: set[int] = set()
        while pending:
            ready = [i for i, deps in pending.items() if deps <= done]
            if not ready:
                raise LiftError(
                    "the captured partials or bound methods refer to each other in a "
                    "cycle, which cannot be rebuilt.\nFix: break the cycle through a "
                    "function (a closure can refer to itself).",
                    anchor="partial-cycle",
                )
            for i in sorted(ready):
                out.append(i)
                done.add(i)
                del pending[i]
        return tuple(out)

    def branched_elsewhere(self) -> frozenset[int]:
        """Cells holding a scalar leaf that another function sharing the cell
        branches on, and cells holding a NumPy boolean in a graph with code that
        branches on its parameters (where the boolean may flow): the walk must be
        redone with them static, so that the answer does not depend on which
        function the walk met first."""
        if not self.scalar_cells:
            return frozenset()
        if not self.shared and not any(boolean for _, _, boolean in self.scalar_cells):
            return frozenset()  # each cell read by one function: analysed already
        readers: dict[int, list[FunctionNode]] = {}
        flows = False
        for node in self.nodes:
            if type(node) is FunctionNode:
                flows = flows or node.info.branches_on_params
                for c in node.cells:
                    readers.setdefault(c, []).append(node)
        out: set[int] = set()
        for cell, index, boolean in self.scalar_cells:
            name = cast(CellNode, self.nodes[index]).name
            if (boolean and flows) or any(
                name in fn.info.branched for fn in readers.get(index, ())
            ):
                out.add(id(cell))
        return frozenset(out)


# Containers the lifted function shares with the original when they hold no
# dynamic leaf (`_own`): what code appends to, fills or counts in.
_OWN_CONTAINERS: Final = (list, dict)


def _refuse_mutation(
    fn: types.FunctionType,
    name: str | None,
    value: Any,
    template: Template,
    leaves: list[Any],
    prefix: Path = (),
) -> None:
    """A `LiftError` if `fn`'s code mutates a list or dict that lift rebuilds
    around its leaves (not the user's own object: see `_own`), reached from the
    variable `name` (which holds `value`, captured as `template`) by a path the
    code reads (`state[0].append`, `d['log'][k] = v`); `prefix`: the part of
    the path that leads from `name` to `value` (a function attribute's)."""
    if name is None or template.treedef is None:
        return  # kept whole: the user's own object
    paths = mutated_paths(fn.__code__, fn.__globals__).get(name)
    if not paths:
        return
    kept = {id(s.value) for s in template.slots if type(s) is Static}
    rebuilt = _rebuilt(value, kept)
    for path in paths:
        if path[: len(prefix)] != prefix:
            continue
        target = _target(value, path[len(prefix) :], kept, rebuilt)
        if target is None:
            continue
        what = type(target).__name__
        at = "" if not path else f" (at `{name}{_path_text(path)}`)"
        held = _what_in(target, template, leaves)
        raise LiftError(
            f"{describe(fn)} mutates the captured variable {name!r} in place{at}, "
            f"a {what} that {held}. lift rebuilds such a {what} around its "
            f"leaves, so the change would reach a copy, not your {what}.\nFix: "
            f"pass {name!r} as an argument and return what the code adds to it, "
            f"or keep only static values in it, outside pytree nodes (a {what} "
            "without arrays, floats or functions, in a capture or in lists, "
            "tuples and dicts, is your own object inside the lifted function).",
            anchor="mutates-a-rebuilt-container",
        )


def _rebuilt(value: Any, kept: set[int]) -> set[int]:
    """The lists and dicts in `value` that JAX's flattening rebuilds (it visits
    them as nodes: not those kept whole, nor a pytree's static data), by id."""
    visited: set[int] = set()

    def is_leaf(x: Any) -> bool:
        if id(x) in kept or is_function_like(x):
            return True
        t: type[Any] = type(x)  # pyright: ignore[reportUnknownVariableType]
        if t is list or t is dict:
            visited.add(id(cast(object, x)))
        return False

    flatten_checked(value, is_leaf)
    return visited


def _target(value: Any, path: Path, kept: set[int], rebuilt: set[int]) -> Any:
    """A list or dict that `path` reaches in `value` and that lift rebuilds
    (`rebuilt`), or `None`. A key the code computes (`ANY`) reaches every
    item; what cannot be read (another branch of the code) reaches nothing."""
    current = [value]
    for step in path:
        following: list[Any] = []
        for x in current:
            if id(x) in kept:
                continue  # the user's own object, and all it holds
            try:
                if step == ANY:
                    if isinstance(x, dict):
                        following.extend(cast("dict[Any, Any]", x).values())
                    elif isinstance(x, (list, tuple)):
                        following.extend(cast("list[Any]", x))
                elif step[0] == ATTR_STEP:
                    following.append(getattr(x, step[1]))
                else:
                    following.append(x[step[1]])
            except Exception:  # not there: nothing
                continue
        current = following
    for x in current:
        if id(x) in rebuilt:
            return x
    return None


def _what_in(target: Any, template: Template, leaves: list[Any]) -> str:
    """What a rebuilt container holds, for a message."""
    held = {id(leaves[s]): leaves[s] for s in template.slots if type(s) is int}
    flat = flatten_checked(target, is_function_like)
    for leaf in flat[0] if flat is not None else ():
        if id(leaf) in held:
            return f"holds a dynamic value ({_aval(leaf)})"
    if flat is not None and any(map(is_function_like, flat[0])):
        return "holds a function"
    return "sits in a pytree node"


def _path_text(path: Path) -> str:
    return "".join(
        "[…]"
        if step == ANY
        else f".{step[1]}"
        if step[0] == ATTR_STEP
        else f"[{step[1]!r}]"
        for step in path
    )


def _parameter(fn: Any, label: Label) -> tuple[types.FunctionType, str] | None:
    """The function and parameter a partial's argument or a bound method's
    object is passed to, when that function is a plain one."""
    offset = 0
    func = fn
    if type(func) is types.MethodType:
        func, offset = func.__func__, 1
    if type(func) is not types.FunctionType:
        return None
    code = func.__code__
    if label.kind == SELF or label.kind == ARG:
        i = (0 if label.kind == SELF else cast(int, label.key)) + offset
        return (func, code.co_varnames[i]) if i < code.co_argcount else None
    if label.kind == KEYWORD:
        return func, cast(str, label.key)
    return None


def _refuse_part_mutations(
    func: Any,
    parts: tuple[tuple[Label, Template], ...],
    obj_parts: list[Any],
    leaves: list[Any],
) -> None:
    """`_refuse_mutation` for the arguments a partial binds and the object a
    method is bound to, by the parameters of the function they are passed to."""
    for (label, template), value in zip(parts, obj_parts, strict=True):
        if template.treedef is None or label.kind not in (SELF, ARG, KEYWORD):
            continue
        found = _parameter(func, label)
        if found is not None:
            _refuse_mutation(found[0], found[1], value, template, leaves)


def _own(value: Any) -> Static:
    """A list, dict or set kept as the user's very object: compared by its
    contents as they are now (type and value at every depth, dict order
    included), never replaced by an equal one (`exact=False`: a skeleton
    holding it is not shared, and the replay takes only that object)."""
    try:
        key = _contents_key(value)
        hash(key)
    except Exception:  # an unhashable static inside: by identity
        return Static(value)
    return Static(value, key, exact=False)


def _plain(value: Any) -> bool:
    """Whether `value` nests only lists, tuples and dicts, not pytree nodes of
    other kinds (whose static data JAX's treedef compares in its own way)."""
    stack = [value]
    while stack:
        x = stack.pop()
        t: type[Any] = type(x)  # pyright: ignore[reportUnknownVariableType]
        if t is list or t is tuple:
            stack.extend(x)
        elif t is dict:
            stack.extend(x.values())
        elif x is not None and (
            t in CUSTOM_NODES or hasattr(cast(Any, t), "_fields")  # a NamedTuple
        ):
            return False
    return True


def _contents_key(value: Any) -> Any:
    t: type[Any] = type(value)  # pyright: ignore[reportUnknownVariableType]
    if t is list:
        return (t, tuple(map(_contents_key, value)))
    if t is dict:
        return (t, tuple((static_key(k), _contents_key(v)) for k, v in value.items()))
    if t is set:
        return (t, frozenset(map(static_key, value)))
    return static_key(value)


def _meta(fn: types.FunctionType) -> Static:
    """A function's docstring, module and annotations, as one static keyed by
    the docstring and module only: annotations never change what the code
    computes, and are new objects at every `def` (jaxtyping's `Float[Array,
    "n"]`, 3.12's type parameters), so keying on them would compile every new
    closure anew. A skeleton captured before stands in for an equal one only
    with the very same annotations (`_same_annotations`), so that each `Lifted`
    rebuilds its own function's signature."""
    doc, annotations = fn.__doc__, fn.__annotations__
    module = cast(object, fn.__module__)  # `None` for code exec'd without `__name__`
    value = (doc, module, dict(annotations) if annotations else None)
    if (doc is None or type(doc) is str) and (module is None or type(module) is str):
        return Static(value, ("meta", doc, module), exact=True)
    return Static(value, Static((doc, module)).slot_key, exact=False)


# Leaf types that Python control flow can read (`if b2 != 1.0`, `if mask`).
_BRANCHABLE: Final = (float, complex, int, np.generic, np.ndarray)


def _branch_static(leaf: Any, t: type[Any]) -> bool:
    """Whether a dynamic `leaf` that code branches on must stay static: Python
    scalars, NumPy scalars and 0-d NumPy arrays (concrete values Python can read)."""
    if issubclass(t, _PY_SCALARS):
        return True
    return issubclass(t, (np.generic, np.ndarray)) and leaf.ndim == 0


def _is_bool(leaf: Any) -> bool:
    t: type[Any] = type(leaf)  # pyright: ignore[reportUnknownVariableType]
    return (
        issubclass(t, (np.generic, np.ndarray))
        and leaf.dtype == np.bool_
        and leaf.ndim == 0
    )


def _check_aux(treedef: Any, holder: Any, label: Label) -> str | None:
    """As `check_opaque`, for the static (aux) data of a captured pytree."""
    return _live_or_refuse(
        functools.partial(aux_tracer, treedef),
        lambda: (
            f"{describe(holder)} captures {_variable(label)}, a pytree whose "
            f"static data holds a tracer at {label.variable or label.text}"
        ),
        "A treedef's static data is part of the compiled program's key, so the "
        "tracer would leak.\nFix: make the traced value a child of the pytree "
        "(not a static field), or pass it as an argument.",
        "tracer-in-static-pytree-data",
    )


def check_opaque(leaf: Any, t: type[Any], holder: Any, label: Label) -> str | None:
    """Refuse a static capture with a tracer hidden inside it whose transform has
    exited (the full walk and the replay alike). One whose transform is still
    running is kept, as the function itself keeps it while it runs there: said
    (what `Lifted`'s flattening refuses, `LIVE`), or `None`."""
    if not scanned(t):
        return None
    return _live_or_refuse(
        functools.partial(hidden_tracer, leaf),
        lambda: (
            f"{describe(holder)} captures {_variable(label)}, a {t.__name__} "
            f"that is not a pytree and holds a tracer at {label.variable or label.text}"
        ),
        "lift cannot make that tracer a leaf, and keeping it would leak it.\n"
        "Fix: convert the function with `lift.closure_convert(f, "
        "*example_args)` inside the transform, register the class as a pytree, "
        "or pass the value as an argument.",
        "hidden-tracer",
    )


def _live_or_refuse(
    find: Callable[..., str | None],
    what: Callable[[], str],
    why_and_fix: str,
    anchor: str,
) -> str | None:
    """`None` when `find()` finds no tracer (the common case: nothing else is
    computed); what it found, when the tracer's transform is still running
    (`find(live_traces())` finds none of the exited); else a `LiftError`:
    `what()`, where the exited tracer is, `why_and_fix`."""
    first = find()
    if first is None:
        return None
    where = find(live_traces())
    if where is None:
        return f"{what()}{first}"
    raise LiftError(
        f"{what()}{where}, from a transform that has exited. {why_and_fix}",
        anchor=anchor,
    )


def _variable(label: Label) -> str:
    name = label.variable
    if name is not None:
        return f"variable {name!r}"
    return f"`{label.text}`"


def _aval(x: Any) -> str:
    aval = getattr(x, "aval", None)
    return str(aval) if aval is not None else type(x).__name__


def _what(template: Template, leaves: list[Any]) -> str:
    for s in template.slots:
        if type(s) is int:
            return f"a dynamic value ({_aval(leaves[s])})"
    return "a function"


def capture(
    obj: Any,
    *,
    static: frozenset[str] = frozenset(),
    dynamic: Callable[[Any], bool] | None = None,
) -> tuple[Skeleton, list[Any]]:
    """Walk `obj` (a function, bound method or partial) into a skeleton and leaves.

    A closure shaped like one captured before (same code objects, equal static
    captures: the common case of a sweep re-lifting fresh optimizers) is replayed
    against that skeleton, which is then shared; anything else takes the full walk.
    """
    if dynamic is not None:
        return _walk(obj, static, dynamic)
    t: type[Any] = type(obj)  # pyright: ignore[reportUnknownVariableType]
    if t is types.FunctionType:
        key = ((id(obj.__code__), t), static)
    else:
        key = (_entry_code(obj), static)
    ref = _recent_skeletons.get(key)
    previous = None if ref is None else ref()
    if previous is not None:
        leaves = replay(previous, obj)
        if leaves is not None:
            if STATE.on:
                _check_replay(previous, leaves, obj, static)
            return previous, leaves
    skeleton, leaves = _walk(obj, static, dynamic)
    if (
        previous is not None
        and skeleton == previous
        and _exact(skeleton)
        and _same_annotations(skeleton, previous)
        and LIVE not in skeleton.cache  # the mark is the walk's, not the key's
    ):
        walked(previous)  # towards compiling its replay
        return previous, leaves
    cache = skeleton.cache
    if key[0] is not None and LIVE not in cache and USER_CELLS not in cache:
        with _lock:
            _recent_skeletons[key] = weakref.ref(skeleton, _forget(key))
            _keep.append(skeleton)
    return skeleton, leaves


def _check_replay(
    skeleton: Skeleton, leaves: list[Any], obj: Any, static: frozenset[str]
) -> None:
    """With `lift.verifying()` on: that the replay gave what the full walk gives."""
    try:
        walked_skeleton, walked_leaves = _walk(obj, static, None)
    except LiftError as err:
        raise disagree(
            "replay of a shape seen before", obj, f"the full walk refuses it ({err})"
        ) from err
    if walked_skeleton != skeleton:
        raise disagree(
            "replay of a shape seen before",
            obj,
            f"another treedef:\n  replay: {skeleton!r:.400}\n  walk:   "
            f"{walked_skeleton!r:.400}",
        )
    if LIVE in walked_skeleton.cache:
        raise disagree(
            "replay of a shape seen before",
            obj,
            f"the full walk finds {walked_skeleton.cache[LIVE]}, which the replay "
            "let through",
        )
    if len(leaves) != len(walked_leaves) or not all(
        map(operator.is_, leaves, walked_leaves)
    ):
        raise disagree(
            "replay of a shape seen before",
            obj,
            f"other leaves ({same_leaves(leaves, walked_leaves) or 'other objects'})",
        )


def _walk(
    obj: Any, static: frozenset[str], dynamic: Callable[[Any], bool] | None
) -> tuple[Skeleton, list[Any]]:
    with _gc.paused():
        walk = _Walk(obj, static, dynamic)
        result = walk.run()
        # A cell shared by several functions: one that branches on it in Python
        # keeps it static, whichever function the walk reached it through.
        branched = walk.branched_elsewhere()
        if branched:
            result = _Walk(obj, static, dynamic, branched).run()
        return result


def _same_annotations(a: Skeleton, b: Skeleton) -> bool:
    """Whether two equal skeletons' functions carry the very same annotations
    (not part of the key: an equal skeleton with others would rebuild them)."""
    for x, y in zip(a.nodes, b.nodes, strict=True):
        if type(x) is FunctionNode and type(y) is FunctionNode:
            u, v = x.meta.value[2], y.meta.value[2]
            if u is None or v is None:
                if u is not v:
                    return False
            elif tuple(u) != tuple(v) or not all(
                map(operator.is_, u.values(), v.values())
            ):
                return False
    return True


def _exact(skeleton: Skeleton) -> bool:
    """Whether every static of `skeleton` is determined by its key, so that an
    equal skeleton (one captured before) may stand in for it."""
    exact = skeleton.cache.get("exact")
    if exact is None:
        statics = [
            s
            for node in skeleton.nodes
            for _, t in node.parts()
            for s in t.slots
            if type(s) is Static
        ]
        statics.extend(n.meta for n in skeleton.nodes if type(n) is FunctionNode)
        exact = skeleton.cache["exact"] = all(s.exact for s in statics)
    return exact


def check_static_names(
    static: frozenset[str], names: frozenset[str], obj: Any, caller: str
) -> None:
    """A `LiftError` for names in `static=` that no captured variable has."""
    unknown = sorted(static - names)
    if not unknown:
        return
    known = ", ".join(repr(n) for n in sorted(names)) or "none"
    said: list[str] = []
    for u in unknown:
        near = difflib.get_close_matches(u, names, n=1)
        said.append(f"{u!r} (did you mean {near[0]!r}?)" if near else repr(u))
    raise LiftError(
        f"{caller}({describe(obj)}, static={tuple(sorted(static))!r}): no captured "
        f"variable is called {', '.join(said)}.\nCaptured variables: {known}.\n"
        "Fix: name captured variables (free variables, default parameters, partial "
        "keywords, function attributes, at any depth).",
        anchor="unknown-static-name",
    )


# The last skeleton seen per entry code object, weakly, plus a ring of the 8 most
# recent, strongly, so that a sweep's few shapes (an optimizer's init and update)
# survive between two lifts even when nothing else keeps them.
# (A dict of weak references read with one `get`: a `WeakValueDictionary`'s `get`
# runs Python code.)
_recent_skeletons: dict[tuple[Any, frozenset[str]], weakref.ref[Skeleton]] = {}
_keep: deque[Skeleton] = deque(maxlen=8)
_lock = threading.Lock()


def _forget(key: tuple[Any, frozenset[str]]) -> Callable[[Any], None]:
    """A callback removing `key` once its skeleton is gone (unless replaced)."""

    def forget(ref: Any) -> None:
        if _recent_skeletons.get(key) is ref:
            _recent_skeletons.pop(key, None)

    return forget


def _entry_code(obj: Any) -> Any:
    code = code_of(obj)
    return None if code is None else (id(code), type(obj))
