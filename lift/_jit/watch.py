"""What a `lift.jit` call reads: whether the function still captures what its
cached call was made for.

A cached call compares, by identity, the cells, defaults, attributes and
partial arguments its function and the functions it captured held when the
entry was made (`Snapshot`, one per function graph); anything else changed
sends the call down the slow path, which lifts the function anew and serves
what Python would compute now."""

from __future__ import annotations

import functools
import operator
import types
from collections.abc import Callable
from typing import Any, Final, NamedTuple, cast

import jax
from jax.core import Tracer

from .._base.errors import LiftError, describe
from .._capture.lifted import Lifted
from .._capture.nodes import CellNode, FunctionNode, PartialNode, Ref, Static, Template
from .._capture.side_effects import own_changed
from .._capture.skeleton import Skeleton, skeleton_of, static_changes
from .._capture.verify import disagree, same_leaves
from .._compat import conversion_context
from .._holders.closure import cells as cells_of, partial_parts
from .._holders.state import function_state, same_state

EMPTY: Final = object()  # what an empty cell holds, for the staleness check
is_: Final = operator.is_


class Snapshot:
    """A lifted function, and what the graph it came from held then: it is current
    while each cell holds the same object, and each function of the graph the
    same defaults and attributes (`Watch`).

    Made before lifting, from the cells and functions the lift is expected to
    read (`targets`), and completed by `lifted`; `verified` once the lift is
    known to have read those (a first call's lift is checked by the next call).
    """

    __slots__ = ("cells", "contents", "context", "lifted", "targets", "verified")

    def __init__(self, targets: list[Any]) -> None:
        self.targets = targets
        self.context = conversion_context()
        cells: list[Any] = [
            t
            if type(t) is types.CellType
            else Watch(t)
            if type(t) is types.FunctionType
            else _PartialWatch(t)
            for t in targets
        ]
        contents: list[Any] = []
        for cell in cells:
            try:
                contents.append(cell.cell_contents)
            except ValueError:
                contents.append(EMPTY)
        self.cells = tuple(cells)
        self.contents = tuple(contents)
        self.lifted: Any = None
        self.verified = False

    def current(self) -> bool:
        if conversion_context() != self.context:
            return False
        for cell, last in zip(self.cells, self.contents, strict=True):
            try:
                now = cell.cell_contents
            except ValueError:
                now = EMPTY
            if now is not last:
                return False
        return True


def watched_targets(lifted: Any, root: Any) -> list[Any]:
    """The cells and functions of the graph `lifted` was lifted from."""
    targets: list[Any] = []
    if isinstance(lifted, Lifted) and not isinstance(root, Lifted):
        skeleton: Skeleton = lifted._skeleton  # pyright: ignore[reportPrivateUsage, reportUnknownMemberType]
        _graph(skeleton, root, targets)
    return targets


def guess_changed(root: Any) -> list[Any]:
    """The targets of a function not lifted yet: its cells, and those of the
    closures they hold (checked against the lift's graph after it)."""
    targets: list[Any] = []
    if type(root) is types.FunctionType:
        seen = {id(root)}
        todo = [root]
        while todo:
            fn = todo.pop()
            targets.append(fn)
            for _, cell in cells_of(fn):
                if id(cell) in seen:
                    continue
                seen.add(id(cell))
                targets.append(cell)
                try:
                    value = cell.cell_contents
                except ValueError:
                    continue
                if (
                    type(value) is types.FunctionType
                    and value.__closure__ is not None
                    and id(value) not in seen
                ):
                    seen.add(id(value))
                    todo.append(value)
    return targets


def same_contents(a: list[Any], b: list[Any]) -> bool:
    """The same cells and functions, in any order: a snapshot made from either
    watches the other's."""
    return len(a) == len(b) and {id(x) for x in a} == {id(x) for x in b}


