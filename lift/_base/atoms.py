"""The types whose values hold nothing, stated once.

Several walks skip a value by its type alone. The leak scan, the frame look
and the static rule's fast paths do. Each derives its own set from the facts
below, by named set operations. Each says beside it why it differs. It imports
nothing of lift's."""

from __future__ import annotations

import types
from typing import Final

import numpy as np

# None, numbers and strings: immutable values made of no other object.
SCALARS: Final = frozenset({type(None), bool, int, float, complex, str, bytes})
# The scalars whose `==` is not their value's identity (`0.0 == -0.0`, `nan !=
# nan`, `1 == 1.0`), and which become leaves (dynamic) when captured.
INEXACT: Final = frozenset({float, complex})
# The scalars compared and hashed by value, exactly: a static one is the same
# static as any value of its type it equals.
EXACT: Final = SCALARS - INEXACT
# Every type whose values hold no other object: the scalars, the other builtin
# singletons, ranges (of ints) and bytearrays (of bytes).
HOLD_NOTHING: Final = SCALARS | {
    type(Ellipsis),
    type(NotImplemented),
    range,
    bytearray,
}
# Python's machinery: modules, code, frames, tracebacks, and the C types' slot
# wrappers and descriptors. They hold objects, but none of the user's data that
# a scan of values should follow (a module's globals are scanned from the
# user's functions that name them; a frame's locals by the frame look).
INTERPRETER: Final = frozenset(
    {
        types.ModuleType,
        types.CodeType,
        types.FrameType,
        types.TracebackType,
        types.MethodWrapperType,
        types.WrapperDescriptorType,
        types.MethodDescriptorType,
        types.GetSetDescriptorType,
        types.MemberDescriptorType,
    }
)
# What the scans for tracers (the leak scan, and the frame look at a trace's
# exit) never open: what holds nothing, the interpreter's machinery, NumPy's
# dtypes, and slices (of indices, in practice: a slice is never opened).
UNOPENED: Final = HOLD_NOTHING | INTERPRETER | {slice, np.dtype}
