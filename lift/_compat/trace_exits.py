"""Traces that exit inside `lift.checking_leaks()`, whether JAX's own checker
looks at them, and its verdict where it does (`LeakSignal`).

Each is noted by weak reference as it exits. `escaped` then asks which still
have tracers.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import types
import weakref
from collections.abc import Callable, Generator
from typing import Any, Final, NamedTuple, cast

from jax._src import core as _core

from .config import jax_checks_leaks, jax_leak_checks_declined
from .escaped import leaked_at_check
from .traces import JAX_CHECKS_EAGER_GRAD, LiveTraces, running_traces

# JAX's checker runs where a trace is entered with `check_leaks=True` (jit, scan,
# vmap); eager `grad`/`jvp`/`vjp`/`linearize` enter their traces through
# `core.set_current_trace(trace)` without it (jax 0.10.2 and 0.8.0,
# `interpreters/ad.py`), so a tracer escaping them is never reported. From jax
# 0.11 eager `grad`, `vjp` and `linearize` are checked (`JAX_CHECKS_EAGER_GRAD`);
# eager `jvp` still is not, and JAX's checker is off unless asked for. While a
# `lift.checking_leaks()` block runs, `core.set_current_trace` is a subclass
# that notes each trace it leaves (by weak reference, nothing kept alive); on
# exit the block asks which of those traces still have tracers. Where JAX's
# checker checks a trace (`core.ensure_no_leaks`, jax 0.8.0 to 0.12), blocks
# given `leaked` are told of each trace that check would fail.


# A block's record: the traces it saw exit, whether it notes every kind (or the
# eager `grad` and `jvp` ones only), the thread it watches (a trace exiting in
# another thread, still running there perhaps, is not the block's, as JAX's
# checker, whose switch is per thread, does not look at it either), and what
# it is told of the traces JAX's checker fails.
class _Recorder(NamedTuple):
    exits: dict[int, Any]
    every: bool
    thread: int | None  # `None`: every thread's
    leaked: Callable[[LeakSignal], None] | None


_recorders: list[_Recorder] = []
# JAX's own, which `watching_trace_exits` replaces with a subclass while traces
# are watched, and puts back after.
SET_CURRENT_TRACE: Final[type] = _core.set_current_trace  # pyright: ignore[reportUnknownMemberType]


# The eager traces lift watches: those of `grad`, `jvp`, `vjp` and `linearize`,
# which JAX's checker misses on jax 0.10.2 and 0.8.0 (`JVPTrace` of eager `jvp`
# on every version); the others (`jit`, `scan`, `vmap`, ...) it checks.
_UNCHECKED_TRACES: Final = frozenset({"JVPTrace", "LinearizeTrace"})
# Traces that hold no tracer of their own: not noted (jax 0.10.2 to 0.12: an
# `EvalTrace` outlives its block, kept by JAX's dispatch caches).
_NO_TRACERS: Final = frozenset({"EvalTrace"})


def jax_checks(tracer: Any) -> bool:
    """Whether JAX's checker looks at the trace of `tracer` when it exits
    (not eager `jvp`, nor eager `grad`, `vjp`, `linearize` before jax 0.11)."""
    kind = type(getattr(tracer, "_trace", None)).__name__
    eager_grad = kind == "LinearizeTrace" and JAX_CHECKS_EAGER_GRAD
    return eager_grad or kind not in _UNCHECKED_TRACES


def _note_exit(trace: Any) -> None:
    """Note a trace that exited normally.

    One unwound by an exception is not noted: the traceback's frames hold its
    tracers, and the error is the report."""
    kind = type(trace).__name__
    if kind in _NO_TRACERS:
        return
    unchecked = kind in _UNCHECKED_TRACES
    key = id(trace)
    thread = threading.get_ident()
    for recorder, every, watched, _ in _recorders:
        if not (every or unchecked) or (watched is not None and watched != thread):
            continue
        ref = recorder.get(key)
        if ref is None or ref() is not trace:
            try:
                recorder[key] = weakref.ref(trace)
            except TypeError:  # a trace that cannot be weakly referenced
                return


class _WatchedSetCurrentTrace(SET_CURRENT_TRACE):  # type: ignore[misc, valid-type]
    __slots__ = ()

    def __exit__(self, *exc: Any) -> Any:
        trace: Any = cast(Any, self).trace  # JAX's `__exit__` may drop it
        out = cast(Any, super()).__exit__(*exc)
        if exc[0] is None:
            _note_exit(trace)
        return out


@contextlib.contextmanager
def watching_trace_exits(
    every: bool = False,
    threads: bool = False,
    leaked: Callable[[LeakSignal], None] | None = None,
) -> Generator[dict[int, Any]]:
    """Note (weakly) the traces that exit while the block runs.

    By default these are the eager `grad` and `jvp` traces JAX's checker does
    not look at. With `every`, they are each trace but JAX's eager one (`jit`,
    `vmap`, `scan`, ... too). `escaped_tracers` then names their tracers still
    alive.

    A trace that exits normally is freed at once, its tracers with it. This
    is measured for jit, grad, vmap, scan, cond, while_loop, custom_jvp,
    checkpoint, linearize and vjp on jax 0.10.2 and 0.12.0.1. So a noted trace
    still alive at the end of the block is the sign of a kept tracer. It is
    found without the garbage collection JAX's checker runs at every trace
    exit.

    With `threads`, traces exiting in every thread are noted, as
    `JAX_CHECK_TRACER_LEAKS=1` checks every thread. Else only this thread's
    are, as `jax.checking_leaks()`, whose switch is per thread.

    With `leaked`, `leaked` is told of each trace JAX's checker would fail
    where it checks (`LeakSignal`). JAX's check (`core.ensure_no_leaks`)
    fails a trace alive after a garbage collection, with a tracer among its
    referrers. `leaked` is told then, while the trace's holders still hold
    it. This is JAX's verdict, reached as JAX reaches it, only as far as
    needed (`leaked_at_check`)."""
    recorder: dict[int, Any] = {}
    if not _recorders:
        _core.set_current_trace = _WatchedSetCurrentTrace
        _core.ensure_no_leaks = LeakCheck
    thread = None if threads else threading.get_ident()
    entry = _Recorder(recorder, every, thread, leaked)
    _recorders.append(entry)
    try:
        yield recorder
    finally:
        # By identity: two blocks' entries may be equal.
        del _recorders[next(i for i, e in enumerate(_recorders) if e is entry)]
        if not _recorders:
            _core.set_current_trace = SET_CURRENT_TRACE
            _core.ensure_no_leaks = ENSURE_NO_LEAKS


# -- JAX's verdict at its check (`core.ensure_no_leaks`) ------------------------


class LeakSignal(NamedTuple):
    """A trace that JAX's checker fails at its check (`core.ensure_no_leaks`):
    still alive after a garbage collection, with `tracers` among its
    referrers (`leaked_at_check`). `frame`: the frame of JAX's that checks it,
    the user's frames beneath."""

    trace: Any
    tracers: list[Any]
    frame: types.FrameType


