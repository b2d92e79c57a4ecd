"""Everything `lift` knows about JAX's internals, in one place.

Tracer liveness, the name of the transform a tracer belongs to, and the leaked
tracers carried by JAX's own leak-checker exception. Each use of `jax._src` is
marked with the JAX version it was written against; nothing else in `lift`
imports `jax._src`.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import gc
import inspect
import os
import sys
import threading
import types
import weakref
from collections.abc import Callable, Generator, Iterable
from typing import Any, Final, NamedTuple

import jax
import jax.core
import jax.extend.core

__all__ = [
    "CUSTOM_NODES",
    "DEFAULT_DEVICE",
    "X64",
    "conversion_context",
    "LiveTraces",
    "Tracer",
    "eager",
    "is_jax_closure_convert",
    "is_tracer",
    "jax_leaked_tracers",
    "live_traces",
    "transform_name",
    "tracer_aval",
    "valid_jaxtype",
]

# Written against jax 0.10.2: `trace_ctx.trace` is the current trace of this
# thread (`TracingContext.trace`, backed by a thread-local config state).
from jax._src import api_util as _api_util, core as _core, tree_util as _jtu_private

_CORE_FILE: Final[str] = str(_core.__file__)  # pyright: ignore[reportUnknownMemberType]

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
        stack.extend(_running_traces())
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

    def has(self, trace: Any) -> bool:
        """Whether `trace` is one of the live traces."""
        return id(trace) in self._ids

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


# jax 0.10.2: with no transform running, the current trace is an `EvalTrace`
# (inside one, `ensure_compile_time_eval` keeps that transform's trace).
_EVAL_TRACE: Final[type[Any]] = _core.EvalTrace  # pyright: ignore[reportUnknownMemberType]
_TRACE_CTX: Final[Any] = _core.trace_ctx  # pyright: ignore[reportUnknownMemberType]


def eager() -> bool:
    """Whether no trace is active in this thread: the current trace is JAX's eager
    one, and what is computed now is a concrete array."""
    return type(_TRACE_CTX.trace) is _EVAL_TRACE


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
    are recognised here, and the leaked tracers recovered from the frames. An
    `IndexError` is JAX's only when it was raised inside `_why_alive`: any other
    is the user's own (the traceback must be unfiltered, see `full_tracebacks`).
    """
    is_report = type(exc) is Exception and str(exc).startswith("Leaked ")
    if not is_report and not (isinstance(exc, IndexError) and _in_why_alive(exc)):
        return None
    for found in _leaked_tracer_lists(exc.__traceback__):
        return list(found)
    return [] if is_report else None


def _in_why_alive(exc: BaseException) -> bool:
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        # jax 0.10.2, jax/_src/core.py: `leaked_tracer_error` -> `_why_alive`.
        if code.co_filename == _CORE_FILE and code.co_name == "_why_alive":
            return True
        tb = tb.tb_next
    return False


# -- A traced program and its constants -----------------------------------------
#
# jax 0.10.2 and 0.8.0: `jax.make_jaxpr` returns a `ClosedJaxpr` pairing a
# `Jaxpr` (the program, with `constvars`) and the constants' values
# (`.consts`); the inner `Jaxpr` holds no value. jax 0.11 and 0.12 merge the two
# (`jax.extend.core.ClosedJaxpr is jax.extend.core.Jaxpr`): a `Jaxpr` carries
# its constants' values itself, and `closed.jaxpr is closed`. Keeping "the
# program" then keeps the tracers it closed over alive.


def bare_jaxpr(closed: Any) -> Any:
    """The program of the traced `closed`, holding none of its constants' values.

    Evaluated as `jax.core.eval_jaxpr(bare, consts, *args)` on every JAX: on
    0.11+ its constants are its leading inputs (`eval_jaxpr` binds
    `[*consts, *args]` to them), on 0.10 and older its `constvars`.
    """
    jaxpr = closed.jaxpr
    if getattr(jaxpr, "num_consts", 0):  # jax >= 0.11: values attached
        jaxpr = jaxpr.with_consts([])
    return jaxpr


def holds_consts(obj: object) -> bool:
    """Whether `obj` is a traced program holding its constants' values: a
    `ClosedJaxpr` (jax <= 0.10), or a `Jaxpr` (jax >= 0.11)."""
    return isinstance(obj, jax.extend.core.ClosedJaxpr)


# -- `jax.jit`'s options ----------------------------------------------------------
#
# `jax.jit(f, donate_argnums=...)` donates an argument passed by keyword too: it
# infers `donate_argnames` from `f`'s signature (`api_util.resolve_argnums`).
# jax 0.10.2 and 0.8.0 name the positional-or-keyword parameters of the
# non-negative numbers; jax 0.11 and 0.12 those of negative ones as well,
# counted from the end of all of `f`'s parameters (keyword-only ones included).


def inferred_argnames(
    signature: inspect.Signature, argnums: tuple[int, ...]
) -> tuple[str, ...]:
    """The parameter names `jax.jit` infers from `argnums` for `signature`."""
    return _api_util.infer_argnums_and_argnames(signature, argnums, None)[1]


