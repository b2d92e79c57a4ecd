"""Closure conversion: trace a function and lift every constant it closed over.

`lift` sees captures that are pytree leaves. A tracer hidden in an object that is
not a pytree, behind an attribute or in a module global is invisible to it, but
not to a trace: tracing `fn` once turns every closed-over tracer and array, of
every dtype, into a constant of the traced program. `convert` hoists all of them
out as leaves and keeps the program itself as static data compared by its
structure, so converting the same code on arguments of the same shapes twice
gives equal treedefs, and nothing keeps `fn` or a tracer alive afterwards.
Unlike `jax.closure_convert`, integer, boolean and PRNG-key tracers are hoisted
too, and there is no cache keyed on the function object.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from ._errors import LiftError, describe

# JAX's public functions used here, typed once for the type checker.
_flatten: Callable[[Any], tuple[list[Any], Any]] = jax.tree_util.tree_flatten  # pyright: ignore
_unflatten: Callable[[Any, Any], Any] = jax.tree_util.tree_unflatten  # pyright: ignore
_make_jaxpr: Callable[..., Callable[..., Any]] = jax.make_jaxpr  # pyright: ignore
_eval_jaxpr: Callable[..., list[Any]] = jax.core.eval_jaxpr  # pyright: ignore
_asarray: Callable[[Any], Any] = jnp.asarray  # pyright: ignore

if TYPE_CHECKING:
    from ._lifted import Lifted

__all__ = ["convert"]

_L = TypeVar("_L", bound="Lifted[Any, Any]")


def _short(shape: tuple[int, ...], dtype: Any) -> str:
    return f"{jnp.dtype(dtype).name}[{','.join(map(str, shape))}]"


def _signature(leaves: list[Any]) -> tuple[tuple[tuple[int, ...], Any], ...]:
    out: list[tuple[tuple[int, ...], Any]] = []
    for leaf in leaves:
        aval = jax.typeof(leaf)
        out.append((tuple(aval.shape), aval.dtype))  # pyright: ignore
    return tuple(out)


class Program:
    """A traced program without its constants: the static half of a conversion.

    Compared by the program's printed text, its input and output trees and the
    types of its inputs and constants, never by identity; so is its hash.
    """

    __slots__ = (
        "_hash",
        "_key",
        "in_sig",
        "in_tree",
        "jaxpr",
        "name",
        "out_tree",
        "where",
    )

    def __init__(
        self,
        jaxpr: Any,
        in_tree: Any,
        out_tree: Any,
        in_sig: tuple[tuple[tuple[int, ...], Any], ...],
        const_sig: tuple[tuple[tuple[int, ...], Any], ...],
        name: str,
        where: str,
    ) -> None:
        self.jaxpr = jaxpr
        self.in_tree = in_tree
        self.out_tree = out_tree
        self.in_sig = in_sig
        self.name = name
        self.where = where
        self._key = (str(jaxpr), in_tree, out_tree, in_sig, const_sig)
        self._hash = hash(self._key)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Program)
            and self._hash == other._hash
            and self._key == other._key
        )

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        ins = ", ".join(_short(s, d) for s, d in self.in_sig)
        return f"Program({self.name}({ins}))"

    def run(self, consts: tuple[Any, ...], args: tuple[Any, ...], kwargs: Any) -> Any:
        """Evaluate the program on new arguments of the traced shapes."""
        __tracebackhide__ = True
        leaves, tree = _flatten((args, kwargs))
        if tree != self.in_tree:
            raise LiftError(
                f"{self.where} was closure-converted for arguments structured as "
                f"{self.in_tree}, and got {tree}. Convert it again with the new "
                f"arguments: lift.closure_convert({self.name}, *args, **kwargs)."
            )
        given = _signature(leaves)
        if given != self.in_sig:
            expected = ", ".join(_short(s, d) for s, d in self.in_sig)
            got = ", ".join(_short(s, d) for s, d in given)
            raise LiftError(
                f"{self.where} was closure-converted for arguments ({expected}) and "
                f"was called with ({got}). Call it with arguments of those shapes "
                f"and dtypes, or convert it again for the new ones: "
                f"lift.closure_convert({self.name}, *args, **kwargs)."
            )
        out = _eval_jaxpr(self.jaxpr, list(consts), *leaves)
        return _unflatten(self.out_tree, out)


def _converted(program: Program, consts: tuple[Any, ...]) -> types.FunctionType:
    def converted(*args: Any, **kwargs: Any) -> Any:
        return program.run(consts, args, kwargs)

    return converted  # pyright: ignore[reportReturnType]


def _as_leaf(const: Any) -> Any:
    # Constants that are neither tracers nor jax arrays (NumPy arrays wrapped by
    # the trace) become jax arrays, so that lift makes them leaves.
    if isinstance(const, jax.Array):
        return const
    return _asarray(np.asarray(const))


def convert(
    cls: type[_L], fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> _L:
    """Trace `fn` on `args`/`kwargs` and return `cls` lifting the program.

    **Arguments:**

    - `cls`: `Lifted` or a subclass of it; the result is an instance of it.
    - `fn`: the function to convert.
    - `args`, `kwargs`: example arguments; their shapes and dtypes are the ones
      the result accepts.

    **Returns:**

    An instance of `cls` whose leaves are every tracer and array `fn` closed
    over (through cells, globals, attributes, anything), and whose static part
    is the traced program.
    """
    if not callable(fn):
        raise LiftError(
            f"lift.closure_convert expects a function, and got {type(fn).__qualname__} "
            f"{fn!r:.60}. Pass the function itself: lift.closure_convert(f, *args)."
        )
    leaves, in_tree = _flatten((args, kwargs))
    out_trees: list[Any] = []

    def flat(*xs: Any) -> list[Any]:
        a, k = _unflatten(in_tree, xs)
        out, tree = _flatten(fn(*a, **k))
        out_trees.append(tree)
        return out

    closed = _make_jaxpr(flat)(*leaves)
    consts = tuple(_as_leaf(c) for c in closed.consts)
    name = getattr(fn, "__name__", None) or "fn"
    program = Program(
        closed.jaxpr,
        in_tree,
        out_trees[-1],
        _signature(leaves),
        _signature(list(consts)),
        name,
        describe(fn),
    )
    converted = _converted(program, consts)
    for attr in ("__name__", "__qualname__", "__doc__", "__module__"):
        value = getattr(fn, attr, None)
        if isinstance(value, str):
            setattr(converted, attr, value)
    return cls(converted)
