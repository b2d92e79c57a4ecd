"""`lift.stack`: a population of pytrees as one, or `lift.diff`'s reason why not."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import lift

RATES = (0.1, 0.01, 0.001)


def test_members_are_the_rows_of_the_stacked_tree() -> None:
    members = [lift.lift(optax.adam(lr)) for lr in RATES]
    stacked = lift.stack(members)
    assert jax.tree.structure(stacked) == jax.tree.structure(members[0])
    for i, member in enumerate(members):
        row = jax.tree.map(lambda x, i=i: x[i], stacked)
        assert jax.tree.structure(row) == jax.tree.structure(member)
        for a, b in zip(jax.tree.leaves(row), jax.tree.leaves(member), strict=True):
            np.testing.assert_array_equal(a, b)


def test_a_stacked_population_trains_under_vmap_in_one_program() -> None:
    params = {"w": jnp.linspace(-1.0, 1.0, 4)}

    def train(opt, p):
        def body(carry, _):
            p, s = carry
            g = jax.grad(lambda p: jnp.sum((p["w"] - 0.5) ** 2))(p)
            u, s = opt.update(g, s, p)
            return (optax.apply_updates(p, u), s), None

        return jax.lax.scan(body, (p, opt.init(p)), None, length=5)[0][0]["w"]

    traces = []
    run = jax.jit(
        lambda opts, p: (traces.append(1), jax.vmap(train, (0, None))(opts, p))[1]
    )
    out = run(lift.stack([lift.lift(optax.adam(lr)) for lr in RATES]), params)
    run(lift.stack([lift.lift(optax.adam(lr * 2)) for lr in RATES]), params)
    assert len(traces) == 1
    for i, lr in enumerate(RATES):
        np.testing.assert_allclose(
            out[i], jax.jit(train)(lift.lift(optax.adam(lr)), params), rtol=1e-6
        )


def test_floats_of_both_weak_and_strong_type_stack() -> None:
    def make(lr):
        return lift.lift(lambda x: x * lr)

    stacked = lift.stack([make(0.5), make(np.float32(2.0))])
    assert jax.tree.leaves(stacked)[0].dtype == jnp.float32
    np.testing.assert_allclose(jax.vmap(lambda f: f(1.0))(stacked), [0.5, 2.0])


def _make(lr, steps):
    return lift.lift(lambda x: x * lr / steps)


def test_a_static_difference_is_refused_in_diffs_words() -> None:
    with pytest.raises(lift.LiftError) as info:
        lift.stack([_make(0.1, 10), _make(0.2, 10), _make(0.3, 20)])
    message = str(info.value)
    assert message.startswith("lift.stack(): trees[0] and trees[2] cannot be stacked")
    assert lift.diff(_make(0.1, 10), _make(0.3, 20)) in message
    assert "steps = 10 vs 20, static because it is an int" in message
    assert info.value.anchor == "stack-differs"


def test_another_optimizer_is_refused_naming_the_functions() -> None:
    with pytest.raises(lift.LiftError, match=r"different function: scale_by_adam"):
        lift.stack([lift.lift(optax.adam(0.1)), lift.lift(optax.sgd(0.1))])


def test_another_shape_is_refused() -> None:
    with pytest.raises(
        lift.LiftError, match=r"float32\[\] in one, float32\[3\] in the other"
    ):
        lift.stack([_make(0.1, 10), _make(jnp.ones(3), 10)])


def test_another_dtype_is_refused() -> None:
    with pytest.raises(lift.LiftError, match=r"trees\[1\]"):
        lift.stack([_make(jnp.float32(0.1), 10), _make(jnp.int32(1), 10)])


def test_nothing_to_stack_is_refused() -> None:
    with pytest.raises(lift.LiftError, match=r"got no trees"):
        lift.stack([])
