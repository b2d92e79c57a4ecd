"""`lift.jit`: `jax.jit` whose compiled programs are keyed on code, not on identity.

`jax.jit(fn)` keys its cache on the function object, so a closure made anew (one
per learning rate, one per call of `make_step(lr)`) compiles anew, with its
captures baked in as constants. `lift.jit` instead passes the function itself, as
a [`lift.Lifted`][] pytree, as the first argument of one jitted trampoline per
code object: the `Lifted`'s treedef (code and static captures) keys the program,
and its leaves (dynamic captures) are parameters of it.

Captures are read when the function is called, as Python reads them. Lifting on
every call would cost tens of microseconds, so each `lift.jit` function keeps the
cells of the graph it last lifted, with what they held, and lifts again only when
one of them holds another object (`is`, not `==`). While they hold the same, a
call passes the function it lifted last to the shared program.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any, Final, TypeVar, cast, overload

from typing_extensions import ParamSpec

from .._base.errors import LiftError, static_str
from .._capture.refusals import reject
from .._compat import entry_point
from .function import JitFunction
from .programs import options_key, program

__all__ = ["jit"]

_P = ParamSpec("_P")
_R = TypeVar("_R")


_LIFT_OPTIONS: Final = ("static", "dynamic")


@overload
def jit(fn: Callable[_P, _R], /, **jit_kwargs: Any) -> JitFunction[_P, _R]: ...
@overload
def jit(
    fn: None = None, /, **jit_kwargs: Any
) -> Callable[[Callable[_P, _R]], JitFunction[_P, _R]]: ...
@entry_point
def jit(fn: Callable[_P, _R] | None = None, /, **jit_kwargs: Any) -> Any:
    """`jax.jit` for closures: one compiled program per code, not per function object.

    The function is lifted (see [`lift.lift`][]) and passed to a program shared by
    every function with the same code and static captures; its dynamic captures
    (arrays, Python floats, ...) are parameters of that program. So closures made
    anew for each hyperparameter compile once, and their programs lower to the
    same text, which JAX's persistent compilation cache serves across processes.

    Captures are read when the function is called, as Python reads them: a
    captured variable bound or rebound after decoration is seen at the next call
    (a dynamic one without retracing), and so are defaults, keyword-only
    defaults and function attributes changed in place, and a change of
    `jax_enable_x64` or of the default device; so are a function's `__code__`
    replaced (as IPython's autoreload does) and a captured `functools.partial`'s
    keywords changed in place. Changes inside a captured container or object
    are not seen by a call that does not trace: `config['lr'] = 0.5` on a
    captured dict, an optimizer updating a captured `nnx` model in place, a
    list mutated in place (seen when the program traces, as the list is the
    user's own). Seeing them would walk every captured object on every call;
    such a call serves what was lifted last, and `lift.verifying()` reports
    it. `jax.jit` sees neither kind of change. Rebind the variable (`config =
    {**config, 'lr': 0.5}`) to have it lifted again, or pass the object as an
    argument (a model to `nnx.jit`, or to the `lift.jit` function).

    ```python
    import jax.numpy as jnp
    import lift

    traces = 0

    def make_step(lr):
        @lift.jit
        def step(w, g):
            global traces
            traces += 1
            return w - lr * g
        return step

    w = jnp.ones(3)
    for lr in (0.1, 0.01, 0.001):
        w = make_step(lr)(w, jnp.ones(3))
    assert traces == 1  # one program for every learning rate
    ```

    Use it as `@lift.jit`, `@lift.jit(static_argnames=("n",))` or
    `lift.jit(fn, ...)`, on functions, bound methods, `functools.partial`s, and
    on methods of pytree classes (an `equinox.Module`, a registered dataclass),
    where `self` is the first argument.

    **Arguments:**

    - `fn`: the function to compile.
    - `**jit_kwargs`: `jax.jit`'s options (`static_argnums`, `static_argnames`,
      `donate_argnums`, `donate_argnames`, `in_shardings`, `out_shardings`,
      `keep_unused`, ...), with argument numbers and names relative to `fn`'s own
      parameters; and `lift`'s `static=`/`dynamic=` for what `fn` captures.

    **Returns:** a callable with `fn`'s name, docstring and signature, and
    `.lower(...)` and `.trace(...)` as a `jax.jit` function has: their stages
    take and describe `fn`'s own arguments (the captures bound to what they hold
    then), and `jax.export.export` exports `fn` with its captures as constants.

    **Raises:** `lift.LiftError` when an option names no parameter of `fn`, or
    marks one both static and donated.
    """
    lift_options = {k: jit_kwargs.pop(k) for k in _LIFT_OPTIONS if k in jit_kwargs}
    for k, names in lift_options.items():
        # Names given as a list or set: a tuple, so that a caller's program,
        # keyed on its helpers' options, compares them by value.
        if isinstance(names, list):
            lift_options[k] = tuple(cast("list[Any]", names))
        elif isinstance(names, set | frozenset):
            lift_options[k] = tuple(sorted(cast("set[Any]", names), key=repr))
    key = options_key(jit_kwargs)

    @entry_point
    def decorator(fn: Callable[_P, _R]) -> JitFunction[_P, _R]:
        return _decorate(fn, jit_kwargs, key, lift_options)

    if fn is None:
        return decorator
    return decorator(fn)


def _decorate(
    fn: Callable[_P, _R],
    jit_kwargs: dict[str, Any],
    options_key: Any,
    lift_options: dict[str, Any],
) -> JitFunction[_P, _R]:
    if issubclass(type(fn), JitFunction):
        fn = cast("JitFunction[_P, _R]", fn).__wrapped__
    elif issubclass(type(fn), (staticmethod, classmethod)):
        # `@lift.jit` above `@staticmethod`: said where the class is written,
        # not at its first call (a staticmethod is callable since Python 3.10).
        raise reject(fn, "lift.jit")
    elif type(fn) is not types.FunctionType and not callable(fn):
        raise LiftError(
            f"lift.jit() got {type(fn).__qualname__} {static_str(fn, 60)}, which is not "
            "callable.\nFix: decorate a function: `@lift.jit` above its `def`.",
            anchor="jit-not-callable",
        )
    return JitFunction(fn, program(fn, jit_kwargs, options_key), lift_options)