# -- The Python code a jaxpr's parameters run -----------------------------------
#
# Written against jax 0.10.2. A jaxpr shows custom derivative rules and callbacks
# by name only; the functions themselves sit in equation parameters:
# `custom_jvp_call[jvp_jaxpr_fun]`, `custom_vjp_call[fwd_jaxpr_thunk, bwd]` and
# `custom_lin[bwd]` hold an `lu.WrappedFun` whose `f` is the rule (or JAX's own
# memoizing thunk around it) and whose `transforms` are (generator, static args)
# pairs; `_prepend_static_args` and `_argnums_partial` box the `nondiff_argnums`
# values in `util.Unhashable` or `api_util._HashableWithStrictTypeEquality`.
# `pure_callback[callback]` and `io_callback[callback]` hold a `_FlatCallback`
# (`callback_func`), `debug_callback[callback]` a closure over the function.
from typing import cast  # noqa: E402

from jax._src import (  # noqa: E402
    callback as _callback,
    linear_util as _lu,
    util as _util,
)

_WRAPPED_FUN: Final[type[Any]] = _lu.WrappedFun  # pyright: ignore[reportUnknownMemberType]
_FLAT_CALLBACK: Final[type[Any]] = _callback._FlatCallback  # pyright: ignore[reportPrivateUsage, reportUnknownMemberType]
_STATIC_BOXES: Final[tuple[type[Any], ...]] = (
    _util.Unhashable,  # pyright: ignore[reportUnknownMemberType]
    _api_util._HashableWithStrictTypeEquality,  # pyright: ignore[reportPrivateUsage, reportUnknownMemberType]
)
_SRC_DIR: Final[str] = os.path.dirname(_CORE_FILE)

# JAX's own closures between a parameter and the user's function (jax 0.10.2):
# file under jax/_src, qualified name, and the closure cells that lead on. The
# other cells hold the trace, avals, stores and memo tables, all determined by
# the traced program itself.
_PLUMBING: Final[dict[tuple[str, str], tuple[str, ...]]] = {
    (os.path.join(_SRC_DIR, *file.split("/")), qualname): cells
    for file, qualname, cells in (
        ("interpreters/partial_eval.py", "_memoize.<locals>.memoized", ("fn",)),
        (
            "interpreters/partial_eval.py",
            "DynamicJaxprTrace.process_custom_jvp_call.<locals>.jvp_jaxpr_thunk",
            ("jvp",),
        ),
        (
            "interpreters/partial_eval.py",
            "DynamicJaxprTrace.process_custom_vjp_call.<locals>.fwd_jaxpr_from_zeros",
            ("fwd",),
        ),
        (
            "interpreters/partial_eval.py",
            "DynamicJaxprTrace.process_custom_vjp_call.<locals>.out_trees_",
            (),
        ),
        ("interpreters/batching.py", "batch_custom_vjp_bwd.<locals>.new_bwd", ("bwd",)),
        (
            "custom_derivatives.py",
            "_custom_jvp_call_dce.<locals>.dce_jvp_jaxpr_thunk",
            ("jvp_jaxpr_fun",),
        ),
        (
            "custom_derivatives.py",
            "_custom_vjp_call_dce.<locals>.dce_fwd_jaxpr_thunk",
            ("fwd_jaxpr_thunk",),
        ),
        ("custom_derivatives.py", "lift_jvp.<locals>.jvp", ("jvp_jaxpr_fun",)),
        ("custom_derivatives.py", "lift_fwd.<locals>.fwd", ("fwd_jaxpr_thunk",)),
        (
            "debugging.py",
            "debug_callback.<locals>._debug_callback.<locals>._flat_callback",
            ("callback", "static_args"),
        ),
        (
            "debugging.py",
            "_make_flat_callback.<locals>._flat_callback",
            ("callback", "static_args"),
        ),
        (  # jax 0.8.0: the same closure, one level up
            "debugging.py",
            "debug_callback.<locals>._flat_callback",
            ("callback", "static_args"),
        ),
    )
}
_RULE_TYPES: Final[tuple[type[Any], ...]] = (
    _WRAPPED_FUN,
    _FLAT_CALLBACK,
    types.FunctionType,
    types.MethodType,
    functools.partial,
)


def runs_code(param: object) -> bool:
    """Whether a jaxpr parameter is Python code (a rule, a callback) not data."""
    return isinstance(param, _RULE_TYPES)


def _unbox(arg: Any) -> list[tuple[str, Any]]:
    # `_prepend_static_args` gets a tuple of boxes, `_argnums_partial` a tuple of
    # boxes after the dynamic argument numbers.
    boxes: tuple[Any, ...] = cast(Any, arg) if type(arg) is tuple else (arg,)
    return [("static", cast(Any, b).val) for b in boxes if isinstance(b, _STATIC_BOXES)]


