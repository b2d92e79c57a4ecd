# pyright: reportPrivateUsage=false
"""`Lifted`: a Python function as a JAX pytree."""

from __future__ import annotations

import copy
import inspect
import sys
import types
import warnings
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Final, Generic, Self, cast

import jax
from typing_extensions import ParamSpec, TypeVar

from .. import _compat
from .._base import built as _registry
from .._base.errors import LiftAttributeError, missing_attribute
from .._capture.capture import NO_NAMES, capture, check_names, check_options
from .._capture.convert import convert
from .._capture.refusals import (
    explain_concretization,
    no_function,
    reject,
    static_argument,
)
from .._copies.calls import Build, call_pinning, call_watched, new_build
from .._copies.copies import never_changes
from .._holders.trees import is_function_like
from .._rule.floats import as_arrays
from .._rule.static import DynamicNames
from .._skeleton.paths import _NOT_FOUND, attribute_of, captures_of
from .._skeleton.rebuild import build, importable
from .._skeleton.repr import pformat, treescope_repr
from .._skeleton.skeleton import Skeleton, root_function, root_name
from . import state_dict as _state_dict
from .pytree import register

# It calls the user's function inside a trace.
_compat.hide_frames_of(__file__)

# Defaults: a subclass that names no parameters (`class Model(lift.Lifted)`) is
# `Lifted[..., Any]`, so its calls are `Any`, not unknown, and strict checkers
# accept it without type arguments.
_P = ParamSpec("_P", default=...)
_R = TypeVar("_R", covariant=True, default=Any)
_T = TypeVar("_T")


# -- the pytree ------------------------------------------------------------------


