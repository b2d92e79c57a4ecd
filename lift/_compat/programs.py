"""Traced programs: a jaxpr and its constants, `jax.jit`'s inferred options,
and the Python code (custom rules, callbacks) a jaxpr's parameters run.
"""

from __future__ import annotations

import functools
import gc
import inspect
import os
import sys
import types
from typing import Any, Final, cast

import jax
import jax.extend.core
from jax._src import (
    api_util as _api_util,
    callback as _callback,
    debugging as _debugging,
    linear_util as _lu,
    util as _util,
)

from .traces import CORE_FILE

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

    Evaluated as `jax.core.eval_jaxpr(bare, consts, *args)` on every JAX. On
    0.11+ its constants are its leading inputs: `eval_jaxpr` binds
    `[*consts, *args]` to them. On 0.10 and older they are its `constvars`.
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


_WRAPPED_FUN: Final[type[Any]] = _lu.WrappedFun  # pyright: ignore[reportUnknownMemberType]
_FLAT_CALLBACK: Final[type[Any]] = _callback._FlatCallback  # pyright: ignore[reportPrivateUsage, reportUnknownMemberType]
_STATIC_BOXES: Final[tuple[type[Any], ...]] = (
    _util.Unhashable,  # pyright: ignore[reportUnknownMemberType]
    _api_util._HashableWithStrictTypeEquality,  # pyright: ignore[reportPrivateUsage, reportUnknownMemberType]
)
_SRC_DIR: Final[str] = os.path.join(os.path.dirname(CORE_FILE), "")

# JAX's own closures between a parameter and the user's function (jax 0.10.2),
# in files under jax/_src: qualified name, and the closure cells that lead on.
# The other cells hold the trace, avals, stores and memo tables, all
# determined by the traced program itself.
_PLUMBING: Final[dict[str, tuple[str, ...]]] = {
    # interpreters/partial_eval.py
    "_memoize.<locals>.memoized": ("fn",),
    "DynamicJaxprTrace.process_custom_jvp_call.<locals>.jvp_jaxpr_thunk": ("jvp",),
    "DynamicJaxprTrace.process_custom_vjp_call.<locals>.fwd_jaxpr_from_zeros": ("fwd",),
    "DynamicJaxprTrace.process_custom_vjp_call.<locals>.out_trees_": (),
    # interpreters/batching.py
    "batch_custom_vjp_bwd.<locals>.new_bwd": ("bwd",),
    # custom_derivatives.py
    "_custom_jvp_call_dce.<locals>.dce_jvp_jaxpr_thunk": ("jvp_jaxpr_fun",),
    "_custom_vjp_call_dce.<locals>.dce_fwd_jaxpr_thunk": ("fwd_jaxpr_thunk",),
    "lift_jvp.<locals>.jvp": ("jvp_jaxpr_fun",),
    "lift_fwd.<locals>.fwd": ("fwd_jaxpr_thunk",),
    # debugging.py (jax 0.8.0: the first one level up, `debug_callback.<locals>`)
    "debug_callback.<locals>._debug_callback.<locals>._flat_callback": (
        "callback",
        "static_args",
    ),
    "_make_flat_callback.<locals>._flat_callback": ("callback", "static_args"),
    "debug_callback.<locals>._flat_callback": ("callback", "static_args"),
}
_RULE_TYPES: Final[tuple[type[Any], ...]] = (
    _WRAPPED_FUN,
    _FLAT_CALLBACK,
    types.FunctionType,
    types.MethodType,
    functools.partial,
)


def _codes_named(code: types.CodeType, name: str) -> list[types.CodeType]:
    """The code objects named `name` nested in `code`."""
    found: list[types.CodeType] = []
    stack = [code]
    while stack:
        for c in stack.pop().co_consts:
            if isinstance(c, types.CodeType):
                found += [c] if c.co_name == name else []
                stack.append(c)
    return found


# The code of the closures JAX makes around a callback's Python (jax 0.8.0 to
# 0.12.1: `_flat_callback` in `debug_callback`, and in `_make_flat_callback`).
_CALLBACK_CODES: Final = tuple(
    c
    for f in vars(_debugging).values()
    if type(f) is types.FunctionType
    for c in _codes_named(f.__code__, "_flat_callback")
)


def callbacks_alive() -> int:
    """A number that grows when JAX keeps a callback more.

    JAX keeps one for `jax.debug.callback`, `pure_callback` and `io_callback`
    while a program is traced. Each of JAX's wrappers holds its class or its
    code. Read in constant time, so that a
    traced call looks for what holds its copies only when it made one."""
    return sys.getrefcount(_FLAT_CALLBACK) + sum(map(sys.getrefcount, _CALLBACK_CODES))


def kept_callbacks(among: list[Any] | None = None) -> list[Any]:
    """What the callbacks JAX keeps now hand the user's code: each callback's
    function and static arguments (`rule_parts`). Found by the objects that
    hold JAX's callback class or code, in one pass of the collector, or
    among the objects given (the young ones)."""
    return [
        part
        for r in (
            gc.get_referrers(_FLAT_CALLBACK, *_CALLBACK_CODES)
            if among is None
            else among
        )
        if type(r) is _FLAT_CALLBACK
        or (type(r) is types.FunctionType and r.__code__ in _CALLBACK_CODES)
        for _, part in rule_parts(r)
    ]


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

    Returns `("code", fn)` for each function reached: a `custom_jvp` rule, a
    `custom_vjp` fwd/bwd, a callback. JAX's wrappers around them are seen
    through. Returns `("static", value)` for each static argument bound to it
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
        elif (
            t is types.FunctionType
            and (cells := _PLUMBING.get(x.__code__.co_qualname)) is not None
            and x.__code__.co_filename.startswith(_SRC_DIR)
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
