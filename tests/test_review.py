"""Breaks found by reviewing lift against its contract as an adversary.

Each test asserts what the contract promises and is marked
`xfail(strict=True)` with what is wrong today, so that it passes once fixed.
"""

from __future__ import annotations

import importlib.metadata
from typing import Any

import jax
import pytest

pytest_plugins = ("pytester",)


def _escaped() -> Any:
    """A tracer whose `jit` has exited."""
    box: list[Any] = []
    with jax.check_tracer_leaks(False):
        jax.jit(lambda x: box.append(x) or x)(1.0)
    return box[0]


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
