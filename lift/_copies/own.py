"""Which captured containers stay your own objects (SPEC 1).

Code that mutates a captured list or dict in place must reach your object. A
container holding no dynamic leaf stays yours wherever it sits (`own_static`).
A plain function in it is no dynamic leaf: a registry `[log_hook]` and a
counter `defaultdict(lambda: 0)` stay yours. Code appending to such a
container, or filling it, acts on it. A container holding dynamic leaves is
rebuilt around them, so code mutating it changes a copy. The call that does
so is refused when it returns (`lift._copies.copies`). A capture the code
rebinds (`nonlocal x; x = ...`) is refused when lifted if it holds a dynamic
leaf (`refuse_rebinding`)."""

from __future__ import annotations

import collections
import contextlib
import threading
import types
from collections.abc import Callable, Generator, Iterable
from typing import Any, Final, cast

from .._base.atoms import EXACT
from .._base.caches import BoundedDict
from .._base.errors import LiftError, describe, static_fix, type_text
from .._compat import CUSTOM_NODES, Tracer, kept_callbacks
from .._holders.closure import default_factory
from .._holders.held import held
from .._holders.reach import items, reach
from .._holders.trees import (
    flatten_checked,
    is_function_like,
    read_as_tuple,
)
from .._rule.static import ById, static_key
from .._skeleton.nodes import Static, Template


def ownable(x: Any) -> bool:
    """Whether `x` is a container that stays your own when it holds no dynamic leaf.

    A list, a dict, an `OrderedDict`, or a `defaultdict` whose factory is no
    function or a plain one (`defaultdict(lambda: 0)`)."""
    t: type[Any] = type(x)  # pyright: ignore[reportUnknownVariableType]
    if t is list or t is dict:
        return True
    if t not in STD_DICTS:
        return False
    factory = default_factory(x)
    return not is_function_like(factory) or plain_function(factory)


def plain_function(x: Any) -> bool:
    """Whether `x` is a function holding nothing: no cells, defaults or attributes.

    Its code alone says what it does, so a container keeps it by identity
    (`log_hook` in a registry). A function with a cell is walked instead: a
    rebinding there must be seen."""
    return (
        type(x) is types.FunctionType
        and x.__closure__ is None
        and not x.__defaults__
        and not x.__kwdefaults__
        and not x.__dict__
    )


# The standard library's dicts that may stay your own as a dict does.
STD_DICTS: Final = (collections.OrderedDict, collections.defaultdict)


def _plain_items(x: Any) -> Iterable[Any] | None:
    """What the containers that may stay your own hold: their items, and a
    tuple's or NamedTuple's."""
    return items(x) if ownable(x) or read_as_tuple(type(x)) else None  # pyright: ignore[reportUnknownArgumentType]


def plain_reach(value: Any) -> set[int]:
    """The ids of the containers below `value` that may stay your own.

    Reached through them, tuples and NamedTuples alone (`ownable`); not
    `value` itself, which `template` keeps whole itself."""
    inner = _plain_items(value)
    if inner is None or all(_plain_items(x) is None for x in inner):
        return set()  # nesting none: the common case, in one pass
    return {
        id(x) for x in reach([value], _plain_items) if x is not value and ownable(x)
    }


# Containers the lifted function shares with the original when they hold no
# dynamic leaf (`own_static`): what code appends to, fills or counts in. The
# dicts of the standard library among them (a `defaultdict(list)` history, an
# `OrderedDict` cache), captured or nested alike (`ownable`).
OWN_CONTAINERS: Final = frozenset({list, dict, *STD_DICTS})


def own_static(value: Any, key: Any = None, code: Any = None) -> Static:
    """A list, dict or set kept as your very object.

    It compares by its contents as they are now: type and value at every
    depth, dict order included. `code` is the lifted function's."""
    try:
        key = _contents_key(value) if key is None else key
        pinned = (code, key) in _PINNED and not getattr(_UNPINNED, "on", False)
    except Exception:  # an unhashable static inside: by identity
        return Static(value)
    # Pinned: by identity too, and never its contents now (`own_changed`).
    return Static(value, (key, ById(value)) if pinned else key)


