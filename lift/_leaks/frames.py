"""The look at the user's frames where JAX's checker fails a trace
(`lift._compat.LeakSignal`): the first walk that names its holders.

The look finds the tracers of the exited trace that a frame's locals reach.
It opens them as the leak scan does (`LeakWalk.expand`), over the holders
`lift._holders` describes, within a budget of objects. Its policy is here
(`FrameLook.at_exit`): which frames, how many objects. `lift._compat` says
which tracers are the trace's own.

What the look adds to the scan is its bounds:

- a budget of objects shared by the frames; a number or string in a
  container costs an eighth.
- a function's globals only for a function that is a frame's local, not for
  a library's tables of functions met deeper.
- no weak reference followed: a weak reference keeps nothing alive."""

from __future__ import annotations

import collections
import functools
import inspect
import itertools
import types
from collections.abc import Iterable
from typing import Any, Final, NamedTuple

import jax
import numpy as np

from .._base import gc as _gc
from .._base.atoms import UNOPENED
from .._base.owners import is_user_module
from .._compat import Tracer, frame_locals
from .._holders.attributes import own_attributes
from .._holders.closure import dict_static, function_of, slots_of, user_class
from .._holders.stdlib import BUILTIN_CONTAINERS, OPENED_BY_SCANS
from .report import FRAME_LOCAL, Leak, Unopened, error_text, local_leak
from .scan import NONE_LIVE, LeakWalk

# Never opened by the look, subclasses too (a subclass of `int` holding a
# tracer is the leak scan's to find): what the scan never opens, classes (a
# place to leak to, not a frame's data), NumPy scalars and JAX's arrays.
_NOT_LOOKED_AT: Final = (*(UNOPENED - OPENED_BY_SCANS), type, np.generic, jax.Array)
# Read here, in C: their items (a dict's values).
_ITEMS: Final = frozenset({list, tuple, set, frozenset, collections.deque})
# Not opened by their own attributes alone, though the user's classes.
_OPENED_AS_SUCH: Final[tuple[type, ...]] = (
    *BUILTIN_CONTAINERS,
    BaseException,
    functools.partial,
)
_HEAP_TYPE: Final = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by Python code
_OPTIMIZED: Final = inspect.CO_OPTIMIZED  # a function's frame, not a module's
# The most objects looked at per look (a number or string in a container
# an eighth), shared out among the frames read. 5 000 spent on equinox's and
# jaxtyping's wrapper frames cost equinox's suite 1.7 times plain's CPU time;
# 1 000 finds each case of the test suite.
_FRAME_BUDGET: Final = 1_000
# The most user frames looked at per look: the innermost and the
# outermost (the test's own, its fixtures'), the frames between a deep
# recursion's not read.
_FRAME_INNER: Final = 8
_FRAME_OUTER: Final = 4


class FrameHolding(NamedTuple):
    """A frame of the user's code holding tracers of an exited trace: its
    code, its local variables (name, value), and the tracers found through
    them (the local's name, the tracer)."""

    code: types.CodeType
    names: list[tuple[str, Any]]
    tracers: list[tuple[str, Any]]


