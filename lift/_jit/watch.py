"""What a `lift.jit` call reads: whether the function still captures what its
cached call was made for.

A cached call compares, by identity, the cells, defaults, attributes and
partial arguments its function and the functions it captured held when the
walk that lifted it read them (`Snapshot`); anything changed sends the call
down the slow path, which lifts the function anew and serves what Python
would compute now."""

from __future__ import annotations

import operator
import types
from collections.abc import Callable
from typing import Any, Final, NamedTuple, cast

import jax
from jax.core import Tracer

from .._base.errors import LiftError, describe
from .._capture.lifted import Lifted
from .._capture.nodes import Static
from .._capture.side_effects import own_changed
from .._capture.skeleton import skeleton_of, static_changes
from .._capture.verify import disagree, same_leaves
from .._compat import conversion_context
from .._holders.closure import function_held, partial_parts

EMPTY: Final = object()  # what an empty cell holds, for the staleness check
is_: Final = operator.is_


class Snapshot:
    """A lifted function, and what the walk that lifted it read (`Walk.read`):
    current while each cell holds the object it held, each function and
    partial the same parts (`Watch`), and the float width and default device
    are those read before the lift (`context`)."""

    __slots__ = ("cells", "contents", "context", "lifted")

    def __init__(self, lifted: Any, read: list[tuple[Any, Any]], context: Any) -> None:
        self.lifted = lifted
        self.context = context
        cells: list[Any] = []
        contents: list[Any] = []
        for obj, held in read:
            if type(obj) is types.CellType:
                cells.append(obj)
                contents.append(EMPTY if held is obj else held)  # `obj`: empty
            else:
                watch = Watch(obj, held)
                cells.append(watch)
                contents.append(watch.token)
        self.cells = tuple(cells)
        self.contents = tuple(contents)

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


class Watch:
    """Stands for a function or a `functools.partial` among the watched cells:
    its `cell_contents` is one token while it holds the objects it held, and a
    new object once one is rebound or changed in place. A function's parts are
    its code, defaults, keyword-only defaults and attributes (`f.scale = 3.0`,
    `f.__kwdefaults__['lr'] = 0.5`, `f.__code__ = ...` as IPython's autoreload
    does); a partial's, its function, arguments, keywords (Python reads the
    keywords' dict at each call) and attributes: what the walk read of them
    (`function_held`, `partial_parts`), compared by identity."""

    __slots__ = ("obj", "parts", "token")

    def __init__(self, obj: Any, parts: tuple[Any, ...]) -> None:
        self.obj = obj
        self.parts = parts
        self.token = object()

    @property
    def cell_contents(self) -> object:
        now, then = _parts(self.obj), self.parts
        if len(now) == len(then) and all(
            a is b or (type(a) is tuple and a[0] == b[0] and a[1] is b[1])
            for a, b in zip(now, then, strict=True)
        ):
            return self.token
        return object()

    @property
    def inline(self) -> bool:
        """Whether it watches a function with no keyword-only defaults and no
        attributes, whose code and defaults a call checks in C (`Fast`)."""
        parts = self.parts
        return (
            type(self.obj) is types.FunctionType
            and parts[2] is None
            and len(parts) == 3 + len(parts[1] or ())
        )


def _parts(obj: Any) -> tuple[Any, ...]:
    if type(obj) is types.FunctionType:
        return function_held(obj)
    return tuple(partial_parts(obj))


def holds_tracer(lifted: Any) -> bool:
    if isinstance(lifted, Lifted):
        leaves: Any = lifted._leaves  # pyright: ignore[reportPrivateUsage, reportUnknownMemberType]
    else:
        leaves = jax.tree_util.tree_leaves(lifted)
    return any(isinstance(leaf, Tracer) for leaf in leaves)


def check_cached(fn: Any, lift_now: Callable[[], Any], first: Any, kept: Any) -> None:
    """With `lift.verifying()` on: that what a cached call passes (`first`, the
    function lifted) is what lifting the function now gives. `kept` is the lift
    it was made from: when that too differs from lifting now, the captures
    changed in place.

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
        if same_leaves(jax.tree_util.tree_leaves(kept), leaves) is None:
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


class Fast(NamedTuple):
    """Everything a call reads, in one object written in one assignment, so that
    another thread never sees half an update: the cells and `Watch`es of the
    graph and what they held when lifted, its functions without keyword-only
    defaults or attributes with their code and defaults (checked in C, by
    `JitFunction.__call__`), the float width and default device the lift
    converted its scalars under, the program to call, the function lifted
    (passed in front of the arguments), and the snapshot it was made from."""

    cells: tuple[Any, ...]
    contents: tuple[Any, ...]
    fns: tuple[types.FunctionType, ...]
    codes: tuple[Any, ...]
    defaults: tuple[Any, ...]
    kwdefaults: tuple[Any, ...]
    context: tuple[Any, Any]
    call: Any
    first: Any
    snapshot: Snapshot | None


# Never current: a cell that holds `None` where `EMPTY` was.
STALE: Final = Fast(
    (types.CellType(None),),
    (EMPTY,),
    (),
    (),
    (),
    (),
    (None, None),
    None,
    None,
    None,
)


def fast_state(snapshot: Snapshot, call: Any) -> Fast:
    """What a call reads for a snapshot known to be current, with its cells as
    they were (no empty one)."""
    plain = [c for c in snapshot.cells if type(c) is Watch and c.inline]
    inline = {id(w) for w in plain}
    kept = [
        (c, v)
        for c, v in zip(snapshot.cells, snapshot.contents, strict=True)
        if id(c) not in inline
    ]
    fns: list[types.FunctionType] = [w.obj for w in plain]
    return Fast(
        tuple(c for c, _ in kept),
        tuple(v for _, v in kept),
        tuple(fns),
        tuple(fn.__code__ for fn in fns),
        tuple(w.parts[1] for w in plain),
        tuple(w.parts[2] for w in plain),
        snapshot.context,
        call,
        snapshot.lifted,
        snapshot,
    )


def stale(snapshot: Snapshot) -> Fast:
    """A state every call checks on the slow path (`JitFunction._lifted`)."""
    return STALE._replace(snapshot=snapshot)
