"""One trial of a learning-rate sweep, as every sweep engine's example runs it.

A small MLP trained with `optax.adam(lr)` by a jitted step closing over the
optimizer, jitted one of three ways (`WAYS`): `jax.jit` (the rate a constant of
the program: a compile per rate), `lift.jit` (the rate an argument: one
program), or `lift.lift` (the optimizer a pytree argument of one jitted step).
`COUNTS` holds what JAX reported: compiles, and the persistent cache's hits and
misses. The engines' examples (`optuna_sweep.py`, `ray_tune_sweep.py`) import
it.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

import lift

WAYS = ("jax.jit", "lift.jit", "lift.lift")

# -- what JAX reports: compiles, and the persistent cache's hits and misses --

COUNTS = {"compiles": 0, "hits": 0, "misses": 0}
_NAMES = {
    "/jax/compilation_cache/cache_hits": "hits",
    "/jax/compilation_cache/cache_misses": "misses",
}


def _on_event(event: str, **_: Any) -> None:
    if event in _NAMES:
        COUNTS[_NAMES[event]] += 1


def _on_duration(event: str, duration: float, **_: Any) -> None:
    if event == "/jax/core/compile/backend_compile_duration":
        COUNTS["compiles"] += 1


jax.monitoring.register_event_listener(_on_event)
jax.monitoring.register_event_duration_secs_listener(_on_duration)

# -- the model: NumPy data, so that nothing compiles before the step ---------

RNG = np.random.default_rng(0)
X = RNG.normal(size=(64, 8)).astype(np.float32)
Y = np.sin(X.sum(axis=1, keepdims=True)).astype(np.float32)
PARAMS = {
    "w1": RNG.normal(size=(8, 32)).astype(np.float32) / 3,
    "b1": np.zeros(32, np.float32),
    "w2": RNG.normal(size=(32, 1)).astype(np.float32) / 6,
}


def loss_fn(params: Any, x: Any, y: Any) -> Any:
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    return jnp.mean((h @ params["w2"] - y) ** 2)


def make_step(way: str, opt: Any) -> Any:
    """A training step with `opt` in it, jitted the chosen way."""
    if way == "lift.lift":
        lifted = lift.lift(opt)
        return lambda params, state, x, y: lifted_step(lifted, params, state, x, y)
    jit = lift.jit if way == "lift.jit" else jax.jit

    @jit
    def step(params: Any, state: Any, x: Any, y: Any) -> Any:
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state, loss

    return step


@jax.jit
def lifted_step(opt: Any, params: Any, state: Any, x: Any, y: Any) -> Any:
    """One program for every lifted optimizer of one structure."""
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    updates, state = opt.update(grads, state, params)
    return optax.apply_updates(params, updates), state, loss


def use_cache(cache_dir: str) -> None:
    """JAX's persistent compilation cache in `cache_dir`, for every program."""
    jax.config.update("jax_compilation_cache_dir", cache_dir)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)


def train(way: str, lr: float, steps: int = 20) -> tuple[float, dict[str, int]]:
    """Train with `lr` the chosen way: the last loss, and what the steps
    compiled (not `opt.init`'s eager ops)."""
    opt = optax.adam(lr)
    step = make_step(way, opt)
    params, state = PARAMS, opt.init(PARAMS)
    before = dict(COUNTS)
    for _ in range(steps):
        params, state, loss = step(params, state, X, Y)
    return float(loss), {k: v - before[k] for k, v in COUNTS.items()}
