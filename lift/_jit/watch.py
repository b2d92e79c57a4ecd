"""What a `lift.jit` call reads: does the function still capture the same?

A cached call compares what the walk read, by identity. That is the cells,
defaults, attributes and partial arguments of every function it reached.
`watch` makes the record (`Fast`); `current` checks it. A change sends the
call down the slow path. That path lifts the function anew, as Python reads
it now."""

from __future__ import annotations

import operator
import types
from collections.abc import Callable
from typing import Any, Final, NamedTuple, cast

from jax.core import Tracer

from .._base.errors import LiftError, describe
from .._compat import DEFAULT_DEVICE, X64
from .._copies.own import unpinned
from .._holders import trees as jtu
from .._holders.closure import function_held, holder_of
from .._holders.labels import Label
from .._lifted.lifted import Lifted
from .._skeleton.nodes import Static
from .._skeleton.skeleton import leaves_of, skeleton_of
from .verify import changed_at, disagree, logs_grew, same_leaves

is_: Final = operator.is_
_contents: Final = operator.attrgetter("cell_contents")
_code: Final = operator.attrgetter("__code__")
_defaults: Final = operator.attrgetter("__defaults__")
_kwdefaults: Final = operator.attrgetter("__kwdefaults__")
_attrs: Final = operator.attrgetter("__dict__")


class Watch:
    """A watched cell that stands for more than a cell.

    It stands for a function with keyword-only defaults or attributes. It
    stands for a holder: a `functools.partial`, a `lift.jit` function. It
    stands for a cell the walk found empty. Its `cell_contents` is one token
    while its parts are the same objects. It is a new object once one part is
    rebound or changed in place.

    A function's parts are its code, defaults, keyword-only defaults and
    attributes (`f.scale = 3.0`). A partial's parts are its function,
    arguments, keywords and attributes. Python reads a partial's keywords at
    each call. Parts compare by identity."""

    __slots__ = ("obj", "parts", "token")

    def __init__(self, obj: Any, parts: tuple[Any, ...]) -> None:
        self.obj = obj
        self.parts = parts
        self.token = object()

    @property
    def cell_contents(self) -> object:
        return self.token if _same_parts(_parts(self.obj), self.parts) else object()


def _same_parts(now: tuple[Any, ...], then: tuple[Any, ...]) -> bool:
    return len(now) == len(then) and all(map(_same, now, then))


def _same(a: Any, b: Any) -> bool:
    """Whether two reads are of the same part.

    A part read again is a new `(label, value)` pair. It is the same when the
    labels are equal and the value is the very object. Anything else compares
    by identity, a user's tuple included."""
    if a is b:
        return True
    if type(a) is not tuple or type(b) is not tuple:
        return False
    x, y = cast("tuple[Any, ...]", a), cast("tuple[Any, ...]", b)
    return (
        len(x) == 2 == len(y) and type(x[0]) is Label and x[0] == y[0] and x[1] is y[1]
    )


def _parts(obj: Any) -> tuple[Any, ...]:
    if type(obj) is types.FunctionType:
        return function_held(obj)
    if type(obj) is types.CellType:
        try:
            return (obj.cell_contents,)
        except ValueError:
            return ()
    holder = holder_of(obj)
    assert holder is not None  # what the walk read: a function, a cell, a holder
    return tuple(holder.parts(obj))


def holds_tracer(lifted: Any) -> bool:
    is_lifted = isinstance(lifted, Lifted)
    leaves: Any = leaves_of(lifted) if is_lifted else jtu.tree_leaves(lifted)  # pyright: ignore[reportUnknownArgumentType]
    return any(isinstance(leaf, Tracer) for leaf in leaves)