def rule_parts(param: object) -> list[tuple[str, Any]]:
    """The user's code behind a jaxpr parameter, and the values JAX hands it.

    Returns `("code", fn)` for each function reached (a `custom_jvp` rule, a
    `custom_vjp` fwd/bwd, a callback; JAX's wrappers around them are seen
    through) and `("static", value)` for each static argument bound to it
    (`nondiff_argnums`, `debug.callback`'s non-array arguments). A callable that
    is none of JAX's known wrappers is returned as the code itself.
    """
    parts: list[tuple[str, Any]] = []
    stack: list[Any] = [param]
    steps = 0
    while stack and steps < 1000:  # JAX's wrappers nest a handful deep
        steps += 1
        x = stack.pop()
        t: type[Any] = type(x)  # pyright: ignore[reportUnknownVariableType]
        if t is _WRAPPED_FUN:
            for _, static_args in x.transforms:
                for arg in static_args:
                    parts.extend(_unbox(arg))
            if x.params:
                params: dict[str, Any] = dict(x.params)  # pyright: ignore[reportUnknownArgumentType]
                parts.append(("static", params))
            stack.append(x.f)
        elif t is _FLAT_CALLBACK:
            stack.append(x.callback_func)
        elif t is types.FunctionType and (
            (cells := _PLUMBING.get((x.__code__.co_filename, x.__code__.co_qualname)))
            is not None
        ):
            for name, cell in zip(
                x.__code__.co_freevars, x.__closure__ or (), strict=False
            ):
                if name in cells:
                    try:
                        stack.append(cell.cell_contents)
                    except ValueError:  # an empty cell
                        pass
        else:
            parts.append(("code" if callable(x) else "static", x))
    return parts


# -- Traces still running, whatever the current trace --------------------------
#
# Written against jax 0.10.2. Inside `shard_map` or `pmap` under `jit` (and
# under `jax.ensure_compile_time_eval()`), the current trace's parents end at an
# `EvalTrace`: the enclosing `jit` trace is running but unreachable from it. Each
# running trace is a local of the JAX function that made it and entered it
# (`trace_to_jaxpr` and friends, `jvp`/`linearize` subtraces), whose frame is on
# this thread's stack until the trace exits.
_JAX_DIR: Final[str] = os.path.join(
    os.path.dirname(os.path.abspath(str(jax.__file__))), ""
)
_TRACE: Final[type[Any]] = _core.Trace  # pyright: ignore[reportUnknownMemberType]


_OPTIMIZED: Final = inspect.CO_OPTIMIZED  # a function's frame, not a module's
_SNAPSHOT_LOCALS: Final = sys.version_info < (3, 13)


def _running_traces(start: types.FrameType | None = None) -> list[Any]:
    """The traces held by JAX frames on this thread's stack (not yet exited),
    from `start` (the caller's frame by default) down."""
    found: list[Any] = []
    frame = sys._getframe(1) if start is None else start  # pyright: ignore[reportPrivateUsage]
    while frame is not None:
        code = frame.f_code
        if code.co_flags & _OPTIMIZED and code.co_filename.startswith(_JAX_DIR):
            # CPython before 3.13 keeps the snapshot `f_locals` builds on a
            # function's frame: it would hold the frame's tracers after the frame
            # drops them (a leak to JAX's checker). Emptied at once; the next
            # reader rebuilds it. (From 3.13 `f_locals` is a live view: kept.)
            snapshot = frame.f_locals
            for value in snapshot.values():
                if isinstance(value, _TRACE) and value.is_valid():
                    found.append(value)
            if _SNAPSHOT_LOCALS and sys.getrefcount(snapshot) <= _ONLY_THE_FRAMES:
                snapshot.clear()  # (one the code holds, `locals()`, is its own)
            del snapshot
        frame = frame.f_back
    return found


# -- Tracebacks JAX has not filtered ---------------------------------------------
#
# Written against jax 0.10.2. `api_boundary` (jax/_src/traceback_util.py) drops
# JAX's frames from an exception's traceback, and with them the frames that tell
# JAX's leak report (and its jax#26560 IndexError) from the user's own error.
# Leak checking runs with filtering off and filters afterwards, as the outermost
# `api_boundary` would have, the exceptions it lets through.
from jax._src import config as _config, traceback_util as _traceback_util  # noqa: E402


def filtering_mode() -> str:
    """The traceback filtering JAX applies now ("auto" resolved)."""
    return str(_traceback_util._filtering_mode())  # pyright: ignore[reportPrivateUsage, reportUnknownMemberType]


def full_tracebacks() -> Any:
    """A context in which JAX leaves exception tracebacks whole."""
    return _config.traceback_filtering("off")  # pyright: ignore[reportUnknownMemberType]


