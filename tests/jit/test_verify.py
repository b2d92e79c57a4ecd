"""`lift.verifying()` and `LIFT_VERIFY=1`: the fast path that remains (a
`lift.jit` function's cached call) checked against the rule it stands for.

Each test breaks the fast path on purpose and checks that the switch catches
it, and that without the switch the broken path would have been served.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
import threading
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lift
from lift._jit import function as _jit_function, verify as _verify


def _make(lr: Any, w: Any) -> Any:
    def inner(x):
        return x * lr

    return lambda x: inner(x) - w


def _jitted(lr: Any) -> Any:
    @lift.jit
    def step(w):
        return w - lr * 2.0

    return step


def test_a_change_the_jit_cached_call_missed_is_caught() -> None:
    lr = jnp.asarray(0.5)

    @lift.jit
    def step(w):
        return w - lr * 2.0

    for _ in range(3):  # the third call takes the fast path
        assert float(step(1.0)) == 0.0
    # Break the fast path: it watches no cell, and misses `lr` rebound.
    step._fast = step._fast._replace(cells=(), contents=())
    lr = jnp.asarray(0.25)
    with lift.verifying(False):
        assert float(step(1.0)) == 0.0  # served stale, unchecked
    with (
        lift.verifying(),
        pytest.raises(
            lift.LiftError,
            match=r"(?s)lift's lift.jit cached call disagrees with the full walk "
            r"for test_a_change_the_jit_cached_call_missed_is_caught.<locals>.step "
            r".*other leaves \(leaf 0: .*This is a bug in lift",
        ),
    ):
        step(1.0)


def _deleted() -> Any:
    x = jnp.ones(())
    jax.jit(lambda a: a * 2, donate_argnums=0)(x)
    return x


_HALF = r"ArrayImpl ~float32\[\] array\(0\.5, dtype=float32\)"


@pytest.mark.parametrize(
    ("first", "then", "detail"),
    [
        (
            np.float32(0.5),
            np.float32(0.25),
            r"other leaves \(leaf 0: float32 np\.float32\(0\.5\) against float32 "
            r"np\.float32\(0\.25\)\)",
        ),
        (
            0.5,
            0.25,
            rf"other leaves \(leaf 0: {_HALF} against ArrayImpl ~float32\[\] "
            r"array\(0\.25, dtype=float32\)\)",
        ),
        (
            0.5,
            (0.5, 1.0),
            r"another treedef:\n  cached: .*leaves=1 .*\n  now:    .*leaves=2 ",
        ),
        (
            0.5,
            _deleted,
            rf"other leaves \(leaf 0: {_HALF} against ArrayImpl float32\[\]\)",
        ),
    ],
    ids=["numpy-scalar", "python-float", "another-structure", "deleted-array"],
)
def test_a_change_the_cached_call_missed_is_caught_whatever_the_capture_holds(
    first: Any, then: Any, detail: str
) -> None:
    lr = first

    @lift.jit
    def step(w):
        return w - jnp.sum(jnp.asarray(lr)) * 2.0

    for _ in range(3):  # the third call takes the fast path
        step(1.0)
    step._fast = step._fast._replace(cells=(), contents=())  # misses `lr` rebound
    lr = then() if callable(then) else then
    with (
        lift.verifying(),
        pytest.raises(
            lift.LiftError,
            match=rf"(?s)cached call disagrees with the full walk .*{detail}",
        ),
    ):
        step(1.0)


def test_a_jit_cached_call_that_lifting_now_refuses_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    step = _jitted(0.5)
    for _ in range(3):
        step(1.0)

    def refuse(self: Any) -> Any:
        raise lift.LiftError("refused")

    monkeypatch.setattr(_jit_function.JitFunction, "_lift", refuse)
    with lift.verifying(False):
        assert float(step(1.0)) == 0.0  # the fast path does not lift
    with (
        lift.verifying(),
        pytest.raises(
            lift.LiftError, match=r"lift.jit cached call .*lifting it now refuses it"
        ),
    ):
        step(1.0)


def test_the_checks_pass_on_sound_paths() -> None:
    with lift.verifying():
        for lr in (0.1, 0.2, 0.3):
            x = lift.lift(_make(lr, np.float32(1.0)))
            assert float(x(1.0)) == pytest.approx(lr - 1.0)
        step = _jitted(0.5)
        for _ in range(3):
            assert float(step(1.0)) == 0.0


class _Scale(eqx.Module):
    w: jax.Array

    def __call__(self, x: Any) -> Any:
        return x * self.w


def test_the_checks_pass_for_a_callable_pytree_under_lift_jit() -> None:
    # `lift.jit` of an equinox module keeps the module itself, not a `Lifted`.
    with lift.verifying():
        step = lift.jit(_Scale(jnp.ones(2)))
        for _ in range(3):  # the third call takes the fast path, checked
            np.testing.assert_allclose(step(2.0), 2.0)

        @jax.jit
        def outer(w: Any) -> Any:
            inner = lift.jit(_Scale(w))  # its leaves are tracers
            return inner(1.0) + inner(1.0) + inner(1.0)

        np.testing.assert_allclose(outer(jnp.ones(2)), 3.0)


def test_the_switch_nests_and_restores() -> None:
    before = _verify.STATE.on
    with lift.verifying():
        assert _verify.STATE.on
        with lift.verifying(False):
            assert not _verify.STATE.on
        assert _verify.STATE.on
    assert _verify.STATE.on is before


@pytest.mark.parametrize(
    ("value", "on"), [("1", True), ("true", True), ("0", False), ("", False)]
)
def test_the_environment_variable_turns_it_on(value: str, on: bool) -> None:
    env = {**os.environ, "LIFT_VERIFY": value}
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from lift._jit import verify; print(verify.STATE.on)",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == str(on)


def _two_steps_sharing_a_log() -> tuple[Any, Any, list[str]]:
    traced: list[str] = []

    def train(x):
        traced.append("train")
        return x + 1

    def evaluate(x):
        traced.append("eval")
        return x * 2

    return lift.jit(train), lift.jit(evaluate), traced


def _a_loss_log_filled_by_a_callback() -> tuple[Any, Any, list[float]]:
    losses: list[float] = []

    def step(x):
        jax.debug.callback(lambda v: losses.append(float(v)), (x**2).sum())
        return x * 0.5

    jitted = lift.jit(step)
    return jitted, jitted, losses


def _a_memo_filled_while_tracing() -> tuple[Any, Any, dict[Any, Any]]:
    memo: dict[Any, Any] = {}

    def step(x):
        memo[x.shape] = np.ones(x.shape)  # a constant per shape
        return x * 0.5

    jitted = lift.jit(step)
    return jitted, jitted, memo


def _call_checked(*fns: Any) -> None:
    """Call each of `fns` in turn on the last one's result, checked
    (`lift.verifying`), and wait for the callbacks they left."""
    x = jnp.ones(2)
    with lift.verifying():
        for fn in fns:
            x = fn(x)
        jax.effects_barrier()


@pytest.mark.parametrize(
    "make",
    [
        _two_steps_sharing_a_log,
        _a_loss_log_filled_by_a_callback,
        _a_memo_filled_while_tracing,
    ],
    ids=[
        "a trace log two functions fill",
        "a loss log a callback fills",
        "a memo filled while tracing",
    ],
)
def test_your_own_log_filled_by_the_calls_is_not_a_difference(make: Any) -> None:
    """Your own list, filled while the functions run (a trace log, a loss log a
    callback fills), is not part of what a cached call promises: it serves
    what it compiled, as `jax.jit` does for a closure. Checked, every call is
    served, and the log holds what the plain functions would put there."""
    first, second, log = make()
    _call_checked(first, first, second, first, second)
    assert len(log) in (1, 2, 5)  # per trace or per call; the memo per shape


def test_a_static_changed_in_place_between_calls_is_named_as_such() -> None:
    """A static value inside a captured container (here an int in a dict that
    holds a float, so lift rebuilds it) changed in place between calls: the
    cached call serves the program compiled for the old value, and the check
    says so, with its fix, not that lift has a bug."""
    config = {"n": 2, "lr": 0.5}

    @lift.jit
    def step(x):
        return x * config["lr"] * config["n"]

    with lift.verifying():
        assert float(step(1.0)) == 1.0
        assert float(step(1.0)) == 1.0
        config["n"] = 3
        with pytest.raises(
            lift.LiftError, match=r"(?s)values of variable 'config' .*changed in place"
        ) as info:
            step(1.0)
    assert "bug in lift" not in str(info.value)
    assert "Docs: python -m lift explain changed-in-place" in str(info.value)


def _an_int_in_a_dict_of_ints() -> Any:
    config = {"n": 2}
    return (lambda x: x * config["n"]), lambda: config.update(n=3)


def _a_registry_entry_replaced() -> Any:
    registry = {"act": lambda x: x * 2}
    return (lambda x: registry["act"](x)), lambda: registry.update(act=lambda x: x * 3)


def _a_singledispatch_registered_later() -> Any:
    @functools.singledispatch
    def scale(v: Any, x: Any) -> Any:
        return x * 2

    return (lambda x: scale(1, x)), lambda: scale.register(int, lambda v, x: x * 3)


def _a_list_of_functions_appended_to() -> Any:
    hooks = [lambda x: x * 2]

    def apply(x):
        for hook in hooks:
            x = hook(x)
        return x

    return apply, lambda: hooks.append(lambda x: x * 1.5)


def _an_int_in_a_default_list() -> Any:
    def scaled(x, ns=[2]):  # noqa: B006
        return x * ns[0]

    return scaled, lambda: scaled.__defaults__[0].__setitem__(0, 3)


@pytest.mark.parametrize(
    ("make", "name"),
    [
        (_an_int_in_a_dict_of_ints, "config"),
        (_a_registry_entry_replaced, "registry"),
        (_a_singledispatch_registered_later, "registry"),
        (_a_list_of_functions_appended_to, "hooks"),
        (_an_int_in_a_default_list, "ns"),
    ],
)
def test_a_static_changed_in_place_inside_your_own_container_is_reported(
    make: Any, name: str
) -> None:
    """Your own container (one holding no dynamic value) changed otherwise
    than a log grows: the cached call serves the program of its old contents,
    Python computes 3.0, and the check names the function and the change."""
    fn, change = make()
    step = lift.jit(fn)
    for _ in range(3):
        assert float(step(1.0)) == 2.0
    change()
    assert float(fn(1.0)) == 3.0
    with lift.verifying(False):
        assert float(step(1.0)) == 2.0  # served stale, unchecked
    with lift.verifying(), pytest.raises(lift.LiftError) as info:
        step(1.0)
    assert re.search(
        rf"cached call of {fn.__qualname__} \(.*test_verify.py:\d+\) serves a "
        rf"program compiled for static values of variable '{name}' that",
        str(info.value),
    )
    assert "changed in place" in str(info.value)
    assert "bug in lift" not in str(info.value)


def test_a_capture_rebound_while_the_check_lifts_is_no_disagreement(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Found in CI: a thread rebinding a capture between another thread's cached
    # call and that call's check made the two lifts read different bindings,
    # reported as lift disagreeing with itself.
    lr = 1.0

    @lift.jit
    def step(w):
        return w * lr

    assert float(step(1.0)) == 1.0
    real = _jit_function.JitFunction._lift  # pyright: ignore[reportPrivateUsage]

    def racing(self: Any) -> Any:
        nonlocal lr
        lr = 2.0  # as another thread would, after the call checked its captures
        return real(self)

    monkeypatch.setattr(_jit_function.JitFunction, "_lift", racing)
    with lift.verifying():
        assert float(step(1.0)) in (1.0, 2.0)
    monkeypatch.undo()
    assert float(step(1.0)) == 2.0


_TIMERS: list[threading.Timer] = []
_SEEN: dict[str, list[str]] = {}


def _append_later(log: list[float], v: Any) -> None:
    """Append `v` to `log` 50 ms after the callback runs."""
    _TIMERS.append(threading.Timer(0.05, log.append, [float(v)]))
    _TIMERS[-1].start()


def test_a_log_a_callback_fills_after_the_call_returns_is_not_a_difference() -> None:
    """On an accelerator a callback runs after its call returns, while the next
    call is checked: the log it fills grows between the check's two reads of
    it. Checked, every call is served, as without the check."""
    losses: list[float] = []

    def step(x):
        jax.debug.callback(functools.partial(_append_later, losses), (x**2).sum())
        return x * 0.5

    _call_checked(*[lift.jit(step)] * 8)
    for timer in _TIMERS:
        timer.join()
    assert len(losses) == 8


def test_a_container_a_callback_reads_is_served_checked() -> None:
    """A callback the first call leaves reaches your dict, so lift keys that
    dict by identity from then on. It is the very dict the program was compiled
    for: checked, every call is served, with one trace."""
    config = {"name": "run"}
    seen = _SEEN["names"] = []  # globals: the step captures no log
    traces = _SEEN["traces"] = []

    def step(x):
        _SEEN["traces"].append("step")
        jax.debug.callback(lambda v: _SEEN["names"].append(config["name"]), x.sum())
        return x * 0.5

    _call_checked(*[lift.jit(step)] * 3)
    assert traces == ["step"] and seen == ["run"] * 3
