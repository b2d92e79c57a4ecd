"""JAX's own leak checker: the tracers its report carries, and the frames'
locals snapshots it takes for leaks (Python 3.11 and 3.12).
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Generator, Iterable, Iterator
from typing import Any, Final, cast

from jax._src import core as _core

from .traces import CORE_FILE, OPTIMIZED, SNAPSHOT_LOCALS, frame_locals, is_tracer


def _core_frames(exc: BaseException) -> Iterable[types.FrameType]:
    """The frames of `exc`'s traceback that run `jax/_src/core.py`."""
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == CORE_FILE:
            yield tb.tb_frame
        tb = tb.tb_next


def _leaked_tracer_lists(exc: BaseException) -> Iterator[list[Any]]:
    for frame in _core_frames(exc):
        # jax 0.10.2, jax/_src/core.py: `ensure_no_leaks` binds the list as
        # `leaked_tracers` before raising, `leaked_tracer_error` as `tracers`
        # (still on the stack when `_why_alive` raises IndexError, jax#26560).
        for name in ("leaked_tracers", "tracers"):
            found = frame.f_locals.get(name)
            if isinstance(found, list):
                tracers: list[Any] = list(found)  # pyright: ignore[reportUnknownArgumentType]
                if all(map(is_tracer, tracers)):
                    yield tracers


def jax_leaked_tracers(exc: BaseException) -> list[Any] | None:
    """The tracers behind JAX's leaked-tracer error, or `None` if `exc` is not one.

    Under `jax.checking_leaks()`, JAX (0.10.2) raises a bare
    `Exception("Leaked trace ...")` when a trace exits with tracers still
    referenced. Its `_why_alive`, building that message, can itself fail. It
    raises `IndexError` when a closure cell is in the chain of references (jax
    issue 26560). It calls a key's or holder's `__repr__`, and passes on what
    that raises. Both are recognised here, and the leaked tracers recovered
    from the frames. An error
    is JAX's only when it was raised inside `_why_alive`: any other is the
    user's own (the traceback must be unfiltered, see `full_tracebacks`).
    """
    is_report = is_leak_report(exc)
    if not is_report and not (isinstance(exc, Exception) and _in_why_alive(exc)):
        return None
    return next(_leaked_tracer_lists(exc), [] if is_report else None)  # pyright: ignore[reportUnknownArgumentType]


def is_leak_report(exc: BaseException) -> bool:
    """Whether `exc` is JAX's own leaked-tracer report (not an error its
    checker raised while writing one)."""
    return type(exc) is Exception and str(exc).startswith("Leaked ")


def _in_why_alive(exc: BaseException) -> bool:
    # jax 0.10.2, jax/_src/core.py: `leaked_tracer_error` -> `_why_alive`.
    return any(f.f_code.co_name == "_why_alive" for f in _core_frames(exc))


# -- frames' locals snapshots, which JAX's checker takes for leaks ----------------
#
# On CPython 3.11 and 3.12 reading `frame.f_locals` of a running function's
# frame (`equinox.error_if` does, for every frame on the stack, while tracing)
# leaves a snapshot dict on the frame that keeps the values it read after the
# frame itself drops them. JAX's checker (`maybe_find_leaked_tracers`, jax 0.10.2
# and 0.12: `gc.collect()` then `gc.get_referrers(trace)`) then sees the exiting
# trace's tracers held by a frame of the stack, and reports a leak, or on 3.11
# fails with `IndexError` while explaining it (jax#26560). While lift checks, the
# checker is wrapped: when it finds tracers, the snapshots no one else holds are
# emptied (the next reader of `f_locals` rebuilds its own) and it looks again.
# From 3.13 (PEP 667) `f_locals` is a live view and nothing is cached.

# JAX's own checker, which `snapshots_are_not_leaks` wraps while it runs.
_FIND_LEAKED: Final[Any] = cast(Any, _core).maybe_find_leaked_tracers
_snapshot_checks = 0  # blocks running with the checker wrapped


def drop_stale_snapshots() -> None:
    """Empty the `f_locals` snapshot of each function frame on this thread's
    stack that nothing but the frame holds.

    A dict the code itself holds (`ns = locals()`) is left as it is."""
    frame: types.FrameType | None = sys._getframe(1)  # pyright: ignore[reportPrivateUsage]
    while frame is not None:
        if frame.f_code.co_flags & OPTIMIZED:
            frame_locals(frame)
        frame = frame.f_back


def _find_leaked_tracers(trace: Any) -> list[Any]:
    found: list[Any] = _FIND_LEAKED(trace)
    if not found:
        return found
    del found  # held here, they would be found again
    drop_stale_snapshots()
    return _FIND_LEAKED(trace)


@contextlib.contextmanager
def snapshots_are_not_leaks() -> Generator[None]:
    """While the block runs, JAX's leak checker ignores tracers held only by
    the `f_locals` snapshots of the stack's frames (CPython 3.11, 3.12)."""
    global _snapshot_checks
    if not SNAPSHOT_LOCALS:
        yield
        return
    _core.maybe_find_leaked_tracers = _find_leaked_tracers  # pyright: ignore[reportAttributeAccessIssue]
    _snapshot_checks += 1
    try:
        yield
    finally:
        _snapshot_checks -= 1
        if _snapshot_checks == 0:
            _core.maybe_find_leaked_tracers = _FIND_LEAKED  # pyright: ignore[reportAttributeAccessIssue]
