"""Breaks found by reviewing lift against its contract as an adversary.

Each test asserts what the contract promises and is marked
`xfail(strict=True)` with what is wrong today, so that it passes once fixed.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

import jax
import pytest

import lift


def _escaped() -> Any:
    """A tracer whose `jit` has exited."""
    box: list[Any] = []
    with jax.check_tracer_leaks(False):
        jax.jit(lambda x: box.append(x) or x)(1.0)
    return box[0]


# -- side effects on captured containers ---------------------------------------


def _augmented_item() -> tuple[Callable[[Any], Any], Any]:
    metrics = {"loss": 0.0}

    def step(x: Any) -> Any:
        metrics["loss"] += x
        return x

    return step, metrics


def _nested_append() -> tuple[Callable[[Any], Any], Any]:
    state: dict[str, Any] = {"lr": 0.5, "log": []}

    def step(x: Any) -> Any:
        state["log"].append(x)
        return x * state["lr"]

    return step, state


def _computed_index() -> tuple[Callable[[Any], Any], Any]:
    buf = [0.0, 0.0]

    def step(x: Any) -> Any:
        i = 0
        buf[i + 1] = x
        return x

    return step, buf


def _slice_store() -> tuple[Callable[[Any], Any], Any]:
    buf = [0.0, 0.0]

    def step(x: Any) -> Any:
        buf[:] = [x, x]
        return x

    return step, buf


def _heappush() -> tuple[Callable[[Any], Any], Any]:
    heap = [0.5]

    def step(x: Any) -> Any:
        heapq.heappush(heap, x)
        return x

    return step, heap


_MUTATION_REASON = (
    "the mutation analysis misses this pattern: the code mutates a silent copy "
    "of a captured container that holds a float, and lift does not refuse it"
)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(
            _augmented_item,
            id="metrics[k] += x",
            marks=pytest.mark.xfail(strict=True, reason=_MUTATION_REASON),
        ),
        pytest.param(_nested_append, id="state[k].append(x)"),
        pytest.param(
            _computed_index,
            id="buf[i + 1] = x",
            marks=pytest.mark.xfail(strict=True, reason=_MUTATION_REASON),
        ),
        pytest.param(
            _slice_store,
            id="buf[:] = ...",
            marks=pytest.mark.xfail(strict=True, reason=_MUTATION_REASON),
        ),
        pytest.param(
            _heappush,
            id="heapq.heappush(buf, x)",
            marks=pytest.mark.xfail(strict=True, reason=_MUTATION_REASON),
        ),
    ],
)
def test_a_mutated_container_holding_a_float_reaches_the_user_or_is_refused(
    make: Callable[[], tuple[Callable[[Any], Any], Any]],
) -> None:
    plain, expected = make()
    plain(2.0)
    step, container = make()
    refused = None
    try:
        lift.lift(step)(2.0)
    except lift.LiftError as err:
        refused = str(err)
    if refused is not None:
        assert "mutates" in refused
    else:
        assert container == expected
