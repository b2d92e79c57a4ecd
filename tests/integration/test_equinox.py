"""equinox interop: a `Lifted` as a Module field, through `equinox.filter_jit`,
and capturing a Module."""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import TraceCounter

import lift


def _params() -> dict[str, jax.Array]:
    return {"w": jnp.asarray([1.0, -2.0, 0.5])}


def _loss(p: dict[str, jax.Array]) -> jax.Array:
    return jnp.sum(jnp.sin(p["w"]) ** 2)


class Trainer(eqx.Module):
    """A Module holding a lifted optimizer as a field."""

    opt: Any

    def step(self, p: Any, s: Any) -> tuple[Any, Any]:
        u, s = self.opt.update(jax.grad(_loss)(p), s, p)
        return optax.apply_updates(p, u), s


def _plain(lr: float, steps: int = 3) -> Any:
    opt = optax.adam(lr)
    p = _params()
    s = opt.init(p)
    for _ in range(steps):
        u, s = opt.update(jax.grad(_loss)(p), s, p)
        p = optax.apply_updates(p, u)
    return p


def _run(step: Any, trainer: Trainer, steps: int = 3) -> Any:
    p = _params()
    s = trainer.opt.init(p)
    for _ in range(steps):
        p, s = step(trainer, p, s)
    return p


def test_lifted_as_a_module_field_through_jax_jit() -> None:
    counter = TraceCounter()
    step = counter.jit(Trainer.step)
    for lr in (0.1, 0.01):
        trainer = Trainer(lift.lift(optax.adam(lr)))
        # The optimizer's captures are the Module's leaves.
        assert len(jax.tree.leaves(trainer)) == len(jax.tree.leaves(trainer.opt)) > 0
        np.testing.assert_allclose(_run(step, trainer)["w"], _plain(lr)["w"], rtol=1e-5)
    assert counter.traces == 1


def test_lifted_through_filter_jit() -> None:
    traces = 0

    @eqx.filter_jit
    def step(trainer: Trainer, p: Any, s: Any) -> tuple[Any, Any]:
        nonlocal traces
        traces += 1
        return trainer.step(p, s)

    for lr in (0.1, 0.01, 0.001):
        trainer = Trainer(lift.lift(optax.adam(lr)))
        np.testing.assert_allclose(_run(step, trainer)["w"], _plain(lr)["w"], rtol=1e-5)
    assert traces == 1


def test_filter_jit_sees_every_lifted_leaf_as_dynamic() -> None:
    opt = lift.lift(optax.adam(0.1))
    dynamic, static = eqx.partition(opt, eqx.is_array)
    assert jax.tree.leaves(static) == []
    assert len(jax.tree.leaves(dynamic)) == len(jax.tree.leaves(opt))
    combined = eqx.combine(dynamic, static)
    assert jax.tree.structure(combined) == jax.tree.structure(opt)


