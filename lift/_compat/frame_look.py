"""When to look at the user's frames as a trace exits for good, and which
tracers are its own. The look happens where JAX's checker looks
(`core.ensure_no_leaks`), for the blocks
`trace_exits.watching_trace_exits(frames=...)` opens. How to look
(which frames, how many objects, the finalizers) is the look's own policy
(`lift._leaks.frames.FrameLook.at_exit`).
"""

from __future__ import annotations

import contextlib
import itertools
import sys
import threading
import types
import weakref
from collections.abc import Callable, Generator
from typing import Any, Final, NamedTuple, Protocol, cast

from jax._src import core as _core

from .config import jax_checks_leaks, jax_leak_checks_declined
from .escaped import leaked_at_check
from .traces import (
    EVAL_TRACE,
    TRACE_CTX,
    LiveTraces,
    running_traces,
)

# JAX's checker (`maybe_find_leaked_tracers`, jax 0.8.0 to 0.12) looks at the
# exit of a trace for any tracer of it still referenced, a caller's local
# variable included: `seen.append(x)` inside a jitted closure over the test's
# local `seen` fails the test there, even though the test's frame drops `seen`
# before any later look could see it. While a block watches frames, each trace
# that exits for good is looked for in the user's frames then on the stack,
# and in the finalizers registered while the trace ran, by the block's look.
#
# "For good": `core.set_current_trace(t)` is also entered to switch back to a
# trace still running, the one a transform runs in (jax 0.10.2: every
# `BatchTrace`, `JVPTrace`, `LinearizeTrace` and `JaxprTrace` primitive
# enters its `parent_trace`, a linearize trace its `tangent_trace`), and the
# user's function running in that trace holds its tracers legitimately. A
# trace exits for good when no `set_current_trace` of it is still open and no
# open or current trace reaches it through its parents; where it was entered
# before the block began watching, the JAX frames beneath the holding frame
# tell (`running_traces`). `trace_exits`, which replaces
# `core.set_current_trace` while blocks watch, tells this module of each
# trace entered (`entering`) and left (`leaving`, `check_frames`).


class FrameHolding(NamedTuple):
    """A frame of the user's code holding tracers of a trace that just exited
    for good. It gives its code, the line it was at and its local variables
    (name, value). It gives the tracers found through them (the local's
    name, the tracer). With
    no code, not a frame: a holder no variable reaches (a finalizer), named
    as its only "variable"."""

    code: types.CodeType | None
    lineno: int
    names: list[tuple[str, Any]]
    tracers: list[tuple[str, Any]]


class Look(Protocol):
    """How a block finds the tracers of an exiting trace (`FrameLook`).

    It chooses the frames it will read from the stack as the trace exits
    (`choose`: from `frame` down, each with its variables' names). Then it
    finds the tracers they and `finalizers` hold (`at_exit`)."""

    def choose(
        self, frame: types.FrameType | None
    ) -> list[tuple[types.FrameType, Any]]: ...

    def at_exit(
        self,
        exited: ExitedTrace,
        chosen: list[tuple[types.FrameType, Any]],
        finalizers: list[Any],
    ) -> list[FrameHolding]: ...


class LeakSignal(NamedTuple):
    """A trace that JAX's checker fails at its check (`core.ensure_no_leaks`):
    still alive after a garbage collection, with `tracers` among its
    referrers (`leaked_at_check`). `frame`: the frame of JAX's that checks it,
    the user's frames beneath."""

    trace: Any
    tracers: list[Any]
    frame: types.FrameType


# A block watching frames: the thread it watches (`None`: every thread's),
# what it is told of the user's frames holding an exiting trace's tracers,
# with the look that finds them, and what it is told of the traces JAX's
# checker fails.
class _Watcher(NamedTuple):
    thread: int | None
    frames: tuple[Callable[[list[FrameHolding]], None], Look]
    leaked: Callable[[LeakSignal], None] | None


_watchers: list[_Watcher] = []


