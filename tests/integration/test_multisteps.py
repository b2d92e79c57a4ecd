"""`optax.MultiSteps`, an object rather than a pytree: lifting it (or its
`gradient_transformation()`) gives an optimizer whose inner learning rate is a
leaf, so a sweep compiles once."""

from __future__ import annotations

import copy
import functools
import pickle
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import TraceCounter

import lift

LRS = (0.1, 0.01, 0.001)
STEPS = 4


def _params() -> dict[str, jax.Array]:
    return {"w": jnp.asarray([1.0, -2.0, 0.5])}


def _grad(p: Any) -> Any:
    return jax.tree.map(jnp.sin, p)


@functools.cache
def _plain(lr: float, k: int) -> Any:
    """optax's own `MultiSteps`, compiled once per rate."""
    ms = optax.MultiSteps(optax.adam(lr), k)

    @jax.jit
    def step(p: Any, s: Any) -> Any:
        u, s = ms.update(_grad(p), s, p)
        return optax.apply_updates(p, u), s

    p = _params()
    s = ms.init(p)
    for _ in range(STEPS):
        p, s = step(p, s)
    return p


def _sweep(make: Any, k: int = 2) -> int:
    traces = 0

    @jax.jit
    def step(opt: Any, p: Any, s: Any) -> Any:
        nonlocal traces
        traces += 1
        u, s = opt.update(_grad(p), s, p)
        return optax.apply_updates(p, u), s

    for lr in LRS:
        opt = make(lr, k)
        p = _params()
        s = opt.init(p)
        for _ in range(STEPS):
            p, s = step(opt, p, s)
        np.testing.assert_allclose(p["w"], _plain(lr, k)["w"], rtol=1e-5)
    return traces


@pytest.mark.parametrize(
    "make",
    [
        lambda lr, k: lift.lift(optax.MultiSteps(optax.adam(lr), k)),
        lambda lr, k: lift.lift(
            optax.MultiSteps(optax.adam(lr), k).gradient_transformation()
        ),
    ],
    ids=["object", "gradient_transformation"],
)
def test_lifted_multisteps_sweep_compiles_once(make: Any) -> None:
    assert _sweep(make) == 1


def test_the_inner_learning_rate_is_a_leaf() -> None:
    opt = lift.lift(optax.MultiSteps(optax.sgd(0.25), 4))
    assert isinstance(opt, optax.GradientTransformation)
    assert lift.is_lifted(opt.init) and lift.is_lifted(opt.update)
    [(path, rate)] = [
        (jax.tree_util.keystr(path), leaf)
        for path, leaf in jax.tree_util.tree_leaves_with_path(opt.update)
        if jax.tree_util.keystr(path).endswith(".captures['step_size']")
    ]
    assert "['_opt']" in path
    assert float(rate) == -0.25
    # Two rates: one structure, and `lift.diff` finds nothing to tell apart.
    other = lift.lift(optax.MultiSteps(optax.sgd(0.5), 4))
    assert jax.tree.structure(other) == jax.tree.structure(opt)
    assert lift.diff(other.update, opt.update) is None


def test_every_k_is_static() -> None:
    # The number of mini-steps is a Python int: another value, another program.
    a = lift.lift(optax.MultiSteps(optax.adam(0.1), 2))
    b = lift.lift(optax.MultiSteps(optax.adam(0.1), 3))
    assert jax.tree.structure(a) != jax.tree.structure(b)
    assert _sweep(lambda lr, k: lift.lift(optax.MultiSteps(optax.adam(lr), k)), 3) == 1


def test_the_original_object_is_untouched_and_has_updated_still_works() -> None:
    ms = optax.MultiSteps(optax.adam(0.1), 2)
    before = dict(vars(ms))
    opt = lift.lift(ms)
    assert vars(ms) == before
    p = _params()
    s = opt.init(p)
    _, s = opt.update(_grad(p), s, p)
    assert not ms.has_updated(s)
    _, s = opt.update(_grad(p), s, p)
    assert ms.has_updated(s)


def test_vmap_over_the_inner_learning_rate() -> None:
    rates = jnp.asarray(LRS)
    opts = jax.vmap(lambda lr: lift.lift(optax.MultiSteps(optax.adam(lr), 2)))(rates)
    p = jax.tree.map(lambda a: jnp.stack([a] * len(LRS)), _params())
    s = jax.vmap(lambda o, p: o.init(p))(opts, p)

    @jax.jit
    @jax.vmap
    def step(opt: Any, p: Any, s: Any) -> Any:
        u, s = opt.update(_grad(p), s, p)
        return optax.apply_updates(p, u), s

    for _ in range(STEPS):
        p, s = step(opts, p, s)
    for i, lr in enumerate(LRS):
        np.testing.assert_allclose(p["w"][i], _plain(lr, 2)["w"], rtol=1e-5)


@pytest.mark.parametrize(
    "make",
    [lambda: optax.adam(0.1), lambda: optax.MultiSteps(optax.adam(0.1), 2)],
    ids=["adam", "multisteps"],
)
def test_copies_of_a_lifted_optax_optimizer(make: Any) -> None:
    opt = lift.lift(make())
    p = _params()
    want = opt.update(_grad(p), opt.init(p), p)[0]
    for copied in (copy.copy(opt), copy.deepcopy(opt)):
        assert jax.tree.structure(copied) == jax.tree.structure(opt)
        got = copied.update(_grad(p), copied.init(p), p)[0]
        np.testing.assert_array_equal(got["w"], want["w"])
    # optax's functions are local closures, which pickle cannot name: the lifted
    # optimizer pickles exactly where the plain one does (flax serialization
    # saves its leaves instead: tests/integration/test_flax.py).
    # (AttributeError up to Python 3.13, PicklingError after.)
    refused = (AttributeError, pickle.PicklingError)
    with pytest.raises(refused, match="local object"):
        pickle.dumps(make())
    with pytest.raises(refused, match="local object"):
        pickle.dumps(opt)