def filter_traceback(exc: BaseException, mode: str) -> None:
    """Filter `exc`'s traceback as JAX's `api_boundary` does in `mode`."""
    tb = exc.__traceback__
    if tb is None or mode == "off" or _traceback_util._is_under_reraiser(exc):  # pyright: ignore[reportPrivateUsage, reportUnknownMemberType]
        return
    if mode == "tracebackhide":
        _traceback_util._add_tracebackhide_to_hidden_frames(tb)  # pyright: ignore[reportPrivateUsage, reportUnknownMemberType]
        return
    entries: list[types.TracebackType] = []
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    include = _traceback_util.include_frame  # pyright: ignore[reportUnknownMemberType]
    kept = [e for e in entries if include(e.tb_frame)]
    if len(kept) == len(entries):
        return  # no JAX frame in it: nothing JAX would have removed
    # As `filter_traceback`, but each entry keeps its own instruction (the frame's
    # current one has moved on since: it is handling this exception).
    out: types.TracebackType | None = None
    for e in reversed(kept):
        out = types.TracebackType(out, e.tb_frame, e.tb_lasti, e.tb_lineno)
    exc.with_traceback(out)
    if mode == "quiet_remove_frames":
        exc.add_note("--------------------\n" + _traceback_util._simplified_tb_msg)  # pyright: ignore[reportPrivateUsage, reportUnknownMemberType]


_CHECK_TRACER_LEAKS: Final[Any] = _config.check_tracer_leaks  # pyright: ignore[reportUnknownMemberType]


def jax_checks_leaks() -> bool:
    """Whether JAX's own leak checker is on (`jax_check_tracer_leaks`).

    jax 0.10.2: `config.check_tracer_leaks.value` reads the thread's state in
    C++ (~0.15 µs; `jax.config.jax_check_tracer_leaks` costs ~0.6 µs, too much
    on every call of a `lift.checked` function).
    """
    return _CHECK_TRACER_LEAKS.value is True


def jax_leak_checks_declined() -> bool:
    """Whether the running code turned JAX's checker off for itself
    (`with jax.check_tracer_leaks(False):`, a thread-local setting; jax 0.8.0
    to 0.12 give a sentinel object when none is set): a leak there is meant."""
    return _CHECK_TRACER_LEAKS.get_local() is False


# -- traces that exit inside `lift.checking_leaks()` --------------------------------
#
# JAX's checker runs where a trace is entered with `check_leaks=True` (jit, scan,
# vmap); eager `grad`/`jvp`/`vjp`/`linearize` enter their traces through
# `core.set_current_trace(trace)` without it (jax 0.10.2 and 0.8.0,
# `interpreters/ad.py`), so a tracer escaping them is never reported. From jax
# 0.11 eager `grad`, `vjp` and `linearize` are checked (`JAX_CHECKS_EAGER_GRAD`);
# eager `jvp` still is not, and JAX's checker is off unless asked for. While a
# `lift.checking_leaks()` block runs, `core.set_current_trace` is a subclass
# that notes each trace it leaves (by weak reference, nothing kept alive); on
# exit the block asks which of those traces still have tracers.


# A block's record: the traces it saw exit, whether it notes every kind (or the
# eager `grad` and `jvp` ones only), the thread it watches (a trace exiting in
# another thread, still running there perhaps, is not the block's, as JAX's
# checker, whose switch is per thread, does not look at it either), and what
# it is told of the user's frames holding an exiting trace's tracers.
class _Recorder(NamedTuple):
    exits: dict[int, Any]
    every: bool
    thread: int
    frames: Callable[[list[FrameHolding]], None] | None


_recorders: list[_Recorder] = []
_original_set_current_trace: Any = None


# The eager traces lift watches: those of `grad`, `jvp`, `vjp` and `linearize`,
# which JAX's checker misses on jax 0.10.2 and 0.8.0 (`JVPTrace` of eager `jvp`
# on every version); the others (`jit`, `scan`, `vmap`, ...) it checks.
_UNCHECKED_TRACES: Final = frozenset({"JVPTrace", "LinearizeTrace"})
# Traces that hold no tracer of their own: not noted (jax 0.10.2 to 0.12: an
# `EvalTrace` outlives its block, kept by JAX's dispatch caches).
_NO_TRACERS: Final = frozenset({"EvalTrace"})


def _note_exit(trace: Any) -> None:
    """Note a trace that exited normally (one unwound by an exception is not
    noted: the traceback's frames hold its tracers, and the error is the
    report)."""
    kind = type(trace).__name__
    if kind in _NO_TRACERS:
        return
    unchecked = kind in _UNCHECKED_TRACES
    key = id(trace)
    thread = threading.get_ident()
    for recorder, every, watched, _ in _recorders:
        if not (every or unchecked) or watched != thread:
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
            if _frame_watchers:
                _entered(cast(Any, self).trace)
            return out

        def __exit__(self, *exc: Any) -> Any:
            trace: Any = cast(Any, self).trace
            last = False
            try:
                out = cast(Any, super()).__exit__(*exc)
            finally:
                if _frame_watchers:
                    last = _left(trace)
            if exc[0] is None:
                _note_exit(trace)
                if last:
                    _check_frames(trace)
            return out

    return WatchedSetCurrentTrace