class FrameLook:
    """`look(live, names, budget, seen)`: the tracers `names` reach that are
    not `live`, with the budget left.

    `names` are a frame's locals, `(name, value)`. `live` tells the tracers
    that are not the exited trace's. Tracers come as `(name, tracer)`, found
    breadth-first within `budget` objects. `seen`: objects already looked at
    by this look.

    An instance of the user's classes is opened by its own attributes
    (`own_attributes`). It is not opened as a pytree: flattening would run
    the class's code at every look. Anything else is opened as the leak scan
    opens it."""

    __slots__ = ("attributes", "skips", "walk")

    def __init__(self) -> None:
        # A weak reference keeps nothing alive: its callback only is looked at.
        self.walk = LeakWalk(0, live=NONE_LIVE, weak=False)
        self.skips: dict[Any, bool] = {}  # per type: never looked into
        # Per type: its slots if opened by its own attributes, else `None`.
        self.attributes: dict[Any, tuple[str, ...] | None] = {}

    def slots(self, obj: Any, cls: Any) -> tuple[str, ...] | None:
        if cls not in self.attributes:
            mine = (
                cls.__flags__ & _HEAP_TYPE
                and user_class(cls)
                and not issubclass(cls, _OPENED_AS_SUCH)
                and function_of(obj) is None  # a `Lifted`: its function
            )
            self.attributes[cls] = slots_of(cls) if mine else None  # pyright: ignore[reportUnknownArgumentType]
        return self.attributes[cls]

    def skip(self, cls: Any) -> bool:
        found = self.skips.get(cls)
        if found is None:
            # A tracer is never skipped: JAX 0.8 registers `Tracer` as a
            # virtual subclass of `jax.Array` (0.10 no longer does).
            found = self.skips[cls] = issubclass(cls, _NOT_LOOKED_AT) and not (
                issubclass(cls, Tracer)
            )
        return found

    def __call__(
        self, live: Any, names: list[tuple[str, Any]], budget: int, seen: set[int]
    ) -> tuple[list[tuple[str, Any]], int]:
        found: list[tuple[str, Any]] = []
        skip, skips = self.skip, self.skips
        queue = [(value, True, name) for name, value in names if not skip(type(value))]
        for obj, top, name in queue:  # it grows as the look goes
            if budget <= 0:
                break
            budget -= 1
            cls: Any = type(obj)  # pyright: ignore[reportUnknownVariableType]
            if issubclass(cls, Tracer):
                if not live.is_live(obj) and all(t is not obj for _, t in found):
                    found.append((name, obj))
                continue
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            if cls in _ITEMS or cls is dict:
                children: Iterable[Any] = obj.values() if cls is dict else obj
                if cls is dict and (keys := dict_static(obj)):
                    # Keys holding objects (`seen[Handle(x)] = ...`), as the
                    # scan opens them.
                    children = [*children, *(key for _, key in keys)]
                if len(obj) > 4:
                    # Numbers, strings, arrays: told apart by their types, in C.
                    budget -= len(obj) // 8
                    if all(map(skip, set(map(type, children)))):
                        continue
            elif (slots := self.slots(obj, cls)) is not None:
                try:
                    children = [value for _, value in own_attributes(obj, slots)]
                except Exception:  # a `__dict__` only its code gives
                    continue
            else:
                children = self.parts(obj, top)
            # Numbers and strings are not queued, and cost an eighth of an
            # object: a list of a thousand floats beside the tracer does not
            # hide it.
            for child in itertools.islice(children, max(0, budget * 8 - 1)):
                skipped = skips.get(type(child))
                if skipped is None:
                    skipped = skip(type(child))
                if not skipped:
                    budget -= 1
                    if budget <= 0:
                        break
                    queue.append((child, False, name))
        return found, budget

    def at_exit(self, exited: Any, frame: types.FrameType) -> list[FrameHolding]:
        """Of the user's frames from `frame` down, those whose locals hold
        tracers of the trace `exited` (`lift._compat.ExitedTrace`).

        At most `_FRAME_INNER` innermost and `_FRAME_OUTER` outermost frames
        are read (the test's, its fixtures'). They share a budget of
        `_FRAME_BUDGET` objects."""
        chosen = _user_frames(frame)
        found: list[FrameHolding] = []
        budget = _FRAME_BUDGET
        seen: set[int] = set()  # an object two frames hold is looked at once
        for i, user in enumerate(chosen):
            if budget <= 0:
                break
            # An equal share of what is left to each frame still to read: a
            # library's wrapper frames (innermost) cannot spend what the
            # test's own frames (outermost) are owed.
            share = budget // (len(chosen) - i)
            names = frame_locals(user)
            tracers, left = self(exited, names, share, seen)
            budget -= share - left
            if tracers and not exited.runs_beneath(user):
                found.append(FrameHolding(user.f_code, names, tracers))
        return found

    def parts(self, obj: Any, top: bool) -> list[Any]:
        """What the leak scan opens of `obj` (a function's globals only if it
        is a frame's local: `top`); nothing it fails to open.

        Of a weak reference, only the callback it keeps itself."""
        walk = self.walk
        walk.seen = {id(obj)}
        walk.globals = top
        try:
            walk.expand(obj, -1)
            return [child for child, _ in walk.queue]
        except Exception:  # what cannot be opened holds nothing the look sees
            return []
        finally:
            # Nothing kept past the call: an object the last look opened
            # dies when the user drops it, not at the next look.
            walk.queue.clear()
            walk.entries.clear()
            walk.failed.clear()
            walk.keep.clear()


#: The most objects one frame's naming walk visits.
_FRAME_LIMIT = 200_000


def frame_leaks(
    holdings: Iterable[FrameHolding],
) -> tuple[list[tuple[Leak, Any]], list[Unopened]]:
    """The leaks of tracers that the user's frames held in local variables
    (`FrameLook.at_exit`), each with its tracer.

    Each leak is named by its shortest path from the local (`seen[0]`, a
    local variable of `test_log`). Also returns what the walk could not
    open."""
    found: list[tuple[Leak, Any]] = []
    unopened: list[Unopened] = []
    for held in holdings:
        wanted = {id(t): (name, t) for name, t in held.tracers}
        walk = LeakWalk(_FRAME_LIMIT, frozenset(wanted), live=NONE_LIVE)
        for name, value in held.names:
            walk.push(value, -1, name, (held.code, name, FRAME_LOCAL), reset=True)
        try:
            with _gc.paused():
                walk.run()
        except Exception as exc:  # named, and each tracer reported as held
            unopened.append(
                Unopened(f"the locals of {held.code.co_qualname}", error_text(exc))
            )
        found.extend(zip(walk.leaks, walk.tracers, strict=True))
        unopened.extend(walk.unopened())
        named = {id(t) for t in walk.tracers}
        for key, (name, tracer) in wanted.items():
            if key not in named:  # reached by a way the walk does not take
                found.append((local_leak(held.code, name, tracer), tracer))
    return found, unopened


def _user_frames(frame: types.FrameType | None) -> list[types.FrameType]:
    """The user's frames from `frame` down, innermost first.

    A user's frame is one of a user's module (`is_user_module`, by module
    name). JAX's, lift's, NumPy's, pytest's, pluggy's and the standard
    library's are not."""
    chosen: list[types.FrameType] = []
    while frame is not None:
        if frame.f_code.co_flags & _OPTIMIZED and is_user_module(
            frame.f_globals.get("__name__")
        ):
            chosen.append(frame)
        frame = frame.f_back
    return chosen[:_FRAME_INNER] + chosen[_FRAME_INNER:][-_FRAME_OUTER:]