class Lifted(Generic[_P, _R]):
    """A Python function as a JAX pytree: its code is static, its captures are leaves.

    Build one with [`lift.lift`][], `Lifted(fn)`, or a subclass `Sub(fn)`. The
    function's cells, defaults, partial arguments and bound `self` are walked
    as pytrees, and so are those of every function they hold. Arrays, tracers,
    NumPy values and Python `float`/`complex` become leaves. Everything else
    is static, part of the treedef. Two `Lifted` with the same code and equal
    static captures have equal treedefs: `jax.jit` reuses its program.

    Calling a `Lifted` calls the function, rebuilt once around the current
    leaves. The function it was made from is never modified.

    Subclass it to add methods. A subclass is a pytree with no further
    registration; transforms return instances of it:

    ```python
    import jax
    import jax.numpy as jnp
    import lift

    class Density(lift.Lifted):
        def log_prob(self, x):
            return self(x)

    def make(mu):
        @Density
        def logp(x):
            return -0.5 * (x - mu) ** 2
        return logp

    d = jax.jit(lambda d: d)(make(jnp.asarray(1.0)))
    assert isinstance(d, Density)
    assert d.log_prob(1.0) == 0.0
    ```

    A subclass adds behaviour, not per-instance state. Setting an attribute
    on an instance raises `lift.LiftError`: a transform would drop it. Data of
    one instance is a capture of its function. A `Lifted` hashes by identity,
    like a function. As a static argument of `jax.jit`, each new one compiles
    anew, and lift warns: pass it as an ordinary argument.

    **Arguments:**

    - `fn`: a function, bound method, `functools.partial`, or `Lifted`.
    - `static`: names of captured variables to keep static whatever their
      type, at any depth.
    - `dynamic`: names of captured variables, the only dynamic ones besides
      arrays and tracers. Or a predicate replacing the default rule for what
      is a leaf. See [`lift.lift`][].
    """

    __slots__ = (
        "__dict__",
        "__weakref__",
        "_built",
        "_flat",
        "_leaves",
        "_original",
        "_read",
        "_skeleton",
    )

    # Set per instance (the function's), as `functools.wraps` would.
    __name__: str
    __qualname__: str  # pyright: ignore[reportIncompatibleVariableOverride]
    _skeleton: Skeleton
    _leaves: tuple[Any, ...]
    _flat: tuple[Any, ...] | None
    _built: Build | None  # at the first call
    _original: Any

    @_compat.entry_point
    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        if not args:  # `Sub(dynamic="a")(fn)`, as `lift.lift(dynamic="a")(fn)` is
            raise no_function(cls, kwargs, base=cls is Lifted)
        return super().__new__(cls)

    @_compat.entry_point
    def __init__(
        self,
        fn: Callable[_P, _R],
        /,
        *,
        static: str | Iterable[str] = (),
        dynamic: str | tuple[str, ...] | Callable[[Any], bool] | None = None,
    ) -> None:
        names, rule = check_options(static, dynamic, caller_name(type(self)))
        self._capture(fn, names, rule)
        check_names(names, rule, self._skeleton.names, fn, caller_name(type(self)))

    def _capture(
        self,
        fn: Callable[_P, _R],
        names: frozenset[str],
        dynamic: Callable[[Any], bool] | DynamicNames | None,
    ) -> None:
        """Lift `fn` into this instance (`static=` names are checked by the caller)."""
        if isinstance(fn, Lifted) and not names and dynamic is None:
            other = cast("Lifted[_P, _R]", fn)
            # Not `other._flat`: floats it converted are its own buffers (donating
            # this one must not delete them), converted anew here as they would
            # be had `other` never been called or flattened.
            self._setup(other._skeleton, other._leaves, None, other._original)
        else:
            if isinstance(fn, Lifted):
                fn = cast("Callable[_P, _R]", fn.__wrapped__)
            elif not is_function_like(fn):
                raise reject(fn, caller_name(type(self)))
            self._read: list[tuple[Any, Any]] = []  # for `lift.jit` (`Walk.read`)
            skeleton, leaves = capture(
                fn, static=names, dynamic=dynamic, read=self._read
            )
            self._setup(skeleton, tuple(leaves), None, fn)
        _registry.record(self)

    def _setup(
        self,
        skeleton: Skeleton,
        leaves: tuple[Any, ...],
        flat: tuple[Any, ...] | None,
        original: Any = None,
    ) -> None:
        self._skeleton = skeleton
        self._leaves = leaves
        self._flat = flat
        self._built = None
        self._original = original
        attrs = skeleton.attrs
        if attrs is None:
            root = root_function(skeleton)
            doc, module, _ = root.meta.value if root is not None else (None, None, None)
            attrs = skeleton.attrs = {
                "__name__": root_name(skeleton, "name"),
                "__qualname__": root_name(skeleton, "qualname"),
                "__doc__": doc,
                "__module__": module,
            }
        # Instance attributes: the class already has its own `__doc__`, `__module__`.
        self.__dict__.update(attrs)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__setattr__ is object.__setattr__:
            # A subclass's instances refuse attributes that a transform would
            # drop (the base class leaves `setattr` at C speed for lift's own).
            cls.__setattr__ = _set_attribute
        register(cls)
        _state_dict.register(cls)

    @classmethod
    @_compat.entry_point
    def closure_convert(
        cls, fn: Callable[..., Any], /, *example_args: Any, **example_kwargs: Any
    ) -> Self:
        """Trace `fn` on example arguments and lift every tracer and array it closed over.

        It serves captures `lift` cannot see as leaves: tracers inside objects
        that are not pytrees, behind attributes, in globals. It returns an
        instance of the class it is called on: `Sub.closure_convert(fn, x)`
        is a `Sub`.

        **Arguments:**

        - `fn`: the function to convert.
        - `*example_args`, `**example_kwargs`: arguments of the shapes and
          dtypes the result will be called with.

        **Returns:** a `Lifted` of this class. Its leaves are every closed-over
        tracer and array, of every dtype.

        ```python
        import jax
        import lift

        class Box:  # not a pytree: `lift` cannot see inside it
            def __init__(self, value):
                self.value = value

        @jax.jit
        def make(scale):
            box = Box(scale)
            return lift.closure_convert(lambda x: box.value * x, 1.0)

        assert make(3.0)(2.0) == 6.0  # the traced `scale` became a leaf
        ```
        """
        converted = convert(fn, example_args, example_kwargs)
        # Not `cls(converted)`: a subclass's own `__init__` may take other arguments.
        return cast("Self", construct(cls, converted, frozenset(), None))

    # -- calling ------------------------------------------------------------------

    def _arrays(self) -> tuple[Any, ...]:
        """The leaves, Python scalars converted once.

        Flattening gives them, and calls compute with them."""
        flat = self._flat
        if flat is None:
            if self._skeleton.live is not None:  # never flattened (`flatten`): not kept
                return as_arrays(self._leaves)
            flat = self._flat = as_arrays(self._leaves)
        return flat

    def _function(self) -> Callable[_P, _R]:
        """The function rebuilt around the leaves, at the first call.

        The calls after it share it."""
        return (self._built or self._build()).fn

    def _build(self) -> Build:
        """The build the calls share, made anew.

        Two threads making one at once each run their own. The last one kept
        is shared after."""
        built = self._built = new_build(self._skeleton, self._arrays(), shared=True)
        return built

    def __call__(self, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:  # the outer `try` leaves lift's frames out of the traceback
            built = self._built
            if built is None:
                built = self._build()
            if built.copies:
                return call_watched(self, built, args, kwargs)
            try:
                return call_pinning(self._skeleton, built.fn, args, kwargs)
            except Exception as err:
                self._explain(err)
                raise
        except Exception as err:
            _compat.user_frames(err)
            raise

    def _explain(self, err: Exception) -> None:
        """Raise the error naming the capture, from `err`.

        It does for JAX's concretization errors, and for those saying a value
        was needed concrete (`jnp.zeros((n,))` with a traced `n`). For any
        other it returns."""
        if not isinstance(err, _CONCRETIZATION) and not (
            isinstance(err, (TypeError, AttributeError))
            and _compat.asks_for_a_concrete_value(err)
        ):
            return
        better = explain_concretization(self, err)
        if better is None:
            return
        try:
            raise better from err
        finally:
            # Not kept by this frame, which its traceback holds: a cycle
            # that would keep this function (and its tracers) alive.
            del better

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        # Behave like a function when stored on a class: bind `self`.
        if instance is None:
            return self
        return types.MethodType(self, instance)

    def __hash__(self) -> int:
        # By identity, as a function's, for JAX's caches (`jax.jit(lifted)`). As
        # a static argument of `jax.jit`, each new `Lifted` compiles anew: say so
        # at each such compile (the same one passed again hits the cache).
        caller = sys._getframe(1)
        if _compat.hashed_as_jit_static(self, caller):
            warnings.warn(
                static_argument(self), stacklevel=_compat.user_stacklevel(caller)
            )
        return object.__hash__(self)

    # -- introspection ---------------------------------------------------------

    @property
    def __wrapped__(self) -> Callable[_P, _R]:
        """The function this was lifted from.

        After a transform it is rebuilt from the leaves: transforms never
        carry the original."""
        original = self._original
        return original if original is not None else self._function()

    @property
    def __signature__(self) -> inspect.Signature:
        return inspect.signature(self.__wrapped__)

    @property
    def captures(self) -> dict[str, Any]:
        """The root function's captured variables by name, with current leaves.

        They are its cells, defaults and keyword-only defaults. Captured
        functions come back as `Lifted`. So the key path `keystr` prints for a
        leaf can be followed by hand, as in
        `opt.update.captures['update_fns'][0].captures['tx'].update.captures['b1']`.
        A partial's `args`, `keywords` and `func` read the same way. So do a
        bound method's `__func__` and `__self__`.
        """
        return captures_of(self, _as_lifted)

    if not TYPE_CHECKING:  # typos in attribute names stay type errors

        def __getattr__(self, name: str) -> Any:
            # Only for attributes not found otherwise: the parts a key path names
            # (`.args[0]`, `.func`, ...), never lift's own state.
            if name.startswith("_") and name not in ("__func__", "__self__"):
                raise AttributeError(name)
            value = attribute_of(self, name, _as_lifted)
            if value is _NOT_FOUND:
                raise missing_attribute(self, name)  # `lift.lift(optax.adam).init`
            return value

    def __treescope_repr__(self, path: str | None, subtree_renderer: Any) -> Any:
        return treescope_repr(self, path, subtree_renderer)

    def __copy__(self) -> Self:
        new = object.__new__(type(self))
        # Its own float buffers, converted anew.
        new._setup(self._skeleton, self._leaves, None, self._original)
        return new

    def __deepcopy__(self, memo: dict[int, Any]) -> Self:
        # The skeleton is immutable static data (code, globals, statics): shared.
        new = object.__new__(type(self))
        leaves = copy.deepcopy(self._arrays(), memo)
        new._setup(self._skeleton, leaves, leaves)
        return new

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled as the function (a module-level one, or a partial of one), the
        # options it was lifted with, and the current leaves.
        names, dynamic = self._skeleton.options or (NO_NAMES, None)
        fn = (
            self._original
            if self._original is not None
            else importable(self._function())
        )
        return (_unpickle, (type(self), fn, names, dynamic, self._arrays()))

    def __repr__(self) -> str:
        return pformat(self)


_CONCRETIZATION: Final = (
    jax.errors.ConcretizationTypeError,
    jax.errors.TracerBoolConversionError,
    jax.errors.TracerIntegerConversionError,
    jax.errors.TracerArrayConversionError,
)


def caller_name(cls: type[Any]) -> str:
    """How `static=`/`dynamic=` messages name the call: `lift`, or the subclass."""
    return "lift" if cls is Lifted else cls.__name__


def construct(
    cls: type[Lifted[Any, Any]],
    fn: Callable[..., Any],
    names: frozenset[str],
    dynamic: Callable[[Any], bool] | DynamicNames | None,
    check: bool = True,
) -> Lifted[Any, Any]:
    """`fn` lifted into an instance of `cls`, whatever `cls.__init__` takes.

    A subclass's own `__init__` may take `fn` alone. Unpickling,
    `lift.lift(pytree)`, `Sub.closure_convert` and `Lifted.captures` make
    theirs here. `check`: whether names no capture has are refused.
    """
    self = object.__new__(cls)
    self._capture(fn, names, dynamic)
    if check:
        check_names(names, dynamic, self._skeleton.names, fn, caller_name(cls))
    return self


def _as_lifted(obj: Any, names: frozenset[str], dynamic: Any) -> Any:
    """`obj`, a function rebuilt for `captures`, lifted with these options."""
    return construct(Lifted, obj, names, dynamic, check=False)


def _unpickle(
    cls: type[Lifted[Any, Any]],
    fn: Callable[..., Any],
    names: frozenset[str],
    dynamic: Callable[[Any], bool] | DynamicNames | None,
    leaves: tuple[Any, ...],
) -> Lifted[Any, Any]:
    self = construct(cls, fn, names, dynamic)
    self._setup(self._skeleton, leaves, leaves, fn)
    return self


# lift's own per-instance state (slots), and `__class__`.
_OWN_ATTRIBUTES: Final = frozenset(Lifted.__slots__) | {"__class__"}


def _set_attribute(self: Lifted[Any, Any], name: str, value: Any) -> None:
    """`setattr` on an instance of a `Lifted` subclass: only lift's own state."""
    if name in _OWN_ATTRIBUTES:
        object.__setattr__(self, name, value)
        return
    cls = type(self).__name__
    function = vars(self).get("__qualname__", "not lifted yet")  # before `__init__`
    raise LiftAttributeError(
        f"{cls} object ({function}): cannot set the attribute {name!r}. A "
        f"{cls} is a pytree of its function's captures; jax.jit, vmap, grad and "
        "tree_map return new instances built from those alone, so an attribute "
        "set on one instance would be gone from them.\nFix: make it a class "
        f"attribute (`class {cls}(lift.Lifted): {name} = ...`), or capture it in "
        f"the function (`def make({name}): return {cls}(lambda x: ... {name} ...)`) "
        "where it is a leaf or static like any capture.",
        anchor="lifted-setattr",
    )


def rebuilt(x: Lifted[Any, Any]) -> Callable[..., Any]:
    """A new function with fresh cells holding `x`'s current leaves.

    `lift.unlift` gives it."""
    return build(x._skeleton, x._arrays())


register(Lifted)
# Your code cannot change a `Lifted` in place (`lifted-setattr`); a call fills
# its own caches, which the copies check must not take for a change.
never_changes(Lifted)
# flax serialization handlers, once flax is imported (never imported from here).
_state_dict.register(Lifted)
