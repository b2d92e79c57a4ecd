"""`lift.jit` serves what Python computes now when a helper whose closure
variable is rebound sits inside a value the walk keeps static: the watch
follows what the walk reads there (issue 53, item 4)."""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any

import jax
import pytest
from helpers import TraceCounter

import lift


def _behind(kind: str, helper: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A step calling `helper` through a holder of `kind`."""
    if kind == "jax.custom_jvp":
        h = jax.custom_jvp(helper)
        h.defjvp(lambda p, t: (helper(p[0]), t[0]))
        return lambda x: h(x)
    if kind == "jax.custom_vjp":
        v = jax.custom_vjp(helper)
        v.defvjp(lambda x: (helper(x), None), lambda r, g: (g,))
        return lambda x: v(x)
    if kind == "jax.tree_util.Partial":
        p = jax.tree_util.Partial(helper)
        return lambda x: p(x)
    if kind == "weakref.ref":
        r = weakref.ref(helper)
        return lambda x: r()(x)  # pyright: ignore[reportOptionalCall]
    if kind == "type-keyed dict":
        table = {int: helper, float: helper}
        return lambda x: table[float](x)
    assert kind == "functools.singledispatch"

    @functools.singledispatch
    def dispatch(x: Any) -> Any:
        return helper(x)

    @dispatch.register(int)
    def _(x: int) -> Any:
        return helper(x) + 1

    return lambda x: dispatch(x)


_KINDS = [
    "jax.custom_jvp",
    "jax.custom_vjp",
    "jax.tree_util.Partial",
    "weakref.ref",
    "type-keyed dict",
    "functools.singledispatch",
]


@pytest.mark.parametrize("kind", _KINDS)
def test_a_rebound_helper_behind_a_static_holder_is_seen(kind: str) -> None:
    scale = 2.0

    def helper(x: Any) -> Any:
        return x * scale

    step = _behind(kind, helper)
    jitted = lift.jit(step)
    assert float(jitted(1.0)) == 2.0
    scale = 3.0
    assert float(step(1.0)) == 3.0
    assert float(jitted(1.0)) == 3.0
    del helper  # the weak reference's helper lives in `step`'s cell


@pytest.mark.parametrize("kind", ["jax.tree_util.Partial", "type-keyed dict"])
def test_an_unchanged_static_holder_compiles_once(kind: str) -> None:
    counter = TraceCounter()
    scale = 2.0

    def helper(x: Any) -> Any:
        counter()
        return x * scale

    jitted = lift.jit(_behind(kind, helper))
    assert [float(jitted(float(x))) for x in range(3)] == [0.0, 2.0, 4.0]
    assert counter.traces == 1
