"""`lift.flax`'s containers as the routes the docs give take them: `dynamic=`
at construction, and flax's nnx + orbax restore recipe compiling a
`lift.flax.Optimizer` step no more often than flax's own `nnx.Optimizer`."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import optax
import pytest
from flax import nnx, serialization
from flax.training import train_state

import lift
import lift.flax

X = jnp.asarray([[1.0, -0.5], [0.25, 2.0], [-1.5, 0.5]])

# What XLA compiles, as JAX reports it (one listener for the module: JAX 0.8
# has no way to remove one).
_COMPILED: list[str] = []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, duration, **kwargs: (
        _COMPILED.append(event)
        if event == "/jax/core/compile/backend_compile_duration"
        else None
    )
)


@functools.cache
def _trainer(optimizer: Any, dynamic: str | None = None) -> Any:
    """A model and its optimizer, one class for each (nnx's graph keys on it)."""
    options = {} if dynamic is None else {"dynamic": dynamic}

    class Trainer(nnx.Module):
        def __init__(self, lr: float) -> None:
            self.model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
            self.optimizer = optimizer(
                self.model, optax.adam(lr), wrt=nnx.Param, **options
            )

    return Trainer


def _step() -> tuple[Any, list[int]]:
    traces = [0]

    @nnx.jit
    def step(trainer: Any) -> None:
        traces[0] += 1
        grads = nnx.grad(lambda m: jnp.mean(m(X) ** 2))(trainer.model)
        trainer.optimizer.update(trainer.model, grads)

    return step, traces


def _compiles_after_restore(optimizer: Any, path: Path) -> tuple[int, int, Any]:
    """flax's nnx + orbax recipe for a trainer holding `optimizer`: save after
    two steps, restore through `eval_shape`, split and merge, take two more.
    The programs compiled and traces made by the two steps after the restore."""
    ocp = pytest.importorskip("orbax.checkpoint")
    trainer_class = _trainer(optimizer)
    step, traces = _step()
    trainer = trainer_class(0.1)
    step(trainer)
    step(trainer)
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, nnx.state(trainer))
    checkpointer.wait_until_finished()
    graphdef, abstract = nnx.split(nnx.eval_shape(lambda: trainer_class(0.5)))
    restored = nnx.merge(graphdef, checkpointer.restore(path, abstract))
    _COMPILED.clear()
    before = traces[0]
    step(restored)
    step(restored)
    return len(_COMPILED), traces[0] - before, restored


def test_a_restored_optimizer_compiles_no_more_than_flaxs_own(tmp_path: Path):
    flax_compiles, _, _ = _compiles_after_restore(nnx.Optimizer, tmp_path / "flax")
    compiles, traces, restored = _compiles_after_restore(
        lift.flax.Optimizer, tmp_path / "lift"
    )
    # orbax commits what it restores to a device; so are the hyperparameters,
    # weakly typed as lift made them: one program for the committed placement,
    # then the same for the committed values the step returns.
    assert flax_compiles == 1
    assert compiles <= flax_compiles
    assert traces == 0  # flax's own traces again: its optimizer is static data
    held = jax.tree.leaves(nnx.state(restored, lift.flax.Hyperparameter))
    assert held and all(x.weak_type and x.committed for x in held)


def test_optimizer_takes_dynamic_names_and_sweeps_bitwise_as_flaxs_own():
    step, traces = _step()
    plain_step, _ = _step()
    for lr in [0.1, 0.01]:
        ours = _trainer(lift.flax.Optimizer, "step_size")(lr)
        plain = _trainer(nnx.Optimizer)(lr)
        # Only the learning rate (optax's `step_size`, -lr) is a hyperparameter.
        held = jax.tree.leaves(nnx.state(ours, lift.flax.Hyperparameter))
        assert [float(x) for x in held] == [pytest.approx(-lr)]
        for _ in range(2):
            step(ours)
            plain_step(plain)
        got, want = nnx.state(ours.model), nnx.state(plain.model)
        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
            assert jnp.array_equal(a, b), lr
    assert traces[0] == 1
    with pytest.raises(lift.LiftError, match=r"learning_rate"):
        lift.flax.Optimizer(
            nnx.Linear(2, 3, rngs=nnx.Rngs(0)),
            optax.adam(0.1),
            wrt=nnx.Param,
            dynamic="learning_rate",
        )


def test_train_state_create_takes_dynamic_names():
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(model)

    def apply(p: Any, x: jax.Array) -> jax.Array:
        return nnx.merge(graphdef, p)(x)

    traces = [0]

    @jax.jit
    def step(state: Any) -> Any:
        traces[0] += 1
        grads = jax.grad(lambda p: jnp.mean(state.apply_fn(p, X) ** 2))(state.params)
        return state.apply_gradients(grads=grads)

    plain_step = jax.jit(step.__wrapped__)
    for lr in [0.1, 0.01]:
        state = lift.flax.TrainState.create(
            apply_fn=apply, params=params, tx=optax.adam(lr), dynamic="step_size"
        )
        assert [float(x) for x in jax.tree.leaves(state.tx)] == [pytest.approx(-lr)]
        plain = train_state.TrainState.create(
            apply_fn=apply, params=params, tx=optax.adam(lr)
        )
        got, want = step(step(state)), plain_step(plain_step(plain))
        for a, b in zip(
            jax.tree.leaves(got.params), jax.tree.leaves(want.params), strict=True
        ):
            assert jnp.array_equal(a, b), lr
    # Two rates, one program (the plain step, run through the same counter, adds
    # one per rate).
    assert traces[0] == 1 + 2
    assert serialization.to_state_dict(state)["tx"]  # the rate is saved
