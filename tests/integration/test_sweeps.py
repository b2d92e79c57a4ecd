"""Vectorised sweeps: a batch of lifted optimizers made by `jax.vmap`, trained
together in one compiled program, each member equal to its own run."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import TraceCounter

import lift

LRS = jnp.asarray([0.3, 0.1, 0.03, 0.01])
STEPS = 6


def _params() -> dict[str, jax.Array]:
    return {
        "w": jnp.linspace(-1.0, 1.0, 6).reshape(2, 3),
        "b": jnp.asarray([0.5, -0.5, 1.0]),
    }


def _loss(p: dict[str, jax.Array]) -> jax.Array:
    x = jnp.asarray([[1.0, 2.0], [-1.0, 0.5], [0.3, -0.7]])
    return jnp.mean((jnp.tanh(x @ p["w"] + p["b"]) - 0.25) ** 2)


def _train(opt: Any, p: Any) -> jax.Array:
    """`STEPS` steps in a `lax.scan`; the loss after each."""

    def body(carry: Any, _: None) -> tuple[Any, jax.Array]:
        p, s = carry
        loss, g = jax.value_and_grad(_loss)(p)
        u, s = opt.update(g, s, p)
        return (optax.apply_updates(p, u), s), loss

    return jax.lax.scan(body, (p, opt.init(p)), None, length=STEPS)[1]


def _plain_curve(opt: optax.GradientTransformation) -> np.ndarray:
    # The plain-optax reference, eager and without JAX's leak checking (which
    # bypasses its caches, so every eager op would compile again).
    with jax.check_tracer_leaks(False):
        p = _params()
        s = opt.init(p)
        losses = []
        for _ in range(STEPS):
            loss, g = jax.value_and_grad(_loss)(p)
            u, s = opt.update(g, s, p)
            p = optax.apply_updates(p, u)
            losses.append(loss)
        return np.asarray(losses)


def test_vmap_makes_a_batch_of_lifted_optimizers() -> None:
    opts = jax.vmap(lambda lr: lift.lift(optax.adam(lr)))(LRS)
    assert lift.is_lifted(opts.update)
    one = lift.lift(optax.adam(0.1))
    assert jax.tree.structure(opts) == jax.tree.structure(one)
    paths = {
        jax.tree_util.keystr(k): v for k, v in jax.tree_util.tree_leaves_with_path(opts)
    }
    (step_size,) = (v for k, v in paths.items() if k.endswith("['step_size']"))
    np.testing.assert_allclose(step_size, -LRS)  # optax scales by -lr


def test_vmapped_sweep_is_one_program_and_each_member_equals_its_own_run() -> None:
    counter = TraceCounter()
    sweep = counter.jit(
        lambda lrs, p: jax.vmap(lambda lr: _train(lift.lift(optax.adam(lr)), p))(lrs)
    )
    curves = np.asarray(sweep(LRS, _params()))
    assert curves.shape == (len(LRS), STEPS)
    # Another sweep, other rates: the same program.
    other = np.asarray(sweep(LRS / 2, _params()))
    assert counter.traces == 1
    assert sweep._cache_size() == 1  # pyright: ignore[reportAttributeAccessIssue]
    for i, lr in enumerate(np.asarray(LRS)):
        np.testing.assert_allclose(
            curves[i], _plain_curve(optax.adam(float(lr))), rtol=1e-4, atol=1e-6
        )
        np.testing.assert_allclose(
            other[i], _plain_curve(optax.adam(float(lr) / 2)), rtol=1e-4, atol=1e-6
        )


def test_batch_built_outside_jit_trains_in_one_program() -> None:
    opts = jax.vmap(lambda lr: lift.lift(optax.adam(lr)))(LRS)
    counter = TraceCounter()
    train_all = counter.jit(
        lambda opts, p: jax.vmap(_train, in_axes=(0, None))(opts, p)
    )
    curves = np.asarray(train_all(opts, _params()))
    train_all(jax.vmap(lambda lr: lift.lift(optax.adam(lr)))(LRS * 3), _params())
    assert counter.traces == 1
    # Members taken out of the batch are ordinary lifted optimizers.
    for i in range(len(LRS)):
        member = jax.tree.map(lambda x, i=i: x[i], opts)
        np.testing.assert_allclose(
            np.asarray(jax.jit(_train)(member, _params())),
            curves[i],
            rtol=1e-5,
            atol=1e-7,
        )


def test_vmapped_sweep_over_two_hyperparameters_and_a_schedule() -> None:
    # Not `warmup_cosine_decay_schedule`: it computes `0.0 if peak_value == 0.0
    # else ...` in Python when it is built, so its peak cannot be a vmapped
    # tracer (plain optax fails the same way). Lifting a schedule built from
    # Python floats is fine (test_optax_zoo.py); here the rate itself is batched.
    def make(lr: jax.Array, b1: jax.Array) -> Any:
        schedule = optax.linear_schedule(lr, lr / 10, STEPS)
        return lift.lift(
            optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(schedule, b1=b1))
        )

    b1s = jnp.asarray([0.9, 0.8, 0.7, 0.5])
    counter = TraceCounter()
    sweep = counter.jit(
        lambda lrs, b1s, p: jax.vmap(lambda lr, b1: _train(make(lr, b1), p))(lrs, b1s)
    )
    curves = np.asarray(sweep(LRS, b1s, _params()))
    sweep(LRS * 2, b1s[::-1], _params())
    assert counter.traces == 1
    for i in range(len(LRS)):
        plain = optax.chain(
            optax.clip_by_global_norm(1.0),
            optax.adamw(
                optax.linear_schedule(float(LRS[i]), float(LRS[i]) / 10, STEPS),
                b1=float(b1s[i]),
            ),
        )
        np.testing.assert_allclose(curves[i], _plain_curve(plain), rtol=1e-4, atol=1e-6)


def test_float_and_array_rates_share_one_program() -> None:
    counter = TraceCounter()
    run = counter.jit(_train)
    for lr in (0.1, 0.2, 0.3):
        run(lift.lift(optax.adam(lr)), _params())
    # Python floats become weakly typed float32 leaves, as `jnp.asarray(lr)` is.
    for lr in (0.1, 0.2, 0.3):
        run(lift.lift(optax.adam(jnp.asarray(lr))), _params())
    assert counter.traces == 1
    # A strongly typed rate is another aval, hence one more program.
    run(lift.lift(optax.adam(jnp.float32(0.1))), _params())
    assert counter.traces == 2


@pytest.mark.xfail(
    strict=True,
    reason="inject_hyperparams wraps a schedule in optax's WrappedSchedule, an "
    "object that is not a pytree: static by identity, the schedule's rate out "
    "of reach, one program per rate",
)
def test_a_sweep_of_inject_hyperparams_with_a_schedule_compiles_once() -> None:
    counter = TraceCounter()

    @jax.jit
    def step(opt: Any, p: Any, s: Any) -> Any:
        counter()
        u, s = opt.update(jax.grad(_loss)(p), s, p)
        return optax.apply_updates(p, u), s

    for lr in (0.1, 0.01):
        make = optax.inject_hyperparams(optax.adam)
        opt = lift.lift(make(learning_rate=optax.linear_schedule(lr, 0.0, 10)))
        p = _params()
        p, _ = step(opt, p, opt.init(p))
    assert counter.traces == 1