def test_the_lifted_object_keeps_its_own_api() -> None:
    # `has_updated`, `inner_opt` and `gradient_transformation()` answer for the
    # lifted optimizer, eagerly, under jit (as an argument or a capture) and
    # through copies and `lift.unlift`.
    opt = lift.lift(optax.MultiSteps(optax.adam(0.1), every_k_schedule=2))
    assert isinstance(opt, optax.GradientTransformation)
    assert type(opt).__name__ == "MultiSteps"
    assert opt.gradient_transformation() is opt
    p = _params()
    s = opt.init(p)
    traces = 0

    @jax.jit
    def step(opt: Any, p: Any, s: Any) -> Any:
        nonlocal traces
        traces += 1
        u, s = opt.update(_grad(p), s, p)
        return optax.apply_updates(p, u), s, opt.has_updated(s)

    updated = []
    for _ in range(4):
        p, s, now = step(opt, p, s)
        updated.append(bool(now))
        assert bool(opt.has_updated(s)) == updated[-1]
        assert bool(jax.jit(lambda s: opt.has_updated(s))(s)) == updated[-1]
        for other in (copy.deepcopy(opt), lift.unlift(opt)):
            assert bool(other.has_updated(s)) == updated[-1]
    assert updated == [False, True, False, True]
    assert traces == 1
    # The inner optimizer, rebuilt with the current leaves: adam's rate.
    inner = opt.inner_opt
    u, _ = inner.update({"w": jnp.ones(3)}, inner.init(p), p)
    np.testing.assert_allclose(u["w"], -0.1 * jnp.ones(3), rtol=1e-4)
    with pytest.raises(AttributeError, match="'MultiSteps' object has no attribute"):
        _ = opt.no_such_attribute
    assert not hasattr(opt, "__deepcopy__")  # dunders are never forwarded


def test_the_api_reads_the_lifted_leaves() -> None:
    # Under vmap over the inner rate, `inner_opt` is each member's optimizer.
    rates = jnp.asarray(LRS)
    opts = jax.vmap(lambda lr: lift.lift(optax.MultiSteps(optax.sgd(lr), 2)))(rates)

    @jax.vmap
    def inner_update(opt: Any) -> Any:
        p = _params()
        inner = opt.inner_opt
        return inner.update({"w": jnp.ones(3)}, inner.init(p), p)[0]["w"]

    np.testing.assert_allclose(
        inner_update(opts), -rates[:, None] * jnp.ones(3), rtol=1e-6
    )
    # Lifting `gradient_transformation()` gives the same type, with the same API.
    via = lift.lift(optax.MultiSteps(optax.adam(0.1), 2).gradient_transformation())
    assert type(via) is type(lift.lift(optax.MultiSteps(optax.adam(0.5), 2)))
    assert not via.has_updated(via.init(_params()))


def test_a_lifted_multisteps_keeps_has_updated():
    import optax

    opt = lift.lift(optax.MultiSteps(optax.adam(0.1), every_k_schedule=2))
    params = {"w": jnp.ones(2)}
    state = opt.init(params)
    _, state = opt.update(params, state, params)
    assert not opt.has_updated(state)


class _ReturnsAnotherOptimizer:
    """A `gradient_transformation()` whose functions are not its own methods."""

    def gradient_transformation(self) -> Any:
        return optax.sgd(0.1)


class _SlottedMultiSteps:
    """Its state in slots, not in a `__dict__` lift could rebuild it from."""

    __slots__ = ("opt",)

    def __init__(self) -> None:
        self.opt = optax.sgd(0.1)

    def init(self, params: Any) -> Any:
        return self.opt.init(params)

    def update(self, grads: Any, state: Any, params: Any = None) -> Any:
        return self.opt.update(grads, state, params)

    def gradient_transformation(self) -> Any:
        return optax.GradientTransformation(self.init, self.update)


@pytest.mark.parametrize("cls", [_ReturnsAnotherOptimizer, _SlottedMultiSteps])
def test_an_object_lift_cannot_take_apart_is_refused_by_name(cls: type) -> None:
    with pytest.raises(
        lift.LiftError,
        match=rf"^lift\(\) got {cls.__name__} <.*, which is neither a function "
        r"nor a pytree holding functions\.",
    ):
        lift.lift(cls())


def test_the_api_of_a_multisteps_given_another_update_says_it_is_not_lifts():
    multi = lift.lift(optax.MultiSteps(optax.sgd(0.1), every_k_schedule=2))
    other = multi._replace(update=lift.lift(optax.sgd(0.1)).update)
    with pytest.raises(
        AttributeError,
        match=r"^this MultiSteps's update is function, not the one lift made: "
        r"its object's attributes are not known$",
    ):
        _ = other.has_updated


def test_a_sweep_of_a_step_capturing_a_multisteps_compiles_once() -> None:
    # The usual spelling: the step closes over the optimizer, and `lift.jit`
    # compiles it once for every rate, as it does for a captured `adam`.
    counter = TraceCounter()

    def make(lr: float) -> Any:
        ms = optax.MultiSteps(optax.adam(lr), 2)

        @lift.jit
        def step(p: Any, s: Any) -> Any:
            counter()
            u, s = ms.update(_grad(p), s, p)
            return optax.apply_updates(p, u), s

        return ms, step

    for lr in LRS:
        ms, step = make(lr)
        p = _params()
        s = ms.init(p)
        for _ in range(STEPS):
            p, s = step(p, s)
        np.testing.assert_allclose(p["w"], _plain(lr, 2)["w"], rtol=1e-5)
    assert counter.traces == 1
