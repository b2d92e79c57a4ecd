"""flax interop: `TrainState` and `nnx.Optimizer` sweeps that compile once per
structure (`lift.flax`), and flax serialization of a `Lifted` (leaves by key path)."""

from __future__ import annotations

import copy
import functools
import subprocess
import sys
import textwrap
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import linen, nnx, serialization, struct
from flax.training import train_state

import lift
import lift.flax

LRS = (0.1, 0.01, 0.001)
X = jnp.asarray([[1.0, -0.5], [0.25, 2.0], [-1.5, 0.5]])


class Model(linen.Module):
    @linen.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return linen.Dense(3)(x)


# One module: `apply_fn` is static, and bound methods of two equal-looking
# modules compare unequal.
MODEL = Model()


# Through one program: eager `init` under JAX's leak checker compiles each op
# afresh (about 0.4 s a call, and twenty tests call it).
_init = jax.jit(MODEL.init)


def _params() -> Any:
    return _init(jax.random.key(0), X)


def _loss(params: Any, apply_fn: Any) -> jax.Array:
    return jnp.mean(apply_fn(params, X) ** 2)


def _train(step: Any, state: Any, steps: int = 3) -> Any:
    for _ in range(steps):
        state = step(state)
    return state


@functools.cache
def _plain_params(lr: float, steps: int = 3) -> Any:
    """flax's own `TrainState` with a plain optimizer (one program per rate)."""
    state = train_state.TrainState.create(
        apply_fn=MODEL.apply, params=_params(), tx=optax.adam(lr)
    )
    step, _ = _counted_step()
    return _train(step, state, steps).params


def _counted_step() -> tuple[Any, list[int]]:
    traces = [0]

    @jax.jit
    def step(state: Any) -> Any:
        traces[0] += 1
        grads = jax.grad(_loss)(state.params, state.apply_fn)
        return state.apply_gradients(grads=grads)

    return step, traces


def _assert_close(a: Any, b: Any) -> None:
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(x, y, rtol=2e-5, atol=1e-6)


# -- TrainState ----------------------------------------------------------------


def test_flax_train_state_with_a_lifted_tx_compiles_once_per_rate() -> None:
    # The pitfall, measured: flax's `tx` is a static field, so each lifted
    # optimizer is a new static value and a new program.
    step, traces = _counted_step()
    for lr in LRS:
        _train(
            step,
            train_state.TrainState.create(
                apply_fn=MODEL.apply, params=_params(), tx=lift.lift(optax.adam(lr))
            ),
        )
    assert traces[0] == len(LRS)


def test_lift_flax_train_state_sweep_compiles_once() -> None:
    step, traces = _counted_step()
    for lr in LRS:
        state = lift.flax.TrainState.create(
            apply_fn=MODEL.apply, params=_params(), tx=optax.adam(lr)
        )
        assert lift.is_lifted(state.tx.update)  # lifted by `create`
        # The learning rate is a leaf of the state.
        assert any(
            "step_size" in jax.tree_util.keystr(path)
            for path, _ in jax.tree_util.tree_leaves_with_path(state)
        )
        state = _train(step, state)
        _assert_close(state.params, _plain_params(lr))
        assert int(state.step) == 3
    assert traces[0] == 1


def test_lift_flax_train_states_vmapped_over_the_rate() -> None:
    # A batch of states, one per rate, trained together in one program.
    states = jax.vmap(
        lambda lr: lift.flax.TrainState.create(
            apply_fn=MODEL.apply, params=_params(), tx=optax.adam(lr)
        )
    )(jnp.asarray(LRS))

    def step(state: Any) -> Any:
        grads = jax.grad(_loss)(state.params, state.apply_fn)
        return state.apply_gradients(grads=grads)

    states = _train(jax.jit(jax.vmap(step)), states)
    for i, lr in enumerate(LRS):
        _assert_close(jax.tree.map(lambda a: a[i], states.params), _plain_params(lr))


def test_a_struct_field_subclass_is_the_same_recipe() -> None:
    # Without `lift.flax`: `tx` redeclared as a pytree field, lifted by hand.
    class TrainState(train_state.TrainState):
        tx: Any = struct.field(pytree_node=True)

    step, traces = _counted_step()
    for lr in LRS:
        state = TrainState.create(
            apply_fn=MODEL.apply, params=_params(), tx=lift.lift(optax.adam(lr))
        )
        _assert_close(_train(step, state).params, _plain_params(lr))
    assert traces[0] == 1


def test_lift_flax_train_state_keeps_a_lifted_tx_and_subclasses() -> None:
    class WithStats(lift.flax.TrainState):
        stats: Any = None

    tx = lift.lift(optax.sgd(0.1))
    state = WithStats.create(
        apply_fn=MODEL.apply, params=_params(), tx=tx, stats=jnp.zeros(2)
    )
    assert state.tx.update is tx.update  # a lifted optimizer is kept
    step, traces = _counted_step()
    for _ in range(2):
        state = step(state)
    assert isinstance(state, WithStats)
    assert traces[0] == 1


