"""Traces that exit inside `lift.checking_leaks()`, and whether JAX's own
checker looks at them.

Each is noted by weak reference as it exits. `escaped` then asks which still
have tracers.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable, Generator
from typing import Any, Final, NamedTuple, cast

from jax._src import core as _core

from . import frame_look
from .frame_look import FrameHolding, LeakSignal, Look
from .traces import JAX_CHECKS_EAGER_GRAD

# JAX's checker runs where a trace is entered with `check_leaks=True` (jit, scan,
# vmap); eager `grad`/`jvp`/`vjp`/`linearize` enter their traces through
# `core.set_current_trace(trace)` without it (jax 0.10.2 and 0.8.0,
# `interpreters/ad.py`), so a tracer escaping them is never reported. From jax
# 0.11 eager `grad`, `vjp` and `linearize` are checked (`JAX_CHECKS_EAGER_GRAD`);
# eager `jvp` still is not, and JAX's checker is off unless asked for. While a
# `lift.checking_leaks()` block runs, `core.set_current_trace` is a subclass
# that notes each trace it leaves (by weak reference, nothing kept alive); on
# exit the block asks which of those traces still have tracers. The same
# subclass tells `frame_look` of each trace entered and left, for blocks that
# watch the user's frames too.


# A block's record: the traces it saw exit, whether it notes every kind (or the
# eager `grad` and `jvp` ones only), and the thread it watches (a trace exiting
# in another thread, still running there perhaps, is not the block's, as JAX's
# checker, whose switch is per thread, does not look at it either).
class _Recorder(NamedTuple):
    exits: dict[int, Any]
    every: bool
    thread: int | None  # `None`: every thread's


_recorders: list[_Recorder] = []
_original_set_current_trace: Any = None


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
    for recorder, every, watched in _recorders:
        if not (every or unchecked) or (watched is not None and watched != thread):
            continue
        ref = recorder.get(key)
        if ref is None or ref() is not trace:
            try:
                recorder[key] = weakref.ref(trace)
            except TypeError:  # a trace that cannot be weakly referenced
                return


def _watching_class(base: type) -> type:
    class WatchedSetCurrentTrace(base):  # type: ignore[misc, valid-type]
        __slots__ = ()

        def __enter__(self) -> Any:
            out = cast(Any, super()).__enter__()
            frame_look.entering(cast(Any, self).trace)
            return out

        def __exit__(self, *exc: Any) -> Any:
            trace: Any = cast(Any, self).trace
            try:
                out = cast(Any, super()).__exit__(*exc)
            finally:
                last = frame_look.leaving(trace)
            if exc[0] is None:
                _note_exit(trace)
                if last is not None:
                    # Called from here: the look counts the frames above it.
                    frame_look.check_frames(trace, last)
            return out

    return WatchedSetCurrentTrace


@contextlib.contextmanager
def watching_trace_exits(
    every: bool = False,
    frames: tuple[Callable[[list[FrameHolding]], None], Look] | None = None,
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

    With `frames` (`(told, look)`), the user's frames are looked at each time
    a trace exits for good in this thread. A transform's switch back to the
    trace it runs in is not such an exit. The look searches the frames' local
    variables for the trace's tracers (see `FrameHolding`). It runs where
    JAX's checker looks (`core.ensure_no_leaks`), and only if the trace is
    still alive then. `told` is called with the frames that hold some, while
    they still do. (A local dropped before the block ends would be gone by
    then.) `look` finds them (`Look`, `lift._leaks.frames.FrameLook`). It says
    which frames, how many objects, and how the leak scan opens holders. The
    innermost block's `look` is used. `frame_look` says when.

    With `threads`, traces exiting in every thread are noted and looked at,
    as `JAX_CHECK_TRACER_LEAKS=1` checks every thread. Else only this thread's
    are, as `jax.checking_leaks()`, whose switch is per thread.

    With `leaked` (and `frames`), `leaked` is told of each trace JAX's checker
    would fail where it checks (`LeakSignal`). JAX's check
    (`core.ensure_no_leaks`) fails a trace alive after a garbage collection,
    with a tracer among its referrers. `leaked` is told then, while the
    trace's holders still hold it. This is JAX's verdict, reached as JAX
    reaches it, only as far as needed (`leaked_at_check`)."""
    global _original_set_current_trace
    recorder: dict[int, Any] = {}
    if not _recorders:
        _original_set_current_trace = _core.set_current_trace
        _core.set_current_trace = _watching_class(_original_set_current_trace)
        _core.ensure_no_leaks = frame_look.LeakCheck
    thread = None if threads else threading.get_ident()
    entry = _Recorder(recorder, every, thread)
    _recorders.append(entry)
    try:
        if frames is None:
            yield recorder
        else:
            with frame_look.watching_frames(frames, thread, leaked):
                yield recorder
    finally:
        # By identity: two blocks' records may be equal dicts.
        del _recorders[next(i for i, e in enumerate(_recorders) if e is entry)]
        if not _recorders and _original_set_current_trace is not None:
            _core.set_current_trace = _original_set_current_trace
            _core.ensure_no_leaks = frame_look.ENSURE_NO_LEAKS
            _original_set_current_trace = None
