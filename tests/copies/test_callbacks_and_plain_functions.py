"""A callback that reaches lift's copy is refused, however it reaches it; a
container that holds plain functions and no dynamic leaf is your own object.
Regression tests of issue 53 (items 2 and 3)."""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import io_callback

import lift


class Recorder:
    def __init__(self, losses: list[Any]) -> None:
        self.losses = losses

    def __call__(self, v: Any) -> None:
        self.losses.append(v)

    def record(self, v: Any) -> None:
        self.losses.append(v)


def _give(losses: list[Any], how: str, loss: Any) -> None:
    table = {"losses": losses}
    if how == "bound builtin method":
        jax.debug.callback(losses.append, loss)
    elif how == "io_callback":
        io_callback(losses.append, None, loss)
    elif how == "recorder object":
        jax.debug.callback(Recorder(losses), loss)
    elif how == "recorder method":
        jax.debug.callback(Recorder(losses).record, loss)
    elif how == "lambda through a dict":
        jax.debug.callback(lambda v: table["losses"].append(v), loss)
    else:
        jax.debug.callback(lambda v: losses.append(v), loss)


@pytest.mark.parametrize(
    "how",
    [
        "bound builtin method",
        "io_callback",
        "recorder object",
        "recorder method",
        "lambda through a dict",
        "lambda",
    ],
)
def test_a_callback_reaching_a_rebuilt_list_by_any_holder_is_refused(
    how: str,
) -> None:
    losses: list[Any] = [jnp.zeros(())]  # an array: lift rebuilds the list

    def step(x: Any) -> Any:
        loss = jnp.sum(x) + losses[0]
        _give(losses, how, loss)
        return loss

    with pytest.raises(
        lift.LiftError, match=r"(?s)step \(.*\) gave a callback .* lift's copy"
    ):
        jax.block_until_ready(jax.jit(lift.lift(step))(jnp.ones(3)))
    assert len(losses) == 1


def test_a_callback_holding_no_copy_is_not_refused() -> None:
    seen: list[Any] = []  # empty: your own object, filled by the callback
    scale = jnp.ones(())

    def step(x: Any) -> Any:
        loss = jnp.sum(x) * scale
        jax.debug.callback(seen.append, loss)
        return loss

    jax.block_until_ready(jax.jit(lift.lift(step))(jnp.ones(3)))
    jax.effects_barrier()
    assert len(seen) == 1


def log_hook(v: Any) -> None:
    del v


def _counter() -> tuple[Callable[[Any], Any], Any]:
    counter: Any = collections.defaultdict(lambda: 0)
    lr = 0.1

    def f(x: Any) -> Any:
        counter["calls"] += 1
        return x * lr

    return f, lambda: counter["calls"]


def _registry() -> tuple[Callable[[Any], Any], Any]:
    hooks = [log_hook]
    lr = 0.1

    def f(x: Any) -> Any:
        hooks.append(log_hook)
        return x * lr

    return f, lambda: len(hooks) - 1


def _nested_counter() -> tuple[Callable[[Any], Any], Any]:
    config: dict[str, Any] = {"lr": 0.1, "counts": collections.defaultdict(int)}
    config["counts"] = collections.defaultdict(lambda: 0)

    def f(x: Any) -> Any:
        config["counts"]["calls"] += 1
        return x * config["lr"]

    return f, lambda: config["counts"]["calls"]


_RUN: dict[str, Callable[[Callable[[Any], Any]], Any]] = {
    "eager": lambda f: lift.lift(f)(2.0),
    "jax.jit": lambda f: jax.jit(lambda g, x: g(x))(lift.lift(f), 2.0),
    "lift.jit": lambda f: lift.jit(f)(2.0),
}


@pytest.mark.parametrize("run", list(_RUN))
@pytest.mark.parametrize(
    "make",
    [_counter, _registry, _nested_counter],
    ids=["defaultdict(lambda: 0)", "[log_hook]", "nested defaultdict(lambda: 0)"],
)
def test_a_container_of_plain_functions_is_your_own(
    make: Callable[[], tuple[Callable[[Any], Any], Any]], run: str
) -> None:
    f, filled = make()
    out = _RUN[run](f)
    assert float(out) == pytest.approx(0.2)
    assert filled() == 1


def test_a_function_with_a_dynamic_capture_still_makes_its_list_a_copy() -> None:
    scale = 2.0
    hooks = [lambda v: v * scale]

    def f(x: Any) -> Any:
        hooks.append(log_hook)
        return hooks[0](x)

    with pytest.raises(lift.LiftError, match="mutated the captured variable 'hooks'"):
        lift.lift(f)(1.0)
    assert len(hooks) == 1


def _takes(x: Any, fs: Any) -> Any:
    return x * len(fs)


def test_a_partial_in_a_list_it_holds_is_your_own_list() -> None:
    # No dynamic leaf anywhere: nothing is rebuilt, so the cycle is no refusal.
    held: list[Any] = []
    p = functools.partial(_takes, fs=held)
    held.append(p)
    assert lift.lift(p)(2.0) == 2.0