def check_cached(fn: Any, lift_now: Callable[[], Any], fast: Fast) -> None:
    """Check that a cached call passes what lifting now gives.

    It runs with `lift.verifying()` on. When the two differ, what each walk
    read (`Walk.read`) says why. A cell, function or partial read otherwise is
    a change the watch missed: a bug in lift. Anything else changed in place
    inside a captured object. A cached call does not see that.

    Another thread may rebind a capture meanwhile. Then `fast` is stale, and
    nothing is compared. Nor is it while only your logs grew (`logs_grew`).
    A container a callback reaches, pinned since `kept` was lifted
    (`lift._copies.own.pin_kept`), is still the one it compiled for.
    A cached call serves what it compiled, as `jax.jit` does."""
    kept = fast.lifted
    if _own_changed(kept):
        return
    try:
        fresh = lift_now()
    except LiftError as err:
        if not current(fast):
            return
        raise disagree(fn, f"lifting it now refuses it ({err})") from err
    if not current(fast):
        return
    leaves, treedef = jtu.tree_flatten(fresh)
    first, tree = jtu.tree_flatten(kept)
    if treedef != tree:  # perhaps a container pinned since, and still the same
        with unpinned():
            leaves, treedef = jtu.tree_flatten(lift_now())
    if treedef != tree:
        what, detail = "a program compiled for static values", ""
        missed = (
            f"another treedef:\n  cached: {tree!r:.400}\n  now:    {treedef!r:.400}"
        )
    else:
        differs = same_leaves(first, leaves)
        if differs is None:
            return
        what, detail = "leaves", f" ({differs})"
        missed = f"other leaves ({differs})"
    if _read_otherwise(kept, fresh):
        raise disagree(fn, missed)
    # Every capture the watch covers holds what it held, read alike by both
    # walks: a value inside a captured container or object changed in place
    # (seeing it would walk them on every call).
    raise _changed_in_place(fn, what + changed_at(kept, fresh), detail)


def _own_changed(kept: Any) -> bool:
    """Whether only logs of yours in `kept` changed since lifted (`logs_grew`)."""
    if not isinstance(kept, Lifted):
        return False
    templates = skeleton_of(cast("Lifted[..., Any]", kept)).templates()
    slots = [s for template in templates for s in template.slots]
    return logs_grew(s for s in slots if type(s) is Static)


def _read_otherwise(kept: Any, fresh: Any) -> bool:
    """Whether the two walks read a cell, function or partial differently.

    The walks are those that lifted `fresh` and `kept`. Reads compare by
    identity."""
    then = {id(obj): held for obj, held in walk_read(kept)}
    return not all(
        then.get(id(obj), held) is held
        or (type(obj) is not types.CellType and _same_parts(held, then[id(obj)]))
        for obj, held in walk_read(fresh)
    )


def walk_read(lifted: Any) -> list[tuple[Any, Any]]:
    """What the walk that lifted `lifted` read (`Walk.read`), as it read it."""
    return getattr(cast(Any, lifted), "_read", []) if isinstance(lifted, Lifted) else []


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
    """Everything a call reads, written in one assignment.

    Another thread never sees half an update. It holds the graph's cells and
    `Watch`es, with what they held when read. It holds the plain functions'
    code and defaults, checked in C. It holds the float width and default
    device read before the lift. `lifted` is what a call passes first."""

    cells: tuple[Any, ...]
    contents: tuple[Any, ...]
    fns: tuple[types.FunctionType, ...]
    codes: tuple[types.CodeType, ...]
    defaults: tuple[Any, ...]
    context: tuple[Any, Any]
    lifted: Any


# Never current: a cell holding `None` where it held another object.
STALE: Final = Fast(
    (types.CellType(None),), (object(),), (), (), (), (None, None), None
)


def watch(lifted: Any, read: list[tuple[Any, Any]], context: tuple[Any, Any]) -> Fast:
    """What a call reads, for `lifted` and its walk's reads (`Walk.read`).

    A read is a cell and its contents, a function and its parts, or a partial
    and its parts."""
    cells: list[Any] = []
    contents: list[Any] = []
    fns: list[tuple[types.FunctionType, Any, Any]] = []
    for obj, held in read:
        t: type[Any] = type(obj)  # pyright: ignore[reportUnknownVariableType]
        if t is types.CellType and held is not obj:
            cells.append(obj)
            contents.append(held)
        elif (
            t is types.FunctionType
            and len(held) == 3 + len(held[1] or ())
            and held[2] is None
        ):
            fns.append((obj, held[0], held[1]))  # no keyword-only defaults, attributes
        else:
            w = Watch(obj, () if held is obj else held)
            cells.append(w)
            contents.append(w.token)
    functions, codes, defaults = zip(*fns, strict=True) if fns else ((), (), ())
    return Fast(
        tuple(cells), tuple(contents), functions, codes, defaults, context, lifted
    )


def current(fast: Fast) -> bool:
    """Whether what `fast` watches holds what it held: the one check."""
    cells, contents, fns, codes, defaults, (x64, device), _ = fast
    try:
        return (
            all(map(is_, map(_contents, cells), contents))
            and all(map(is_, map(_code, fns), codes))
            and all(map(is_, map(_defaults, fns), defaults))
            and not any(map(_kwdefaults, fns))
            and not any(map(_attrs, fns))
            and X64.value is x64
            and DEFAULT_DEVICE.value is device
        )
    except ValueError:  # a cell emptied by `del`
        return False