def test_the_constructor_and_replace_lift_tx_too() -> None:
    # `tx` is lifted wherever it is set, so a new optimizer put in with
    # `replace` (or the plain constructor) reuses the compiled step.
    step, traces = _counted_step()
    tx = optax.adam(LRS[0])
    state = lift.flax.TrainState(
        step=0,
        apply_fn=MODEL.apply,
        params=_params(),
        tx=tx,
        opt_state=tx.init(_params()),
    )
    assert lift.is_lifted(state.tx.update)
    _assert_close(_train(step, state).params, _plain_params(LRS[0]))
    for lr in LRS[1:]:
        fresh = state.replace(tx=optax.adam(lr))
        assert lift.is_lifted(fresh.tx.update) and lift.is_lifted(fresh.tx.init)
        _assert_close(_train(step, fresh).params, _plain_params(lr))
    assert traces[0] == 1
    # A rate computed under jit: the replaced optimizer captures the tracer.
    rate = jax.jit(lambda s, lr: s.replace(tx=optax.adam(lr)))(state, 0.25)
    [step_size] = [
        leaf
        for path, leaf in jax.tree_util.tree_leaves_with_path(rate.tx.update)
        if jax.tree_util.keystr(path).endswith("['step_size']")
    ]
    assert float(step_size) == -0.25


def test_replace_lifts_an_optimizer_object_and_keeps_tree_maps() -> None:
    # `optax.MultiSteps` as `tx`: lifted by `create` and by `replace`, with its
    # own API kept (`has_updated` on the state's optimizer).
    state = lift.flax.TrainState.create(
        apply_fn=MODEL.apply, params=_params(), tx=optax.MultiSteps(optax.sgd(0.1), 2)
    )
    step, traces = _counted_step()
    state = step(state)
    assert not state.tx.has_updated(state.opt_state)
    state = step(state.replace(tx=optax.MultiSteps(optax.sgd(0.2), 2)))
    assert state.tx.has_updated(state.opt_state)
    assert traces[0] == 1
    # Tree maps rebuild the state with other leaves, and keep its `tx` as it is.
    axes = jax.tree.map(lambda _: 0, state)
    assert jax.tree.structure(axes) == jax.tree.structure(state)
    cleared = jax.tree.map(
        lambda _: None,
        state,
        is_leaf=lambda x: isinstance(x, optax.GradientTransformation),
    )
    assert cleared.tx is None


def test_a_subclass_with_its_own_post_init_lifts_tx() -> None:
    class Checked(lift.flax.TrainState):
        def __post_init__(self) -> None:
            super().__post_init__()
            assert lift.is_lifted(self.tx.update)

    state = Checked.create(apply_fn=MODEL.apply, params=_params(), tx=optax.sgd(0.1))
    state = state.replace(tx=optax.sgd(0.2))
    step, traces = _counted_step()
    step(step(state))
    assert traces[0] == 1


# -- nnx.Optimizer ---------------------------------------------------------------


def _nnx_run(make: Any, lr: float, step: Any) -> Any:
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    optimizer = make(model, optax.adam(lr))
    for _ in range(3):
        step(model, optimizer)
    return nnx.state(model, nnx.Param)


def _nnx_step() -> tuple[Any, list[int]]:
    traces = [0]

    @nnx.jit
    def step(model: Any, optimizer: Any) -> None:
        traces[0] += 1
        grads = nnx.grad(lambda m: jnp.mean(m(X) ** 2))(model)
        optimizer.update(model, grads)

    return step, traces


def test_nnx_optimizer_refuses_a_lifted_tx() -> None:
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="static attribute 'tx'"):
        nnx.Optimizer(model, lift.lift(optax.adam(0.1)), wrt=nnx.Param)


def test_lift_flax_optimizer_sweep_compiles_once() -> None:
    plain_step, plain_traces = _nnx_step()
    step, traces = _nnx_step()
    for lr in LRS:
        want = _nnx_run(
            lambda m, tx: nnx.Optimizer(m, tx, wrt=nnx.Param), lr, plain_step
        )
        got = _nnx_run(
            lambda m, tx: lift.flax.Optimizer(m, tx, wrt=nnx.Param), lr, step
        )
        _assert_close(got, want)
    assert traces[0] == 1
    assert plain_traces[0] == len(LRS)


