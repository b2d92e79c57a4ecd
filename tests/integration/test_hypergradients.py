"""Hypergradients: `jax.grad` through the captured hyperparameters of a lifted
optimizer over unrolled steps."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import TraceCounter

import lift

ROOT = Path(__file__).resolve().parents[2]


def _data() -> tuple[jax.Array, jax.Array]:
    x = jnp.linspace(-1.0, 1.0, 24).reshape(8, 3)
    return x, jnp.sin(x @ jnp.asarray([1.0, -2.0, 0.5]))


def _unrolled(opt: Any, steps: int = 5) -> jax.Array:
    x, y = _data()
    w = jnp.zeros(3)
    state = opt.init(w)

    def loss(w: jax.Array) -> jax.Array:
        return jnp.mean((x @ w - y) ** 2)

    for _ in range(steps):
        updates, state = opt.update(jax.grad(loss)(w), state, w)
        w = optax.apply_updates(w, updates)
    return loss(w)


def _by_name(tree: Any) -> dict[str, Any]:
    return {
        re.findall(r"\['(\w+)'\]", jax.tree_util.keystr(path))[-1]: leaf
        for path, leaf in jax.tree_util.tree_leaves_with_path(tree)
    }


@pytest.mark.parametrize(
    "make",
    [optax.adam, optax.sgd, lambda lr: optax.sgd(lr, momentum=0.9)],
    ids=["adam", "sgd", "momentum"],
)
def test_grad_through_the_captured_rate_equals_grad_of_the_plain_closure(
    make: Any,
) -> None:
    lr = 0.05
    # Under jit: eagerly, under JAX's leak checker (which turns its caches
    # off), every op of the five unrolled steps compiles afresh (70 s for adam).
    grads = jax.jit(jax.grad(_unrolled))(lift.lift(make(lr)))
    assert lift.is_lifted(grads.update)
    assert jax.tree.structure(grads) == jax.tree.structure(lift.lift(make(lr)))
    # optax applies the rate as `step_size = -lr`.
    d_lr = -_by_name(grads)["step_size"]
    plain = jax.jit(lambda lr: _unrolled(make(lr)))
    want = jax.jit(jax.grad(lambda lr: _unrolled(make(lr))))(jnp.asarray(lr))
    np.testing.assert_allclose(d_lr, want, rtol=1e-4)
    assert abs(float(want)) > 1e-3  # a real signal, not 0 == 0
    h = 1e-3
    fd = (plain(jnp.asarray(lr + h)) - plain(jnp.asarray(lr - h))) / (2 * h)
    np.testing.assert_allclose(d_lr, fd, rtol=2e-2)


def test_hypergradients_for_every_float_hyperparameter() -> None:
    grads = _by_name(jax.jit(jax.grad(_unrolled))(lift.lift(optax.adam(0.05, b1=0.8))))
    assert {"b1", "b2", "eps", "step_size"} <= set(grads)
    want_b1 = jax.jit(jax.grad(lambda b1: _unrolled(optax.adam(0.05, b1=b1))))(
        jnp.asarray(0.8)
    )
    np.testing.assert_allclose(grads["b1"], want_b1, rtol=1e-4)


def test_jitted_hypergradient_traces_once_across_rates() -> None:
    counter = TraceCounter()
    hypergrad = counter.jit(jax.grad(_unrolled))
    results = [
        -_by_name(hypergrad(lift.lift(optax.adam(lr))))["step_size"]
        for lr in (0.01, 0.03, 0.1)
    ]
    assert counter.traces == 1
    assert len({float(r) for r in results}) == 3


def test_hypergradient_descent_lowers_the_validation_loss() -> None:
    spec = importlib.util.spec_from_file_location(
        "hypergradient_example", ROOT / "examples" / "hypergradient.py"
    )
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    data = example.make_data()
    start = float(example.validation_loss(lift.lift(optax.adam(1e-3)), data))
    tuned = example.main(["--outer", "25"])
    assert tuned > 1e-3
    assert example.traces == 1
    end = float(example.validation_loss(lift.lift(optax.adam(tuned)), data))
    assert end < 0.5 * start