class _CheckedHere(threading.local):
    """Whether this thread runs a call of a `lift.checked` function.

    Such a call scans what its trace leaves and raises its own report. The
    code may catch that report, as it may catch JAX's checker's. The frames
    are not looked at then, as they are not while JAX's checker is on."""

    on: bool = False


CHECKED_HERE: Final = _CheckedHere()
# id of each trace entered (while frames are watched) and not yet left: how
# many times, and the trace (held while open: the `with` holds it anyway).
_open_traces: dict[int, list[Any]] = {}


@contextlib.contextmanager
def watching_frames(
    frames: tuple[Callable[[list[FrameHolding]], None], Look],
    thread: int | None,
    leaked: Callable[[LeakSignal], None] | None = None,
) -> Generator[None]:
    """Look at the user's frames as each trace exits for good in `thread`
    (with `None`, in every thread) while the block runs. Tell `frames`'
    callback of those holding its tracers
    (`watching_trace_exits(frames=...)`). The looks still to come when the
    block ends are taken then. With `leaked`, tell it of each trace JAX's
    checker would fail at its check."""
    entry = _Watcher(thread, frames, leaked)
    _watchers.append(entry)
    try:
        yield
    finally:
        _look_pending()
        # By identity: two blocks' entries may be equal.
        del _watchers[next(i for i, e in enumerate(_watchers) if e is entry)]
        if not _watchers:
            _open_traces.clear()
            with _pending_lock:
                _pending.clear()  # another thread's exit, noted since


class ExitedTrace:
    """The `LiveTraces` of a look at `trace`'s exit: every tracer is live but
    those of `trace` (jax 0.10.2 to 0.12: a tracer's `_trace`)."""

    __slots__ = ("trace",)

    def __init__(self, trace: Any) -> None:
        self.trace = trace

    def is_live(self, tracer: Any) -> bool:
        return getattr(tracer, "_trace", None) is not self.trace

    def runs_beneath(self, frame: types.FrameType) -> bool:
        """Whether a JAX frame beneath `frame` runs the trace (or a trace
        whose parents reach it): `frame` is then inside it, its tracers its
        own."""
        return LiveTraces(running_traces(frame.f_back)).has(self.trace)


# What `weakref.finalize` keeps (each finalizer's function and arguments) until
# its object dies: a tracer given to a finalizer registered in a trace is held
# there, by no variable, and gone once the object dies.
_FINALIZERS: Final[dict[Any, Any]] = cast(Any, weakref.finalize)._registry


def entering(trace: Any) -> None:
    """`core.set_current_trace(trace)` entered while traces are watched: while
    frames are, counted (an exit no JAX check followed is looked at first)."""
    if not _watchers:
        return
    if _pending:
        # Exits no JAX check of their own follows (a `jit`'s traces under
        # `jax.linearize`, jax 0.8.0 and 0.10.2): looked at now, so that their
        # frames are not held on.
        _look_pending(threading.get_ident(), waiting=False)
    entry = _open_traces.get(id(trace))
    if entry is None:
        _open_traces[id(trace)] = [1, trace, len(_FINALIZERS)]
    else:
        entry[0] += 1


def leaving(trace: Any) -> int | None:
    """Count a `set_current_trace(trace)` left.

    If it was the last one open, return how many finalizers there were when
    it was first entered. One entered before frames were watched, or left
    while none are, is not counted: `None`."""
    if not _watchers:
        return None
    entry = _open_traces.get(id(trace))
    if entry is None:
        return None
    if entry[0] > 1:
        entry[0] -= 1
        return None
    del _open_traces[id(trace)]
    return entry[2]


def _still_running(trace: Any) -> bool:
    """Whether `trace` is the current trace or an open one, or a parent of one."""
    starts: list[Any] = [TRACE_CTX.trace]
    starts.extend(entry[1] for entry in _open_traces.values())
    return LiveTraces(starts).has(trace)