def test_copies_of_a_lift_flax_optimizer() -> None:
    # nnx deep-copies its graph definition, treedefs of lifted functions included.
    step, traces = _nnx_step()
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    optimizer = lift.flax.Optimizer(model, optax.adam(0.1), wrt=nnx.Param)
    for copied in (copy.deepcopy(optimizer), nnx.clone(optimizer)):
        assert isinstance(copied, lift.flax.Optimizer)
        assert jax.tree.structure(copied.tx) == jax.tree.structure(optimizer.tx)
        step(nnx.clone(model), copied)
    assert traces[0] == 1
    assert int(optimizer.step[...]) == 0  # the original is untouched


def test_assigning_tx_to_a_lift_flax_optimizer_lifts_it() -> None:
    # nnx would keep a plain optimizer's closures as static data: a new program
    # for every optimizer assigned.
    step, traces = _nnx_step()
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    optimizer = lift.flax.Optimizer(model, optax.adam(LRS[0]), wrt=nnx.Param)
    step(model, optimizer)
    for lr in LRS[1:]:
        optimizer.tx = optax.adam(lr)
        assert lift.is_lifted(optimizer.tx.update)
        step(model, optimizer)
    assert traces[0] == 1
    # The assigned rate is the one used: one step from the same start as
    # `nnx.Optimizer` with that rate.
    plain_step, _ = _nnx_step()
    start = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    ours, theirs = nnx.clone(start), nnx.clone(start)
    optimizer = lift.flax.Optimizer(ours, optax.adam(LRS[0]), wrt=nnx.Param)
    optimizer.tx = optax.adam(LRS[2])
    step(ours, optimizer)
    plain_step(theirs, nnx.Optimizer(theirs, optax.adam(LRS[2]), wrt=nnx.Param))
    _assert_close(nnx.state(ours, nnx.Param), nnx.state(theirs, nnx.Param))


def test_optimizer_state_moves_between_nnx_and_lift_flax_optimizers() -> None:
    # `nnx.Optimizer`'s state has no `tx`: it updates a `lift.flax.Optimizer`,
    # which keeps its own. The other way, the `tx` entry is dropped by hand.
    plain_step, _ = _nnx_step()
    step, _ = _nnx_step()
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    plain = nnx.Optimizer(model, optax.adam(0.1), wrt=nnx.Param)
    plain_step(model, plain)
    restored = nnx.clone(model)
    ours = lift.flax.Optimizer(restored, optax.adam(0.1), wrt=nnx.Param)
    tx = vars(ours)["tx"]  # (read as an attribute, it is a new pure copy)
    nnx.update(ours, nnx.state(plain))
    assert vars(ours)["tx"] is tx and int(ours.step[...]) == 1
    _assert_close(nnx.state(ours, nnx.OptState), nnx.state(plain, nnx.OptState))
    # Training on from there is training on from `nnx.Optimizer`'s state.
    step(restored, ours)
    plain_step(model, plain)
    _assert_close(nnx.state(restored, nnx.Param), nnx.state(model, nnx.Param))

    back = nnx.Optimizer(
        nnx.Linear(2, 3, rngs=nnx.Rngs(2)), optax.adam(0.1), wrt=nnx.Param
    )
    state = nnx.state(ours)
    with pytest.raises(ValueError, match="immutable node"):
        nnx.update(back, state)
    state = nnx.state(ours)
    state.pop("tx")
    nnx.update(back, state)
    assert int(back.step[...]) == 2
    _assert_close(nnx.state(back, nnx.OptState), nnx.state(ours, nnx.OptState))


def test_an_nnx_data_subclass_is_the_same_recipe() -> None:
    # Without `lift.flax`: `tx` declared data before `nnx.Optimizer` sets it.
    class Optimizer(nnx.Optimizer[Any]):
        def __init__(self, model: Any, tx: Any, **kwargs: Any) -> None:
            self.tx = nnx.data(tx)
            super().__init__(model, tx, **kwargs)

    step, traces = _nnx_step()
    for lr in LRS:
        _nnx_run(
            lambda m, tx: Optimizer(m, lift.lift(tx), wrt=nnx.Param),
            lr,
            step,
        )
    assert traces[0] == 1


# -- nnx checkpoints -------------------------------------------------------------


class _Trainer(nnx.Module):
    """A model and the lifted optimizer of its parameters: the state a
    training run checkpoints."""

    def __init__(self, lr: float, rngs: nnx.Rngs | None = None) -> None:
        self.model = nnx.Linear(2, 3, rngs=rngs or nnx.Rngs(0))
        self.optimizer = lift.flax.Optimizer(
            self.model, optax.adamw(lr, weight_decay=0.05), wrt=nnx.Param
        )


def _trainer_step() -> tuple[Any, list[int]]:
    traces = [0]

    @nnx.jit
    def step(trainer: _Trainer) -> None:
        traces[0] += 1
        grads = nnx.grad(lambda m: jnp.mean(m(X) ** 2))(trainer.model)
        trainer.optimizer.update(trainer.model, grads)

    return step, traces


def _hyperparameters(node: Any) -> list[jax.Array]:
    return jax.tree.leaves(nnx.state(node, lift.flax.Hyperparameter))