def test_lifted_capturing_a_module() -> None:
    def make(seed: int) -> Any:
        model = eqx.nn.MLP(2, 1, 4, 1, key=jax.random.key(seed))

        @lift.lift
        def predict(x: jax.Array) -> jax.Array:
            return model(x)

        return predict, model

    counter = TraceCounter()
    apply = counter.jit(lambda f, x: f(x))
    x = jnp.asarray([0.5, -1.0])
    for seed in (0, 1):
        predict, model = make(seed)
        # The Module's arrays are the lifted function's leaves, named by path.
        # (The Module's activation functions are static.)
        arrays = jax.tree.leaves(eqx.filter(model, eqx.is_array))
        assert len(jax.tree.leaves(predict)) == len(arrays) == 4
        assert any(
            "model" in jax.tree_util.keystr(k)
            for k, _ in jax.tree_util.tree_leaves_with_path(predict)
        )
        np.testing.assert_allclose(apply(predict, x), model(x), rtol=1e-6)
    assert counter.traces == 1

    # Gradients with respect to the lifted function reach the Module's weights.
    predict, model = make(0)
    grads = jax.grad(lambda f: jnp.sum(f(x)))(predict)
    want = eqx.filter_grad(lambda m: jnp.sum(m(x)))(model)
    got = sorted(np.asarray(g).ravel().tolist() for g in jax.tree.leaves(grads))
    expected = sorted(np.asarray(g).ravel().tolist() for g in jax.tree.leaves(want))
    for a, b in zip(got, expected, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_module_field_under_filter_vmap() -> None:
    lrs = jnp.asarray([0.1, 0.01])
    trainers = eqx.filter_vmap(lambda lr: Trainer(lift.lift(optax.adam(lr))))(lrs)
    p = jax.tree.map(lambda a: jnp.stack([a, a]), _params())
    s = eqx.filter_vmap(lambda t, p: t.opt.init(p))(trainers, p)
    step = eqx.filter_jit(eqx.filter_vmap(Trainer.step))
    for _ in range(3):
        p, s = step(trainers, p, s)
    for i, lr in enumerate((0.1, 0.01)):
        np.testing.assert_allclose(p["w"][i], _plain(lr)["w"], rtol=1e-5)


def _where_path(suffix: str) -> Any:
    """An `eqx.tree_at` selector: the leaves whose key path ends with `suffix`."""

    def where(tree: Any) -> list[Any]:
        return [
            leaf
            for path, leaf in jax.tree_util.tree_leaves_with_path(tree)
            if jax.tree_util.keystr(path).endswith(suffix)
        ]

    return where


def test_tree_at_replaces_a_capture() -> None:
    def make(lr: float) -> Any:
        return lift.lift(lambda g: -lr * g)

    scale = make(0.1)
    # By variable, through `captures`, or by key path: the same leaf.
    by_name = eqx.tree_at(lambda f: f.captures["lr"], scale, jnp.asarray(0.5))
    by_path = eqx.tree_at(_where_path(".captures['lr']"), scale, [jnp.asarray(0.5)])
    for new in (by_name, by_path):
        assert lift.is_lifted(new)
        assert float(new(2.0)) == -1.0
    assert float(scale(2.0)) == pytest.approx(-0.2)  # the original is untouched


def test_tree_at_changes_a_module_optimizer_rate_without_recompiling() -> None:
    counter = TraceCounter()
    step = counter.jit(Trainer.step)
    trainer = Trainer(lift.lift(optax.adam(0.1)))
    # optax's adam ends in `scale(-learning_rate)`: its `step_size`.
    where = _where_path(".captures['step_size']")
    [rate] = where(trainer.opt.update)
    assert float(rate) == pytest.approx(-0.1)
    for lr in (0.1, 0.01):
        trainer = eqx.tree_at(
            lambda t: where(t.opt.update), trainer, [jnp.asarray(-lr)]
        )
        np.testing.assert_allclose(_run(step, trainer)["w"], _plain(lr)["w"], rtol=1e-5)
    assert counter.traces == 1


class Frozen(eqx.Module):
    """The pitfall: a `Lifted` in a static field is part of the treedef."""

    opt: Any = eqx.field(static=True)


def test_static_field_pitfall() -> None:
    # equinox warns (the Lifted holds arrays), and every new optimizer is a new
    # static value: one program each. A plain field (`Trainer`) compiles once.
    traces = {"static": 0, "field": 0}

    @eqx.filter_jit
    def apply(module: Any, g: jax.Array, kind: str) -> jax.Array:
        traces[kind] += 1
        return module.opt(g)

    g = jnp.ones(2)
    for lr in (0.1, 0.2, 0.3):
        with pytest.warns(UserWarning, match="JAX array is being set as static"):
            frozen = Frozen(lift.lift(lambda g, lr=lr: -lr * g))
        np.testing.assert_allclose(apply(frozen, g, "static"), -lr * g, rtol=1e-6)
        field = Trainer(lift.lift(lambda g, lr=lr: -lr * g))
        np.testing.assert_allclose(apply(field, g, "field"), -lr * g, rtol=1e-6)
    assert traces == {"static": 3, "field": 1}


def test_a_capture_replaced_by_a_python_float_compiles_once_under_filter_jit():
    import equinox as eqx

    def make(lr):
        return lift.lift(lambda x: x * lr)

    traces = []

    @eqx.filter_jit
    def call(f, x):
        traces.append(None)
        return f(x)

    base = make(0.1)
    for lr in (0.2, 0.3, 0.4):
        call(eqx.tree_at(lambda f: f.captures["lr"], base, lr), jnp.ones(2))
    assert len(traces) == 1
