"""Capturing a closure: walk a function's graph into a `Skeleton` and leaves.

The walk is iterative, over a queue of nodes. It visits each function, cell,
partial and bound method once, cycles included. It walks each captured value
as a pytree. Function leaves become nodes in turn. It reads the user's objects
and never writes to them. Every lift takes this one walk. What it reads of a
code object is computed once (`lift._rule.code`).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from typing import Any, Final, cast

from .._base import gc as _gc
from .._base.errors import LiftError, describe
from .._rule.code import NO_BRANCH, WHOLE, Branches
from .._rule.static import DynamicNames
from .._skeleton.nodes import (
    CellNode,
    FunctionNode,
)
from .._skeleton.skeleton import Skeleton, interned
from .walk import Walk


def capture(
    obj: Any,
    *,
    static: frozenset[str] = frozenset(),
    dynamic: Callable[[Any], bool] | DynamicNames | None = None,
    read: list[tuple[Any, Any]] | None = None,
) -> tuple[Skeleton, list[Any]]:
    """Walk `obj` (a function, bound method or partial) into a skeleton and leaves.

    The one entry into capture. The skeleton is the one alive equal to it
    (`interned`). `read`, if given, gets what the walk read (`Walk.read`).
    """
    with _gc.paused():
        walk = Walk(obj, static, dynamic)
        result = walk.run()
        # A function or cell walked outside the captures `dynamic=` names, then
        # reached from inside one: walked again inside (the set only grows).
        while (scoped := walk.scope.rescope()) is not None:
            walk = Walk(obj, static, dynamic, scoped_ids=scoped)
            result = walk.run()
        # A cell shared by several functions: one that branches on it in Python
        # keeps it static, whichever function the walk reached it through.
        branched = branched_elsewhere(walk)
        if branched:
            walk = Walk(obj, static, dynamic, branched, walk.scope.ids)
            result = walk.run()
        # A function or cell a static capture holds too (a registry's): static.
        while walk.held and (
            (frozen := walk.frozen.union(walk.held & walk.ids.keys())) != walk.frozen
        ):
            walk = Walk(obj, static, dynamic, branched, walk.scope.ids, frozen)
            result = walk.run()
        if read is not None:
            read.extend(walk.read)
        skeleton, leaves = result
        skeleton.options = (static, dynamic)
        return interned(skeleton), leaves


NO_NAMES: Final[frozenset[str]] = frozenset()


def check_options(
    static: str | Iterable[str],
    dynamic: str | Iterable[str] | Callable[[Any], bool] | None,
    name: str,
) -> tuple[frozenset[str], Callable[[Any], bool] | DynamicNames | None]:
    """Check `static=` and `dynamic=`, and return them as the walk takes them.

    `static=` becomes a set of names. `dynamic=` becomes a predicate or
    `DynamicNames`. `name` is the call's, for the messages."""
    if static == () and dynamic is None:
        return NO_NAMES, None
    names = _names(static)
    if names is None:
        raise LiftError(
            f"{name}(..., static={static!r}): `static=` names captured variables.\n"
            f"Fix: pass names as strings, e.g. `{name}(f, static=('b2',))`.",
            anchor="options",
        )
    if dynamic is None or callable(dynamic):
        return names, dynamic
    named = _names(dynamic)
    if named is None:
        raise LiftError(
            f"{name}(..., dynamic={dynamic!r}): `dynamic=` names captured "
            "variables, or is a predicate on a captured value.\nFix: pass names "
            f"as strings, e.g. `{name}(f, dynamic=('learning_rate',))`, or a "
            f"function, e.g. `{name}(f, dynamic=lambda v: isinstance(v, jax.Array))`.",
            anchor="options",
        )
    both = sorted(names & named)
    if both:
        raise LiftError(
            f"{name}(..., static={tuple(sorted(names))!r}, dynamic="
            f"{tuple(sorted(named))!r}): {', '.join(map(repr, both))} cannot be "
            f"both static and dynamic.\nFix: name each variable in one of them.",
            anchor="options",
        )
    return names, DynamicNames(named)


def _names(option: Any) -> frozenset[str] | None:
    """An option's names (a string, or an iterable of strings), or `None`."""
    try:
        names = frozenset((option,) if isinstance(option, str) else option)
    except TypeError:
        return None
    if not all(isinstance(n, str) for n in cast(frozenset[Any], names)):
        return None
    return names


def check_names(
    static: frozenset[str],
    dynamic: Callable[[Any], bool] | DynamicNames | None,
    found: frozenset[str],
    fn: Any,
    caller: str,
) -> None:
    """Refuse names in `static=` or `dynamic=` that no capture of `fn` has.

    `found` are the names its captures have."""
    named = dynamic.names if isinstance(dynamic, DynamicNames) else NO_NAMES
    if static <= found and named <= found:  # the common case, checked once
        return
    for option, given in (("static", static), ("dynamic", named)):
        unknown = sorted(given - found)
        if not unknown:
            continue
        known = ", ".join(repr(n) for n in sorted(found)) or "none"
        said: list[str] = []
        for u in unknown:
            near = difflib.get_close_matches(u, found, n=1)
            said.append(f"{u!r} (did you mean {near[0]!r}?)" if near else repr(u))
        fix = (
            "Fix: name captured variables (free variables, default parameters, "
            "partial keywords, function attributes, at any depth)."
        )
        if option == "dynamic":
            # The names a user knows are often a constructor's arguments, which
            # the closures it built need not keep (optax's `adam` keeps
            # `-learning_rate` as `step_size`): a partial of the constructor
            # keeps them as its keywords.
            fix += (
                " To name a constructor's arguments, lift a partial of it and "
                "build the object inside your jitted function: `make = lift.lift("
                f"functools.partial(constructor, {unknown[0]}=...), "
                f"dynamic={unknown[0]!r})`, then `make()`."
            )
        raise LiftError(
            f"{caller}({describe(fn)}, {option}={tuple(sorted(given))!r}): no "
            f"captured variable is called {', '.join(said)}.\nCaptured "
            f"variables: {known}.\n{fix}",
            anchor="unknown-static-name",
        )


def branched_elsewhere(walk: Walk) -> dict[int, Branches]:
    """Cells the walk must redo as static, with the keys branched on.

    One is a cell with a scalar leaf that another function sharing it branches
    on. Another holds a NumPy boolean, where some code branches on its
    parameters. The answer must not depend on which function the walk met
    first."""
    if not walk.scalar_cells:
        return {}
    if not any(boolean for _, _, boolean in walk.scalar_cells) and all(
        index not in walk.shared for _, index, _ in walk.scalar_cells
    ):
        return {}  # each cell read by one function: analysed already
    readers: dict[int, list[FunctionNode]] = {}
    flows = False
    for node in walk.nodes:
        if type(node) is FunctionNode:
            flows = flows or node.info.branches_on_params
            for c in node.cells:
                readers.setdefault(c, []).append(node)
    out: dict[int, Branches] = {}
    for cell, index, boolean in walk.scalar_cells:
        name = cast(CellNode, walk.nodes[index]).name
        got = (f.info.branch_paths.get(name, NO_BRANCH) for f in readers.get(index, ()))
        if paths := WHOLE if boolean and flows else NO_BRANCH.union(*got):
            out[id(cell)] = paths
    return out