# The lifted function's code and the contents of your own containers that a
# callback JAX keeps reached (`pin_kept`). Such a container, lifted with such
# a function, is keyed by identity too.
_PINNED: BoundedDict[Any, bool] = BoundedDict(4096)
_UNPINNED = threading.local()  # set in this thread: no container is pinned


@contextlib.contextmanager
def unpinned() -> Generator[None]:
    """Lifts in this thread key your own containers by contents, pinned or not.

    A pin keys another container of the same contents apart. The very
    container lifted before the pin keeps its program (`lift.verifying`)."""
    _UNPINNED.on = True
    try:
        yield
    finally:
        del _UNPINNED.on


def nests_plainly(value: Any) -> bool:
    """Whether `value` nests lists, tuples and dicts only.

    Not pytree nodes of other kinds, whose static data JAX's treedef compares
    in its own way."""

    def into(x: Any) -> Iterable[Any] | None:
        t: type[Any] = type(x)  # pyright: ignore[reportUnknownVariableType]
        plain = t is list or t is tuple or t is dict
        return items(x) if plain or (x is value and ownable(x)) else None

    return not any(
        into(x) is None
        and x is not None
        and (type(x) in CUSTOM_NODES or hasattr(cast(Any, type(x)), "_fields"))
        for x in reach([value], into)
    )


def kept_whole(
    value: Any, leaves: list[Any], owned: frozenset[int], is_static: Any
) -> bool:
    """Whether the captured `value`, flattened to `leaves`, stays your own.

    It must be a list or dict holding no dynamic leaf. `owned` holds the ids
    of the containers nested in it that stay yours."""
    return (
        ownable(value)
        and all(id(x) in owned or own_part(x, is_static) for x in leaves)
        and nests_plainly(value)
    )


def own_part(leaf: Any, is_static: Callable[[Any], bool]) -> bool:
    """Whether a leaf leaves its container your own.

    A static leaf does, and so does a plain function (`plain_function`). A
    tracer never does."""
    if issubclass(type(leaf), Tracer):  # pyright: ignore[reportUnknownArgumentType]
        return False
    return is_static(leaf) or plain_function(leaf)


def own_changed(statics: Iterable[Static]) -> bool:
    """Whether one of your own containers among `statics` has changed.

    That is a list, dict or set kept by `own_static`, whose contents are no
    longer those it was keyed by."""
    for static in statics:
        value = static.value
        if type(value) in _KEYED and not static.by_identity:  # pyright: ignore[reportUnknownArgumentType]
            try:
                if _contents_key(value) != contents_key_of(static):
                    return True
            except Exception:  # now holds an unhashable value: changed
                return True
    return False


def contents_key_of(static: Static) -> Any:
    """The contents key `own_static` gave `static`, pinned or not."""
    key: Any = static.slot_key
    if type(key) is not tuple:
        return key
    parts = cast("tuple[Any, ...]", key)
    return parts[0] if len(parts) == 2 and type(parts[1]) is ById else parts


def pin_kept(
    nodes: Iterable[Any],
    code: Any,
    callbacks: Callable[[], list[Any]] = kept_callbacks,
) -> None:
    """Compare by identity your own containers among the statics of `nodes`
    (a skeleton's) that a callback JAX keeps reaches (`callbacks()`, each a
    pass over the heap: one a call shares).

    Such a callback runs on the container it was traced with. Another
    container equal to it must get a program of its own. So containers with
    those contents, in a lift of a function of `code`, are keyed by identity
    too from now on."""
    own = {
        id(s.value): s
        for node in nodes
        for _, template in node.parts()
        for s in template.slots
        if type(s) is Static and type(s.value) in _KEYED and not s.by_identity  # pyright: ignore[reportUnknownArgumentType]
    }
    if own:
        for x in reach(callbacks(), held, 100_000):  # bounded
            static = own.get(id(x))
            if static is not None and static.value is x:
                _PINNED.add((code, static.slot_key), True)