class _CheckedHere(threading.local):
    """Whether this thread runs a call of a `lift.checked` function.

    Such a call scans what its trace leaves and raises its own report. The
    code may catch that report, as it may catch JAX's checker's. No block is
    told of its traces then, as none is while JAX's checker is on."""

    on: bool = False


CHECKED_HERE: Final = _CheckedHere()


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


# JAX's own, which `watching_trace_exits` replaces with `LeakCheck` while
# traces are watched, and puts back after.
ENSURE_NO_LEAKS: Final = _core.ensure_no_leaks


class LeakCheck:
    """`core.ensure_no_leaks(trace)` while traces are watched.

    It runs JAX's check, then tells the blocks of a trace that check would
    fail. Where an error unwinds it, no block is told. JAX's checker does
    not look then either: the traceback holds its tracers, and the error is
    the report."""

    __slots__ = ("check", "ref")
    check: Any

    def __init__(self, trace: Any) -> None:
        self.check = ENSURE_NO_LEAKS(trace)
        self.ref = weakref.ref(trace)

    def __enter__(self) -> Any:
        return self.check.__enter__()

    def __exit__(self, *exc: Any) -> Any:
        check, self.check = self.check, None
        try:
            out = check.__exit__(*exc)
        finally:
            del check
        if exc[0] is None:
            _signal(self.ref, sys._getframe(1))  # pyright: ignore[reportPrivateUsage]
        return out


def _signal(ref: Any, frame: types.FrameType) -> None:
    """Tell the blocks watching this thread of the trace `ref` if JAX's
    checker would fail it here (where that checker is off: on, it raises)."""
    thread = threading.get_ident()
    told = [
        r.leaked
        for r in _recorders
        if r.leaked is not None and r.thread in (None, thread)
    ]
    if not told or CHECKED_HERE.on or jax_leak_checks_declined() or jax_checks_leaks():
        return
    tracers = leaked_at_check(ref)
    trace = ref()
    if tracers and trace is not None:
        signal = LeakSignal(trace, tracers, frame)
        del trace, tracers
        for leaked in told:
            leaked(signal)
