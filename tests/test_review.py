"""Breaks found by reviewing lift against its contract as an adversary.

Each test asserts what the contract promises and is marked
`xfail(strict=True)` with what is wrong today, so that it passes once fixed.
"""

from __future__ import annotations

import heapq
import importlib.metadata
import weakref
from collections.abc import Callable
from typing import Any

import jax
import pytest

import lift
from lift._compat import JAX_VERSION

pytest_plugins = ("pytester",)


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


# -- the pytest plugin -----------------------------------------------------------


def _plugin_args() -> list[str]:
    installed = any(
        ep.value == "lift._plugin"
        for ep in importlib.metadata.entry_points(group="pytest11")
    )
    return [] if installed else ["-p", "lift._plugin"]


LOCAL_LOG = """
import jax

def test_local_log():
    seen = []

    def f(x):
        seen.append(x)
        return x * 2

    assert float(jax.jit(f)(1.0)) == 2.0
    assert len(seen) == 1
"""


@pytest.mark.xfail(
    strict=True,
    reason="the fast mode passes a test whose local list kept a jit tracer "
    "for the rest of the test: JAX's checker fails it at the trace exit, the "
    "fast mode looks only after the test's frame has dropped it",
)
def test_fast_mode_fails_a_test_jax_fails_for_a_tracer_kept_in_a_local(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_local=LOCAL_LOG)
    monkeypatch.setenv("JAX_CHECK_TRACER_LEAKS", "1")
    jax_run = pytester.runpytest_subprocess()
    jax_run.assert_outcomes(failed=1)  # JAX's checker: a leak
    monkeypatch.setenv("JAX_CHECK_TRACER_LEAKS", "0")
    result = pytester.runpytest_subprocess(*_plugin_args(), "--lift-leaks")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*LeakError*seen*"])


ODEINT = """
import jax
import jax.numpy as jnp
from jax.experimental.ode import odeint

def test_odeint_in_jit():
    def solve(y0, k):
        return odeint(lambda y, t: -k * y, y0, jnp.linspace(0.0, 1.0, 3))

    out = jax.jit(solve)(1.0, 2.0)
    assert abs(float(out[-1]) - float(jnp.exp(-2.0))) < 1e-3
"""


@pytest.mark.xfail(
    JAX_VERSION < (0, 12),
    strict=True,
    reason="before jax 0.12 (seen on 0.10.2 and 0.8.0) the fast mode fails a "
    "clean test of jax.experimental.ode.odeint under jit (a tracer kept by "
    "JAX's own closure_convert cache, which JAX's checker passes) and tells the "
    "user to stop storing _closure_convert_for_avals; on 0.12 the tracers are "
    "attributed to JAX's caches",
)
def test_fast_mode_passes_odeint_under_jit_as_jax_checker_does(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_odeint=ODEINT)
    monkeypatch.setenv("JAX_CHECK_TRACER_LEAKS", "1")
    pytester.runpytest_subprocess().assert_outcomes(passed=1)
    monkeypatch.setenv("JAX_CHECK_TRACER_LEAKS", "0")
    result = pytester.runpytest_subprocess(*_plugin_args(), "--lift-leaks")
    result.assert_outcomes(passed=1)


class _Model:
    """A stateful object whose jitted method takes it as a static argument."""

    def __init__(self) -> None:
        self.last: Any = None

    def step(self, x: Any) -> Any:
        self.last = x
        return x * 2


@pytest.mark.lift_allow_leaks
@pytest.mark.xfail(
    strict=True,
    reason="lift.checked(jax.jit) does not scan the static arguments of the "
    "call that traced: a method that stores a tracer on self (static_argnums=0) "
    "passes, where JAX's checker fails it",
)
def test_checked_jit_finds_a_tracer_stored_on_a_static_argument() -> None:
    model = _Model()
    step = lift.checked(jax.jit)(_Model.step, static_argnums=0)
    with jax.check_tracer_leaks(False), pytest.raises(lift.LeakError, match="last"):
        step(model, 1.0)


# -- find_leaks --------------------------------------------------------------------


class _Holder:
    def __init__(self, value: Any) -> None:
        self.value = value


@pytest.mark.lift_allow_leaks
@pytest.mark.xfail(
    strict=True,
    reason="a tracer reached from two roots is reported under whichever root "
    "comes first: the report (holder, function, variable) depends on the "
    "order of the roots",
)
def test_a_report_does_not_depend_on_the_order_of_roots() -> None:
    tracer = _escaped()
    model = _Holder(tracer)
    cache = {"last": tracer}

    def uses_model() -> Any:
        return model

    def uses_cache() -> Any:
        return cache

    def report(*roots: Any) -> list[tuple[str, Any, Any]]:
        leaks = lift.find_leaks(*roots)
        return sorted((leak.path, leak.function, leak.variable) for leak in leaks)

    assert report(uses_model, uses_cache) == report(uses_cache, uses_model)


@pytest.mark.lift_allow_leaks
@pytest.mark.xfail(
    strict=True,
    reason="find_leaks skips a weakref.ref silently: the tracer its referent "
    "holds is neither reported nor the holder named",
)
def test_find_leaks_opens_or_names_a_weak_reference() -> None:
    holder = _Holder(_escaped())
    ref = weakref.ref(holder)

    def reads() -> Any:
        return ref().value  # pyright: ignore[reportOptionalMemberAccess]

    assert lift.find_leaks(reads) != []


@pytest.mark.lift_allow_leaks
@pytest.mark.xfail(
    strict=True,
    reason="find_leaks skips an exception's args silently: a caught error "
    "kept with a tracer in it is neither reported nor named",
)
def test_find_leaks_opens_or_names_a_kept_exception() -> None:
    errors = [ValueError("not finite", _escaped())]

    def reads() -> Any:
        return errors

    assert lift.find_leaks(reads) != []
