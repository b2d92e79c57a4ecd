"""What a call made while a transform traces it leaves holding lift's copies
(`lift._copies.copies`): a callback JAX keeps in the compiled program
(`jax.debug.callback(lambda v: losses.append(v), loss)`) would change lift's
copy later, at run time, where the copy check after the call cannot see it.
Such a call is refused when it returns, as a call that changed a copy is.
Told by reference counts (the copies', the rebuilt functions' and their
cells', before the call and after it, less what the call returns), and, for
the rare one held more, by what holds it (`lift._compat.held_by_a_callback`):
a custom derivative rule that reads a copy is not refused."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterable
from typing import Any, cast

from .. import _compat
from .._base.errors import LiftError, describe
from .._holders.closure import function_parts, holder_of
from .copies import CONTAINERS, Copies, Copy

__all__ = ["Kept", "refuse_kept"]


class Kept:
    """What a callback would hold lift's copies by, with its reference counts
    when a traced call began: the copies, the rebuilt functions (a captured
    helper given to the callback) and their cells (a function made in the call
    that reads one). One held more when the call returns, and not through what
    it returns, is looked at: does a callback hold it, and does it reach a copy."""

    def __init__(self, copies: Copies, functions: tuple[Any, ...]) -> None:
        self.copies = [c for c in copies if not c.attributes]
        self.held: list[Any] = [c.value for c in self.copies]
        for fn in functions:
            self.held.append(fn)
            self.held.extend(fn.__closure__ or ())
        self.counts = [sys.getrefcount(x) for x in self.held]
        self.callbacks = _compat.callbacks_alive()

    def outlived(self, out: Any) -> Copy | None:
        """The first copy a callback the call made holds now, if any."""
        if _compat.callbacks_alive() == self.callbacks:
            return None  # the call gave JAX no callback (none was collected)
        for x, count in zip(self.held, self.counts, strict=True):
            if sys.getrefcount(x) > count and not _reaches(out, x):
                copy = next((c for c in self.copies if _reaches(x, c.value)), None)
                if copy is not None and _compat.held_by_a_callback(x):
                    return copy
        return None


def _reaches(root: Any, target: Any, limit: int = 10_000) -> bool:
    """Whether `root` holds `target` (a cell: what it holds), through
    containers and a callable's parts as `lift._holders.closure` describes
    them: cells, defaults, attributes; a partial's or a bound method's parts
    (bounded)."""
    if type(target) is types.CellType:
        target = _in_cell(target)
    stack, seen = [root], set[int]()
    while stack and len(seen) < limit:
        x = stack.pop()
        if x is target:
            return True
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, dict):
            stack.extend(cast("dict[Any, Any]", x).values())
        elif isinstance(x, CONTAINERS):
            stack.extend(cast("Iterable[Any]", x))
        elif type(x) is types.CellType:
            stack.append(_in_cell(x))
        elif type(x) is types.FunctionType:
            stack.extend(x.__closure__ or ())
            stack.extend(value for _, value in function_parts(x))
        elif (holder := holder_of(x)) is not None:
            stack.extend(value for _, value in holder.parts(x))
    return False


def _in_cell(cell: types.CellType) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return None


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
        "leaves (it holds dynamic values or functions). JAX keeps the callback "
        "in the compiled program and runs it later, so what it does to the "
        f"{what} reaches lift's copy, and your {what} does not change.\nFix: "
        "record through a function that does not capture it (a list and a "
        "function of the module: globals are not captured), or keep only static "
        f"values in the {what} (one without arrays, floats or functions is your "
        "own object inside the lifted function).",
        anchor="copy-outlives-the-call",
    )
