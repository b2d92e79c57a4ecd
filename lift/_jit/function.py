"""`lift.jit` and the function it returns (`JitFunction`): calls, stages, pytree.

`jax.jit(fn)` keys its cache on the function object. A closure made anew
compiles anew, its captures baked in as constants. `lift.jit` passes the
function itself, as a [`lift.Lifted`][], to one jitted trampoline per code
object (`lift._jit.programs`). The `Lifted`'s treedef keys the program. Its
leaves are parameters.

Captures are read when the function is called, as Python reads them. Lifting
on every call would cost tens of microseconds. So a call reads what the
function captures now (`lift._jit.watch`). While that is what the last lift
read, it passes the last `Lifted` on. It lifts again only when a cell holds
another object (`is`, not `==`).

Read from an instance, the function is a method bound to it
(`BoundJitFunction`): the instance is its first argument. The function is
also a holder in the closure graph.
"""

from __future__ import annotations

import copy
import types
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final, Generic, Self, TypeVar, cast, overload

from typing_extensions import ParamSpec

from .._base.errors import LiftError, describe, static_str, under_lift_jit
from .._capture.refusals import reject
from .._compat import DEFAULT_DEVICE, X64, entry_point, hide_frames_of, user_frames
from .._holders import trees as jtu
from .._holders.closure import METHOD, Holder, register_holder
from .._holders.labels import ATTR, WRAPPED, Label
from .._lifted.lift import lift
from .._lifted.lifted import Lifted
from .aot import Lowered, Traced
from .programs import MISSING, Program, program
from .verify import STATE as _VERIFY
from .watch import STALE, Fast, check_cached, current, holds_tracer, walk_read, watch

# It calls the user's function inside a trace.
hide_frames_of(__file__)

_P = ParamSpec("_P")
_R = TypeVar("_R")


