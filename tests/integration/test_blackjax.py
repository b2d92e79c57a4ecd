"""blackjax: a sampler's kernel, lifted, is a `jax.jit` argument that compiles
once for a whole step-size sweep and gives the samples the plain kernels give;
`lift.jit` over `kernel.step` shares one program across kernels; kernels leave
`jax.vmap` and `jax.jit` (window adaptation) as values; integers stay static."""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lift

# blackjax 1.4 and later need jax>=0.9: with the oldest JAX lift supports, pip
# installs blackjax 1.3, whose kernels capture their parameters under other
# names and whose plain kernels JAX cannot report as outputs. These tests (and
# docs/integrations/blackjax.md) are written against 1.7.
blackjax = pytest.importorskip(
    "blackjax",
    minversion="1.7",
    reason="blackjax is not installed",
)

STEP_SIZES = (0.1, 0.3)  # two: a program per value plain, one lifted
X0 = jnp.zeros(2)
NUM_SAMPLES = 5


def logdensity(x: jax.Array) -> jax.Array:
    return -0.5 * jnp.sum(x**2)


SAMPLERS: dict[str, Callable[[Any], Any]] = {
    "hmc": lambda step_size: blackjax.hmc(logdensity, step_size, jnp.ones(2), 3),
    "nuts": lambda step_size: blackjax.nuts(logdensity, step_size, jnp.ones(2)),
    "mala": lambda step_size: blackjax.mala(logdensity, step_size),
}


