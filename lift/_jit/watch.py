"""What a `lift.jit` call reads: whether the function still captures what its
cached call was made for.

A cached call compares, by identity, the cells, defaults, attributes and
partial arguments its function and the functions it captured held when the
walk that lifted it read them (`Fast`, made by `watch`, checked by `current`);
anything changed sends the call down the slow path, which lifts the function
anew and serves what Python would compute now."""

from __future__ import annotations

import operator
import types
from collections.abc import Callable
from typing import Any, Final, NamedTuple, cast

import jax
from jax.core import Tracer

from .._base.errors import LiftError, describe
from .._compat import DEFAULT_DEVICE, X64
from .._copies.own import own_changed
from .._holders.closure import function_held, holder_of
from .._holders.labels import Label
from .._lifted.lifted import Lifted
from .._skeleton.nodes import Static
from .._skeleton.skeleton import leaves_of, skeleton_of
from .verify import disagree, same_leaves

is_: Final = operator.is_
_contents: Final = operator.attrgetter("cell_contents")
_code: Final = operator.attrgetter("__code__")
_defaults: Final = operator.attrgetter("__defaults__")
_kwdefaults: Final = operator.attrgetter("__kwdefaults__")
_attrs: Final = operator.attrgetter("__dict__")


class Watch:
    """Stands for a function with keyword-only defaults or attributes, a
    holder (a `functools.partial`, a `lift.jit` function and the attributes
    set on it) or a cell the walk found empty, among the watched
    cells: its `cell_contents` is one token while it holds the objects it held,
    and a new object once one is rebound or changed in place. A function's
    parts are its code, defaults, keyword-only defaults and attributes
    (`f.scale = 3.0`, `f.__kwdefaults__['lr'] = 0.5`, `f.__code__ = ...` as
    IPython's autoreload does); a partial's, its function, arguments, keywords
    (Python reads the keywords' dict at each call) and attributes: what the
    walk read of them (`function_held`, a holder's parts), compared by
    identity."""

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
    """The same part: the very object, or a part read again (`(label, value)`,
    a new pair each reading) with an equal label and the very value. Anything
    else, a user's tuple included, by identity alone."""
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
    if isinstance(lifted, Lifted):
        leaves: Any = leaves_of(lifted)  # pyright: ignore[reportUnknownArgumentType]
    else:
        leaves = jax.tree_util.tree_leaves(lifted)
    return any(isinstance(leaf, Tracer) for leaf in leaves)


def check_cached(fn: Any, lift_now: Callable[[], Any], fast: Fast) -> None:
    """With `lift.verifying()` on: that what a cached call passes (`fast.lifted`)
    is what lifting the function now gives. When they differ, what the two
    walks read (`Walk.read`) says why: a cell, function or partial the watch
    covers that the walk now reads otherwise is a change the watch missed (a
    bug in lift); anything else changed inside a captured container or object,
    in place, which a cached call does not see. When `fast` is no longer
    current after lifting now (another thread rebound a capture meanwhile),
    the two lifts read different bindings and nothing is compared.

    The contents of your own lists, dicts and sets (a log a function fills
    while it traces, a trace counter, a loss log a callback fills) are not
    part of what a cached call promises: it serves what it compiled, as
    `jax.jit` does for a closure. While one of them differs from what `kept`
    was keyed with, nothing is compared."""
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
    leaves, treedef = cast(
        "tuple[list[Any], Any]",
        jax.tree_util.tree_flatten(fresh),  # pyright: ignore[reportUnknownMemberType]
    )
    first, tree = cast(
        "tuple[list[Any], Any]",
        jax.tree_util.tree_flatten(kept),  # pyright: ignore[reportUnknownMemberType]
    )
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
    raise _changed_in_place(fn, what, detail)


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


def _read_otherwise(kept: Any, fresh: Any) -> bool:
    """Whether the walk that lifted `fresh` read, of a cell, function or
    partial that the walk of `kept` read too, something else (by identity)."""
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
    """Everything a call reads, in one object written in one assignment, so that
    another thread never sees half an update: the cells and `Watch`es of the
    graph and what they held when the walk read them, its functions without
    keyword-only defaults or attributes with their code and defaults (checked
    in C), the float width and default device read before the lift, the
    function lifted (`lifted`: what a call passes in front of its arguments)."""

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
    """What a call reads, for `lifted` and what the walk that lifted it read
    (`Walk.read`: a cell and its contents, itself when empty; a function and
    `function_held`; a partial and its parts)."""
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
    return Fast(
        tuple(cells),
        tuple(contents),
        tuple(fn for fn, _, _ in fns),
        tuple(code for _, code, _ in fns),
        tuple(defaults for _, _, defaults in fns),
        context,
        lifted,
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
