"""Tracers and traces: which transform a tracer belongs to, whether its trace
is still running, and the JAX version facts the rest of `_compat` reads.
"""

from __future__ import annotations

import inspect
import os
import sys
import types
from collections.abc import Callable
from typing import Any, Final

import jax
import jax.core

# Written against jax 0.10.2: `trace_ctx.trace` is the current trace of this
# thread (`TracingContext.trace`, backed by a thread-local config state).
from jax._src import core as _core, tree_util as _jtu_private

CORE_FILE: Final[str] = str(_core.__file__)  # pyright: ignore[reportUnknownMemberType]

# The installed JAX as numbers (`0.12.0.1` -> `(0, 12, 0)`), for the behaviours
# below that changed between releases.
JAX_VERSION: Final[tuple[int, ...]] = tuple(
    int(part) for part in jax.__version__.split(".")[:3] if part.isdigit()
)

# jax 0.11 and later: eager `grad` linearizes under `check_leaks=True`
# (`interpreters/ad.py`), so JAX's own checker reports a tracer escaping it (as
# "Leaked trace LinearizeTrace", its holders named by object ids); jax 0.10.2
# and 0.8.0 never report it.
JAX_CHECKS_EAGER_GRAD: Final = JAX_VERSION >= (0, 11)

# jax 0.10.2 and 0.8.0: JAX's `_why_alive` raises `IndexError` when a closure
# cell is in the chain of references to a leaked tracer (jax issue 26560), and
# the report is lost. Fixed in jax 0.11: the cell is named in the chain.
JAX_ISSUE_26560: Final = JAX_VERSION < (0, 11)

# Written against jax 0.10.2 (and 0.8.0): every type registered with
# `jax.tree_util`, custom pytree nodes and NamedTuples JAX treats as its own
# nodes alike, is a key of `tree_util._registry` (a live dict).
CUSTOM_NODES: Final[dict[type, Any]] = _jtu_private._registry  # pyright: ignore[reportPrivateUsage, reportUnknownMemberType, reportUnknownVariableType]

# Written against jax 0.10.2 and 0.12.0.1: whether JAX has a type for a value
# (what `jax.extend.core.valid_jaxtype` re-exports; `jax.core.valid_jaxtype` is
# deprecated in 0.10 and gone in 0.12).
valid_jaxtype: Final[Callable[[Any], bool]] = _core.valid_jaxtype  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]

# Attributes through which a trace reaches the traces enclosing it. Written
# against jax 0.10.2: `parent_trace` on DynamicJaxprTrace, JaxprTrace,
# BatchTrace, JVPTrace, LinearizeTrace and RematTrace; `tangent_trace` on
# LinearizeTrace (the trace of the linearized tangents is alive exactly as long
# as the linearize trace itself).
PARENT_ATTRS = ("parent_trace", "tangent_trace")

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

    In jax 0.10.2 a `jit` trace is not invalidated when `jit` returns. Its
    `invalidate` is a no-op for the flag (see `DynamicJaxprTrace.invalidate`).
    So `trace.is_valid()` cannot tell an escaped `jit` tracer from a live one.
    A trace is live exactly when it is the current trace, or its ancestor
    through the parents of each trace. The snapshot holds the traces strongly
    while it exists, so their ids stay meaningful.
    """

    __slots__ = ("_ids", "_traces")

    def __init__(self, starts: list[Any] | None = None) -> None:
        """`starts`: the traces whose parents are live too; by default the
        current trace and those JAX's frames on the stack run."""
        traces: list[Any] = []
        ids: set[int] = set()
        if starts is None:
            # jax 0.10.2: `_core.trace_ctx.trace` is the current trace object.
            starts = [_core.trace_ctx.trace, *running_traces()]  # pyright: ignore[reportUnknownMemberType]
        stack = list(starts)
        while stack:
            trace = stack.pop()
            if trace is None or id(trace) in ids:
                continue
            ids.add(id(trace))
            traces.append(trace)
            stack += [getattr(trace, attr, None) for attr in PARENT_ATTRS]
        self._ids = frozenset(ids)
        self._traces = tuple(traces)

    def __len__(self) -> int:
        return len(self._traces)

    def has(self, trace: Any) -> bool:
        """Whether `trace` is one of the live traces."""
        return id(trace) in self._ids

    def is_live(self, tracer: Any) -> bool:
        """Whether `tracer` belongs to a trace that has not exited yet."""
        # jax 0.10.2: every tracer has a `_trace`; `is_valid()` is false once a
        # vmap/jvp/grad trace has exited (a jit trace stays "valid").
        trace = getattr(tracer, "_trace", None)
        return trace is not None and trace.is_valid() and id(trace) in self._ids


def live_traces() -> LiveTraces:
    """Snapshot the traces that are live in this thread now."""
    return LiveTraces()


