"""Ahead of time: `lift.jit`'s stages (`trace`, `lower`, `compile`).

Each stage takes and describes the function's own arguments. Each subclasses
JAX's public stage class. So a `lift.jit` function is a `jax.stages.Wrapped`,
as `jax.export.export` asks. Every public member goes to JAX's object of the
trampoline. No private state of the base classes is used. What they show
leaves out the bound arguments in front: the `Lifted`, a method's instance."""

# The stages replace the members of JAX's with forwarders of their own types.
# pyright: reportIncompatibleMethodOverride=false, reportIncompatibleVariableOverride=false

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax

from .._compat import is_signature_mismatch


def _own(tree: Any, bound: tuple[Any, ...]) -> Any:
    """The trampoline's `(args, kwargs)` pytree without the bound arguments."""
    args, kwargs = tree
    return tuple(args[len(bound) :]), kwargs


def _forward(name: str) -> Any:
    """A method that calls JAX's stage's own."""

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(self._inner, name)(*args, **kwargs)

    method.__name__ = name
    return method


def _forward_attr(name: str, stage: str = "_inner") -> property:
    """A property read from JAX's stage, or from the function's own (`_alone`)."""
    return property(lambda self: getattr(getattr(self, stage), name))


def _own_attr(name: str) -> property:
    """A property of JAX's stage, without the bound arguments."""
    return property(lambda self: _own(getattr(self._inner, name), self._bound))


class _Bound:
    """What the stages share.

    `_inner` is JAX's stage of the shared program. `_bound` holds the arguments
    bound in front of `fn`'s own."""

    __slots__ = ()
    _inner: Any
    _bound: tuple[Any, ...]

    def __init__(self, inner: Any, bound: tuple[Any, ...]) -> None:
        self._inner = inner
        self._bound = bound
        # jax 0.8.0's `Traced` keeps it as `_out_tree` only (public from later
        # versions, as on `Lowered` and `Compiled`).
        tree = getattr(inner, "out_tree", None)
        self.out_tree = tree if tree is not None else getattr(inner, "_out_tree", None)

    # The arguments (`(args, kwargs)`, static ones left out), as `ArgInfo`s.
    args_info = _own_attr("args_info")
    out_info = _forward_attr("out_info")


class Traced(_Bound, jax.stages.Traced):
    """What `lift.jit(fn).trace(...)` returns: a `jax.stages.Traced` for `fn`'s
    own arguments.

    `jaxpr` is `fn`'s, with its captures as constants. It is traced again on
    first use. `lower()` lowers the shared program. Its first inputs are the
    captures, bound to their values when traced.
    """

    __slots__ = ("_bake", "_bound", "_inner")

    def __init__(
        self, inner: Any, bound: tuple[Any, ...], bake: Callable[[], Any]
    ) -> None:
        super().__init__(inner, bound)
        self._bake = bake

    @functools.cached_property
    def _alone(self) -> Any:
        """The function's own program, its captures baked in: made on first use."""
        return self._bake()

    fun_name = _forward_attr("fun_name")
    out_avals = _forward_attr("out_avals")
    # The function's closed jaxpr: captures are constants.
    jaxpr = _forward_attr("jaxpr", "_alone")
    lojax = _forward_attr("lojax", "_alone")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._alone(*args, **kwargs)

    def lower(
        self,
        *,
        lowering_platforms: tuple[str, ...] | None = None,
        _private_parameters: Any = None,
    ) -> Any:
        """Lower to compiler input, as `jax.stages.Traced.lower` does."""
        options = {
            "lowering_platforms": lowering_platforms,
            "_private_parameters": _private_parameters,
        }
        if getattr(_private_parameters, "for_export", False):
            # `jax.export.export` (jax 0.10.2) lowers what `.trace` returned, and
            # exports a function of its arguments alone: the captures are baked.
            return self._alone.lower(**options)
        return Lowered(self._inner.lower(**options), self._bound)


class Lowered(_Bound, jax.stages.Lowered):
    """What `lift.jit(fn).lower(...)` returns: a `jax.stages.Lowered`.

    It takes `fn`'s own arguments. Its text is the shared program's. Its first
    inputs are the captures. `compile()` binds them to their values when
    lowered."""

    __slots__ = ("_bound", "_inner")

    in_avals = _own_attr("in_avals")
    cost_analysis = _forward("cost_analysis")

    def compile(
        self, compiler_options: Any = None, *, device_assignment: Any = None
    ) -> Compiled:
        """Compile, as `jax.stages.Lowered.compile` does."""
        inner = self._inner.compile(
            compiler_options, device_assignment=device_assignment
        )
        return Compiled(inner, self._bound)

    as_text = _forward("as_text")
    compiler_ir = _forward("compiler_ir")


class Compiled(_Bound, jax.stages.Compiled):
    """What `.compile()` returns: a `jax.stages.Compiled`.

    It is called with `fn`'s own arguments; the captures are bound."""

    __slots__ = ("_bound", "_inner")

    in_avals = _own_attr("in_avals")
    cost_analysis = _forward("cost_analysis")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self._inner(*self._bound, *args, **kwargs)
        except TypeError as err:
            given: Any = jax.tree_util.tree_structure((args, kwargs))  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
            expected: Any = self.in_tree  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
            if given == expected or not is_signature_mismatch(err):
                raise
            raise TypeError(
                f"The function was compiled for arguments {expected} (static "
                f"ones left out), but called with {given}."
            ) from err

    as_text = _forward("as_text")
    memory_analysis = _forward("memory_analysis")
    runtime_executable = _forward("runtime_executable")
    input_shardings = _own_attr("input_shardings")
    output_shardings = _forward_attr("output_shardings")
    input_formats = _own_attr("input_formats")
    output_formats = _forward_attr("output_formats")