def check_frames(trace: Any, finalizers: int = 0) -> None:
    """At the last exit of `trace`, tell the blocks watching this thread's
    frames which of the user's frames hold its tracers. Also tell which
    finalizers registered since it was entered hold some: those past the
    first `finalizers`. Called by the `__exit__` of `core.set_current_trace`: the
    user's frames are those beneath that."""
    if (
        type(trace) is EVAL_TRACE
        or CHECKED_HERE.on
        or jax_leak_checks_declined()
        or jax_checks_leaks()
    ):
        # A block that turned JAX's checker off for itself keeps its tracers
        # on purpose, and JAX's checker does not look at it either; one that
        # turned it on (`jax.checking_leaks()`, `lift.checking_leaks()`) or a
        # `lift.checked` call has its leaks reported by that checker, which
        # the code may catch.
        return
    thread = threading.get_ident()
    told = [w.frames for w in _watchers if w.thread is None or w.thread == thread]
    if not told or _still_running(trace):
        return
    new = len(_FINALIZERS) - finalizers
    chosen = told[-1][1].choose(sys._getframe(2))  # pyright: ignore[reportPrivateUsage]
    finals = list(itertools.islice(reversed(_FINALIZERS), new)) if new > 0 else []
    if type(trace).__name__ not in _CHECKED_ON_LEAVING:
        _tell(told, trace, chosen, finals)
        return
    exit = _Exit(trace, chosen, finals, told)
    del chosen
    with _pending_lock:
        _pending.append(exit)


class _Exit:
    """A trace's last exit, its look at the user's frames still to come.

    It keeps the trace by weak reference, the finalizers registered while it
    ran, and the blocks to tell. Of the frames the look chose then, it keeps
    each one's id and code, never the frame. A frame that returns before the
    look is not read: held here, it would keep its locals alive, and their
    tracers too, past JAX's check (a vmapped function's own, jax 0.8.0 to
    0.10.2). The frames still running are found on the stack again
    (`running`)."""

    __slots__ = ("chosen", "finalizers", "key", "thread", "told", "trace")

    def __init__(
        self,
        trace: Any,
        chosen: list[tuple[types.FrameType, Any]],
        finalizers: list[Any],
        told: list[tuple[Callable[[list[FrameHolding]], None], Look]],
    ) -> None:
        self.trace = weakref.ref(trace)
        self.chosen = {id(f): (f.f_code, names) for f, names in chosen}
        self.finalizers = finalizers
        self.told = told
        self.thread = threading.get_ident()
        self.key = id(trace)

    def running(self) -> list[tuple[types.FrameType, Any]]:
        """The frames chosen at the exit that still run, innermost first.

        By id and code: a frame of the same code at a freed frame's address
        runs too, and what it holds is held."""
        if self.thread == threading.get_ident():
            frame = sys._getframe(1)  # pyright: ignore[reportPrivateUsage]
        else:
            frame = sys._current_frames().get(self.thread)  # pyright: ignore[reportPrivateUsage]
        found: list[tuple[types.FrameType, Any]] = []
        chosen = self.chosen
        while frame is not None and len(found) < len(chosen):
            entry = chosen.get(id(frame))
            if entry is not None and entry[0] is frame.f_code:
                found.append((frame, entry[1]))
            frame = frame.f_back
        return found


# The look at the last exit of a `jit`, `scan`, `vmap`, ... trace waits until
# JAX leaves its `core.ensure_no_leaks(trace)` block (where JAX's checker looks,
# jax 0.8.0 to 0.12): JAX has dropped the locals that held the trace's tracers
# while it ran, and a trace no tracer holds is freed, so that nothing is left
# to look for (most exits, in equinox's suite: those JAX keeps are looked at).
# Until then no frame is held: the look reads those of the chosen frames
# still running then. An exit that no such block follows is looked at when
# the next trace is entered, or when the block watching frames ends; one whose
# block an error unwinds, not at all. (Eager
# `grad`'s and `jvp`'s traces are looked at as they exit: no such block
# follows theirs before jax 0.11.)
_CHECKED_ON_LEAVING: Final = frozenset(
    {"DynamicJaxprTrace", "BatchTrace", "JaxprTrace"}
)
_pending: list[_Exit] = []
_pending_lock = threading.Lock()
# JAX's own, which `trace_exits` replaces with `LeakCheck` while traces are
# watched, and puts back after.
ENSURE_NO_LEAKS: Final = _core.ensure_no_leaks