def _assert_equal_states(a: Any, b: Any) -> None:
    sa, sb = nnx.state(a), nnx.state(b)
    assert jax.tree.structure(sa) == jax.tree.structure(sb)
    for x, y in zip(jax.tree.leaves(sa), jax.tree.leaves(sb), strict=True):
        np.testing.assert_array_equal(x, y)


def test_the_hyperparameters_are_variables_of_the_state() -> None:
    optimizer = _Trainer(0.1).optimizer
    held = nnx.state(optimizer, lift.flax.Hyperparameter)
    # adamw's b1, b2, eps, eps_root, weight_decay (in `init` and `update`), lr.
    assert len(jax.tree.leaves(held)) == 7
    assert all(x.weak_type for x in jax.tree.leaves(held))
    # `nnx.OptState` takes what it takes from `nnx.Optimizer`: not these.
    plain = nnx.Optimizer(
        nnx.Linear(2, 3, rngs=nnx.Rngs(0)), optax.adam(0.1), wrt=nnx.Param
    )
    assert jax.tree.structure(nnx.state(optimizer, nnx.OptState)) == (
        jax.tree.structure(nnx.state(plain, nnx.OptState))
    )
    # Read as an attribute, `tx` is the lifted optimizer optax's way: arrays
    # for leaves, its functions called directly as `nnx.Optimizer` calls them.
    tx = optimizer.tx
    assert lift.is_lifted(tx.update)
    assert not any(
        isinstance(x, nnx.Variable)
        for x in jax.tree.leaves(tx, is_leaf=lambda x: isinstance(x, nnx.Variable))
    )
    params = {"w": jnp.ones(3)}
    want = optax.adamw(0.1, weight_decay=0.05)
    got, _ = tx.update(params, tx.init(params), params)
    expected, _ = want.update(params, want.init(params), params)
    _assert_close(got, expected)


def _saved_checkpoint(tmp_path: Any) -> tuple[Any, list[int], _Trainer, Any]:
    """A trainer (rate 0.1) after one compiled step, saved by orbax under
    `tmp_path / "state"`: the step, its trace count, the trainer, the
    checkpointer."""
    ocp = pytest.importorskip("orbax.checkpoint")
    step, traces = _trainer_step()
    saved = _Trainer(0.1)
    step(saved)
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(tmp_path / "state", nnx.state(saved))
    checkpointer.wait_until_finished()
    return step, traces, saved, checkpointer


def test_orbax_restores_through_eval_shape_split_and_merge(tmp_path: Any) -> None:
    # flax's checkpointing guide: an abstract target from `nnx.eval_shape`,
    # split, restored into by orbax, merged.
    step, traces, saved, checkpointer = _saved_checkpoint(tmp_path)

    abstract = nnx.eval_shape(lambda: _Trainer(0.5))
    graphdef, abstract_state = nnx.split(abstract)
    assert len(jax.tree.leaves(nnx.state(abstract, lift.flax.Hyperparameter))) == 7
    restored = nnx.merge(
        graphdef, checkpointer.restore(tmp_path / "state", abstract_state)
    )
    # Everything came back, the learning rate of the checkpoint included, with
    # the weak types lift gave the hyperparameters (orbax gives strong ones).
    _assert_equal_states(restored, saved)
    assert all(x.weak_type for x in _hyperparameters(restored))
    # Committed to their device, as orbax commits the rest (test_flax_routes.py
    # counts the compiles): otherwise nothing for `jax.jit` to key apart.
    why = lift.diff(saved.optimizer.tx, restored.optimizer.tx) or ""
    assert all("committed to" in line for line in why.splitlines()), why
    # The step compiled before serves the restored state: no new trace, and
    # training on is training on from the saved state.
    step(restored)
    step(saved)
    assert traces[0] == 1
    _assert_equal_states(restored, saved)


def test_orbax_restores_into_a_live_trainer_with_nnx_update(tmp_path: Any) -> None:
    # The guide's other form: restore into the abstract state, `nnx.update`
    # an existing object with it. Its optimizer takes the saved rate.
    step, traces, saved, checkpointer = _saved_checkpoint(tmp_path)

    live = _Trainer(0.5, rngs=nnx.Rngs(3))
    step(live)
    _, abstract_state = nnx.split(nnx.eval_shape(lambda: _Trainer(0.5)))
    nnx.update(live, checkpointer.restore(tmp_path / "state", abstract_state))
    _assert_equal_states(live, saved)
    assert all(x.weak_type for x in _hyperparameters(live))
    step(live)
    step(saved)
    assert traces[0] == 1
    _assert_equal_states(live, saved)


