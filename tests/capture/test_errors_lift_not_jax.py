"""Where lift promises its own message, JAX's raw error does not come out: a
tracer held by a dispatch table of functions (`{int: f, float: g}`, keys JAX
cannot sort), and a dynamic capture used as the key of a dict whose values are
traced."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import pytest

import lift


def test_tracer_in_a_dispatch_table_is_named_not_a_sorting_error() -> None:
    tables: list[dict[type, Any]] = []

    @jax.jit
    def trace(x):
        tables.append({int: lambda v: v * x, float: lambda v: v + x})
        return x

    with jax.check_tracer_leaks(False):  # the leak is what lift refuses
        trace(1.0)
    table = tables[0]

    def use(v):
        return table[float](v)

    with pytest.raises(lift.LiftError, match="hidden-tracer") as info:
        lift.lift(use)
    message = str(info.value)
    assert "'table'" in message and "keys JAX cannot sort" in message
    assert "captures['x']" in message


def test_dispatch_table_without_tracers_lifts() -> None:
    lr = 0.5
    table = {int: lambda v: v * 2, float: lambda v: v * lr}
    lifted = lift.lift(lambda v: table[float](v))
    assert lifted(2.0) == 1.0


def _select(lr: float):
    return lambda y: {0.1: y, 0.01: 2 * y}[lr]


@pytest.mark.parametrize("jit", [jax.jit, lift.jit], ids=["jax.jit", "lift.jit"])
def test_dynamic_capture_as_key_of_a_dict_of_traced_values_is_named(jit) -> None:
    def run() -> object:
        if jit is jax.jit:
            return jax.jit(lambda f, y: f(y))(lift.lift(_select(0.1)), jnp.ones(()))
        return lift.jit(_select(0.1))(jnp.ones(()))

    with pytest.raises(lift.LiftError, match="control-flow-on-a-capture") as info:
        run()
    message = str(info.value)
    assert "'lr' as a hashed Python value" in message
    assert "static=('lr',)" in message
    # The fix works: static, `lr` selects a value.
    fixed = lift.lift(_select(0.01), static="lr")
    assert jax.jit(lambda f, y: f(y))(fixed, jnp.ones(())) == 2.0


def test_traced_argument_as_the_key_is_not_blamed_on_a_capture() -> None:
    lr = 0.1

    def pick(y):
        return {0.1: lr, 0.01: 2 * lr}[y]

    with pytest.raises(TypeError, match="unhashable") as info:
        jax.jit(lambda f, y: f(y))(lift.lift(pick), jnp.ones(()))
    assert not isinstance(info.value, lift.LiftError)