class Watch:
    """Stands for a function's code, defaults and attributes among the watched
    cells: its `cell_contents` is one token while they are the objects they
    were (`function_state`), and a new object once one is rebound or changed
    in place (`f.scale = 3.0`, `f.__defaults__ = ...`,
    `f.__kwdefaults__['lr'] = 0.5`, `f.__code__ = ...` as IPython's
    autoreload does)."""

    __slots__ = ("fn", "state", "token")

    def __init__(self, fn: types.FunctionType) -> None:
        self.fn = fn
        self.state = function_state(fn)
        self.token = object()

    @property
    def cell_contents(self) -> object:
        return self.token if same_state(self.fn, self.state) else object()


class _PartialWatch:
    """As `Watch`, for a captured `functools.partial`: the parts
    `partial_parts` reads (its function, arguments, keywords and attributes;
    Python reads the keywords' dict at each call, `p.keywords['lr'] = 0.5`
    changes it in place), by identity."""

    __slots__ = ("partial", "parts", "token")

    def __init__(self, partial: functools.partial[Any]) -> None:
        self.partial = partial
        self.parts = tuple(partial_parts(partial))
        self.token = object()

    @property
    def cell_contents(self) -> object:
        now = tuple(partial_parts(self.partial))
        then = self.parts
        if len(now) == len(then) and all(
            label is label0 and value is value0
            for (label, value), (label0, value0) in zip(now, then, strict=True)
        ):
            return self.token
        return object()


def _graph(skeleton: Skeleton, root: Any, cells: list[Any]) -> None:
    """The original cells and functions behind the skeleton's nodes.

    Follows the skeleton from `root` the way it was captured: every node is found
    from a node of smaller index, through a cell, default, partial argument or
    bound method's parts.
    """
    nodes = skeleton.nodes
    objs: list[Any] = [None] * len(nodes)
    objs[0] = root
    for i, node in enumerate(nodes):
        obj = objs[i]
        if obj is None:
            continue
        if type(node) is FunctionNode:
            for index, (_, cell) in zip(node.cells, cells_of(obj), strict=True):
                objs[index] = cell
            cells.append(obj)
        elif type(node) is CellNode or type(node) is PartialNode:
            cells.append(obj)
        for label, template in node.parts():
            slots = template.slots
            if not any(type(s) is Ref for s in slots):
                continue
            value = label.read(obj)
            for slot, v in zip(slots, _parts(template, value), strict=True):
                if type(slot) is Ref and objs[slot.index] is None:
                    objs[slot.index] = v


def _parts(template: Template, value: Any) -> list[Any]:
    """The values standing in a template's slots."""
    treedef = template.treedef  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    if treedef is None:
        return [value]
    return list(treedef.flatten_up_to(value))  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]


def holds_scalars(lifted: Any) -> bool:
    """Whether `lifted`'s leaves hold Python scalars, converted by the float
    width and default device of the moment (any leaf, if it is no `Lifted`)."""
    if not isinstance(lifted, Lifted):
        return True
    return any(type(leaf) in _SCALARS for leaf in lifted._leaves)  # pyright: ignore[reportPrivateUsage, reportUnknownMemberType, reportUnknownArgumentType, reportUnknownVariableType]


_SCALARS: Final = frozenset({float, complex, int, bool})


def holds_tracer(lifted: Any) -> bool:
    if isinstance(lifted, Lifted):
        leaves: Any = lifted._leaves  # pyright: ignore[reportPrivateUsage, reportUnknownMemberType]
    else:
        leaves = jax.tree_util.tree_leaves(lifted)
    return any(isinstance(leaf, Tracer) for leaf in leaves)