class JitFunction(Generic[_P, _R]):
    """A function compiled by [`lift.jit`][]: call it, `.lower(...)` or `.trace(...)`.

    Stored on a class, it binds as a method: `self` is its first argument.
    """

    __slots__ = ("__dict__", "__weakref__", "_fast", "_fn", "_lift_options", "program")

    def __init__(
        self, fn: Callable[_P, _R], program: Program, lift_options: dict[str, Any]
    ) -> None:
        self._setup(fn, program, lift_options)
        found = {attr: getattr(fn, attr, MISSING) for attr in _FROM_FN}
        self.__dict__.update({k: v for k, v in found.items() if v is not MISSING})

    def _setup(self, fn: Any, program: Program, lift_options: dict[str, Any]) -> None:
        self._fn = fn
        self.program = program
        self._lift_options = lift_options
        # What a call reads, the last lift included.
        self._fast: Fast = STALE

    @property
    def __wrapped__(self) -> Callable[_P, _R]:
        """The function as it was decorated."""
        return self._fn

    def _lifted(self) -> Any:
        """The function as a pytree, lifted again if a capture was rebound.

        What a call reads is kept for the next calls (`Fast`). A function that
        holds a tracer is lifted afresh on each call."""
        fast = self._fast
        if current(fast):
            if _VERIFY.on:
                check_cached(self._fn, self._lift, fast)
            return fast.lifted
        # Read before the lift: a change meanwhile makes the state stale.
        context = (X64.value, DEFAULT_DEVICE.value)
        lifted = self._lift()
        if holds_tracer(lifted):
            # A captured tracer lives as long as its trace: kept here, it would
            # leak.
            self._fast = STALE
            return lifted
        # What the walk read, as it read it (`Walk.read`): a capture another
        # thread rebinds during the lift differs from it at the next call.
        read = [] if isinstance(self._fn, Lifted) else walk_read(lifted)
        fast = self._fast = watch(lifted, read, context)
        return fast.lifted

    def _lift(self) -> Any:
        try:
            return lift(self._fn, **self._lift_options)
        except LiftError as err:
            better = under_lift_jit(err)
            if better is err:
                raise
            try:
                raise better from None
            finally:
                del better  # not kept by this frame (its traceback holds it)

    def __call__(self, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:  # the outer `try` leaves lift's frames out of the traceback
            first = self._lifted()
            try:
                return self.program.for_nargs(len(args))(first, *args, **kwargs)
            except (TypeError, ValueError) as err:
                if isinstance(err, LiftError) and err.static_names is not None:
                    raise under_lift_jit(err) from None
                better = self.program.explain(self._fn, err, args, kwargs)
                if better is None:
                    raise
                try:
                    raise better from err
                finally:
                    del better  # not kept by this frame (its traceback holds it)
        except Exception as err:
            user_frames(err)
            raise

    @entry_point
    def lower(self, *args: _P.args, **kwargs: _P.kwargs) -> Lowered:
        """Lower for the given arguments, as `jax.jit(fn).lower(...)` does.

        The result describes `fn`'s own arguments. Its `compile()` is called
        with them. The captures are bound to the values they hold now.
        """
        return self.trace(*args, **kwargs).lower()

    @entry_point
    def trace(self, *args: _P.args, **kwargs: _P.kwargs) -> Traced:
        """Trace for the given arguments, as `jax.jit(fn).trace(...)` does.

        `jax.export.export(lift.jit(fn))` goes through here. It exports `fn`
        with its captures as constants. The export takes `fn`'s arguments.
        """
        return self._trace((), args, kwargs)

    def _trace(
        self, bound: tuple[Any, ...], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Traced:
        lifted = self._lifted()
        try:
            inner = self.program.for_nargs(len(bound) + len(args)).trace(
                lifted, *bound, *args, **kwargs
            )
        except LiftError as err:
            raise under_lift_jit(err) from None
        program = self.program

        def alone() -> Any:
            return program.bake(lifted, *bound).trace(*args, **kwargs)

        return Traced(inner, (lifted, *bound), alone)

    @overload
    def __get__(self, instance: None, owner: type | None = None) -> Self: ...
    @overload
    def __get__(self, instance: object, owner: type | None = None) -> Any: ...
    def __get__(self, instance: object, owner: type | None = None) -> Any:
        return self if instance is None else BoundJitFunction(self, instance)

    # Copies share the program (compiled code, one per code object anyway); a
    # shallow copy shares the function and what a call reads of it (`copy.copy`
    # copies every slot), a deep copy watches its own copy afresh.
    def __deepcopy__(self, memo: dict[int, Any]) -> Self:
        new = object.__new__(type(self))
        fn = copy.deepcopy(self._fn, memo)
        new._setup(fn, self.program, copy.deepcopy(self._lift_options, memo))
        new.__dict__.update(copy.deepcopy(self.__dict__, memo))
        return new

    def __repr__(self) -> str:
        return f"<lift.jit {describe(self._fn)}>"

    def __getattr__(self, name: str) -> Any:
        # A `JitFunction` rebuilt from its leaves has the `Lifted` as `fn`, and
        # reads the function's name and other attributes there.
        if name.startswith("__") and name.endswith("__") and name not in _FN_ATTRS:
            raise AttributeError(name)
        return getattr(self._fn, name)


_FN_ATTRS: Final = frozenset({"__name__", "__qualname__", "__annotations__"})


class BoundJitFunction:
    # A `lift.jit` method bound to an instance, which is its first argument. (No
    # docstring: `__doc__` is the method's.)

    __slots__ = ("__func__", "__self__")

    def __init__(self, func: Any, instance: object) -> None:
        self.__func__ = func
        self.__self__ = instance

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self.__func__(self.__self__, *args, **kwargs)
        except Exception as err:
            user_frames(err)  # this frame's too
            raise

    # Ahead of time, the instance is bound as it is to the method: what these
    # return take and describe the method's other arguments.
    lower = JitFunction.lower  # pyright: ignore[reportUnknownVariableType, reportUnknownMemberType]

    @entry_point
    def trace(self, *args: Any, **kwargs: Any) -> Traced:
        return self.__func__._trace((self.__self__,), args, kwargs)  # pyright: ignore[reportPrivateUsage]

    @property
    def __wrapped__(self) -> Any:
        return types.MethodType(self.__func__.__wrapped__, self.__self__)  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]

    @property
    def __doc__(self) -> str | None:  # pyright: ignore[reportIncompatibleVariableOverride]
        return self.__func__.__doc__

    @property
    def __module__(self) -> str:  # pyright: ignore[reportIncompatibleVariableOverride]
        return self.__func__.__module__

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__func__, name)

    def __repr__(self) -> str:
        fn = describe(self.__func__.__wrapped__)
        return f"<bound lift.jit {fn} of {self.__self__!r:.60}>"


