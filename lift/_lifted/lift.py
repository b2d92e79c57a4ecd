"""`lift`, `unlift`, `is_lifted`: the functions users call."""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar, cast, overload

from typing_extensions import ParamSpec

from .._base.errors import LiftError
from .._capture.capture import check_names, check_options
from .._capture.refusals import reject
from .._compat import entry_point, live_traces
from .._holders import trees as jtu
from .._holders.trees import (
    ITERATORS,
    MAX_CONTAINER_DEPTH,
    flatten_checked,
    irregular,
    is_function_like,
    ordered,
)
from .._leaks.find import find_leaks
from .._rule.hidden import aux_tracer
from .._rule.static import static_key, taken_apart
from .._skeleton.skeleton import skeleton_of
from . import multisteps as _objects  # noqa: F401  # pyright: ignore[reportUnusedImport]  (registers optax.MultiSteps)
from .lifted import Lifted, caller_name, construct, rebuilt

_P = ParamSpec("_P")
_T = TypeVar("_T")
_R_co = TypeVar("_R_co", covariant=True)


class _Function(Protocol[_P, _R_co]):
    """A function or bound method as a type checker sees one: it has code.

    `lift` gives a `Lifted` of it that keeps its signature. A callable object
    or a `Lifted` falls through to the pytree overload, as at run time."""

    __code__: types.CodeType

    def __call__(self, *args: _P.args, **kwargs: _P.kwargs) -> _R_co: ...


@overload
def lift(
    obj: None = None,
    /,
    *,
    static: str | Iterable[str] = (),
    dynamic: str | tuple[str, ...] | Callable[[Any], bool] | None = None,
) -> Callable[[Callable[_P, _T]], Lifted[_P, _T]]: ...
@overload
def lift(
    obj: _Function[_P, _T],
    /,
    *,
    static: str | Iterable[str] = (),
    dynamic: str | tuple[str, ...] | Callable[[Any], bool] | None = None,
) -> Lifted[_P, _T]: ...
@overload
def lift(
    obj: functools.partial[_T],
    /,
    *,
    static: str | Iterable[str] = (),
    dynamic: str | tuple[str, ...] | Callable[[Any], bool] | None = None,
) -> Lifted[..., _T]: ...
@overload
def lift(
    obj: _T,
    /,
    *,
    static: str | Iterable[str] = (),
    dynamic: str | tuple[str, ...] | Callable[[Any], bool] | None = None,
) -> _T: ...
@entry_point
def lift(
    obj: Any = None,
    /,
    *,
    static: str | Iterable[str] = (),
    dynamic: str | tuple[str, ...] | Callable[[Any], bool] | None = None,
) -> Any:
    """Make a function, or every function inside a pytree, into a [`lift.Lifted`][].

    Use it as `@lift`, `@lift(static=("n",))`, or `lift(obj)`.

    - A function, bound method or `functools.partial` gives a `Lifted`. Any
      function will do: `def`, `lambda`, nested, recursive, generator, async.
      An existing `Lifted` is returned as it is.
    - Any other pytree gives the same structure, its functions lifted. Tuples,
      NamedTuples (`optax.GradientTransformation`), dicts, lists and
      registered nodes all work. Callable pytrees (an `equinox.Module`) are
      kept, their function leaves lifted.

    ```python
    import jax
    import jax.numpy as jnp
    import lift

    def make_scale(lr):
        return lift.lift(lambda g: -lr * g)

    traces = 0

    @jax.jit
    def apply(scale, g):
        global traces
        traces += 1
        return scale(g)

    for lr in (0.1, 0.01, 0.001):
        apply(make_scale(lr), jnp.ones(3))
    assert traces == 1  # one program for every learning rate
    ```

    Only some floats dynamic, by name (the others stay constants, as in plain
    optax):

    ```python
    import functools

    import jax
    import optax
    import lift

    make = lift.lift(
        functools.partial(optax.adamw, learning_rate=0.1), dynamic="learning_rate"
    )
    assert len(jax.tree.leaves(make)) == 1  # not adamw's b1, b2, eps, weight_decay
    ```

    **Arguments:**

    - `obj`: the function or pytree to lift.
    - `static`: names of captured variables to keep static whatever their
      type. Free variables, defaults, partial keywords and function
      attributes count, at any depth.
    - `dynamic`: names of captured variables (found as `static=` finds
      them), or a predicate on a captured leaf. Named captures, and
      everything inside them, are dynamic. Arrays, tracers and NumPy values
      stay dynamic wherever they are. Every other Python `float` and
      `complex` is static, a constant as in the plain function. So the
      result is bitwise the plain function's, the named values inputs of one
      program: `lift.lift(opt, dynamic="learning_rate")`. A name no capture
      has is a `lift.LiftError` listing those there are. A predicate
      replaces the default rule: arrays, tracers, NumPy values, Python
      `float` and `complex` are dynamic.

    **Returns:** a `Lifted`, or `obj`'s structure with its functions lifted.

    **Raises:** `lift.LiftError` for a builtin, a class, a bare value, or a
    callable that is not a pytree. Also for captures that cannot be leaves.
    """
    if obj is None:

        @entry_point
        def decorator(fn: Any) -> Any:
            return lift(fn, static=static, dynamic=dynamic)

        return decorator
    names, rule = check_options(static, dynamic, "lift")
    options = bool(names) or rule is not None
    kind: type[Any] = type(obj)  # pyright: ignore[reportUnknownVariableType]
    if issubclass(kind, Lifted):
        if not options:
            return obj
        # Not `kind(obj, ...)`: a subclass's own `__init__` may take `fn` alone.
        sub = cast("type[Lifted[Any, Any]]", kind)
        return construct(sub, obj, *check_options(static, dynamic, caller_name(sub)))
    if is_function_like(obj):
        return Lifted(obj, static=static, dynamic=dynamic)
    if (functions := taken_apart(obj)) is not None:  # optax.MultiSteps
        obj = functions
    if issubclass(kind, ITERATORS):
        raise reject(obj, "lift")
    flat = flatten_checked(obj, _is_liftable)
    if flat is None:
        raise _unflattenable(obj, "lift")
    leaves, treedef = flat
    if jtu.treedef_is_leaf(treedef) and treedef.num_leaves == 1:
        raise reject(obj, "lift")
    _check_static_data(obj, treedef)
    seen: set[str] = set()
    out: list[Any] = []
    made: list[Lifted[Any, Any]] = []
    for leaf in leaves:
        new: Any = leaf
        cls: type[Lifted[Any, Any]] | None = None
        if isinstance(leaf, Lifted) and options:
            cls = cast("type[Lifted[Any, Any]]", type(leaf))  # pyright: ignore[reportUnknownArgumentType]
        elif is_function_like(leaf):
            cls = Lifted
        if cls is not None:
            # `static=` names may be captured by any of the functions.
            new = construct(cls, cast(Any, leaf), names, rule, check=False)
            seen.update(skeleton_of(new).names)
            made.append(new)
        out.append(new)
    check_names(names, rule, frozenset(seen), obj, "lift")
    if not made:  # nothing to lift: the user's own object (an `nnx.Module`)
        return obj
    if irregular(obj):  # dicts in their own order, as the original had them
        rebuild, perm, _ = ordered(obj, treedef, static_key)
        return jtu.unflatten(rebuild, [out[i] for i in perm])
    return jtu.unflatten(treedef, out)


