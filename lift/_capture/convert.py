"""Closure conversion: trace a function and lift every constant it closed over.

`lift` sees captures that are pytree leaves. It cannot see a tracer in an
object that is not a pytree, or in a module global. A trace sees it. Tracing
`fn` once makes every closed-over tracer and array a constant of the program.
`convert` hoists them all out as leaves. The program itself is static data,
compared by its structure. So the same code on the same shapes gives equal
treedefs. Nothing keeps `fn` or a tracer alive afterwards. Unlike
`jax.closure_convert`, it hoists integer, boolean and PRNG-key tracers too.
It keeps no cache keyed on the function object.

The printed program is not all of it. Custom derivative rules, callbacks and
a nested `jit`'s constants are keyed too (`lift._capture.program_parts`).
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable
from typing import Any, Final

import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from .. import _compat
from .._base.errors import STANDS_FOR, LiftError, array_text, code_of, describe
from .._holders.trees import tree_flatten, unflatten
from .program_parts import ProgramParts

# JAX's public functions used here, typed once for the type checker.
_make_jaxpr: Callable[..., Callable[..., Any]] = jax.make_jaxpr  # pyright: ignore
_eval_jaxpr: Callable[..., list[Any]] = jax.core.eval_jaxpr  # pyright: ignore
_asarray: Callable[[Any], Any] = jnp.asarray  # pyright: ignore


def _signature(leaves: Iterable[Any]) -> tuple[tuple[tuple[int, ...], Any], ...]:
    avals = map(jax.typeof, leaves)
    return tuple((tuple(a.shape), a.dtype) for a in avals)  # pyright: ignore


class Program:
    """A traced program without its constants: the static half of a conversion.

    Its rules and callbacks were vetted when it was made (`ProgramParts`). The
    jaxpr keeps JAX's own references to the finished trace. Those are not the
    user's captures. So the scan for tracers in static data passes it by
    (`vetted`).

    It compares by the program's text and what the text hides. It compares by
    its input and output trees, and its inputs' and constants' types. So does
    its hash.
    """

    vetted: Final = True  # see `lift._rule.hidden.aux_tracer`

    __slots__ = (
        "_alive",
        "_hash",
        "_key",
        "code",
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
        leaves: list[Any],
        consts: tuple[Any, ...],
        fn: Any,
    ) -> None:
        self.name = getattr(fn, "__name__", None) or "fn"
        self.where = where = describe(fn)
        self.code = code_of(fn, shown=True)  # where reports show `fn`
        hidden = ProgramParts(jaxpr, where)
        self.jaxpr = jaxpr
        self.in_tree = in_tree
        self.out_tree = out_tree
        self.in_sig = in_sig = _signature(leaves)
        const_sig = _signature(consts)
        self._key = (str(jaxpr), in_tree, out_tree, in_sig, const_sig, *hidden.key)
        self._alive = tuple(hidden.alive)
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
        ins = ", ".join(array_text(s, d) for s, d in self.in_sig)
        return f"Program({self.name}({ins}))"

    def run(self, consts: tuple[Any, ...], args: tuple[Any, ...], kwargs: Any) -> Any:
        """Evaluate the program on new arguments of the traced shapes."""
        __tracebackhide__ = True
        leaves, tree = tree_flatten((args, kwargs))
        if tree != self.in_tree:
            raise LiftError(
                f"{self.where} was closure-converted for arguments structured as "
                f"{self.in_tree}, and got {tree}.\nFix: convert it again with the new "
                f"arguments: `lift.closure_convert({self.name}, *args, **kwargs)`.",
                anchor="convert-other-arguments",
            )
        given = _signature(leaves)
        if given != self.in_sig:
            expected = ", ".join(array_text(s, d) for s, d in self.in_sig)
            got = ", ".join(array_text(s, d) for s, d in given)
            raise LiftError(
                f"{self.where} was closure-converted for arguments ({expected}) and "
                f"was called with ({got}).\nFix: call it with arguments of those shapes "
                f"and dtypes, or convert it again for the new ones: "
                f"`lift.closure_convert({self.name}, *args, **kwargs)`.",
                anchor="convert-other-arguments",
            )
        out = _eval_jaxpr(self.jaxpr, list(consts), *leaves)
        return unflatten(self.out_tree, out)


# A program is static data: a pytree node without children, so that `lift`
# compares it by its key as part of the treedef, and does not scan the traced
# program object by object for tracers (it holds none: rules that capture one
# are refused, constants are hoisted).
jax.tree_util.register_pytree_node(  # pyright: ignore[reportUnknownMemberType]
    Program, lambda p: ((), p), lambda p, _: p
)


def convert(
    fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> types.FunctionType:
    """Trace `fn` on `args`/`kwargs` and return a function running the program.

    **Arguments:**

    - `fn`: the function to convert.
    - `args`, `kwargs`: example arguments; their shapes and dtypes are the ones
      the result accepts.

    **Returns:**

    A function that runs the traced program on the constants it closed over.
    Lifted (`Lifted.closure_convert`), its leaves are every tracer and array
    `fn` closed over. They may be in cells, globals or attributes. Its static
    part is the program.
    """
    if not callable(fn):
        raise LiftError(
            f"lift.closure_convert expects a function, and got {type(fn).__qualname__} "
            f"{fn!r:.60}.\nFix: pass the function first: "
            "`lift.closure_convert(f, *example_args)`.",
            anchor="convert-not-a-function",
        )
    leaves, in_tree = tree_flatten((args, kwargs))
    out_trees: list[Any] = []

    def flat(*xs: Any) -> list[Any]:
        a, k = unflatten(in_tree, xs)
        out, tree = tree_flatten(fn(*a, **k))
        out_trees.append(tree)
        return out

    closed = _make_jaxpr(flat)(*leaves)
    # Constants that are neither tracers nor jax arrays (NumPy arrays wrapped
    # by the trace) become jax arrays, so that lift makes them leaves.
    consts = tuple(
        c if isinstance(c, jax.Array) else _asarray(np.asarray(c))
        for c in closed.consts
    )
    program = Program(
        _compat.bare_jaxpr(closed), in_tree, out_trees[-1], leaves, consts, fn
    )

    def converted(*args: Any, **kwargs: Any) -> Any:
        return program.run(consts, args, kwargs)

    for attr in ("__name__", "__qualname__", "__doc__", "__module__"):
        value = getattr(fn, attr, None)
        if isinstance(value, str):
            setattr(converted, attr, value)
    return converted  # pyright: ignore[reportReturnType]


def _shown(converted: types.FunctionType) -> types.CodeType | None:
    """The user's code a converted function runs the program of: its
    `Program`'s, read from its cell (a rebuilt copy has its own cells)."""
    cells = dict(
        zip(converted.__code__.co_freevars, converted.__closure__ or (), strict=True)
    )
    program = cells["program"].cell_contents
    return program.code if isinstance(program, Program) else None


# Reports show the user's function for a converted one, not this module.
_CONVERTED: Final = next(
    c for c in convert.__code__.co_consts if getattr(c, "co_name", None) == "converted"
)
STANDS_FOR[_CONVERTED] = _shown