def test_nnx_update_between_two_lift_flax_optimizers() -> None:
    step, traces = _trainer_step()
    source = _Trainer(0.1)
    step(source)
    target = _Trainer(0.5, rngs=nnx.Rngs(3))
    nnx.update(target, nnx.state(source))
    _assert_equal_states(target, source)
    step(target)
    step(source)
    assert traces[0] == 1
    _assert_equal_states(target, source)
    # The optimizer alone, too.
    other = lift.flax.Optimizer(
        nnx.Linear(2, 3, rngs=nnx.Rngs(0)),
        optax.adamw(0.7, weight_decay=0.05),
        wrt=nnx.Param,
    )
    nnx.update(other, nnx.state(source.optimizer))
    _assert_equal_states(other, source.optimizer)


def test_hyperparameters_set_from_bare_arrays_stay_weakly_typed() -> None:
    # A state of strongly typed NumPy arrays (a restore without flax's
    # Variables): the learning rate is set, its weak type kept, and the step
    # compiled before still serves.
    step, traces = _trainer_step()
    trainer = _Trainer(0.1)
    step(trainer)
    strong = jax.tree.map(
        lambda v: np.asarray(v[...]) * 2,
        nnx.state(trainer, lift.flax.Hyperparameter),
        is_leaf=lambda x: isinstance(x, nnx.Variable),
    )
    assert not any(getattr(x, "weak_type", False) for x in jax.tree.leaves(strong))
    nnx.update(trainer, strong)
    lrs = jax.tree.leaves(trainer.optimizer.tx.update)
    assert all(x.weak_type for x in lrs) and float(lrs[-1]) == pytest.approx(-0.2)
    step(trainer)
    assert traces[0] == 1
    # The same through a copy of the Variables (`jax.tree.map` over the state).
    held = nnx.state(trainer, lift.flax.Hyperparameter)
    copied = jax.tree.map(np.asarray, held)
    assert all(x.weak_type for x in jax.tree.leaves(copied))


def test_hyperparameters_of_other_widths_are_set_as_given() -> None:
    # A NumPy learning rate is held strongly typed, as lift keeps it; a weak
    # one set from a float16 array stays float16: lift makes no weak float16.
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    numpy_rate = lift.flax.Optimizer(model, optax.sgd(np.float32(0.1)), wrt=nnx.Param)
    assert _hyperparameters(numpy_rate) == [np.float32(-0.1)]
    trainer = _Trainer(0.1)
    half = jax.tree.map(
        lambda v: np.asarray(v[...], dtype=np.float16),
        nnx.state(trainer, lift.flax.Hyperparameter),
        is_leaf=lambda x: isinstance(x, nnx.Variable),
    )
    nnx.update(trainer, half)
    lrs = jax.tree.leaves(trainer.optimizer.tx.update)
    assert all(
        x.dtype == np.float16 and not getattr(x, "weak_type", False) for x in lrs
    )


# -- serialization ---------------------------------------------------------------


def _trained(lr: float) -> Any:
    step, _ = _counted_step()
    state = lift.flax.TrainState.create(
        apply_fn=MODEL.apply, params=_params(), tx=optax.adamw(lr, weight_decay=0.05)
    )
    return _train(step, state, 2)


def test_to_bytes_round_trip_restores_the_optimizer_leaves() -> None:
    saved = _trained(0.1)
    data = serialization.to_bytes(saved)
    # The target's learning rate is replaced by the saved one; the code is the
    # target's.
    target = lift.flax.TrainState.create(
        apply_fn=MODEL.apply, params=_params(), tx=optax.adamw(0.5, weight_decay=0.05)
    )
    restored = serialization.from_bytes(target, data)
    assert jax.tree.structure(restored) == jax.tree.structure(saved)
    for a, b in zip(jax.tree.leaves(restored), jax.tree.leaves(saved), strict=True):
        np.testing.assert_array_equal(a, b)
    # Leaves keep their dtype and weak type, so the restored state reuses the
    # compiled step and computes what the saved one would.
    for a, b in zip(
        jax.tree.leaves(restored.tx), jax.tree.leaves(saved.tx), strict=True
    ):
        assert a.dtype == b.dtype and a.weak_type == b.weak_type
    step, traces = _counted_step()
    _assert_close(step(restored).params, step(saved).params)
    assert traces[0] == 1


@pytest.mark.parametrize("via", ["bytes", "state dict"])
def test_a_resumed_train_state_reuses_the_compiled_step(via: str) -> None:
    # flax restores every leaf as a NumPy array, strongly typed; `step` was a
    # weakly typed int32 (a Python 0, then `step + 1`), and `jax.jit` keys on
    # weak types: a resumed state compiled its step a second time.
    step, traces = _counted_step()
    saved = _train(
        step,
        lift.flax.TrainState.create(
            apply_fn=MODEL.apply, params=_params(), tx=optax.adam(0.1)
        ),
        2,
    )
    assert traces[0] == 1
    target = lift.flax.TrainState.create(
        apply_fn=MODEL.apply, params=_params(), tx=optax.adam(0.5)
    )
    if via == "bytes":
        resumed = serialization.from_bytes(target, serialization.to_bytes(saved))
    else:
        resumed = serialization.from_state_dict(
            target, serialization.to_state_dict(saved)
        )
    assert resumed.step.weak_type and resumed.step.dtype == saved.step.dtype
    assert lift.diff(saved, resumed) is None
    _assert_close(step(resumed).params, step(saved).params)
    assert int(step(resumed).step) == 3
    assert traces[0] == 1