# The containers `own_static` keys by their contents.
_KEYED: Final = frozenset({list, dict, set, *STD_DICTS})


def atoms_key(value: Any) -> Any:
    """A list's or dict's key made in C when it holds exact scalars alone
    (their types, then their values), else `None`."""
    t: type[Any] = type(value)  # pyright: ignore[reportUnknownVariableType]
    if (t is not list and t is not dict) or not EXACT.issuperset(
        kinds := tuple(map(type, value))
    ):
        return None
    if t is list:
        return (t, kinds, tuple(value))
    values = tuple(value.values())
    more = tuple(map(type, values))
    return (t, kinds, tuple(value), more, values) if EXACT.issuperset(more) else None


def _contents_key(value: Any) -> Any:
    t: type[Any] = type(value)  # pyright: ignore[reportUnknownVariableType]
    if (key := atoms_key(value)) is not None:
        return key
    if t is list:
        return (t, tuple(map(_contents_key, value)))
    if t is dict or t in STD_DICTS:
        # A defaultdict's factory too: what a missing key gets.
        factory = static_key(default_factory(value))
        items = tuple((static_key(k), _contents_key(v)) for k, v in value.items())
        return (t, factory, items)
    if t is set:
        return (t, frozenset(map(static_key, value)))
    return static_key(value)


def refuse_rebinding(
    fn: types.FunctionType, name: str, template: Template, leaves: list[Any]
) -> None:
    """A `LiftError` if the rebound variable `name` holds a dynamic leaf.

    `fn`'s code rebinds it (`nonlocal name; name = ...`). A function in it
    (`template`) is refused too. Its new value would not reach the lifted
    function's leaves."""
    if all(type(s) is Static for s in template.slots):
        return
    what = next(
        (
            f"a dynamic value ({type_text(leaves[s])})"
            for s in template.slots
            if type(s) is int
        ),
        "a function",
    )
    raise LiftError(
        f"{describe(fn)} rebinds the captured variable {name!r} "
        f"(`nonlocal {name}; {name} = ...`), which holds {what}. A lifted "
        "function's dynamic captures are pytree leaves and cannot be "
        "reassigned from inside it.\n"
        f"Fix: pass {name!r} as an argument and return its new value, or keep it "
        f"static with {static_fix((name,))} if it is not an array.",
        anchor="rebinds-a-dynamic-capture",
        static=(name,),
    )


def own_leaf(
    value: Any, owned: dict[int, bool], is_static: Callable[[Any], bool]
) -> Callable[[Any], bool]:
    """The `is_leaf` a capture is flattened with.

    Function-likes are leaves. So is each list or dict nested in `value`
    through lists, tuples, dicts and NamedTuples that holds no dynamic leaf
    (`own_part`). Each such container is kept whole, your own object
    (`own_static`): code appending to it or filling it acts on it. One inside
    a registered node is rebuilt with the node, whose unflatten may need a
    container there. A call mutating it is refused when it returns
    (`lift._copies.copies`). `owned` records the answer for each container
    met. `is_static` says what the walk makes of a leaf."""
    below = plain_reach(value)
    if not below:
        return is_function_like

    def is_leaf(x: Any) -> bool:
        if id(x) not in below:  # not a container that may be your own
            return is_function_like(x)
        found = owned.get(id(x))
        if found is None:
            flat = flatten_checked(x, is_function_like)
            found = owned[id(x)] = (
                flat is not None
                and nests_plainly(x)
                and all(own_part(leaf, is_static) for leaf in flat[0])
            )
        return found

    return is_leaf