@contextlib.contextmanager
def watching_trace_exits(
    every: bool = False,
    frames: Callable[[list[FrameHolding]], None] | None = None,
) -> Generator[dict[int, Any]]:
    """Note (weakly) the traces that exit while the block runs: the eager `grad`
    and `jvp` traces JAX's checker does not look at, or with `every` each trace
    but JAX's eager one (`jit`, `vmap`, `scan`, ... too). `escaped_tracers` then
    names their tracers still alive.

    A trace that exits normally is freed at once (its tracers with it: measured
    for jit, grad, vmap, scan, cond, while_loop, custom_jvp, checkpoint,
    linearize and vjp on jax 0.10.2 and 0.12.0.1), so a noted trace still alive
    at the end of the block is the sign of a kept tracer, found without the
    garbage collection JAX's checker runs at every trace exit.

    With `frames`, each time a trace exits for good in this thread (not a
    transform's switch back to the trace it runs in), the user's frames on the
    stack are looked at for its tracers in their local variables (see
    `FrameHolding`); `frames` is called with those that hold some, while they
    still do. (A local dropped before the block ends would be gone by then.)"""
    global _original_set_current_trace, _frame_watchers
    recorder: dict[int, Any] = {}
    if not _recorders:
        _original_set_current_trace = _core.set_current_trace
        _core.set_current_trace = _watching_class(_original_set_current_trace)
    entry = _Recorder(recorder, every, threading.get_ident(), frames)
    _recorders.append(entry)
    if frames is not None:
        _frame_watchers += 1
    try:
        yield recorder
    finally:
        # By identity: two blocks' records may be equal dicts.
        del _recorders[next(i for i, e in enumerate(_recorders) if e is entry)]
        if frames is not None:
            _frame_watchers -= 1
            if not _frame_watchers:
                _open_traces.clear()
                _kinds.clear()
                _user_codes.clear()
        if not _recorders and _original_set_current_trace is not None:
            _core.set_current_trace = _original_set_current_trace
            _original_set_current_trace = None


def escaped_tracers(recorder: dict[int, Any]) -> list[Any]:
    """The tracers still alive of the traces `recorder` saw exit: escaped ones
    (after a garbage collection, so that only reachable tracers count)."""
    if not any(ref() is not None for ref in recorder.values()):
        return []
    gc.collect()
    live = live_traces()
    traces = [t for ref in recorder.values() if (t := ref()) is not None]
    traces = [t for t in traces if not live.has(t)]
    if not traces:
        return []
    found = [
        x
        for x in gc.get_referrers(*traces)
        if isinstance(x, Tracer) and not live.is_live(x)
    ]
    return found


# -- tracers of an exiting trace that the user's frames hold -----------------------
#
# JAX's checker (`maybe_find_leaked_tracers`, jax 0.8.0 to 0.12) looks at the
# exit of a trace for any tracer of it still referenced, a caller's local
# variable included: `seen.append(x)` inside a jitted closure over the test's
# local `seen` fails the test there, even though the test's frame drops `seen`
# before any later look could see it. While a block watches frames, each trace
# that exits for good is looked for in the locals of the user's frames then on
# the stack (not JAX's, lift's, pytest's, pluggy's, the standard library's or
# an installed package's: `_is_user_code`), directly or inside plain
# containers, objects' attributes and closures, to a bounded depth and number
# of objects.
#
# "For good": `core.set_current_trace(t)` is also entered to switch back to a
# trace still running, the one a transform runs in (jax 0.10.2: every
# `BatchTrace`, `JVPTrace`, `LinearizeTrace` and `JaxprTrace` primitive
# enters its `parent_trace`, a linearize trace its `tangent_trace`), and the
# user's function running in that trace holds its tracers legitimately. A
# trace exits for good when no `set_current_trace` of it is still open and no
# open or current trace reaches it through its parents; where it was entered
# before the block began watching, the JAX frames beneath the holding frame
# tell (`_running_traces`).

_frame_watchers = 0  # blocks watching frames
# id of each trace entered (while frames are watched) and not yet left: how
# many times, and the trace (held while open: the `with` holds it anyway).
_open_traces: dict[int, list[Any]] = {}
# The most objects looked at per trace exit, and the deepest: a local at depth
# 0, a tracer in a dict of lists at 2.
_FRAME_BUDGET: Final = 1_000
_FRAME_DEPTH: Final = 4


class FrameHolding(NamedTuple):
    """A frame of the user's code holding tracers of a trace that just exited
    for good: its code, the line it was at, its local variables (name, value)
    and the tracers found through them (the local's name, the tracer)."""

    code: types.CodeType
    lineno: int
    names: list[tuple[str, Any]]
    tracers: list[tuple[str, Any]]


def _entered(trace: Any) -> None:
    entry = _open_traces.get(id(trace))
    if entry is None:
        _open_traces[id(trace)] = [1, trace]
    else:
        entry[0] += 1


def _left(trace: Any) -> bool:
    """Count a `set_current_trace(trace)` left; whether it was the last one
    open (one entered before frames were watched is not counted: `False`)."""
    entry = _open_traces.get(id(trace))
    if entry is None:
        return False
    if entry[0] > 1:
        entry[0] -= 1
        return False
    del _open_traces[id(trace)]
    return True


def _still_running(trace: Any) -> bool:
    """Whether `trace` is the current trace or an open one, or a parent of one."""
    starts: list[Any] = [_TRACE_CTX.trace]
    starts.extend(entry[1] for entry in _open_traces.values())
    return _reaches(starts, trace)