def test_a_flax_checkpoint_resumes_into_lift_flax_without_a_recompile() -> None:
    step, traces = _counted_step()
    flax_state = train_state.TrainState.create(
        apply_fn=MODEL.apply, params=_params(), tx=optax.adam(0.1)
    )
    data = serialization.to_bytes(_train(step, flax_state, 2))
    fresh = lift.flax.TrainState.create(
        apply_fn=MODEL.apply, params=_params(), tx=optax.adam(0.1)
    )
    step(fresh)
    assert traces[0] == 2  # flax's own state, then lift.flax's
    resumed = serialization.from_bytes(fresh, data)
    assert int(step(resumed).step) == 3
    assert traces[0] == 2


def test_state_dict_holds_leaves_by_key_path() -> None:
    saved = _trained(0.1)
    state = serialization.to_state_dict(saved)
    update = state["tx"]["update"]
    assert all(isinstance(k, str) for k in update)
    paths = {
        jax.tree_util.keystr(p): leaf
        for p, leaf in jax.tree_util.tree_leaves_with_path(saved.tx.update)
    }
    assert update.keys() == paths.keys()
    # optax's `scale(-learning_rate)`: readable in the checkpoint by its path.
    [rate] = [k for k in update if k.endswith(".captures['step_size']")]
    assert float(update[rate]) == pytest.approx(-0.1)
    assert state["tx"]["init"].keys() == {
        jax.tree_util.keystr(p)
        for p, _ in jax.tree_util.tree_leaves_with_path(saved.tx.init)
    }

    target = _trained(0.01)
    restored = serialization.from_state_dict(target, state)
    assert jax.tree.structure(restored) == jax.tree.structure(target)
    for a, b in zip(
        jax.tree.leaves(restored.tx), jax.tree.leaves(saved.tx), strict=True
    ):
        np.testing.assert_array_equal(a, b)


def test_orbax_checkpoints_the_state_dict(tmp_path: Any) -> None:
    # orbax names leaves by key entries of JAX's own kinds only, so it saves the
    # state dict (strings and arrays), restored into the target by flax.
    import orbax.checkpoint as ocp

    saved = _trained(0.1)
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(tmp_path / "state", serialization.to_state_dict(saved))
    checkpointer.wait_until_finished()
    target = _trained(0.01)
    raw = checkpointer.restore(tmp_path / "state", serialization.to_state_dict(target))
    restored = serialization.from_state_dict(target, raw)
    assert jax.tree.structure(restored) == jax.tree.structure(saved)
    for a, b in zip(
        jax.tree.leaves(restored.tx), jax.tree.leaves(saved.tx), strict=True
    ):
        np.testing.assert_array_equal(a, b)
    _assert_close(restored.params, saved.params)


def test_a_state_dict_of_another_optimizer_is_refused() -> None:
    state = serialization.to_state_dict(lift.lift(optax.adam(0.1)))
    with pytest.raises(
        lift.LiftError,
        match=r"(?s)does not fit the lifted function chain\.<locals>\.update_fn .*"
        r"missing .*unexpected .*\nFix: restore into a target made by the same code"
        r".*\nDocs: python -m lift explain state-dict-mismatch$",
    ):
        serialization.from_state_dict(lift.lift(optax.sgd(0.1, momentum=0.9)), state)


def test_a_leaf_of_another_shape_is_refused() -> None:
    def make(w: Any) -> Any:
        return lift.lift(lambda x: w * x)

    state = serialization.to_state_dict(make(jnp.ones(3)))
    with pytest.raises(
        lift.LiftError,
        match=r"(?s)The state dict's \.captures\['w'\] has shape \(3,\), the "
        r"target's \(2,\)\.\nFix: .*\nDocs: python -m lift explain state-dict-mismatch$",
    ):
        serialization.from_state_dict(make(jnp.ones(2)), state)


