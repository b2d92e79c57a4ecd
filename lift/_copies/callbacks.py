"""A callback a traced call gives JAX must not hold lift's copies.

JAX keeps the callback (`jax.debug.callback`, `pure_callback`,
`io_callback`) in the compiled program and runs it later. Whatever it does to
lift's copy (`lift._copies.copies`) then escapes the copy check after the call.
Such a call is refused when it returns, as a call that changed a copy is.

The signal is JAX's: a callback more kept, and a copy, rebuilt function or
cell held more. The search goes down from each callback JAX keeps, through
what anything holds (`lift._holders.held`): a function, a bound method
(`losses.append`), an object, a dict. A custom derivative rule is no callback:
one that reads a copy is not refused."""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable
from typing import Any

from .. import _compat
from .._base import gc as _gc
from .._base.errors import LiftError, describe
from .._holders.held import held
from .._holders.reach import reach
from .copies import Copies, Copy

# JAX's callbacks alive when the running collection began, those the
# collections freed, the collections run, and those of older generations.
_COLLECTED = [0, 0, 0, 0]


def _collecting(phase: str, info: dict[str, int]) -> None:
    try:
        alive = _compat.callbacks_alive()
    except Exception:  # at exit, the modules torn down
        return
    if phase == "start":
        _COLLECTED[0] = alive
    else:
        _COLLECTED[1] += _COLLECTED[0] - alive
        _COLLECTED[2] += 1
        _COLLECTED[3] += info["generation"] > 0


gc.callbacks.append(_collecting)


def mark() -> tuple[int, int, int]:
    """Where a traced call begins, for `made_since`: read in constant time."""
    return _compat.callbacks_alive() + _COLLECTED[1], _COLLECTED[2], _COLLECTED[3]


def made_since(begun: tuple[int, int, int]) -> bool:
    """Whether JAX keeps a callback made since `begun` (`mark`).

    The collector runs meanwhile. The count of JAX's callbacks says so, with
    those collections freed added back. An old callback freed otherwise (a
    cache of JAX's emptied) may hide a new one. So the young objects are read
    too, while no collection of an older generation has promoted them. With
    another thread running Python code they are not read (`young_objects`):
    a callback may be new, and the callers look."""
    made, collections, older = begun
    if _compat.callbacks_alive() + _COLLECTED[1] != made:
        return True
    if _COLLECTED[3] != older:
        return False  # the count alone
    young = _gc.young_objects(older=_COLLECTED[2] != collections)
    return young is None or bool(_compat.kept_callbacks(young))


class Kept:
    """What a callback could hold lift's copies by, and their reference counts
    when a traced call began: the copies, the rebuilt functions and their cells."""

    def __init__(self, copies: Copies, functions: tuple[Any, ...]) -> None:
        self.copies = [c for c in copies if not c.attributes]
        self.held: list[Any] = [c.value for c in self.copies]
        self.held += [x for fn in functions for x in (fn, *(fn.__closure__ or ()))]
        self.counts = [sys.getrefcount(x) for x in self.held]
        self.begun = mark()

    def outlived(
        self, callbacks: Callable[[], list[Any]] = _compat.kept_callbacks
    ) -> Copy | None:
        """The first copy a callback JAX keeps (`callbacks()`) reaches now, if
        any.

        Asked once JAX keeps a callback more (`made_since`). A collection
        may have freed what held a copy: then the reference counts say
        nothing, and the search runs."""
        if _COLLECTED[2] == self.begun[1] and not any(
            sys.getrefcount(x) > count
            for x, count in zip(self.held, self.counts, strict=True)
        ):
            return None  # none holds more of lift's
        copies = {id(c.value): c for c in self.copies}  # alive: their ids unique
        found = reach(callbacks(), held, 100_000)  # bounded
        return next((copies[id(x)] for x in found if id(x) in copies), None)


def refuse_kept(fn: Any, copy: Copy) -> LiftError:
    """The error for a call of the rebuilt `fn`, traced, that left a callback
    holding `copy`."""
    name = copy.label.variable or copy.label.text.lstrip(".")
    what = type(copy.value).__name__
    of = "" if copy.owner is fn else f" of {describe(copy.owner)}"
    return LiftError(
        f"{describe(fn)} gave a callback (`jax.debug.callback`, "
        "`jax.pure_callback`, `io_callback`) a function holding lift's copy of "
        f"the captured variable {name!r}{of}: a {what} that lift rebuilds around its "
        "leaves (it holds dynamic values, or functions capturing some). JAX keeps "
        "the callback in the compiled program and runs it later: what it does to the "
        f"{what} reaches lift's copy, and your {what} does not change.\nFix: "
        "record through a function that does not capture it (a list and a "
        "function of the module: globals are not captured), or keep only static "
        f"values in the {what} (one without arrays or floats, in it or its "
        "functions, is your own object inside the lifted function).",
        anchor="copy-outlives-the-call",
    )