# A `lift.jit` function is a pytree whose one child is the function lifted, and
# whose aux data is the shared program: captured by another lifted function (a
# step calling a jitted helper), its dynamic captures are leaves of that one.
def _flatten_with_keys(
    x: JitFunction[Any, Any],
) -> tuple[tuple[tuple[Any, Any]], Program]:
    lifted = x._lifted()  # pyright: ignore[reportPrivateUsage]
    return ((jtu.GetAttrKey("__wrapped__"), lifted),), x.program


def _unflatten(program: Program, children: Iterable[Any]) -> JitFunction[Any, Any]:
    # JAX may unflatten with placeholders for leaves: store, never inspect.
    (lifted,) = children
    self = cast("JitFunction[Any, Any]", object.__new__(JitFunction))
    self._setup(lifted, program, {})  # pyright: ignore[reportPrivateUsage]
    return self


jtu.register_pytree_with_keys(JitFunction, _flatten_with_keys, _unflatten)


# Captured by a function, a `lift.jit` function is a node of the graph, like a
# partial: its function's captures are watched with the rest, and a `lift.jit`
# closure that calls itself is a cycle the graph closes.
def _holder_static(x: JitFunction[Any, Any]) -> Any:
    options = x._lift_options  # pyright: ignore[reportPrivateUsage]
    return (x.program, tuple(sorted(options.items())))


def _holder_parts(x: JitFunction[Any, Any]) -> Iterator[tuple[Label, Any]]:
    """Its function, then the attributes set on it (`helper.scale = 2.0`).

    The code calling it may read those."""
    yield Label.of(WRAPPED), x._fn  # pyright: ignore[reportPrivateUsage]
    for name, value in list(x.__dict__.items()):
        if name not in _FROM_FN:
            yield Label.of(ATTR, name), value


# What `JitFunction.__init__` copies from the function: its, not attributes.
_FROM_FN: Final = frozenset({"__module__", "__name__", "__qualname__", "__doc__"})


def _holder_rebuild(
    static: Any, parts: list[tuple[Label, Any]]
) -> JitFunction[Any, Any]:
    program, options = static
    rebuilt = JitFunction(parts[0][1], program, dict(options))
    rebuilt.__dict__.update((cast(str, label.key), value) for label, value in parts[1:])
    return rebuilt


register_holder(
    Holder(JitFunction, "lift.jit", _holder_static, _holder_parts, _holder_rebuild)
)


# A bound `lift.jit` method, read as a bound method is (its `__func__` and
# `__self__`, each followed: the instance's arrays are leaves, a capture of its
# method is watched) and rebuilt as one of its own kind.
def _bound_rebuild(static: None, parts: list[tuple[Label, Any]]) -> BoundJitFunction:
    return BoundJitFunction(parts[0][1], parts[1][1])


register_holder(
    Holder(
        BoundJitFunction,
        "bound lift.jit method",
        METHOD.static,
        METHOD.parts,
        _bound_rebuild,
    )
)


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

    @entry_point
    def decorator(fn: Callable[_P, _R]) -> JitFunction[_P, _R]:
        if issubclass(type(fn), JitFunction):
            fn = cast("JitFunction[_P, _R]", fn).__wrapped__
        elif issubclass(type(fn), (staticmethod, classmethod)):
            # `@lift.jit` above `@staticmethod`: said where the class is written,
            # not at its first call (a staticmethod is callable since Python 3.10).
            raise reject(fn, "lift.jit")
        elif type(fn) is not types.FunctionType and not callable(fn):
            raise LiftError(
                f"lift.jit() got {type(fn).__qualname__} {static_str(fn, 60)}, which "
                "is not callable.\nFix: decorate a function: `@lift.jit` above its "
                "`def`.",
                anchor="jit-not-callable",
            )
        return JitFunction(fn, program(fn, jit_kwargs), lift_options)

    return decorator if fn is None else decorator(fn)