def test_a_flax_train_state_checkpoint_restores_with_the_target_optimizer() -> None:
    # flax's `TrainState` saves no optimizer: its checkpoint restores into
    # `lift.flax.TrainState` (a subclass too), keeping the target's `tx`.
    class Plain(train_state.TrainState):
        stats: Any = None

    class Lifted(lift.flax.TrainState):
        stats: Any = None

    step, _ = _counted_step()
    saved = _train(
        step,
        Plain.create(
            apply_fn=MODEL.apply,
            params=_params(),
            tx=optax.adam(0.1),
            stats=jnp.arange(2.0),
        ),
    )
    assert "tx" not in serialization.to_state_dict(saved)
    target = Lifted.create(
        apply_fn=MODEL.apply, params=_params(), tx=optax.adam(0.1), stats=jnp.zeros(2)
    )
    restored = serialization.from_bytes(target, serialization.to_bytes(saved))
    assert isinstance(restored, Lifted)
    assert restored.tx is target.tx
    assert int(restored.step) == 3
    np.testing.assert_array_equal(restored.stats, [0.0, 1.0])
    _assert_close(restored.params, saved.params)
    _assert_close(restored.opt_state, saved.opt_state)
    # Training on from there is training on from flax's state.
    _assert_close(step(restored).params, step(saved).params)
    # Any other missing field is still refused, as flax does.
    state = serialization.to_state_dict(saved)
    del state["stats"]
    with pytest.raises(ValueError, match="Missing field stats in state dict"):
        serialization.from_state_dict(target, state)
    with pytest.raises(ValueError, match=r'Unknown field.*"extra"'):
        serialization.from_state_dict(target, {**state, "stats": 0, "extra": 1})


def test_a_lift_checkpoint_into_flax_train_state_drops_tx_by_hand() -> None:
    # The other way: flax's `TrainState` has no field for the saved optimizer
    # and says so; without the `tx` entry the rest restores.
    saved = _trained(0.1)
    target = train_state.TrainState.create(
        apply_fn=MODEL.apply, params=_params(), tx=optax.adamw(0.1, weight_decay=0.05)
    )
    data = serialization.to_bytes(saved)
    with pytest.raises(ValueError, match=r'Unknown field.*"tx"'):
        serialization.from_bytes(target, data)
    state = serialization.msgpack_restore(data)
    del state["tx"]
    restored = serialization.from_state_dict(target, state)
    assert int(restored.step) == 2
    _assert_close(restored.params, saved.params)
    _assert_close(restored.opt_state, saved.opt_state)


def test_subclasses_serialize_too() -> None:
    class Schedule(lift.Lifted):
        pass

    def make(lr: float) -> Any:
        return Schedule(lambda step: lr * 0.5**step)

    data = serialization.to_bytes({"s": make(0.3)})
    restored = serialization.from_bytes({"s": make(0.7)}, data)
    assert isinstance(restored["s"], Schedule)
    assert float(restored["s"](1)) == pytest.approx(0.15)


def test_copies_of_a_lifted_train_state() -> None:
    saved = _trained(0.1)
    for copied in (copy.copy(saved), copy.deepcopy(saved)):
        # (A deep copy copies `apply_fn`'s module too: a new static value.)
        assert jax.tree.structure(copied.tx) == jax.tree.structure(saved.tx)
        step, _ = _counted_step()
        _assert_close(step(copied).params, step(saved).params)


def test_flax_handlers_are_registered_lazily() -> None:
    # `import lift` and lifting never import flax; importing flax afterwards
    # (even with no `import lift.flax`) registers handlers for `Lifted` and for
    # subclasses defined before and after it.
    code = textwrap.dedent(
        """
        import sys
        import lift

        class Before(lift.Lifted):
            pass

        def make(lr):
            return lift.lift(lambda g: -lr * g)

        made = make(0.1)
        assert "flax" not in sys.modules

        from flax import serialization

        class After(lift.Lifted):
            pass

        for cls in (lift.Lifted, Before, After):
            assert serialization.is_serializable(cls), cls
        state = serialization.to_state_dict(made)
        assert list(state) == [".captures['lr']"], state
        print("ok")
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == "ok\n"


def test_import_lift_flax_without_flax_says_how_to_install_it() -> None:
    # `None` in `sys.modules` makes `import flax` fail as if it were not installed.
    code = textwrap.dedent(
        """
        import sys
        sys.modules["flax"] = None
        try:
            import lift.flax
        except ModuleNotFoundError as err:
            print(type(err).__name__, err.name)
            print(err)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "ModuleNotFoundError flax",
        "lift.flax needs flax, which is not installed.",
        'Fix: pip install "jax-lift[flax]"  (or: pip install flax)',
    ]


def test_train_state_replace_with_a_new_optimizer_still_jits():
    import optax

    import lift.flax

    @jax.jit
    def step(state, x):
        grads = jax.grad(lambda p: jnp.sum((p["w"] * x - 2.0) ** 2))(state.params)
        return state.apply_gradients(grads=grads)

    state = lift.flax.TrainState.create(
        apply_fn=None, params={"w": jnp.ones(3)}, tx=optax.adam(0.1)
    )
    state = step(state, jnp.ones(3))
    state = state.replace(tx=optax.adam(0.05))
    assert step(state, jnp.ones(3)).params["w"].shape == (3,)


