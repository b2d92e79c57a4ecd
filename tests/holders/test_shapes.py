"""Every way a function can hold an array must pass one suite: round trip, vmap,
grad, returned from `jit`. (The table is `helpers.HOLDERS`; calling, no retrace,
lifting again, key paths, `repr`, `diff`, the leak scan and `lift.jit` over it are in
`test_soundness.py`.)"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import HOLDERS, Holder

import lift

X = jnp.asarray([1.0, 2.0, 3.0])
W1 = jnp.asarray([1.0, 0.0, 0.0])
W2 = jnp.asarray([0.0, 1.0, 2.0])
_IDS = [h.name for h in HOLDERS]


@pytest.mark.parametrize("holder", HOLDERS, ids=_IDS)
def test_round_trip(holder: Holder) -> None:
    g = lift.lift(holder.make(W2))
    leaves, treedef = jax.tree_util.tree_flatten(g)
    again = jax.tree_util.tree_unflatten(treedef, leaves)
    assert type(again) is type(g)
    np.testing.assert_array_equal(again(X), holder.make(W2)(X))
    assert jax.tree_util.tree_structure(again) == treedef


@pytest.mark.parametrize("holder", HOLDERS, ids=_IDS)
def test_vmap_over_captures(holder: Holder) -> None:
    batch = jax.vmap(lambda w: lift.lift(holder.make(w)))(jnp.stack([W1, W2]))
    out = jax.vmap(lambda g: g(X))(batch)
    np.testing.assert_allclose(out, [holder.make(W1)(X), holder.make(W2)(X)])


@pytest.mark.parametrize("holder", HOLDERS, ids=_IDS)
def test_grad_through_captures(holder: Holder) -> None:
    grads = jax.grad(lambda g: jnp.sum(g(X)))(lift.lift(holder.make(W2)))
    (leaf,) = jax.tree_util.tree_leaves(grads)
    np.testing.assert_allclose(leaf, X)  # d/dw sum(x * w) = x


@pytest.mark.parametrize("holder", HOLDERS, ids=_IDS)
def test_returned_from_jit_holds_arrays(holder: Holder) -> None:
    g = jax.jit(lambda w: lift.lift(holder.make(w)))(W2)
    leaves = jax.tree_util.tree_leaves(g)
    assert all(isinstance(leaf, jax.Array) for leaf in leaves)
    assert not any(isinstance(leaf, jax.core.Tracer) for leaf in leaves)
    np.testing.assert_array_equal(g(X), holder.make(W2)(X))
