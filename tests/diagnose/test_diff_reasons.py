"""`lift.diff` says the true reason, by path, for each static difference the
suite makes: an object compared by identity inside a captured dict (optax's
`WrappedSchedule` under `inject_hyperparams`), a config dict the code branches
on, a name given to `static=`, a rebound scalar, an int. Each pair also
retraces, as the diff says."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import optax
import pytest

import lift


def _injected(lr: float) -> Any:
    schedule = optax.linear_schedule(lr, 0.0, 100)
    return lift.lift(optax.inject_hyperparams(optax.sgd)(learning_rate=schedule))


def _config(anneal: bool, lr: float) -> Any:
    config = {"ANNEAL_LR": anneal, "LR": lr}

    def train(x):
        if config["ANNEAL_LR"]:
            return x * config["LR"]
        return x

    return lift.lift(train)


def _clipped(lr: float) -> Any:
    config = {"LR": lr, "CLIP": 1.0}

    def train(x):
        if config["LR"] > 0.15:
            return x * config["CLIP"]
        return x * config["LR"]

    return lift.lift(train)


BRANCH_LINE = _clipped.__code__.co_firstlineno + 4


def _named(n: float) -> Any:
    return lift.lift(lambda x: x * n, static="n")


def _counter(start: int) -> Any:
    count = start

    def step(x):
        nonlocal count
        count += 1
        return x * count

    return lift.lift(step)


def _steps(steps: int) -> Any:
    return lift.lift(lambda x: x / steps)


# (a, b, each line's start, the reason it states)
CASES: dict[str, tuple[Callable[[], Any], Callable[[], Any], list[tuple[str, str]]]] = {
    "identity-compared object in a dict": (
        lambda: _injected(0.1),
        lambda: _injected(0.2),
        [
            (
                f".{fn}.captures['sched_hps']['learning_rate']: "
                "sched_hps['learning_rate'] = <optax.schedules._inject.WrappedSchedule "
                "object> vs <optax.schedules._inject.WrappedSchedule object>",
                "it is a WrappedSchedule, not a float or array, with no `__eq__` of "
                "its own: compared by identity, so each new object compiles anew",
            )
            for fn in ("init", "update")
        ],
    ),
    "a float entry branched on": (
        lambda: _clipped(0.1),
        lambda: _clipped(0.2),
        [
            (
                ".captures['config']['LR']: config['LR'] = 0.1 vs 0.2",
                f"it is used in `if` at {__file__}:{BRANCH_LINE} (a traced value "
                "could not run there)",
            )
        ],
    ),
    "the branched-on entry itself": (
        lambda: _config(True, 0.1),
        lambda: _config(False, 0.1),
        [
            (
                ".captures['config']['ANNEAL_LR']: config['ANNEAL_LR'] = True vs False",
                "it is a bool, not a float or array",
            )
        ],
    ),
    "named static=": (
        lambda: _named(0.5),
        lambda: _named(0.25),
        [(".captures['n']: n = 0.5 vs 0.25", "you declared it static (static=('n',))")],
    ),
    "rebound int": (
        lambda: _counter(0),
        lambda: _counter(1),
        [(".captures['count']: count = 0 vs 1", "it is an int, not a float or array")],
    ),
    "int": (
        lambda: _steps(10),
        lambda: _steps(20),
        [
            (
                ".captures['steps']: steps = 10 vs 20",
                "it is an int, not a float or array",
            )
        ],
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_diff_states_the_true_reason_by_path(case: str) -> None:
    make_a, make_b, expected = CASES[case]
    a, b = make_a(), make_b()
    text = lift.diff(a, b)
    assert text is not None
    lines = text.splitlines()
    assert len(lines) == len(expected), text
    for line, (start, reason) in zip(lines, expected, strict=True):
        assert line.startswith(f"{start}, static because {reason} (in "), line
    # The difference is real: `jax.jit` traces anew for `b`.
    traces = []
    run = jax.jit(lambda f: traces.append(1) or jax.tree.leaves(f))
    run(a)
    run(b)
    assert len(traces) == 2


def test_a_branch_on_one_entry_leaves_the_others_dynamic() -> None:
    # `if config["ANNEAL_LR"]` keeps that entry static, not the dict: a sweep
    # of config["LR"] has no static difference and traces once.
    a, b = _config(True, 0.1), _config(True, 0.2)
    assert lift.diff(a, b) is None
    traces = []
    run = jax.jit(lambda f: traces.append(1) or jax.tree.leaves(f))
    run(a)
    run(b)
    assert len(traces) == 1


def test_rebound_float_is_refused_or_said_to_be_rebound() -> None:
    def counter(start: float) -> Any:
        total = start

        def step(x):
            nonlocal total
            total += x
            return total

        return lift.lift(step)

    try:
        a, b = counter(0.5), counter(1.5)
    except lift.LiftError as err:  # a rebound float refused at lift time
        refused = str(err)
    else:
        refused = ""
    if refused:
        assert "rebinds the captured variable 'total'" in refused
        return
    text = lift.diff(a, b)
    assert text is not None
    assert text.startswith(
        ".captures['total']: total = 0.5 vs 1.5, static because the code rebinds it "
        "(`nonlocal total`)"
    )