def test_a_flax_train_state_checkpoint_restores_into_lift_flax_train_state():
    import optax
    from flax import serialization
    from flax.training import train_state

    import lift.flax

    saved = train_state.TrainState.create(
        apply_fn=None, params={"w": jnp.ones(2)}, tx=optax.adam(0.1)
    )
    target = lift.flax.TrainState.create(
        apply_fn=None, params={"w": jnp.zeros(2)}, tx=optax.adam(0.1)
    )
    restored = serialization.from_bytes(target, serialization.to_bytes(saved))
    assert (restored.params["w"] == 1.0).all()


def test_diff_names_only_the_static_fields_that_differ():
    import optax
    from flax.training import train_state

    class Model:
        def apply(self, params, x):
            return params["w"] * x

    model = Model()

    def state():
        return train_state.TrainState.create(
            apply_fn=model.apply, params={"w": jnp.ones(2)}, tx=optax.sgd(0.1)
        )

    a, b = state(), state()
    same_tx = b.replace(tx=a.tx)
    # apply_fn alone does not make the treedefs differ: JAX compares it with ==.
    assert jax.tree.structure(a) == jax.tree.structure(same_tx)
    assert lift.diff(a, same_tx) is None
    found = lift.diff(a, b)
    assert found is not None and ".tx" in found
    assert ".apply_fn" not in found


class _Counter(nnx.Module):
    def __init__(self) -> None:
        self.count = nnx.BatchStat(jnp.array(0))
        self.w = nnx.Param(jnp.ones(2))

    def __call__(self, x: jax.Array) -> jax.Array:
        self.count[...] += 1
        return x * self.w[...]


def test_an_nnx_module_keeps_its_state_lifted() -> None:
    # Plain Python: calling the module counts in its own `count`. lift acts
    # on the user's module (lifted itself, it holds no function to lift: it is
    # kept), or refuses; a copy counting in its place is what this rules out.
    m = _Counter()
    lifted = lift.lift(m)
    assert lifted is m
    lifted(jnp.ones(2))
    assert int(m.count[...]) == 1

    m = _Counter()

    def step(x: jax.Array) -> jax.Array:
        return m(x)

    # A closure over it: the module holds arrays, so lift rebuilds it around
    # them, and the call that counts in the copy is refused.
    with pytest.raises(lift.LiftError, match=r"step .* mutated the captured .*'m'"):
        lift.lift(step)(jnp.ones(2))
    assert int(m.count[...]) == 0

    m = _Counter()
    with pytest.raises(lift.LiftError, match=r"self"):
        lift.lift(m.__call__)(jnp.ones(2))
    assert int(m.count[...]) == 0


def _fork(depth: int, a: float, b: float) -> Any:
    """Two closures `depth` functions deep under a third as deep: their
    leaves' key paths differ only in the middle, which a long path elides."""

    def chain(f: Any) -> Any:
        for _ in range(depth):
            f = (lambda g: lambda x: g(x))(f)
        return f

    left, right = chain(_scaled(a)), chain(_scaled(b))
    return chain(lambda x: left(x) + right(x))


def _scaled(v: float) -> Any:
    return lambda x: v * x


def test_leaves_whose_elided_key_paths_print_alike_keep_their_own_keys() -> None:
    saved = lift.lift(_fork(20, 0.5, 0.25))
    state = serialization.to_state_dict(saved)
    first, second = state
    assert second == f"{first} (leaf 1)"
    assert "...(52 more)..." in first
    restored = serialization.from_state_dict(lift.lift(_fork(20, 1.0, 1.0)), state)
    assert [float(x) for x in jax.tree.leaves(restored)] == [0.5, 0.25]


def test_a_state_dict_restores_into_an_abstract_target_as_saved() -> None:
    # `jax.eval_shape` gives a target of shapes and dtypes (as orbax restores
    # into): its leaves are the state dict's values, unconverted.
    saved = lift.lift(_scaled(0.5))
    state = serialization.to_state_dict(saved)
    restored = serialization.from_state_dict(jax.eval_shape(lambda: saved), state)
    assert jax.tree.leaves(restored) == [state[".captures['v']"]]


class _WithExtra(lift.flax.TrainState):
    extra: Any = None


def test_a_field_none_in_the_target_restores_what_the_state_dict_holds() -> None:
    # Another structure than the target's: restored as flax gives it.
    def make(extra: Any) -> Any:
        return _WithExtra.create(
            apply_fn=None, params={"w": jnp.ones(2)}, tx=optax.sgd(0.1), extra=extra
        )

    saved = serialization.to_state_dict(make({"count": np.int32(3)}))
    restored = serialization.from_state_dict(make(None), saved)
    assert restored.extra == {"count": np.int32(3)}