# id of each trace inside a `core.ensure_no_leaks` block: how many.
_checking: dict[int, int] = {}


class LeakCheck:
    """`core.ensure_no_leaks(trace)` while traces are watched.

    It runs JAX's check, then the looks at this thread's exits still to come.
    Where an error unwinds it, there is no look for `trace`. JAX's checker
    does not look then either: the traceback holds its tracers, and the
    error is the report."""

    __slots__ = ("check", "key", "ref")
    check: Any

    def __init__(self, trace: Any) -> None:
        self.check = ENSURE_NO_LEAKS(trace)
        self.key = id(trace)
        self.ref = weakref.ref(trace)

    def __enter__(self) -> Any:
        _checking[self.key] = _checking.get(self.key, 0) + 1
        return self.check.__enter__()

    def __exit__(self, *exc: Any) -> Any:
        check, self.check = self.check, None
        try:
            out = check.__exit__(*exc)
        finally:
            del check
            if _checking.get(self.key, 0) > 1:
                _checking[self.key] -= 1
            else:
                _checking.pop(self.key, None)
        signalled = False
        if _watchers and exc[0] is None:
            signalled = _signal(self.ref, sys._getframe(1))  # pyright: ignore[reportPrivateUsage]
        if _pending:
            # This trace's own look is the signal's, where a block takes it.
            drop = self.key if signalled or exc[0] is not None else None
            _look_pending(threading.get_ident(), drop=drop)
        return out


def _signal(ref: Any, frame: types.FrameType) -> bool:
    """Tell the blocks watching this thread of the trace `ref` if JAX's
    checker would fail it here (where that checker is off: on, it raises).
    Whether some block takes such signals."""
    if CHECKED_HERE.on or jax_leak_checks_declined() or jax_checks_leaks():
        return False
    thread = threading.get_ident()
    told = [
        w.leaked
        for w in _watchers
        if w.leaked is not None and (w.thread is None or w.thread == thread)
    ]
    if not told:
        return False
    tracers = leaked_at_check(ref)
    trace = ref()
    if tracers and trace is not None:
        signal = LeakSignal(trace, tracers, frame)
        del trace, tracers
        for leaked in told:
            leaked(signal)
    return True


def _look_pending(
    thread: int | None = None, drop: int | None = None, waiting: bool = True
) -> None:
    """Look at the frames of each trace exit still to be looked at whose trace
    is alive.

    These are this thread's exits, or with `thread` `None` every thread's.
    Those of the trace of id `drop` are skipped. Without `waiting`, so are
    those whose trace a `core.ensure_no_leaks` block still checks: they wait
    for it."""
    global _pending
    with _pending_lock:
        exits: list[_Exit] = []
        kept: list[_Exit] = []
        for e in _pending:
            mine = thread is None or e.thread == thread
            later = not waiting and e.key in _checking
            (exits if mine and not later else kept).append(e)
        _pending = kept
    for exit in exits:
        trace = exit.trace()
        if trace is not None and exit.key != drop:
            _tell(exit.told, trace, exit.running(), exit.finalizers)


def _tell(
    told: list[tuple[Callable[[list[FrameHolding]], None], Look]],
    trace: Any,
    chosen: list[tuple[types.FrameType, Any]],
    finalizers: list[Any],
) -> None:
    """Look at `chosen` and `finalizers` for the tracers of `trace`, and tell
    the blocks `told` of the holders found."""
    look = told[-1][1]
    found = look.at_exit(ExitedTrace(trace), chosen, finalizers)
    if found:
        for frames, _ in told:
            frames(found)
