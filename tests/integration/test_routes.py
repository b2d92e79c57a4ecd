"""The routes lift's messages give for optax.contrib's `reduce_on_plateau`,
followed as written: its factory checks `factor` in Python, so the message
says to lift the optimizer it builds, which sweeps `factor` compiling once and
computes bitwise what plain optax computes."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import optax
import pytest
from helpers import TraceCounter

import lift

reduce_on_plateau = pytest.importorskip("optax.contrib").reduce_on_plateau

PARAMS = jnp.array([1.0, -2.0, 3.0])


def _train(opt: Any, params: jax.Array = PARAMS) -> jax.Array:
    tx = optax.chain(optax.sgd(0.1), opt)
    state = tx.init(params)
    for _ in range(6):
        grads = jax.grad(lambda p: jnp.sum(p**2))(params)
        # A loss that does not improve: the plateau scales the updates down.
        updates, state = tx.update(grads, state, params, value=jnp.float32(1.0))
        params = optax.apply_updates(params, updates)
    return params


def test_naming_factor_at_the_factory_gives_the_route_that_works():
    factory = functools.partial(reduce_on_plateau, factor=0.5, patience=1)
    with pytest.raises(
        lift.LiftError,
        match=(
            r"^reduce_on_plateau \(.*\) uses the captured variable 'factor' in "
            r"Python control flow .*: the factory checks it while it builds\.\n"
            r"Fix: lift what the factory builds instead, naming the variable its "
            r"functions keep: `lift\.lift\(optax\.contrib\.reduce_on_plateau\(\.\.\., "
            r"factor=\.\.\.\), dynamic='factor'\)`; or keep it static by leaving "
            r"'factor' out of `dynamic=`"
        ),
    ):
        jax.jit(lambda make: _train(make()))(lift.lift(factory, dynamic="factor"))


def test_the_built_optimizer_lifted_sweeps_factor_once_bitwise_as_plain():
    counter = TraceCounter()
    run = jax.jit(counter.jit(_train))
    first = lift.lift(reduce_on_plateau(factor=0.5, patience=1), dynamic="factor")
    for factor in [0.5, 0.1, 0.9]:
        # Replaced by name, as the message names it, or built and lifted anew.
        opt = lift.replace(first, factor=factor)
        # Plain optax, its factor a constant of the program (the parameters an
        # input, as in the sweep, so that XLA does not fold the whole run).
        plain = jax.jit(lambda p, f=factor: _train(reduce_on_plateau(f, 1), p))
        assert jnp.array_equal(run(opt, PARAMS), plain(PARAMS)), factor
        fresh = lift.lift(
            reduce_on_plateau(factor=factor, patience=1), dynamic="factor"
        )
        assert jnp.array_equal(run(fresh, PARAMS), plain(PARAMS)), factor
    assert counter.traces == 1
    # The plateau did scale: factor reached the program.
    assert not jnp.array_equal(
        run(lift.replace(first, factor=0.1), PARAMS), run(first, PARAMS)
    )