# jax 0.10.2: with no transform running, the current trace is an `EvalTrace`
# (inside one, `ensure_compile_time_eval` keeps that transform's trace).
EVAL_TRACE: Final[type[Any]] = _core.EvalTrace  # pyright: ignore[reportUnknownMemberType]
TRACE_CTX: Final[Any] = _core.trace_ctx  # pyright: ignore[reportUnknownMemberType]


def eager() -> bool:
    """Whether no trace is active in this thread: the current trace is JAX's eager
    one, and what is computed now is a concrete array."""
    return type(TRACE_CTX.trace) is EVAL_TRACE


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
            # A property of `func_src_info`, a `str` (jax 0.8.0 to 0.12.1).
            name = debug.func_name  # type: ignore[union-attr]
            src = getattr(debug, "func_src_info", None)
            if (
                traced_for == "shard_map"
                and isinstance(src, str)
                and (_PMAP_FILE in src or (name == "call_wrapped" and _LU_FILE in src))
            ):
                # jax 0.10.2 runs `pmap` as `shard_map` of `_fun` in
                # jax/_src/pmap.py, jax 0.8.0 of `call_wrapped` in
                # jax/_src/linear_util.py; the user's function is not named there.
                return "pmap"
            return f"{_TRACED_FOR.get(traced_for, traced_for)}({name})"
        return "jit"
    return _TRACE_KINDS.get(kind, kind)


_PMAP_FILE: Final = os.path.join("jax", "_src", "pmap.py")
_LU_FILE: Final = os.path.join("jax", "_src", "linear_util.py")


def is_jax_closure_convert(fn: Any) -> bool:
    """Whether `fn` is a function returned by `jax.closure_convert`.

    Written against jax 0.10.2: `jax/_src/custom_derivatives.py` returns the
    nested `converted_fun`, whose closure keeps every non-float constant.
    """
    if type(fn) is not types.FunctionType:  # a proxy's attributes may fail
        return False
    code = fn.__code__
    return code.co_name == "converted_fun" and code.co_filename.endswith(
        os.path.join("jax", "_src", "custom_derivatives.py")
    )


# -- Traces still running, whatever the current trace --------------------------
#
# Written against jax 0.10.2. Inside `shard_map` or `pmap` under `jit` (and
# under `jax.ensure_compile_time_eval()`), the current trace's parents end at an
# `EvalTrace`: the enclosing `jit` trace is running but unreachable from it. Each
# running trace is a local of the JAX function that made it and entered it
# (`trace_to_jaxpr` and friends, `jvp`/`linearize` subtraces), whose frame is on
# this thread's stack until the trace exits.
JAX_DIR: Final[str] = os.path.join(
    os.path.dirname(os.path.abspath(str(jax.__file__))), ""
)
TRACE: Final[type[Any]] = _core.Trace  # pyright: ignore[reportUnknownMemberType]


OPTIMIZED: Final = inspect.CO_OPTIMIZED  # a function's frame, not a module's
# A snapshot held by its frame only: the frame, the caller's name, the argument.
ONLY_THE_FRAMES: Final = 3
SNAPSHOT_LOCALS: Final = sys.version_info < (3, 13)


def running_traces(start: types.FrameType | None = None) -> list[Any]:
    """The traces held by JAX frames on this thread's stack (not yet exited),
    from `start` (the caller's frame by default) down."""
    found: list[Any] = []
    frame = sys._getframe(1) if start is None else start  # pyright: ignore[reportPrivateUsage]
    while frame is not None:
        code = frame.f_code
        if code.co_flags & OPTIMIZED and code.co_filename.startswith(JAX_DIR):
            for _, value in frame_locals(frame):
                if isinstance(value, TRACE) and value.is_valid():
                    found.append(value)
        frame = frame.f_back
    return found


def frame_locals(frame: types.FrameType) -> list[tuple[str, Any]]:
    """A frame's local variables (cells' contents included), leaving no
    snapshot behind.

    Before 3.13 `f_locals` caches a snapshot on a function's frame. It would
    keep the values after the frame drops them: a leak to JAX's checker. The
    snapshot is emptied when nothing else holds it; the next reader rebuilds
    it. A dict the code holds (`ns = locals()`) is its own, and is left alone.
    A snapshot with names `exec` wrote there is kept too: they are the code's
    own data, and the next `locals()` would miss them.
    From 3.13 (PEP 667) `f_locals` is a live view: nothing to empty."""
    snapshot = frame.f_locals
    items = list(snapshot.items())
    if (
        SNAPSHOT_LOCALS
        and sys.getrefcount(snapshot) <= ONLY_THE_FRAMES
        and _variables(frame.f_code).issuperset(snapshot)
    ):
        snapshot.clear()
    del snapshot
    return items


def _variables(code: types.CodeType) -> frozenset[str]:
    return frozenset((*code.co_varnames, *code.co_cellvars, *code.co_freevars))
