"""The leak scan's opening of one object, for the look at the user's frames as
a trace exits (`lift._compat.watching_trace_exits(opener=...)`): the frame
look opens plain containers and objects itself, and asks this for the rest,
so that it opens what the leak scan opens."""

from __future__ import annotations

import weakref
from typing import Any, cast

from .._holders.stdlib import WEAK_HOLDERS, weakref_parts
from .scan import NONE_LIVE, LeakWalk

__all__ = ["FrameOpener"]


class FrameOpener:
    """The parts of one object as the leak scan opens it (its holders: slots,
    exceptions, partials, suspended generators, NumPy object arrays, a user's
    function's globals, ...), for the look at the user's frames as a trace
    exits (`_compat.watching_trace_exits(opener=...)`), which opens plain
    containers and objects itself."""

    __slots__ = ("walk",)

    def __init__(self) -> None:
        self.walk = LeakWalk(0, live=NONE_LIVE)

    def __call__(self, obj: Any) -> list[Any]:
        if isinstance(obj, WEAK_HOLDERS):
            # The look runs before the garbage collector (JAX's checker
            # collects first): through a weak reference it would reach
            # garbage, and what it names it keeps alive until the phase ends.
            # A tracer alive there by another holder is still alive then. A
            # weak reference's callback it keeps itself.
            if isinstance(obj, weakref.ReferenceType):
                ref = cast(weakref.ReferenceType[Any], obj)
                return [value for _, value in weakref_parts(ref)]
            return []
        walk = self.walk
        walk.seen = {id(obj)}
        try:
            walk.expand(obj, -1)
            return [child for child, _ in walk.queue]
        finally:
            # Nothing kept past the call: the look's caller holds the parts,
            # and an object the last exit's look opened dies when the user
            # drops it, not when the next trace exits.
            walk.queue.clear()
            walk.entries.clear()
            walk.failed.clear()
            walk.keep.clear()
            walk.seen = set()
