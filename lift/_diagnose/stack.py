"""`lift.stack`: a population of pytrees as one pytree, its leaves stacked."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import jax.numpy as jnp
import numpy as np

from .._base.errors import LiftError
from .._holders import trees as jtu
from .._lifted.lift import flatten_lifted
from .diff import diff

__all__ = ["stack"]

_T = TypeVar("_T")


def stack(trees: Sequence[_T], /) -> _T:
    """One pytree holding `trees` stacked along a new first axis.

    A population for `jax.vmap`, or for sharding over devices: N optimizers
    (or models, or training states) of one structure become one, each leaf
    an array of N rows. Row `i` is `trees[i]`
    (`jax.tree.map(lambda x: x[i], stacked)` takes it out). They must share
    one treedef and each leaf's shape and dtype: one program serves them all.
    Where they do not, the error says why with `lift.diff`'s words.

    ```python
    import jax
    import optax

    import lift

    opts = lift.stack([lift.lift(optax.adam(lr)) for lr in (0.1, 0.01, 0.001)])
    params = {"w": jax.numpy.ones((3, 2))}  # three rows: one for each member
    states = jax.vmap(lambda opt, p: opt.init(p))(opts, params)
    print(jax.tree.leaves(states)[1].shape)
    ```

    ```text
    (3, 2)
    ```

    **Arguments:**

    - `trees`: a non-empty sequence of pytrees, `Lifted` or holding them.

    **Returns:** the first tree's structure, each leaf the members' leaves
    stacked with `jnp.stack`.

    **Raises:** `LiftError` when two members differ in structure, or in a
    leaf's shape or dtype.
    """
    members = list(trees)
    if not members:
        raise LiftError(
            "lift.stack() got no trees: give it a sequence of one or more",
            anchor="stack-differs",
        )
    for member in members:
        flatten_lifted(member, "stack")  # refuses containers JAX cannot flatten
    first, treedef = jtu.tree_flatten(members[0])
    columns: list[list[Any]] = [[leaf] for leaf in first]
    for i, member in enumerate(members[1:], start=1):
        leaves, other = jtu.tree_flatten(member)
        if other != treedef or any(
            not _stackable(a, b) for a, b in zip(first, leaves, strict=True)
        ):
            why = diff(members[0], member) or (
                f"the pytree structures differ: {treedef} != {other}"
            )
            raise LiftError(
                f"lift.stack(): trees[0] and trees[{i}] cannot be stacked, since "
                f"one program cannot serve both:\n{why}\nFix: build every member "
                "the same way, with the values that differ as floats or arrays "
                "(dynamic), not ints, strings or functions (static).",
                anchor="stack-differs",
            )
        for column, leaf in zip(columns, leaves, strict=True):
            column.append(leaf)
    stacked = [jnp.stack(c) for c in columns]  # pyright: ignore[reportUnknownMemberType]
    return jtu.unflatten(treedef, stacked)


def _stackable(a: Any, b: Any) -> bool:
    """Same shape and dtype (a weakly typed float stacks with a float32)."""
    same_dtype: bool = jnp.result_type(a) == jnp.result_type(b)  # pyright: ignore[reportUnknownMemberType]
    return np.shape(a) == np.shape(b) and same_dtype