def _reaches(starts: list[Any], trace: Any) -> bool:
    """Whether `trace` is one of `starts` or a parent of one (through
    `_PARENT_ATTRS`, iteratively)."""
    stack = [t for t in starts if t is not None]
    seen: set[int] = set()
    while stack:
        t = stack.pop()
        if t is trace:
            return True
        if id(t) in seen:
            continue
        seen.add(id(t))
        for attr in _PARENT_ATTRS:
            parent = getattr(t, attr, None)
            if parent is not None:
                stack.append(parent)
    return False


def _check_frames(trace: Any) -> None:
    """At the last exit of `trace`: tell the blocks watching this thread's
    frames which of the user's frames hold its tracers."""
    if type(trace) is _EVAL_TRACE or jax_leak_checks_declined():
        # A block that turned JAX's checker off for itself keeps its tracers
        # on purpose, and JAX's checker does not look at it either.
        return
    thread = threading.get_ident()
    told = [r.frames for r in _recorders if r.frames is not None and r.thread == thread]
    if not told or _still_running(trace):
        return
    found = _frames_holding(trace, sys._getframe(2))  # pyright: ignore[reportPrivateUsage]
    if found:
        for frames in told:
            frames(found)


def _frames_holding(trace: Any, frame: types.FrameType | None) -> list[FrameHolding]:
    found: list[FrameHolding] = []
    budget = _FRAME_BUDGET
    users = _user_codes
    while frame is not None:
        code = frame.f_code
        known = users.get(id(code))  # by id: a code object's hash reads it all
        if known is None:
            variables = None
            if code.co_flags & _OPTIMIZED and _is_user_code(code.co_filename):
                variables = frozenset(
                    (*code.co_varnames, *code.co_cellvars, *code.co_freevars)
                )
            known = users[id(code)] = (code, variables)  # held: the id stays its own
        variables = known[1]
        if variables is not None:
            names = _frame_locals(frame, variables)
            tracers, budget = _tracers_of(trace, names, budget)
            if tracers and not _runs_beneath(trace, frame):
                found.append(FrameHolding(code, frame.f_lineno, names, tracers))
        frame = frame.f_back
    return found


def _runs_beneath(trace: Any, frame: types.FrameType) -> bool:
    """Whether a JAX frame beneath `frame` runs `trace` (or a trace whose
    parents reach it): `frame` is then inside it, its tracers its own."""
    return _reaches(_running_traces(frame.f_back), trace)


def _frame_locals(
    frame: types.FrameType, variables: frozenset[str]
) -> list[tuple[str, Any]]:
    """A running frame's local variables (cells' contents included), leaving
    no snapshot behind: before 3.13 `f_locals` caches one on the frame, which
    would keep the values after the frame drops them; emptied when nothing
    else holds it (a dict the code holds, `ns = locals()`, is its own) and it
    holds only the code's `variables` (names `exec` wrote there are the
    code's own data: the next `locals()` would miss them)."""
    snapshot = frame.f_locals
    items = list(snapshot.items())
    if (
        _SNAPSHOT_LOCALS
        and sys.getrefcount(snapshot) <= _ONLY_THE_FRAMES
        and variables.issuperset(snapshot)
    ):
        snapshot.clear()
    del snapshot
    return items


# How `_tracers_of` opens each type of object, decided once per type (and
# forgotten when the last block watching frames ends, so that no class is kept).
_SKIP, _TRACER, _ITEMS, _VALUES, _OBJECT, _FUNCTION, _METHOD = range(7)
_kinds: dict[Any, tuple[int, Any]] = {}
_UNDECIDED: Final = (-1, None)
# Each code object met on the stack, with its variables' names if it is a
# function of the user's (as `_kinds`, forgotten when the last block watching
# frames ends).
_user_codes: dict[int, tuple[types.CodeType, frozenset[str] | None]] = {}
_CLOSED_PACKAGES: Final = frozenset(
    {"jax", "jaxlib", "numpy", "lift", "builtins", "ml_dtypes", "_pytest", "pytest"}
)


def _kind(t: Any) -> tuple[int, Any]:
    found = _kinds.get(t)
    if found is None:
        found = _kinds[t] = _decide_kind(t)
    return found


def _decide_kind(t: Any) -> tuple[int, Any]:
    if issubclass(t, Tracer):
        return _TRACER, None
    if issubclass(t, dict):
        return _VALUES, cast(Any, dict).values
    bases: tuple[Any, ...] = (list, tuple, set, frozenset, collections.deque)
    for base in bases:
        if issubclass(t, base):
            return _ITEMS, base.__iter__  # a subclass's own `__iter__` is not run
    if t is types.FunctionType:
        return _FUNCTION, None
    if t is types.MethodType:
        return _METHOD, None
    if issubclass(t, (type, types.ModuleType, BaseException)):
        return _SKIP, None
    module: object = getattr(t, "__module__", None) or "builtins"
    if not isinstance(module, str):
        module = ""  # a class whose `__module__` is a property of its own
    if module.partition(".")[0] in _CLOSED_PACKAGES:
        return _SKIP, None  # JAX's, NumPy's, lift's, pytest's and C objects
    # An instance `__dict__` as Python makes it (no property to run).
    for klass in t.__mro__:
        descriptor = klass.__dict__.get("__dict__")
        if descriptor is not None:
            if type(descriptor) in _PLAIN_DICT:
                return _OBJECT, None
            break
    return _SKIP, None


