"""`lift.jit`: `jax.jit` whose compiled programs are keyed on code, not on identity.

`jax.jit(fn)` keys its cache on the function object. A closure made anew
compiles anew, its captures baked in as constants. `lift.jit` passes the
function itself, as a [`lift.Lifted`][], to one jitted trampoline per code
object. The `Lifted`'s treedef keys the program. Its leaves are parameters.

Captures are read when the function is called, as Python reads them. Lifting
on every call would cost tens of microseconds. So a `lift.jit` function keeps
the cells it last lifted, with what they held. It lifts again only when one
holds another object (`is`, not `==`). Else it passes the last `Lifted`.
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

    The function is lifted (see [`lift.lift`][]). It goes to a program shared
    by every function with the same code and static captures. Its dynamic
    captures (arrays, Python floats) are parameters of that program. So
    closures made anew per hyperparameter compile once. Their programs lower
    to the same text, which JAX's persistent cache serves across processes.

    Captures are read when the function is called, as Python reads them. A
    variable rebound after decoration is seen at the next call. A dynamic one
    is seen without retracing. So are defaults and function attributes changed
    in place. So is a change of `jax_enable_x64` or of the default device. So
    is a new `__code__`, as IPython's autoreload sets. So are a captured
    `functools.partial`'s keywords changed in place.

    A call that does not trace misses changes inside a captured object. Such
    a change is `config['lr'] = 0.5` on a captured dict. It is an optimizer
    updating a captured `nnx` model in place. Seeing them would walk every
    captured object on every call. Such a call serves what was lifted last;
    `lift.verifying()` reports it. `jax.jit` sees neither kind of change.
    Rebind the variable (`config = {**config, 'lr': 0.5}`) to lift it again.
    Or pass the object as an argument.

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
    `lift.jit(fn, ...)`. It takes functions, bound methods and
    `functools.partial`s. It takes methods of pytree classes, such as an
    `equinox.Module`; `self` is then the first argument.

    **Arguments:**

    - `fn`: the function to compile.
    - `**jit_kwargs`: `jax.jit`'s options (`static_argnums`, `donate_argnames`,
      `in_shardings`, ...). Numbers and names are of `fn`'s own parameters.
      Also `lift`'s `static=` and `dynamic=`, for what `fn` captures.

    **Returns:** a callable with `fn`'s name, docstring and signature. It has
    `.lower(...)` and `.trace(...)`, as a `jax.jit` function does. Their stages
    take and describe `fn`'s own arguments. `jax.export.export` exports `fn`
    with its captures as constants.

    **Raises:** `lift.LiftError` when an option names no parameter of `fn`. So
    does one marked both static and donated.
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
