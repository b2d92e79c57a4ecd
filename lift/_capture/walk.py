"""The full walk: a function's graph into a `Skeleton` and its leaves.

The walk is iterative, over a queue of nodes. It visits each function, cell,
partial and bound method once, cycles included. It walks each captured value
as a pytree. Function leaves become nodes in turn. It never writes to the
user's objects. The static rule says what is a leaf (`lift._rule.static`).
The side-effect rule says what stays the user's own (`lift._copies.own`)."""

from __future__ import annotations

import types
from typing import Any

from .._base.atoms import EXACT
from .._base.caches import BoundedDict
from .._copies.own import (
    atoms_key,
    kept_whole,
    own_leaf,
    refuse_rebinding,
)
from .._holders.closure import (
    METHOD,
    cells,
    function_held,
    holder_of,
    user_class,
)
from .._holders.labels import ATTR, SELF, Label
from .._holders.trees import ITERATORS, irregular, is_function_like, ordered
from .._rule.code import NO_BRANCH, WHOLE, Branches, CodeInfo, branch_hits, code_info
from .._rule.static import (
    ALWAYS_DYNAMIC,
    BRANCHABLE,
    DYNAMIC_ATOMS,
    STATIC_ATOMS,
    ArrayImpl,
    attributes_by_global,
    branch_static,
    check_aux,
    is_bool,
    static_key,
    taken_apart,
)
from .._skeleton.nodes import (
    CellNode,
    FunctionNode,
    HolderNode,
    Node,
    Slot,
    Static,
    Template,
    atom_static,
    aux_followed,
    followed,
    function_meta,
    rebuild_order,
)
from .._skeleton.shared import cell_of, one_slot, refs_template
from .._skeleton.skeleton import Skeleton
from .flatten import (
    flatten_capture,
    int_leaf,
    unreadable_holder,
)
from .leaves import STATIC, Leaves

# A function's defaults alone, read (`_held`) and made into templates
# (`Walk.parts_of`); each entry holds what its key has the id of.
_HELD: BoundedDict[tuple[int, int], tuple[Any, ...]] = BoundedDict(512)
_PARTS: BoundedDict[tuple[int, int], Any] = BoundedDict(512)


def _held(fn: types.FunctionType) -> tuple[Any, ...]:
    """`function_held(fn)`, read once per tuple of defaults and code when `fn`
    has no other parts and its defaults are atoms (never a tracer): a `def`
    makes one tuple for all its closures."""
    defaults, code = fn.__defaults__, fn.__code__
    atoms = defaults and all(type(x) in EXACT for x in defaults)
    if fn.__kwdefaults__ is not None or fn.__dict__ or not atoms:
        return function_held(fn)
    found = _HELD.get(key := (id(defaults), id(code)))
    return _HELD.add(key, function_held(fn)) if found is None else found


