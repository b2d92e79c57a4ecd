"""An `equinox.Module` passed to a `lift.jit` function is neither an array nor
hashable: the refusal's fix is `eqx.filter_jit` over the lifted function, never
`static_argnames` (refused in turn); run as the message writes it, it works and
compiles once for a sweep of the closure's captures."""

from __future__ import annotations

import re
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest

import lift

traces = 0


def make_step(scale: float):
    def step(model, x):
        global traces
        traces += 1
        return model(x) * scale

    return step


def _fix(message: str) -> str:
    """The code of the message's fix: its first backquoted call."""
    found = re.search(r"Fix: [^`]*`([^`]+)`", message)
    assert found is not None, message
    return found[1]


@pytest.mark.parametrize(
    "options", [{}, {"static_argnames": ("model",)}], ids=["plain", "static_argnames"]
)
def test_equinox_model_refused_with_the_fix_that_works(options: dict[str, Any]) -> None:
    global traces
    model = eqx.nn.MLP(2, 2, 4, 1, key=jax.random.PRNGKey(0))
    x = jnp.ones(2)
    with pytest.raises(lift.LiftError) as info:
        lift.jit(make_step(0.5), **options)(model, x)
    fix = _fix(str(info.value))
    assert fix == "eqx.filter_jit(lift.lift(step))"
    assert "static_argnames" not in str(info.value)
    eqx.clear_caches()  # compiled by the other case
    traces = 0
    outs = [
        eval(fix, {"eqx": eqx, "lift": lift, "step": make_step(s)})(model, x)
        for s in (0.5, 1.0, 2.0)
    ]
    assert traces == 1  # one program for every scale: the scale is a leaf
    assert jnp.allclose(outs[2], 4 * outs[0])
    assert jnp.allclose(outs[1], model(x))


class Scaled(eqx.Module):
    w: jax.Array
    activation: Any

    @lift.jit
    def apply(self, x):
        return self.activation(self.w * x)


def test_equinox_method_refused_with_the_fix_that_works() -> None:
    module = Scaled(jnp.arange(2.0), jax.nn.relu)
    with pytest.raises(lift.LiftError) as info:
        module.apply(jnp.ones(2))
    fix = _fix(str(info.value))
    assert fix == "eqx.filter_jit(lift.lift(apply))"

    class Fixed(eqx.Module):
        w: jax.Array
        activation: Any

        def apply(self, x):
            return self.activation(self.w * x)

    Fixed.apply = eval(fix, {"eqx": eqx, "lift": lift, "apply": Fixed.apply})
    fixed = Fixed(jnp.arange(2.0), jax.nn.relu)
    assert jnp.array_equal(fixed.apply(jnp.ones(2)), jnp.arange(2.0))