def _check_static_data(obj: Any, treedef: jtu.TreeDef) -> None:
    """Refuse `obj` when its treedef's static data holds an exited tracer.

    Static data is an equinox `static=True` field, a `Partial`'s function, a
    node's aux data. A closure capturing `obj` is refused alike. A tracer
    whose transform still runs is kept, as the pytree keeps it."""
    if aux_tracer(treedef) is None:  # the common case: one cached lookup
        return
    where = aux_tracer(treedef, live_traces())
    if where is None:
        return
    # The leak scan spells the path from `obj` and names who holds the tracer
    # (a `Partial`'s function it reads as `.func`, not as static data).
    found = find_leaks(obj)
    leaks = [leak for leak in found if "<static>" in leak.path] or found
    if leaks:
        leak = leaks[0]
        where = leak.path.removeprefix("roots[0]")
        if leak.function is not None:
            what = f"{leak.kind} {leak.variable!r}" if leak.variable else leak.kind
            where += f" ({what} of {leak.function}, {leak.filename}:{leak.lineno})"
    raise LiftError(
        f"lift() got a {type(obj).__name__} whose static data holds a tracer at "
        f"{where}, from a transform that has exited. A treedef's static data is "
        f"part of the compiled program's key, so the tracer would leak.\nFix: make "
        f"the traced value a child of the pytree (not a static field), or return "
        f"it from the transform instead of storing it.",
        anchor="tracer-in-static-pytree-data",
    )


def _is_liftable(x: Any) -> bool:
    return is_function_like(x) or issubclass(type(x), Lifted)  # pyright: ignore[reportUnknownArgumentType]


def is_lifted(x: Any) -> bool:
    """Whether `x` is a [`lift.Lifted`][] (of any subclass).

    ```python
    import lift

    assert lift.is_lifted(lift.lift(lambda x: x))
    assert not lift.is_lifted(lambda x: x)
    ```
    """
    return issubclass(type(x), Lifted)  # pyright: ignore[reportUnknownArgumentType]


def flatten_lifted(x: Any, caller: str) -> tuple[list[Any], jtu.TreeDef]:
    """`x` flattened down to its `Lifted` (and stateful iterators, left whole).

    Checked first: JAX's flattening with an `is_leaf` breaks on a cyclic or
    very deep container (jax 0.10.2).
    """
    flat = flatten_checked(x, stops_flattening)
    if flat is None:
        raise _unflattenable(x, caller)
    return flat


def _unflattenable(x: Any, caller: str) -> LiftError:
    return LiftError(
        f"{caller}() got a {type(x).__name__} that contains itself or nests more "
        f"than {MAX_CONTAINER_DEPTH} levels deep, which JAX's pytree flattening "
        f"cannot take.\nFix: pass the functions inside it one by one.",
        anchor="container-cycle",
    )


def stops_flattening(x: Any) -> bool:
    return issubclass(type(x), (Lifted, *ITERATORS))  # pyright: ignore[reportUnknownArgumentType]


def unlift(x: Any) -> Any:
    """Plain Python functions back from [`lift.Lifted`][]: for code that demands one.

    A `Lifted` gives a new function, its captures the current leaves. A
    pytree gives the same structure with every `Lifted` unlifted. Other values
    are returned as they are.

    ```python
    import types
    import jax.numpy as jnp
    import lift

    w = jnp.asarray(2.0)
    f = lift.unlift(lift.lift(lambda x: w * x))
    assert isinstance(f, types.FunctionType)
    assert f(3.0) == 6.0
    ```
    """
    if is_lifted(x):
        return rebuilt(x)
    leaves, treedef = flatten_lifted(x, "unlift")
    return jtu.unflatten(treedef, [rebuilt(x) if is_lifted(x) else x for x in leaves])