def check_cached(
    fn: Any, lift_now: Callable[[], Any], first: Any, tree: Any, kept: Any
) -> None:
    """With `lift.verifying()` on: that what a cached call passes (`first`, the
    leaves for `tree`, or a lifted function when `tree` is `None`) is what
    lifting the function now gives. `kept` is the lift it was made from: when
    that too differs from lifting now, the captures changed in place.

    The contents of your own lists, dicts and sets (a log a function fills
    while it traces, a trace counter, a loss log a callback fills) are not
    part of what a cached call promises: it serves what it compiled, as
    `jax.jit` does for a closure. While one of them differs from what `kept`
    was keyed with, nothing is compared."""
    if _own_changed(kept):
        return
    try:
        fresh = lift_now()
    except LiftError as err:
        raise disagree(
            "lift.jit cached call", fn, f"lifting it now refuses it ({err})"
        ) from err
    leaves, treedef = cast(
        "tuple[list[Any], Any]",
        jax.tree_util.tree_flatten(fresh),  # pyright: ignore[reportUnknownMemberType]
    )
    if tree is None:
        first, tree = cast(
            "tuple[list[Any], Any]",
            jax.tree_util.tree_flatten(first),  # pyright: ignore[reportUnknownMemberType]
        )
    if treedef != tree:
        if _changed_since(kept, fresh, tree) is None:
            raise disagree(
                "lift.jit cached call",
                fn,
                f"another treedef:\n  cached: {tree!r:.400}\n  now:    {treedef!r:.400}",
            )
        # Only statics changed since the kept lift (inside a captured container
        # or object, since the cells are watched): in place.
        raise _changed_in_place(fn, "a program compiled for static values", "")
    differs = same_leaves(first, leaves)
    if differs is not None:
        if kept is None or same_leaves(jax.tree_util.tree_leaves(kept), leaves) is None:
            raise disagree("lift.jit cached call", fn, f"other leaves ({differs})")
        # Every capture it watches holds what it held, and the lift it kept
        # differs from one made now: a value inside a captured container or
        # object changed in place, which a cached call does not see (it would
        # walk them on every call).
        raise _changed_in_place(fn, "leaves", f" ({differs})")


def _own_changed(kept: Any) -> bool:
    """Whether a list, dict or set of yours that `kept` holds (as your own
    object) changed since it was lifted."""
    if not isinstance(kept, Lifted):
        return False
    nodes = skeleton_of(cast("Lifted[..., Any]", kept)).nodes
    return own_changed(
        slot
        for node in nodes
        for _, template in node.parts()
        for slot in template.slots
        if type(slot) is Static
    )


def _changed_since(kept: Any, fresh: Any, tree: Any) -> list[tuple[Any, Any]] | None:
    """The statics that differ between `kept`, the lift a cached call was made
    from (with the treedef `tree`), and `fresh`, a lift made now; `None` when
    more than statics differs, or there is no such lift."""
    if not isinstance(kept, Lifted) or not isinstance(fresh, Lifted):
        return None
    old, new = cast("Lifted[..., Any]", kept), cast("Lifted[..., Any]", fresh)
    if jax.tree_util.tree_structure(old) != tree:  # pyright: ignore[reportUnknownMemberType]
        return None
    return static_changes(skeleton_of(old), skeleton_of(new))


def _changed_in_place(fn: Any, what: str, detail: str) -> LiftError:
    return LiftError(
        f"lift.jit's cached call of {describe(fn)} serves {what} that lifting "
        f"it now would not{detail}: a value inside a captured container or object "
        "(`config['lr'] = 0.5`, an optimizer updating a captured model) changed "
        "in place since the function was last lifted, which a cached call does "
        "not see.\nFix: rebind the variable (`config = {**config, 'lr': 0.5}`), "
        "or pass the object as an argument of the function.",
        anchor="changed-in-place",
    )


# The fast path checks one cell and one function's code, defaults and keyword-only
# defaults (its attributes: none when lifted), or, when that cell is `None`,
# several cells and `Watch`es. These stand in for the cell: a function not
# lifted yet (never current), and a graph without cells (always current).
STALE_CELL: Final = types.CellType(None)  # checked against `EMPTY`
NO_CELL: Final = types.CellType(EMPTY)


