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


def test_a_partial_in_a_list_it_holds_is_refused_as_a_cycle() -> None:
    # A partial is no plain function: the list holding it is walked, and the
    # partial's cycle through it cannot be rebuilt.
    held: list[Any] = []
    p = functools.partial(_takes, fs=held)
    held.append(p)
    with pytest.raises(lift.LiftError, match="refer to each other in a cycle"):
        lift.lift(p)


def test_a_rebinding_in_a_function_a_list_holds_is_seen() -> None:
    # A function with a cell in a captured list is walked, not kept by
    # identity: rebinding its cell gives another treedef and what Python
    # computes now, under `jax.jit` and `lift.jit`.
    k = 2

    def h(x: Any) -> Any:
        return x * k

    fns = [h]

    def step(x: Any) -> Any:
        return fns[0](x)

    run = jax.jit(lambda f, x: f(x))
    jitted = lift.jit(step)
    assert float(run(lift.lift(step), 1.0)) == float(jitted(1.0)) == 2.0
    k = 3
    assert float(run(lift.lift(step), 1.0)) == float(jitted(1.0)) == 3.0


def test_equal_pytrees_with_distinct_static_data_do_not_share_a_skeleton() -> None:
    # Two captures whose static (aux) data are equal lists, each the closure's
    # own: each lifted function acts on its own list.
    @jax.tree_util.register_pytree_node_class
    class Box:
        def __init__(self, a: Any, log: list[str]) -> None:
            self.a, self.log = a, log

        def tree_flatten(self) -> Any:
            return (self.a,), self.log

        @classmethod
        def tree_unflatten(cls, log: Any, children: Any) -> Any:
            return cls(children[0], log)

    def make() -> Any:
        box = Box(jnp.ones(()), [])

        def f(v: Any) -> Any:
            box.log.append("called")
            return v * box.a

        return f, box

    (f1, b1), (f2, b2) = make(), make()
    lift.lift(f1)
    lift.lift(f2)(1.0)
    assert (b1.log, b2.log) == ([], ["called"])
