"""`lift.checked(transform)`: a transform whose every call checks for leaked
tracers, cheaply on a cached call of the transformed function.

Each new transformed function is scanned once for what it captures. Each
call's arguments and result are scanned for what they hold. A call that
traces runs under JAX's own checker too, and its report is translated into
lift's."""

from __future__ import annotations

import contextlib
import functools
import inspect
import itertools
import threading
import types
import weakref
from collections.abc import Callable
from typing import Any, TypeVar, cast

from typing_extensions import ParamSpec

from .. import _compat
from .._base.built import recording
from .._base.errors import LeakError, LiftError, describe
from .checking import describe_short, leak_error, lifted_roots, scan_confirmed
from .report import Unopened, format_leaks
from .scan import param_name

# It calls the user's function inside a trace.
_compat.hide_frames_of(__file__)

_P = ParamSpec("_P")
_R = TypeVar("_R")


_T = TypeVar("_T", bound=Callable[..., Any])


def checked(transform: _T) -> _T:
    """Wrap a JAX transform so that each call that traces checks for leaks.

    `lift.checked(jax.jit)(f)` behaves as `jax.jit(f)`. A call that runs the
    Python of `f` (a trace) scans on exit. It scans the call's outputs, `f`'s
    captures and the module globals its code names. It scans every `Lifted`
    built while `f` ran. It raises [`lift.LeakError`][] for any tracer that
    escaped. A call
    served from the compilation cache runs no Python of `f`, cannot leak, and
    costs no scan.

    **Arguments:**

    - `transform`: any transform taking the function first: `jax.jit`,
      `jax.vmap`, `jax.grad`, `lift.jit`, ... Further arguments given with the
      function (`checked(jax.jit)(f, static_argnums=0)`) go to the transform.

    **Returns:**

    The transform, checked (typed as the transform itself).

    ```python
    import jax
    import lift

    STASH = []

    def step(x):
        STASH.append(x)
        return x * 2

    try:
        lift.checked(jax.jit)(step)(1.0)
    except lift.LeakError as e:
        print(e)
    ```

    ```text
    1 tracer escaped the transform that created it:
      STASH[0]: float32[] from jit(step), in global 'STASH' used by step (...) — return the value from the transformed function instead of storing it in STASH
    Docs: python -m lift explain leak-report
    ```
    """

    _check_transform(transform)

    @functools.wraps(transform)
    def apply(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        if not callable(fn):  # `checked(jax.grad(f))(x)`: given what it made
            raise _called_with_a_value(transform, fn)
        transformed = transform(_tracing(fn), *args, **kwargs)

        checks = _compat.jax_checks_leaks
        here = _compat.CHECKED_HERE

        def call(*a: Any, **k: Any) -> Any:
            __tracebackhide__ = True
            outer = getattr(_calls, "pending", None)
            pending: list[weakref.WeakSet[Any]] = []
            _calls.pending = pending
            # The plugin's verdict at JAX's checks stands aside: this call
            # reports what its trace leaves.
            was, here.on = here.on, True
            try:
                if checks():
                    # JAX's checker runs only when its leak checking is on; the
                    # full traceback then tells its report from the user's error.
                    out = _call_under_jax_checks(transformed, fn, pending, a, k)
                else:
                    out = transformed(*a, **k)
            finally:
                _calls.pending = outer
                here.on = was
            if not pending:
                return out  # served from the cache: no Python of fn ran
            roots: list[tuple[str, Any]] = [("output", out), (describe_short(fn), fn)]
            # The call's arguments, by `fn`'s parameter names (`self`, `state`)
            # or position (`args[2]`): a static one (`self` of a method jitted
            # with `static_argnums=0`) is the caller's object, where `fn` may
            # store.
            roots.extend((param_name(fn, i), value) for i, value in enumerate(a))
            roots.extend(k.items())
            unopened: list[Unopened] = []
            leaks, _ = scan_confirmed(
                lambda: [*roots, *lifted_roots(itertools.chain(*pending))], unopened
            )
            if leaks:
                raise LeakError(format_leaks(leaks, unopened), anchor="leak-report")
            return out

        # A plain function (a proxy object's call costs more than the check on
        # a cached call) that reads as the transformed function: its name,
        # docstring and `__wrapped__`, its `.lower`, `.trace`, `._cache_size()`
        # (reached through), and it binds as a method.
        functools.update_wrapper(call, transformed)
        _reach_through(call, transformed)
        setattr(call, _MADE, _FUNCTION)
        return call

    setattr(apply, _MADE, _TRANSFORM)
    return cast(_T, apply)


# What `checked` made, marked on it: a checked transform, or a function it
# checks (a plain function, whose `lower` and others are its own attributes).
_MADE = "_lift_checked"
_TRANSFORM = "transform"
_FUNCTION = "function"


def _check_transform(transform: Any) -> None:
    """Refuse what is not a transform: a function already compiled
    (`jax.jit(f)`, also inside `functools.partial`), or one `checked` made."""
    inner = transform
    while isinstance(inner, functools.partial):
        inner = cast("functools.partial[Any]", inner).func
    try:
        # A plain function's own mark (a `jax.jit` of one copies its `__dict__`).
        made = vars(inner).get(_MADE) if type(inner) is types.FunctionType else None
        compiled = made is None and hasattr(inner, "lower")
    except Exception:  # an object whose attributes fail: not ours to judge
        return
    if made is not None:
        raise _checked_twice(inner, made)
    if compiled:  # `checked(jax.jit(f))`: f is compiled
        raise _transformed(inner)


def _call_under_jax_checks(
    transformed: Callable[..., Any],
    fn: Callable[..., Any],
    pending: list[weakref.WeakSet[Any]],
    a: Any,
    k: Any,
) -> Any:
    __tracebackhide__ = True
    mode = _compat.filtering_mode()
    try:
        with _compat.full_tracebacks(), _compat.snapshots_are_not_leaks():
            return transformed(*a, **k)
    except Exception as exc:
        if not pending:
            raise
        lifted = lifted_roots(itertools.chain(*pending))
        leak_error(exc, [(describe_short(fn), fn)], lifted, mode)
        raise


def _reach_through(proxy: Callable[..., Any], transformed: Any) -> None:
    """Give `proxy` the public and `_`-prefixed attributes of `transformed`
    that a function does not have (`lower`, `trace`, `_cache_size`, ...)."""
    for name in dir(transformed):
        if not name.startswith("__") and not hasattr(proxy, name):
            with contextlib.suppress(Exception):  # one that fails to read or set
                setattr(proxy, name, getattr(transformed, name))


def _called_with_a_value(transform: Any, value: Any) -> LiftError:
    """The error for a checked transform called with a value: `transform` was a
    function already transformed (`jax.grad(f)`), not a transform."""
    inner = getattr(transform, "__wrapped__", None)
    name = _name(inner)
    what = describe(inner) if inner is not None else repr(transform)
    return LiftError(
        f"lift.checked(...) was given a function already transformed ({what}) "
        f"and then called with {type(value).__name__} {value!r:.40}: "
        "lift.checked takes the transform itself (jax.grad, jax.vmap, ...) and "
        f"then the function.\nFix: `lift.checked(jax.grad)({name})`.",
        anchor="checked-got-a-function",
    )


def _transformed(fn: Any) -> LiftError:
    """The error for `lift.checked` given a function already transformed."""
    inner = getattr(fn, "__wrapped__", fn)
    if type(inner) is types.FunctionType and _MADE in vars(inner):
        inner = _traced_function(inner) or inner  # `jax.jit(checked(jax.jit)(f))`
    name = _name(inner)
    jit = "lift.jit" if type(fn).__module__.startswith("lift") else "jax.jit"
    return LiftError(
        f"lift.checked() got {jit}({name}) ({describe(inner)}), a function already "
        "transformed: lift.checked wraps the transform itself, so that it checks "
        f"each trace the transform runs.\nFix: `lift.checked({jit})({name})`.",
        anchor="checked-got-a-function",
    )


def _checked_twice(made: Any, kind: str) -> LiftError:
    """The error for `lift.checked` given what `lift.checked` made."""
    if kind == _TRANSFORM:
        inner = getattr(made, "__wrapped__", None)
        name = getattr(inner, "__qualname__", None) or "transform"
        return LiftError(
            f"lift.checked() got lift.checked({name}), a transform already "
            "checked: it checks each trace it runs as it is.\nFix: check the "
            f"transform once: `lift.checked({name})(fn)`.",
            anchor="checked-got-a-function",
        )
    fn = _traced_function(made)
    name = _name(fn)
    return LiftError(
        f"lift.checked() got a function lift.checked already made "
        f"({describe(fn) if fn is not None else repr(made)}), a function "
        "already transformed and checked: lift.checked wraps the transform "
        f"itself.\nFix: call it as it is (it is checked), or make it once: "
        f"`lift.checked(jax.jit)({name})`.",
        anchor="checked-got-a-function",
    )


def _name(fn: Any) -> str:
    """`fn`'s name as code would call it, or `f`."""
    name = getattr(fn, "__name__", None)
    return name if isinstance(name, str) and name.isidentifier() else "f"


def _traced_function(made: Any) -> Any:
    """The user's function inside a function `checked` made, if reachable."""
    try:
        fn = inspect.unwrap(made)
    except ValueError:  # a cycle of `__wrapped__`
        return None
    return None if fn is made else fn


# The calls of checked functions running in this thread, innermost last: a trace
# reports to the innermost one. Module-level, so that the traced wrapper captures
# nothing but `fn` (`lift.jit` then shares one program across closures).
_calls = threading.local()


def _tracing(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """`fn`, noting each run (a trace) and what it lifts in the current call."""

    @functools.wraps(fn)
    def traced(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        pending: list[weakref.WeakSet[Any]] | None = getattr(_calls, "pending", None)
        with recording() as bucket:
            if pending is not None:
                pending.append(bucket)
            return fn(*args, **kwargs)

    return traced