# How Python classes (getset) and C types such as `SimpleNamespace` (member)
# give their instances' `__dict__`: no code of the class's own runs.
_PLAIN_DICT: Final = (types.GetSetDescriptorType, types.MemberDescriptorType)


def _tracers_of(
    trace: Any, names: list[tuple[str, Any]], budget: int
) -> tuple[list[tuple[str, Any]], int]:
    """The tracers of `trace` that `names` hold, breadth-first, at most
    `_FRAME_DEPTH` deep and `budget` objects; with the budget left."""
    found: list[tuple[str, Any]] = []
    kinds = _kinds
    # Breadth-first: a list read from `at` on (numbers and strings not queued).
    queue = [
        (value, 0, name)
        for name, value in names
        if kinds.get(type(value), _UNDECIDED)[0] != _SKIP
    ]
    at = 0
    seen: set[int] = set()
    while at < len(queue) and budget > 0:
        obj, depth, name = queue[at]
        at += 1
        budget -= 1
        kind, how = kinds.get(type(obj)) or _kind(type(obj))
        if kind == _SKIP:
            continue
        if kind == _TRACER:
            if getattr(obj, "_trace", None) is trace and all(
                t is not obj for _, t in found
            ):
                found.append((name, obj))
            continue
        if depth >= _FRAME_DEPTH or id(obj) in seen:
            continue
        seen.add(id(obj))
        if kind in (_ITEMS, _VALUES):
            children: Iterable[Any] = how(obj)
        elif kind == _OBJECT:
            children = object.__getattribute__(obj, "__dict__").values()
        elif kind == _FUNCTION:
            children = []
            for cell in obj.__closure__ or ():
                try:
                    children.append(cell.cell_contents)
                except ValueError:  # an empty cell
                    pass
        else:  # a bound method
            children = (obj.__self__,)
        for child in children:
            budget -= 1
            if budget <= 0:
                break
            known = kinds.get(type(child))
            if known is None or known[0] != _SKIP:  # numbers and strings: not queued
                queue.append((child, depth + 1, name))
    return found, budget


_user_files: dict[str, bool] = {}


def _is_user_code(filename: str) -> bool:
    """Whether code from `filename` is the user's: not JAX's, jaxlib's, lift's,
    pytest's, pluggy's, the standard library's nor an installed package's (as
    lift's scans decide: the project under test is the user's when installed
    editable, from its own tree; equinox's or diffrax's frames, many and full
    of pytrees under every solve, are not looked at)."""
    user = _user_files.get(filename)
    if user is None:
        user = _user_files[filename] = _classify(filename)
    return user


def _classify(filename: str) -> bool:
    if filename.startswith("<"):
        return not filename.startswith("<frozen ")  # exec'd code is the user's
    return not os.path.abspath(filename).startswith(_library_paths())


@functools.cache
def _library_paths() -> tuple[str, ...]:
    """Where JAX's, jaxlib's, lift's, pytest's and pluggy's code is (from a
    source tree too), the standard library's and installed packages'."""
    import sysconfig

    others = {_JAX_DIR, os.path.join(os.path.dirname(os.path.abspath(__file__)), "")}
    for name in ("jaxlib", "_pytest", "pytest", "pluggy"):
        spec = getattr(sys.modules.get(name), "__file__", None)
        if isinstance(spec, str):
            others.add(os.path.join(os.path.dirname(os.path.abspath(spec)), ""))
    paths = sysconfig.get_paths()
    others.update(
        os.path.join(os.path.abspath(paths[k]), "")
        for k in ("stdlib", "platstdlib", "purelib", "platlib")
        if k in paths
    )
    others.add(os.path.join(os.path.dirname(os.path.abspath(os.__file__)), ""))
    return tuple(sorted(others))


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

_STALE_SNAPSHOTS: Final = sys.version_info < (3, 13)
# A snapshot held by its frame only: the frame, the caller's name, the argument.
_ONLY_THE_FRAMES: Final = 3
_original_find_leaked: Any = None
_snapshot_checks = 0  # blocks running with the checker wrapped


def _drop_stale_snapshots() -> None:
    """Empty the `f_locals` snapshot of each function frame on this thread's
    stack that nothing but the frame holds (a dict the code itself holds,
    `ns = locals()`, is left as it is)."""
    frame: types.FrameType | None = sys._getframe(1)  # pyright: ignore[reportPrivateUsage]
    while frame is not None:
        if frame.f_code.co_flags & _OPTIMIZED:
            snapshot = frame.f_locals
            if sys.getrefcount(snapshot) <= _ONLY_THE_FRAMES:
                snapshot.clear()
            del snapshot
        frame = frame.f_back


