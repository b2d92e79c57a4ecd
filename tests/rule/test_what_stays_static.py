"""What the static rule keeps static so that every leaf is read by the call: a
function a static registry dispatches to, the entry of a config dict a branch
reads (and only it), a Python scalar the code rebinds."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import optax
import pytest
from helpers import TraceCounter, call_lifted

import lift

# -- a function reached through a static registry ---------------------------------


def _singledispatch(a: float) -> Any:
    @functools.singledispatch
    def scale(x: Any) -> Any:
        return a * x

    @scale.register(int)
    def _(x: int) -> Any:
        return a * x + 1

    return scale


def _wrapped_table(a: float) -> Any:
    # A hand-written dispatcher: a dict keyed by types (static as a whole),
    # and `functools.wraps` reaching the same function as an attribute.
    def impl(x: Any) -> Any:
        return a * x

    table = {float: impl, int: impl}

    @functools.wraps(impl)
    def call(x: Any) -> Any:
        return table[float](x)

    return call


def _shared_cell(a: float) -> Any:
    # The registry's function shares its cell with the lifted one.
    def impl(x: Any) -> Any:
        return a * x

    table = {float: impl, int: impl}
    return lambda x: table[float](x) + a


class _Handlers:
    """An object that is not a pytree: static, compared by identity."""

    run: Any = None


def _object_attribute(a: float) -> Any:
    def impl(x: Any) -> Any:
        return a * x

    handlers = _Handlers()
    handlers.run = impl

    @functools.wraps(impl)
    def call(x: Any) -> Any:
        return handlers.run(x)

    return call


@pytest.mark.parametrize(
    "make", [_singledispatch, _wrapped_table, _shared_cell, _object_attribute]
)
def test_a_function_a_static_registry_dispatches_to_leaves_no_dead_leaf(
    make: Any,
) -> None:
    # The registry calls the function itself: a leaf of its capture would never
    # be read (a zero gradient, a `tree_map` ignored). It is static instead.
    lifted = lift.lift(make(2.0))
    assert jax.tree_util.tree_leaves(lifted) == []
    assert float(lifted(3.0)) == float(make(2.0)(3.0))
    counter = TraceCounter()
    run = counter.jit(call_lifted)
    assert float(run(lift.lift(make(2.0)), 3.0)) == float(make(2.0)(3.0))
    assert float(run(lift.lift(make(5.0)), 3.0)) == float(make(5.0)(3.0))
    assert counter.traces == 2  # a new static value, a new program


def test_a_registry_holding_a_function_of_no_other_path_keeps_it_walked() -> None:
    # A float read directly, beside a registry of other functions: still a leaf.
    table = {float: abs, int: abs}

    def make(a: float) -> Any:
        return lambda x: table[float](x) * a

    lifted = lift.lift(make(2.0))
    assert float(jax.grad(lambda g: g(-3.0))(lifted).captures["a"]) == 3.0


def test_a_method_its_class_holds_keeps_its_leaves() -> None:
    # A class holds its methods as code, not as a registry the call goes
    # through: the bound method's function is walked, its captures leaves.
    def make(a: float) -> Any:
        class Model:
            def scale(self, x: Any, lr: float = 0.1) -> Any:
                return a * lr * x

        return Model().scale

    lifted = lift.lift(make(2.0))
    grads = jax.tree_util.tree_leaves(jax.grad(lambda g: g(3.0))(lifted))
    assert sorted(map(float, grads)) == pytest.approx([0.3, 6.0])  # lr x, a x


# -- a branch on one entry of a captured dict --------------------------------------


def _ppo_lr(config: dict[str, Any]) -> Any:
    def lr(step: Any) -> Any:
        if config["ANNEAL_LR"]:
            return config["LR"] * (1.0 - step / config["STEPS"])
        return config["LR"]

    return lr


def test_a_branch_on_one_config_entry_keeps_only_that_entry_static() -> None:
    counter = TraceCounter()
    run = counter.jit(call_lifted)
    for rate in (0.1, 0.2, 0.3):
        config = {"LR": rate, "ANNEAL_LR": True, "STEPS": 100}
        out = run(lift.lift(_ppo_lr(config)), 50.0)
        assert float(out) == pytest.approx(rate / 2)
    assert counter.traces == 1
    off = {"LR": 0.1, "ANNEAL_LR": False, "STEPS": 100}
    assert float(run(lift.lift(_ppo_lr(off)), 50.0)) == pytest.approx(0.1)
    assert counter.traces == 2  # the entry branched on is static


def test_a_float_entry_a_branch_reads_stays_static_and_its_siblings_dynamic() -> None:
    def make(config: dict[str, Any]) -> Any:
        return lambda x: x * config["lr"] if config["clip"] > 0.5 else x

    lifted = lift.lift(make({"clip": 1.0, "lr": 0.1}))
    paths = [
        jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(lifted)
    ]
    assert paths == [".captures['config']['lr']"]
    assert float(lifted(2.0)) == pytest.approx(0.2)


def test_a_branch_on_the_whole_dict_or_a_computed_key_keeps_it_static() -> None:
    def whole(config: dict[str, Any]) -> Any:
        return lambda x: x * config["lr"] if config else x

    def computed(config: dict[str, Any], key: str = "clip") -> Any:
        return lambda x: x * config["lr"] if config[key] > 0.5 else x

    for make in (whole, computed):
        assert (
            jax.tree_util.tree_leaves(lift.lift(make({"clip": 1.0, "lr": 0.1}))) == []
        )


# -- a Python scalar the code rebinds -------------------------------------------------


def test_a_schedule_called_before_lifting_lifts_with_decay_steps_static() -> None:
    # optax's cosine schedule rebinds `decay_steps` (`nonlocal`), a float once
    # called: static, as a branched-on float is; its other floats are leaves.
    schedule = optax.cosine_decay_schedule(0.1, 1000)
    expected = float(schedule(300))
    lifted = lift.lift(schedule)
    assert float(lifted(300)) == pytest.approx(expected)
    paths = {
        jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(lifted)
    }
    assert ".captures['init_value']" in paths
    assert ".captures['decay_steps']" not in paths
    assert "decay_steps=1000.0" in repr(lifted)
    other = optax.cosine_decay_schedule(0.1, 2000)
    other(0)
    assert "rebinds it" in lift.diff(lifted, lift.lift(other))
    opt = lift.lift(optax.adamw(schedule))
    params = {"w": jnp.ones(3)}
    updates, _ = jax.jit(lambda o, p: o.update(p, o.init(p), p))(opt, params)
    plain, _ = optax.adamw(schedule).update(
        params, optax.adamw(schedule).init(params), params
    )
    assert jnp.allclose(updates["w"], plain["w"])


def test_rebinding_an_array_or_a_function_is_still_refused() -> None:
    def make(v: Any) -> Any:
        def f(x: Any) -> Any:
            nonlocal v
            v = v
            return x

        return f

    for value in (jnp.ones(()), lambda y: y):
        with pytest.raises(lift.LiftError, match="rebinds the captured variable 'v'"):
            lift.lift(make(value))
    assert jax.tree_util.tree_leaves(lift.lift(make(0.5))) == []
