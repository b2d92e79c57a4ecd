"""A helper's locals die when it returns, under the plugin's fast mode as
without it: where JAX raises after a trace exited, and where `jax.linearize`
of a `jit` runs. A test that has no leak and passes plain and under JAX's
checker (`JAX_CHECK_TRACER_LEAKS=1`) must pass under `--lift-leaks` too. Each
case has a clean twin."""

from __future__ import annotations

import pytest
from helpers import plugin_args

pytest_plugins = ("pytester",)
pytestmark = pytest.mark.lift_allow_leaks

CASES = """
import gc
import weakref

import jax
import jax.numpy as jnp
import pytest


class Big:
    pass


def _errored_jit(x, refs, fails):
    big = Big()  # a helper's local: freed when the helper returns
    refs.append(weakref.ref(big))
    if fails:
        # The trace exits normally; JAX raises after it, inside its
        # `ensure_no_leaks` block.
        with pytest.raises(TypeError, match="not a valid JAX type"):
            jax.jit(lambda a: "not an array")(x)
    else:
        jax.jit(lambda a: a + 1.0)(x)


def test_locals_of_helpers_whose_jit_raised_are_freed():
    refs = []
    for _ in range(10):
        _errored_jit(jnp.ones(3), refs, fails=True)
    gc.collect()
    assert sum(r() is not None for r in refs) == 0


def test_locals_of_helpers_whose_jit_raised_are_freed_twin():
    refs = []
    for _ in range(10):
        _errored_jit(jnp.ones(3), refs, fails=False)
    gc.collect()
    assert sum(r() is not None for r in refs) == 0


def _linearized(x, linearize):
    big = Big()
    ref = weakref.ref(big)
    double = jax.jit(lambda v: v * 2.0)  # fresh: its linearization is traced
    if linearize:
        jax.linearize(double, x)
    else:
        jax.jvp(double, (x,), (x,))
    return ref


def test_locals_of_a_helper_that_linearized_a_jit_are_freed():
    ref = _linearized(jnp.ones(3), linearize=True)
    gc.collect()
    assert ref() is None


def test_locals_of_a_helper_that_linearized_a_jit_are_freed_twin():
    ref = _linearized(jnp.ones(3), linearize=False)
    gc.collect()
    assert ref() is None
"""


def test_a_helpers_locals_die_when_it_returns(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each case passes plain and under JAX's checker. Frames kept until the
    # phase's end would keep 10 helpers' locals alive (100 MB arrays there
    # grow the run by 1 GB).
    monkeypatch.setenv("JAX_CHECK_TRACER_LEAKS", "0")
    monkeypatch.setenv("COLUMNS", "250")
    pytester.makepyfile(test_helpers_locals=CASES)
    result = pytester.runpytest_subprocess(*plugin_args(), "--lift-leaks", "-v")
    result.stdout.fnmatch_lines_random(
        [
            "*test_locals_of_helpers_whose_jit_raised_are_freed PASSED*",
            "*test_locals_of_helpers_whose_jit_raised_are_freed_twin PASSED*",
            "*test_locals_of_a_helper_that_linearized_a_jit_are_freed PASSED*",
            "*test_locals_of_a_helper_that_linearized_a_jit_are_freed_twin PASSED*",
        ]
    )
    result.assert_outcomes(passed=4)
