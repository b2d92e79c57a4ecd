"""Everything `lift` knows about JAX's internals, in one place.

Tracer liveness, the name of the transform a tracer belongs to, and the leaked
tracers carried by JAX's own leak-checker exception. Each use of `jax._src` is
marked with the JAX version it was written against; nothing else in `lift`
imports `jax._src`.
"""

from __future__ import annotations

import os
import types
from collections.abc import Iterable
from typing import Any, Final

import jax
import jax.core

__all__ = [
    "LiveTraces",
    "Tracer",
    "is_jax_closure_convert",
    "is_tracer",
    "jax_leaked_tracers",
    "live_traces",
    "transform_name",
    "tracer_aval",
]

# Written against jax 0.10.2: `trace_ctx.trace` is the current trace of this
# thread (`TracingContext.trace`, backed by a thread-local config state).
from jax._src import core as _core

_CORE_FILE: Final[str] = str(_core.__file__)  # pyright: ignore[reportUnknownMemberType]

# Attributes through which a trace reaches the traces enclosing it. Written
# against jax 0.10.2: `parent_trace` on DynamicJaxprTrace, JaxprTrace,
# BatchTrace, JVPTrace, LinearizeTrace and RematTrace; `tangent_trace` on
# LinearizeTrace (the trace of the linearized tangents is alive exactly as long
# as the linearize trace itself).
_PARENT_ATTRS = ("parent_trace", "tangent_trace")

# Class names of traces (jax 0.10.2) and the transform a user knows them by.
_TRACE_KINDS = {
    "BatchTrace": "vmap",
    "JVPTrace": "jvp",
    "LinearizeTrace": "grad",
    "JaxprTrace": "linearize",
    "RematTrace": "checkpoint",
    "ShardMapTrace": "shard_map",
    "EvalTrace": "eager evaluation",
}

# `DebugInfo.traced_for` values (jax 0.10.2) spelled as the user's API.
_TRACED_FOR = {
    "checkpoint / remat": "checkpoint",
    "while_body": "while_loop",
    "while_cond": "while_loop",
    "custom_vjp fun": "custom_vjp",
    "custom_jvp fun": "custom_jvp",
}


#: The class of all tracers (public API; typed here once for the type checker).
Tracer: Final[type[Any]] = jax.core.Tracer  # pyright: ignore[reportUnknownMemberType]


def is_tracer(x: object) -> bool:
    """Whether `x` is a JAX tracer."""
    return isinstance(x, Tracer)


class LiveTraces:
    """The traces of this thread that have not exited, taken at one instant.

    In jax 0.10.2 a `jit` trace is not invalidated when `jit` returns (its
    `invalidate` is a no-op for the flag, see `DynamicJaxprTrace.invalidate`),
    so `trace.is_valid()` cannot tell an escaped `jit` tracer from a live one.
    A trace is live exactly when it is the current trace or is reachable from
    it through the parents of each trace; this holds the traces strongly for
    as long as the snapshot exists, so their ids stay meaningful.
    """

    __slots__ = ("_ids", "_traces")

    def __init__(self) -> None:
        traces: list[Any] = []
        ids: set[int] = set()
        # jax 0.10.2: `_core.trace_ctx.trace` is the current trace object.
        stack: list[Any] = [_core.trace_ctx.trace]  # pyright: ignore[reportUnknownMemberType]
        while stack:
            trace = stack.pop()
            if trace is None or id(trace) in ids:
                continue
            ids.add(id(trace))
            traces.append(trace)
            for attr in _PARENT_ATTRS:
                parent = getattr(trace, attr, None)
                if parent is not None:
                    stack.append(parent)
        self._ids = frozenset(ids)
        self._traces = tuple(traces)

    def __len__(self) -> int:
        return len(self._traces)

    def is_live(self, tracer: Any) -> bool:
        """Whether `tracer` belongs to a trace that has not exited yet."""
        # jax 0.10.2: every tracer has a `_trace`; `is_valid()` is false once a
        # vmap/jvp/grad trace has exited (a jit trace stays "valid").
        trace = getattr(tracer, "_trace", None)
        if trace is None:
            return False
        if not trace.is_valid():
            return False
        return id(trace) in self._ids


def live_traces() -> LiveTraces:
    """Snapshot the traces that are live in this thread now."""
    return LiveTraces()


def tracer_aval(tracer: Any) -> str:
    """`float32[3]`, `int32[]`, `key<fry>[]`: the short form of a tracer's type."""
    try:
        return str(tracer.aval.str_short())
    except Exception:  # an exotic tracer without a readable aval
        return type(tracer).__name__


def transform_name(tracer: Any) -> str:
    """The transform a tracer came from, as the user wrote it: `jit(step)`."""
    trace = getattr(tracer, "_trace", None)
    kind = type(trace).__name__
    if kind == "DynamicJaxprTrace":
        # jax 0.10.2: `DynamicJaxprTrace.frame.debug_info` is a `DebugInfo` whose
        # `traced_for` is "jit", "scan", "cond", "while_body", "checkpoint /
        # remat", "custom_vjp fun", ... and `func_name` the traced function.
        debug = getattr(getattr(trace, "frame", None), "debug_info", None)
        traced_for = getattr(debug, "traced_for", None)
        if isinstance(traced_for, str):
            try:
                name = debug.func_name  # type: ignore[union-attr]
            except Exception:
                name = "<unknown>"
            return f"{_TRACED_FOR.get(traced_for, traced_for)}({name})"
        return "jit"
    return _TRACE_KINDS.get(kind, kind)


def is_jax_closure_convert(fn: Any) -> bool:
    """Whether `fn` is a function returned by `jax.closure_convert`.

    Written against jax 0.10.2: `jax/_src/custom_derivatives.py` returns the
    nested `converted_fun`, whose closure keeps every non-float constant.
    """
    code = getattr(fn, "__code__", None)
    return (
        isinstance(code, types.CodeType)
        and code.co_name == "converted_fun"
        and code.co_filename.endswith(
            os.path.join("jax", "_src", "custom_derivatives.py")
        )
    )


def _leaked_tracer_lists(tb: types.TracebackType | None) -> Iterable[list[Any]]:
    while tb is not None:
        frame = tb.tb_frame
        code = frame.f_code
        # jax 0.10.2, jax/_src/core.py: `ensure_no_leaks` binds the list as
        # `leaked_tracers` before raising, `leaked_tracer_error` as `tracers`
        # (still on the stack when `_why_alive` raises IndexError, jax#26560).
        if code.co_filename == _CORE_FILE:
            for name in ("leaked_tracers", "tracers"):
                found = frame.f_locals.get(name)
                if isinstance(found, list):
                    tracers: list[Any] = list(found)  # pyright: ignore[reportUnknownArgumentType]
                    if all(map(is_tracer, tracers)):
                        yield tracers
        tb = tb.tb_next


def jax_leaked_tracers(exc: BaseException) -> list[Any] | None:
    """The tracers behind JAX's leaked-tracer error, or `None` if `exc` is not one.

    JAX (0.10.2) raises a bare `Exception("Leaked trace ...")` when a trace exits
    with tracers still referenced under `jax.checking_leaks()`, and while
    building that message its `_why_alive` can itself fail with `IndexError`
    when a closure cell is in the chain of references (jax issue 26560). Both
    are recognised here, and the leaked tracers recovered from the frames.
    """
    is_report = type(exc) is Exception and str(exc).startswith("Leaked ")
    is_crash = isinstance(exc, IndexError)
    if not (is_report or is_crash):
        return None
    for found in _leaked_tracer_lists(exc.__traceback__):
        return list(found)
    return [] if is_report else None