class Fast(NamedTuple):
    """Everything a call reads, in one object written in one assignment, so that
    another thread never sees half an update: what the graph held when lifted
    (one cell and one function, checked inline, the function's keyword-only
    defaults' values in `kwvalues`; or several cells and `Watch`es, a
    partial's included, and the plain functions, their code, defaults and
    keyword-only defaults as tuples, each function's attribute dict empty
    when lifted), the float width and default device its scalars were
    converted under (`None`: it has none), the program to call and what to
    pass it in front of the arguments (the lifted function's leaves, or the
    function itself: `JitFunction._entry`), the treedef that rebuilds the
    function from them (`Program.calling`, or `None`), and the snapshot it was
    made from. The inline form for one cell saves about a microsecond a call
    (a third of `lift.jit`'s cost over `jax.jit` for a closure over `lr`)."""

    cell: types.CellType | None
    content: Any
    fn: Any
    code: Any
    defaults: Any
    kwdefaults: Any
    kwvalues: tuple[Any, ...] | None
    cells: tuple[Any, ...]
    contents: tuple[Any, ...]
    context: tuple[Any, Any] | None
    call: Any
    first: Any
    tree: Any
    snapshot: Snapshot | None


# The one function, when the graph has none: no defaults, no attributes.
def no_fn() -> None: ...


NO_FN: Final = no_fn
NO_STATE: Final = function_state(NO_FN)
STALE: Final = Fast(
    STALE_CELL,
    EMPTY,
    NO_FN,
    NO_FN.__code__,
    None,
    None,
    None,
    (),
    (),
    None,
    None,
    None,
    None,
    None,
)


def fast_state(
    snapshot: Snapshot,
    context: tuple[Any, Any] | None,
    call: Any,
    first: Any,
    tree: Any,
) -> Fast:
    """What a call reads for a snapshot known to be current, with its cells
    as they were (no empty one): one cell and one function without
    attributes inline, else the general form."""
    cells, contents = snapshot.cells, snapshot.contents
    one = [i for i, c in enumerate(cells) if type(c) is types.CellType]
    watched = [c for c in cells if type(c) is Watch]
    if (
        len(one) <= 1
        and len(watched) <= 1
        and len(one) + len(watched) == len(cells)  # no partial
        and not any(w.state.attrs for w in watched)
    ):
        # One cell and one function without attributes: checked inline.
        cell, content = (cells[one[0]], contents[one[0]]) if one else (NO_CELL, EMPTY)
        fn, state = (watched[0].fn, watched[0].state) if watched else (NO_FN, NO_STATE)
        kwvalues = (
            None if state.kwdefaults is None else tuple(v for _, v in state.kwitems)
        )
        fast = Fast(
            cell,
            content,
            fn,
            state.code,
            state.defaults,
            state.kwdefaults,
            kwvalues,
            (),
            (),
            context,
            call,
            first,
            tree,
            snapshot,
        )
    else:
        # Functions without attributes or keyword-only defaults are checked
        # in C (`__call__`), the others by their `Watch`'s property.
        plain = [w for w in watched if w.state.kwdefaults is None and not w.state.attrs]
        inline = {id(w) for w in plain}
        kept = [
            (c, v) for c, v in zip(cells, contents, strict=True) if id(c) not in inline
        ]
        fast = Fast(
            None,
            None,
            tuple(w.fn for w in plain),
            tuple(w.state.code for w in plain),
            tuple(w.state.defaults for w in plain),
            tuple(w.state.kwdefaults for w in plain),
            None,
            tuple(c for c, _ in kept),
            tuple(v for _, v in kept),
            context,
            call,
            first,
            tree,
            snapshot,
        )
    return fast


def stale(snapshot: Snapshot | None, entry: tuple[Any, Any, Any] | None) -> Fast:
    """A state every call checks on the slow path (`JitFunction._slow`)."""
    if snapshot is None and entry is None:
        return STALE
    call, first, tree = entry if entry is not None else (None, None, None)
    return STALE._replace(call=call, first=first, tree=tree, snapshot=snapshot)