class Walk(Leaves):
    """The walk of one capture over its state (`Leaves`)."""

    def run(self) -> tuple[Skeleton, list[Any]]:
        self.new_node(self.root)
        queue = self.queue
        holders = False
        while queue:
            index, obj = queue.popleft()
            if type(obj) is types.FunctionType:
                self.nodes[index] = self.function(index, obj)
                continue
            holder = holder_of(obj)
            assert holder is not None  # queued as `is_function_like`
            try:
                held = tuple(holder.parts(obj))
            except Exception as err:  # a subclass's own property raised
                raise unreadable_holder(obj, self.captured_as(index), err) from err
            if holder is not METHOD:  # a bound method's parts cannot change
                self.read.append((obj, held))  # `lift.jit` watches them
            holders = True
            parts = tuple(
                (label, self.template(value, index, label, obj))
                for label, value in held
            )
            self.nodes[index] = HolderNode(holder, holder.static(obj), parts)
        nodes: list[Node] = self.nodes  # type: ignore[assignment]
        skeleton = Skeleton(
            nodes,
            rebuild_order(nodes, self.captured_as) if holders else (),
            self.parents,
            len(self.leaves),
            frozenset(self.float_leaves),
        )
        skeleton.names = frozenset(self.names)
        skeleton.has_attributes = self.attributes
        skeleton.own = tuple(self.own)
        skeleton.live = self.live
        return skeleton, self.leaves

    def function(self, index: int, fn: types.FunctionType) -> FunctionNode:
        read, names, parents = self.read, self.names, self.parents
        read.append((fn, held := _held(fn)))
        info = code_info(held[0])
        indices: list[int] = []
        ids = self.ids
        nodes, leaves = self.nodes, self.leaves
        # A cell holding a float or an array, read by no branch and not rebound,
        # with no `static=`/`dynamic=` (the common capture, thousands in a wide
        # closure): `cell` and `template` inlined, which halves the walk of a
        # closure over a thousand floats.
        fast = self.fast
        in_scope = index in self.scope.nodes
        unplain = info.unplain
        for label, cell in cells(fn, info.cell_labels):
            cell_index = ids.get(id(cell))
            if cell_index is None:
                cell_index = len(nodes)
                ids[id(cell)] = cell_index
                parents.append(None)
                try:
                    contents = cell.cell_contents
                except ValueError:
                    contents = cell  # an empty cell: `cell` says so
                read.append((cell, contents))
                if fast:
                    t = type(contents)  # pyright: ignore[reportUnknownVariableType]
                    name = label.variable
                    slot: Slot | None = None
                    if t in EXACT:  # `None`, a flag, a count: static
                        slot = atom_static(contents)
                    elif t in ALWAYS_DYNAMIC and name not in unplain:
                        slot = len(leaves)
                        leaves.append(contents)
                        if t is not ArrayImpl:
                            self.float_leaves.append(slot)
                            self.scalar_cells.append((cell, cell_index, False))
                    if slot is not None:
                        names.add(name)  # pyright: ignore[reportArgumentType]
                        nodes.append(cell_of(slot, index, label))
                        indices.append(cell_index)
                        continue
                    if (
                        name not in unplain
                        and (fns := self.functions(contents, t)) is not None  # pyright: ignore[reportUnknownArgumentType]
                    ):
                        # Plain functions in a tuple: `template`'s, once reserved.
                        names.add(name)  # pyright: ignore[reportArgumentType]
                        nodes.append(None)
                        template = self.refs(contents, fns, index, label, fn)
                        nodes[cell_index] = CellNode(template, label, index)
                        indices.append(cell_index)
                        continue
                nodes.append(None)
                if in_scope or id(cell) in self.scope.ids:
                    self.scope.add(cell_index, cell)
                nodes[cell_index] = self.cell(cell, cell_index, label, fn, info, index)
            else:
                self.shared.add(cell_index)  # a cell of several functions
                self.scope.reached(cell_index, cell, not in_scope)
            indices.append(cell_index)
        parts: tuple[tuple[Label, Template], ...] = ()
        if held[3:]:
            parts = self.parts_of(fn, held, info, index)
        node = FunctionNode(
            info,
            fn.__globals__,
            fn.__name__,
            fn.__qualname__,
            tuple(indices),
            parts,
            held[1] is not None,
            held[2] is not None,
            function_meta(fn),
        )
        if parts and node.own_attribute() is not None:
            self.attributes = True
        return node

    def parts_of(
        self, fn: types.FunctionType, held: tuple[Any, ...], info: CodeInfo, index: int
    ) -> tuple[tuple[Label, Template], ...]:
        """The templates of a function's defaults, keyword-only defaults and
        attributes (`function_held`).

        Defaults alone, each `None`, a flag or a count (optax's `params=None`),
        are made once per read (`_held`) and node index."""
        key = (id(held), index)
        alone = self.fast and _HELD.get((id(held[1]), id(held[0]))) is held
        if alone and (found := _PARTS.get(key)) is not None and found[0] is held:
            self.names.update(found[2])
            return found[1]
        made: list[tuple[Label, Template]] = []
        for label, value in held[3:]:
            if self.fast and type(value) in EXACT:  # `None`, a flag, a count: static
                made.append((label, one_slot(atom_static(value), index, label)))
                continue
            alone = False
            # A module-level `def f` reading `f.scale` reaches its attributes
            # through the module global, not through the rebuilt function:
            # leaves there would be dead, so its attributes are static instead.
            forced = label.kind == ATTR and attributes_by_global(fn, info.global_names)
            made.append((label, self.template(value, index, label, fn, forced=forced)))
        names = [n for label, _ in made if type(n := label.variable) is str]
        self.names.update(names)
        if alone:
            _PARTS.add(key, (held, tuple(made), names))
        return tuple(made)

    def cell(
        self,
        cell: types.CellType,
        index: int,
        label: Label,
        fn: types.FunctionType,
        info: CodeInfo,
        owner: int,
    ) -> CellNode:
        name: str = label.key  # pyright: ignore[reportAssignmentType]
        try:
            contents = cell.cell_contents
        except ValueError:
            # An empty cell: the user's own, which Python binds later (a
            # decorator's function named in its own body, `super()`'s class).
            self.names.add(name)
            self.own.append(id(cell))
            return CellNode(None, label, owner, cell)
        # A Python scalar the code rebinds is static, as one it branches on.
        rebound = name in info.rebound
        branched = WHOLE if rebound else info.branch_paths.get(name, NO_BRANCH)
        if self.branched_cells:
            branched |= self.branched_cells.get(id(cell), NO_BRANCH)
        before = len(self.leaves)
        # A cell a static capture's function shares (`frozen`) is static.
        frozen = bool(self.frozen) and id(cell) in self.frozen
        template = self.template(contents, index, label, fn, branched, frozen)
        if rebound:
            refuse_rebinding(fn, name, template, self.leaves)
        values = self.leaves[before:]
        if values and any(issubclass(type(v), BRANCHABLE) for v in values):  # pyright: ignore[reportUnknownArgumentType]
            self.scalar_cells.append((cell, index, any(map(is_bool, values))))
        return CellNode(template, label, owner)

    # -- values ------------------------------------------------------------------

    def template(
        self,
        value: Any,
        owner: int,
        label: Label,
        holder: Any,
        branched: Branches = NO_BRANCH,
        forced: bool = False,
    ) -> Template:
        name = label.variable
        if type(name) is str:
            self.names.add(name)
        t: type[Any] = type(value)  # pyright: ignore[reportUnknownVariableType]
        if (
            self.fast
            and not branched
            and not forced
            and (fns := self.functions(value, t)) is not None
        ):
            # Plain functions in a tuple or NamedTuple (a chain's, an optimizer's):
            # each a node, as `slot` makes them.
            return self.refs(value, fns, owner, label, holder)
        forced = forced or (name is not None and name in self.static)
        pinned = self.scope.pinned(owner, name)
        leaf = t in ALWAYS_DYNAMIC and not (pinned and t is not ArrayImpl)
        leaf = leaf and not (branched and branch_static(value, t))
        # An `int` or `bool` that `dynamic=` names: an integer leaf.
        named = t in (int, bool) and name in (self.named or ())
        leaf = leaf or (named and int_leaf(holder, label, value))
        if leaf and not forced and self.dynamic is None:
            # A float or an array (the common capture): what `slot` makes of it.
            index = len(self.leaves)
            self.leaves.append(value)
            if t is not ArrayImpl:
                self.float_leaves.append(index)
            return one_slot(index, owner, label)
        if t in STATIC_ATOMS and self.dynamic is None:
            # A user's class holds data (`registry = [...]`) as an instance of
            # it does: a tracer there is refused alike.
            if t is type and user_class(value):
                self.opaque(value, t, holder, label)
            elif t in EXACT:
                return one_slot(atom_static(value), owner, label)
            return Template(None, (Static(value),), owner, label)
        if (
            self.dynamic is None
            and (pinned or self.named is None)
            and (key := atoms_key(value)) is not None
        ):
            # A table of ints or strings: your own, keyed in C.
            return Template(None, (self.mine(value, key),), owner, label)
        if issubclass(t, ITERATORS):
            # Static by identity; a suspended frame's locals may hold a tracer.
            self.opaque(value, type(value), holder, label)  # pyright: ignore[reportUnknownArgumentType]
            return Template(None, (Static(value),), owner, label)
        if not forced and label.kind != SELF and (apart := taken_apart(value)):
            value, t = apart, type(apart)  # pyright: ignore[reportUnknownVariableType]
        order, aux = None, ...
        owned: dict[int, bool] = {}
        whole = () in branched

        def is_static(leaf: Any) -> bool:
            return self.kind(leaf, forced, whole, pinned) is STATIC

        leaves, treedef = [value], None
        if (
            forced or t not in DYNAMIC_ATOMS or self.dynamic is not None
        ) and not is_function_like(value):
            if not forced and (fns := self.functions(value, t)) is not None:
                # Plain functions in a tuple or NamedTuple (a chain's, an
                # optimizer's): nothing to flatten, no static data.
                leaves, treedef, aux = list(value), fns, None
            else:
                flat = flatten_capture(
                    value,
                    own_leaf(value, owned, is_static),
                    lambda: own_leaf(
                        value,
                        owned,
                        lambda leaf: self.kind(leaf, forced, whole) is STATIC,
                    ),
                    forced,
                    holder,
                    label,
                )
                if flat is None:  # whole and static
                    if not forced:
                        self.opaque(value, t, holder, label)
                    return Template(None, (followed(value, self.read),), owner, label)
                leaves, treedef = flat
                if treedef.num_nodes == 1 and treedef.num_leaves == 1:
                    treedef = None
                else:
                    if irregular(value):
                        order = ordered(value, treedef, static_key)
                    self.live = self.live or check_aux(treedef, holder, label)
        frozen = frozenset(k for k, v in owned.items() if v)
        if kept_whole(value, leaves, frozen, is_static):
            # A list or dict holding no dynamic leaf (a log, a cache, a
            # counter, a registry of plain functions): your own object.
            for i, x in enumerate(leaves):  # a hidden tracer: refused as in `slot`
                self.opaque(x, type(x), holder, label, (treedef, i))  # pyright: ignore[reportUnknownArgumentType]
            return Template(None, (self.mine(value),), owner, label)
        slots: list[Slot] = []
        new_nodes: list[tuple[int, int]] = []
        hits = branch_hits(branched, treedef, len(leaves)) if branched else None
        for pos, leaf in enumerate(leaves):
            slots.append(
                self.slot(
                    leaf,
                    forced,
                    hits is not None and hits[pos],
                    holder,
                    label,
                    new_nodes,
                    (treedef, pos),
                    frozen,
                    pinned,
                )
            )
        template = Template(treedef, tuple(slots), owner, label, order, aux)
        if template.aux is not None and (key := aux_followed(treedef, self.read)):
            template.key += (key,)  # a rebinding inside its static data
        for node_index, pos in new_nodes:
            self.parents[node_index] = (template, pos)
        return template

    def refs(
        self, fns: Any, treedef: Any, owner: int, label: Label, holder: Any
    ) -> Template:
        """The template of `fns`, plain functions in a tuple, each a node."""
        indices: list[int] = []
        new_nodes: list[tuple[int, int]] = []
        ids = self.ids
        for pos, fn in enumerate(fns):
            index = ids.get(id(fn))
            if index is None:
                index = self.new_node(fn)
                self.reached_from[index] = (holder, label)
                new_nodes.append((index, pos))
            indices.append(index)
        template = refs_template(treedef, indices, owner, label)
        for node_index, pos in new_nodes:
            self.parents[node_index] = (template, pos)
        return template