def _counted_loops() -> tuple[Any, Any, list[int]]:
    """An inference loop taking the kernel (for lifted kernels) and one taking
    `kernel.step` as a static argument (blackjax's own examples), sharing one
    trace counter."""
    traces = [0]

    def run(step: Any, key: jax.Array, state: Any) -> jax.Array:
        traces[0] += 1

        def one(state: Any, key: jax.Array) -> tuple[Any, jax.Array]:
            state, _ = step(key, state)
            return state, state.position

        _, xs = jax.lax.scan(one, state, jax.random.split(key, NUM_SAMPLES))
        return xs

    lifted = jax.jit(lambda kernel, key, state: run(kernel.step, key, state))
    plain = jax.jit(run, static_argnums=0)
    return lifted, plain, traces


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_step_size_sweep_traces_once_lifted_and_per_value_plain(name: str) -> None:
    make = SAMPLERS[name]
    lifted_loop, plain_loop, traces = _counted_loops()
    key = jax.random.key(0)
    plain = []
    for step_size in STEP_SIZES:
        kernel = make(step_size)
        plain.append(plain_loop(kernel.step, key, kernel.init(X0)))
    assert traces[0] == len(STEP_SIZES)

    traces[0] = 0
    lifted = []
    for step_size in STEP_SIZES:
        kernel = lift.lift(make(step_size))
        assert type(kernel).__name__ == "SamplingAlgorithm"
        lifted.append(lifted_loop(kernel, key, kernel.init(X0)))
    assert traces[0] == 1
    for want, got in zip(plain, lifted, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    # The sweep moved the chains: the step size reached the one program.
    assert not np.allclose(lifted[0], lifted[-1])


def test_mass_matrix_sweep_shares_the_program_until_its_shape_changes() -> None:
    lifted_loop, _, traces = _counted_loops()
    key = jax.random.key(1)
    for scale in (0.5, 1.0, 2.0):
        kernel = lift.lift(blackjax.hmc(logdensity, 0.1, scale * jnp.ones(2), 3))
        lifted_loop(kernel, key, kernel.init(X0))
    assert traces[0] == 1
    dense = lift.lift(blackjax.hmc(logdensity, 0.1, jnp.eye(2), 3))
    lifted_loop(dense, key, dense.init(X0))
    assert traces[0] == 2


def test_lift_jit_over_kernel_step_traces_once_for_every_kernel() -> None:
    traces = collections.Counter[str]()

    def counted(x: jax.Array) -> jax.Array:
        # MALA's step evaluates it once per trace. A `Counter`, not a list: lift
        # rebuilds a captured list (a pytree) with the function, and the count
        # would go to the copy.
        traces["traces"] += 1
        return logdensity(x)

    key = jax.random.key(2)
    results: dict[str, list[jax.Array]] = {}
    counts: dict[str, int] = {}
    for jit in (jax.jit, lift.jit):
        name = jit.__module__.split(".")[0]
        results[name] = []
        counts[name] = 0
        for step_size in STEP_SIZES:
            kernel = blackjax.mala(counted, step_size)
            state = kernel.init(X0)
            traces.clear()
            step = jit(kernel.step)
            for i in range(3):
                state, _ = step(jax.random.fold_in(key, i), state)
            counts[name] += traces["traces"]
            results[name].append(state.position)
    assert counts == {"jax": len(STEP_SIZES), "lift": 1}
    for want, got in zip(results["jax"], results["lift"], strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_kernels_built_inside_vmap_leave_it_lifted() -> None:
    key = jax.random.key(3)

    def one_chain(step_size: jax.Array) -> jax.Array:
        kernel = blackjax.hmc(logdensity, step_size, jnp.ones(2), 3)
        state, _ = kernel.step(key, kernel.init(X0))
        return state.position

    inside = jax.vmap(one_chain)(jnp.asarray(STEP_SIZES))
    kernels = jax.vmap(
        lambda s: lift.lift(blackjax.hmc(logdensity, s, jnp.ones(2), 3))
    )(jnp.asarray(STEP_SIZES))
    assert type(kernels).__name__ == "SamplingAlgorithm"
    assert kernels.step.captures["kernel_args"][0].shape == (len(STEP_SIZES),)

    def step_once(kernel: Any) -> jax.Array:
        state, _ = kernel.step(key, kernel.init(X0))
        return state.position

    outside = jax.vmap(step_once)(kernels)
    np.testing.assert_allclose(outside, inside, rtol=1e-6, atol=1e-6)


def test_window_adaptation_kernel_returned_from_jit_only_lifted() -> None:
    key = jax.random.key(4)
    warmup = blackjax.window_adaptation(
        blackjax.hmc, logdensity, num_integration_steps=3
    )

    def adapt(key: jax.Array) -> tuple[Any, Any]:
        (state, parameters), _ = warmup.run(key, X0, num_steps=10)
        return state, blackjax.hmc(logdensity, **parameters)

    with pytest.raises(TypeError, match="not a valid JAX type"):
        jax.jit(adapt)(key)

    state, kernel = jax.jit(lambda key: lift.lift(adapt(key)))(key)
    step_size = kernel.step.captures["kernel_args"][0]
    assert float(step_size) > 0  # a concrete array, not a tracer of `adapt`
    # The adapted kernel has the structure of a hand-made one: same program.
    lifted_loop, _, traces = _counted_loops()
    made = lift.lift(blackjax.hmc(logdensity, 0.1, jnp.ones(2), 3))
    lifted_loop(made, key, made.init(X0))
    lifted_loop(kernel, key, state)
    assert traces[0] == 1


def test_integer_settings_stay_static() -> None:
    lifted_loop, _, traces = _counted_loops()
    key = jax.random.key(5)
    for steps in (2, 3, 4):
        kernel = lift.lift(blackjax.hmc(logdensity, 0.1, jnp.ones(2), steps))
        lifted_loop(kernel, key, kernel.init(X0))
    assert traces[0] == 3
    why = lift.diff(
        lift.lift(blackjax.hmc(logdensity, 0.1, jnp.ones(2), 3)),
        lift.lift(blackjax.hmc(logdensity, 0.1, jnp.ones(2), 5)),
    )
    assert why is not None
    assert "3 vs 5, static because it is an int" in str(why)