def _find_leaked_tracers(trace: Any) -> list[Any]:
    found: list[Any] = _original_find_leaked(trace)
    if not found:
        return found
    del found  # held here, they would be found again
    _drop_stale_snapshots()
    return _original_find_leaked(trace)


@contextlib.contextmanager
def snapshots_are_not_leaks() -> Generator[None]:
    """While the block runs, JAX's leak checker does not count tracers held only
    by the `f_locals` snapshots of the frames on the stack (CPython 3.11, 3.12)."""
    global _original_find_leaked, _snapshot_checks
    if not _STALE_SNAPSHOTS:
        yield
        return
    if _snapshot_checks == 0:
        _original_find_leaked = cast(Any, _core).maybe_find_leaked_tracers
        _core.maybe_find_leaked_tracers = _find_leaked_tracers  # pyright: ignore[reportAttributeAccessIssue]
    _snapshot_checks += 1
    try:
        yield
    finally:
        _snapshot_checks -= 1
        if _snapshot_checks == 0:
            _core.maybe_find_leaked_tracers = _original_find_leaked  # pyright: ignore[reportAttributeAccessIssue]
            _original_find_leaked = None


# The frames in which `jax.jit` hashes its static arguments on a cache miss (it
# hashes the jitted function there too, as `fun`). Written against jax 0.10.2
# (`pjit._infer_params`) and 0.8.0 (`pjit._infer_params_internal`).
_PJIT_FILE: Final = os.path.join("jax", "_src", "pjit.py")
_HASHES_STATIC_ARGS: Final = frozenset({"_infer_params", "_infer_params_internal"})


_HASH_DEPTH: Final = 8  # `__hash__` methods nested inside one another, at most

# Where JAX's and lift's own Python frames come from.
_LIBRARIES: Final = (
    os.path.dirname(jax.__file__) + os.sep,
    os.path.dirname(__file__) + os.sep,
)


def user_stacklevel(frame: types.FrameType) -> int:
    """The `stacklevel` that makes a warning issued by the function `frame` called
    point at the user's code: past JAX's and lift's frames and `__hash__` methods
    (an object hashing what it holds), to the call that caused them."""
    level = 2
    current: types.FrameType | None = frame
    while current is not None and (
        current.f_code.co_name == "__hash__"
        or current.f_code.co_filename.startswith(_LIBRARIES)
    ):
        current = current.f_back
        level += 1
    return level if current is not None else 2


def hashed_as_jit_static(obj: object, frame: types.FrameType) -> bool:
    """Whether `frame`, the caller of `obj.__hash__`, is `jax.jit` hashing `obj`
    as a static argument (or inside one), rather than as the function it jits
    (`jax.jit(obj)`, `jax.jit(obj.method)`).

    Inside a container hashed in C (a tuple) the caller is `jax.jit`'s own frame;
    inside an object whose `__hash__` is written in Python (a frozen dataclass,
    an `equinox.Module`) it is that `__hash__`, and `jax.jit` is further up.
    """
    name = frame.f_code.co_name
    if name == "__hash__":
        return _hashed_inside_jit_static(frame)
    if name not in _HASHES_STATIC_ARGS or not frame.f_code.co_filename.endswith(
        _PJIT_FILE
    ):
        return False
    return not _is_jitted(frame, obj)


def _hashed_inside_jit_static(frame: types.FrameType) -> bool:
    """`hashed_as_jit_static` for a caller that is another `__hash__`: up through
    such frames (at most `_HASH_DEPTH`) to the one that hashed the outermost."""
    outer = frame
    for _ in range(_HASH_DEPTH):
        back = outer.f_back
        if back is None:
            return False
        code = back.f_code
        if code.co_name != "__hash__":
            if code.co_name not in _HASHES_STATIC_ARGS or not code.co_filename.endswith(
                _PJIT_FILE
            ):
                return False
            # The outermost object hashed: a static argument, or the jitted function.
            return not _is_jitted(back, outer.f_locals.get("self"))
        outer = back
    return False


def _is_jitted(frame: types.FrameType, obj: object) -> bool:
    """Whether `obj` is the function `jax.jit` hashes in `frame` (`fun`), or the
    instance or function of that bound method."""
    fun = frame.f_locals.get("fun")
    return fun is obj or any(
        getattr(fun, attr, None) is obj for attr in ("__self__", "__func__")
    )


# What decides how a captured Python scalar becomes an array: the default float
# width and the default device. Written against jax 0.10.2 (and 0.8.0, 0.12.0):
# `config.enable_x64` and `config.default_device` are `State`s whose `.value`
# reads this thread's setting (context managers included) in about 20 ns, where
# `jax.config.jax_enable_x64` takes 80 (read on every `lift.jit` cached call).
X64: Final[Any] = cast(Any, _config.enable_x64)  # pyright: ignore[reportUnknownMemberType]
DEFAULT_DEVICE: Final[Any] = cast(Any, _config.default_device)  # pyright: ignore[reportUnknownMemberType]


def conversion_context() -> tuple[Any, Any]:
    """`(jax_enable_x64, jax_default_device)` as they are now."""
    return X64.value, DEFAULT_DEVICE.value
