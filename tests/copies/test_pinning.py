"""A callback JAX keeps in a program fills the log of the closure it was
traced with.

Two closures of one code over two empty logs of your own are equal when
lifted: a log of yours is keyed by its contents. Once a traced call leaves a
callback reaching the log, logs with those contents are keyed by identity
too, so each closure gets a program of its own. The collector runs during
the call: an old callback freed then must not hide the one it made.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable
from typing import Any

import jax
import pytest

import lift
from lift._base.caches import BoundedDict
from lift._copies import own

# Whether the collector ran enabled in each traced call.
_ENABLED: list[bool] = []


# Programs holding one of JAX's callbacks each, which a call frees.
_OLD: list[Any] = []


def _old_callback(cycle: bool) -> None:
    """Leave a program holding one of JAX's callbacks, which the call frees.

    In a cycle, only a collection frees it; else emptying `_OLD` does, as a
    cache of JAX's emptied would."""
    junk: dict[str, Any] = {}
    junk["self"] = junk if cycle else None
    junk["f"] = lambda x: (jax.debug.callback(lambda _: None, x), x)[1]
    junk["program"] = jax.make_jaxpr(junk["f"])(1.0)
    if not cycle:
        _OLD.append(junk)


def _logger(log: list[Any], *, copy: bool, free: str) -> Callable[..., Any]:
    # With `copy`, the function holds a dict of a float: lift rebuilds it.
    table = {"scale": 0.5}

    def record(x: Any) -> Any:
        jax.debug.callback(lambda v: log.append(float(v)), x)
        _ENABLED.append(gc.isenabled())
        # Frees an older callback: the count is back where it was.
        if free == "a collection":
            gc.collect()
        elif free.startswith("a free"):
            _OLD.clear()
        return x

    def step(x: Any) -> Any:
        return record(x * 0.5)

    def step_with_copy(x: Any) -> Any:
        return record(x * table["scale"])

    return step_with_copy if copy else step


@pytest.fixture(autouse=True)
def _nothing_pinned(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each case starts with no log pinned: the one before does not pin for it.
    monkeypatch.setattr(own, "_PINNED", BoundedDict(4096))


@pytest.mark.parametrize(
    "free", ["", "a collection", "a free", "a free, an idle thread beside"]
)
@pytest.mark.parametrize("copy", [False, True], ids=["no copy", "a copy"])
@pytest.mark.parametrize("consumer", ["one jax.jit", "lift.jit"])
def test_a_callback_fills_the_log_of_the_closure_called(
    consumer: str, copy: bool, free: str
) -> None:
    # An idle thread (a test runner's timer, a server) has Python frames:
    # the young objects are not read then, and the count alone is not trusted.
    idle = threading.Event()
    beside = threading.Thread(target=idle.wait, daemon=True)
    if "thread" in free:
        beside.start()
    call = jax.jit(lambda g, x: g(x))
    logs: list[list[Any]] = [[], [], []]
    _ENABLED.clear()
    try:
        for log in logs:
            gc.collect()  # no older callback left to free but the one made here
            _old_callback(cycle=free == "a collection")
            step = _logger(log, copy=copy, free=free)
            if consumer == "lift.jit":
                lift.jit(step)(2.0)
            else:
                call(lift.lift(step), 2.0)
    finally:
        idle.set()
    jax.effects_barrier()
    assert logs == [[1.0], [1.0], [1.0]]
    assert _ENABLED == [True, True, True]  # three traces, none with the collector off


def test_pinning_keeps_to_the_code_traced() -> None:
    # A callback reached an empty log of `_logger`'s step. An empty log of
    # another function is still keyed by its contents: equal closures of it
    # share one program.
    step = lift.lift(_logger([], copy=False, free=""))
    jax.jit(lambda g, x: g(x))(step, 2.0)  # pins as the test above does
    assert jax.tree.structure(step) != jax.tree.structure(
        lift.lift(_logger([], copy=False, free=""))
    )

    def make(log: list[Any]) -> Any:
        return lift.lift(lambda x: (log.append(1), x)[1])

    assert jax.tree.structure(make([])) == jax.tree.structure(make([]))
