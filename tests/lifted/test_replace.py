"""`lift.replace`: a `Lifted`'s captured variables replaced by name, for a
hyperparameter sweep and for an `in_axes` prefix that maps over one of them."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import optax
import pytest
from helpers import TraceCounter

import lift


def _adamw() -> Any:
    return lift.lift(
        functools.partial(optax.adamw, learning_rate=0.1, weight_decay=0.01)
    )


def _train(make_opt: Any) -> jax.Array:
    opt = make_opt()
    params = jnp.asarray([1.0, -2.0])
    state = opt.init(params)
    for _ in range(3):
        grads = 2.0 * params
        updates, state = opt.update(grads, state, params)
        params = optax.apply_updates(params, updates)
    return params


# The plain optimizer's run compiled too, as the lifted one's is: a TPU computes
# eagerly with other approximations of division and square root.
_compiled = jax.jit(_train, static_argnums=0)


def test_a_lifted_factory_captures_the_names_given_to_it() -> None:
    adamw = _adamw()
    assert list(adamw.captures) == ["learning_rate", "weight_decay"]
    assert float(adamw.captures["learning_rate"]) == pytest.approx(0.1)


def test_replace_by_name_computes_as_the_plain_optimizer_and_compiles_once() -> None:
    counter = TraceCounter()
    run = counter.jit(_train)
    adamw = _adamw()
    for lr in (0.3, 0.1, 0.03):
        replaced = lift.replace(adamw, learning_rate=lr)
        assert type(replaced) is type(adamw)
        assert float(replaced.captures["learning_rate"]) == pytest.approx(lr)
        plain = _compiled(lambda lr=lr: optax.adamw(lr, weight_decay=0.01))
        assert jnp.allclose(run(replaced), plain, rtol=1e-4, atol=1e-6)
    assert counter.traces == 1
    # The original is untouched.
    assert float(adamw.captures["learning_rate"]) == pytest.approx(0.1)


def test_replace_builds_an_in_axes_prefix_over_one_capture() -> None:
    adamw = _adamw()
    axes = lift.replace(jax.tree.map(lambda _: None, adamw), learning_rate=0)
    assert jax.tree.leaves(axes) == [0]
    assert "learning_rate=0," in repr(axes)
    assert "b1=None" in repr(axes)  # not `float32[]=None`
    rates = jnp.asarray([0.3, 0.1, 0.03])
    batch = lift.replace(adamw, learning_rate=rates)
    out = jax.jit(jax.vmap(_train, in_axes=(axes,)))(batch)
    assert out.shape == (3, 2)
    for i, lr in enumerate([0.3, 0.1, 0.03]):
        member = _compiled(lambda lr=lr: optax.adamw(lr, weight_decay=0.01))
        assert jnp.allclose(out[i], member, rtol=1e-4, atol=1e-6)


def test_replace_a_closure_variable_holding_several_leaves() -> None:
    def make(scale: tuple[float, float]) -> Any:
        return lift.lift(lambda x: scale[0] * x + scale[1])

    f = make((2.0, 1.0))
    g = lift.replace(f, scale=(3.0, -1.0))
    assert float(g(jnp.asarray(1.0))) == 2.0
    # One value for every leaf of the variable, as an `in_axes` prefix has it.
    axes = lift.replace(jax.tree.map(lambda _: None, f), scale=0)
    assert jax.tree.leaves(axes) == [0, 0]
    with pytest.raises(lift.LiftError, match=r"'scale' has 2 leaves, the value 3\."):
        lift.replace(f, scale=(1.0, 2.0, 3.0))


def test_replace_on_a_lifted_whose_leaves_tree_map_made_pytrees() -> None:
    # `jax.tree.map(lambda x: (x, x), f)` makes each leaf a pair: its leaves'
    # key paths go on past the `CapturePath`, and still name their variable.
    def make(lr: float, eps: float) -> Any:
        return lift.lift(lambda x: lr * x + eps)

    pairs = jax.tree.map(lambda x: (x, 2 * x), make(0.1, 1e-3))
    replaced = lift.replace(pairs, lr=(0.5, 1.0))
    assert replaced.captures["lr"] == (0.5, 1.0)
    assert replaced.captures["eps"] == pytest.approx((1e-3, 2e-3))


def test_replace_an_unknown_name_suggests_the_nearest() -> None:
    with pytest.raises(
        lift.LiftError,
        match=(
            r"^lift\.replace\(adamw \(.*alias\.py:\d+\), learnig_rate=\.\.\.\): the "
            r"function has no captured variable 'learnig_rate' holding a leaf \(did "
            r"you mean 'learning_rate'\?\)\.\nIts captured variables: "
            r"'learning_rate', 'weight_decay' .*\nFix: .*"
            r"\nDocs: python -m lift explain replace-unknown-name$"
        ),
    ):
        lift.replace(_adamw(), learnig_rate=0.3)


def test_replace_a_static_capture_is_refused() -> None:
    adam = lift.lift(functools.partial(optax.adam, learning_rate=0.1, nesterov=True))
    with pytest.raises(lift.LiftError, match=r"no captured variable 'nesterov'"):
        lift.replace(adam, nesterov=False)


def test_replace_on_a_lifted_optax_optimizer_names_optax_variables() -> None:
    # A built optimizer lifted is a pytree of `Lifted`s: names are looked for
    # at any depth, as `dynamic=` looks for them.
    adam = lift.lift(optax.adam(0.1), dynamic="step_size")
    slower = lift.replace(adam, step_size=-0.3)
    params = jnp.array([1.0, -2.0])
    counter = TraceCounter()

    def update(tx: Any) -> Any:
        return tx.update(params, tx.init(params))[0]

    step = jax.jit(counter.jit(update))
    plain = jax.jit(lambda: update(optax.adam(0.3)))()
    assert jnp.array_equal(step(slower), plain)
    step(adam)
    assert counter.traces == 1
    with pytest.raises(
        lift.LiftError,
        match=(
            r"^lift\.replace\(GradientTransformationExtraArgs, learning_rate=\.\.\.\): "
            r"the function has no captured variable 'learning_rate' holding a "
            r"leaf\.\nIts captured variables: .*'step_size'.*\nFix: .*"
            r"`lift\.lift\(functools\.partial\(optax\.adam, learning_rate=0\.1\)\)`"
        ),
    ):
        lift.replace(adam, learning_rate=0.3)
    with pytest.raises(
        lift.LiftError, match=r"^lift\.replace\(\) got 'tuple', which holds no Lifted"
    ):
        lift.replace((1.0, 2.0), x=0.3)
