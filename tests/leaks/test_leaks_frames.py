"""Leak checks read frames and generators without reporting or changing them.

On CPython 3.11 and 3.12 reading `frame.f_locals` of a running function leaves a
snapshot dict on the frame (`equinox.error_if` reads every frame on the stack
while tracing): JAX's checker takes the exiting trace's tracers held there for
a leak, or on 3.11 fails with `IndexError` (jax issue 26560). None of that is a
`LeakError`. A suspended generator's `f_locals` is, before 3.13, a dict the
generator may hold itself (`locals()`): a scan leaves it as it found it. Each
case has its leaking twin, which is still reported.
"""

from __future__ import annotations

import sys
from collections.abc import Generator
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest
from shared_runs import DEFAULT, EXHAUSTIVE

import lift

STASH: list[Any] = []


@pytest.fixture(autouse=True)
def _clear() -> Generator[None]:
    yield
    STASH.clear()


def _read_every_frame() -> None:
    """What `equinox.error_if` does while tracing: read each frame's locals."""
    frame = sys._getframe()  # pyright: ignore[reportPrivateUsage]
    while frame is not None:
        frame.f_locals  # noqa: B018
        frame = frame.f_back


def _reads_frames(x: Any) -> Any:
    y = x * 2
    _read_every_frame()
    return y + 1


def _reads_frames_and_stashes(x: Any) -> Any:
    _read_every_frame()
    STASH.append(x)
    return x + 1


def _error_if(x: Any) -> Any:
    return eqx.error_if(x, x < -100.0, "too small") * 2


def _error_if_and_stash(x: Any) -> Any:
    STASH.append(x)
    return eqx.error_if(x, x < -100.0, "too small") * 2


@pytest.mark.parametrize("fn", [_reads_frames, _error_if])
def test_reading_frames_while_tracing_is_no_leak(fn: Any) -> None:
    with lift.checking_leaks():
        out = jax.jit(fn)(jnp.float32(1.0))
    assert float(out) in (3.0, 2.0)
    with jax.check_tracer_leaks(True):
        assert float(lift.checked(jax.jit)(fn)(jnp.float32(2.0))) in (5.0, 4.0)


@pytest.mark.lift_allow_leaks  # stores its tracer on purpose
@pytest.mark.parametrize("fn", [_reads_frames_and_stashes, _error_if_and_stash])
def test_reading_frames_while_tracing_leak_twin(fn: Any) -> None:
    with (
        pytest.raises(
            lift.LeakError, match=r"STASH\[0\]: float32\[\] from jit"
        ) as info,
        lift.checking_leaks(),
    ):
        jax.jit(fn)(jnp.float32(1.0))
    assert "list index out of range" not in str(info.value)


PROJECT = """
import sys
import equinox as eqx
import jax
import jax.numpy as jnp

STASH = []

def read_every_frame():
    frame = sys._getframe()
    while frame is not None:
        frame.f_locals
        frame = frame.f_back

def test_reads_frames():
    def f(x):
        read_every_frame()
        return x * 2
    assert jax.jit(f)(1.0) == 2.0

def test_error_if():
    assert jax.jit(lambda x: eqx.error_if(x, x < 0, "neg") * 2)(1.0) == 2.0

def test_error_if_leak():
    def f(x):
        STASH.append(x)
        return eqx.error_if(x, x < 0, "neg") * 2
    jax.jit(f)(1.0)
"""


# Run by pytest in a subprocess with the plugin's tests run the same way.
DEFAULT.add("frames", {"test_frames.py": PROJECT})
EXHAUSTIVE.add("frames", {"test_frames.py": PROJECT})


@pytest.mark.parametrize("mode", ["fast", "exhaustive"])
def test_plugin_modes_report_only_the_leak(
    tmp_path_factory: pytest.TempPathFactory, mode: str
) -> None:
    run = (DEFAULT if mode == "fast" else EXHAUSTIVE)(tmp_path_factory)
    run.assert_outcomes("test_frames.py", passed=2, failed=1)
    run.lines("test_frames.py").fnmatch_lines(
        [
            "*test_reads_frames PASSED*",
            "*test_error_if PASSED*",
            "*test_error_if_leak FAILED*",
            "*STASH[[]0[]]: float32[[][]] from jit(f)*",
        ]
    )
    assert "list index out of range" not in run.text("test_frames.py")


# -- suspended generators -------------------------------------------------------


def _holds_its_locals(v: Any) -> Generator[Any]:
    a = v
    names = locals()  # before 3.13 the frame's own snapshot dict
    yield None
    yield names["a"], a


def _plain(v: Any) -> Generator[Any]:
    a = v
    yield None
    yield a, a


@pytest.mark.parametrize("make", [_holds_its_locals, _plain])
def test_scanning_a_generator_leaves_it_working(make: Any) -> None:
    gen = make(jnp.float32(3.0))
    next(gen)
    assert lift.find_leaks(gen) == []
    assert lift.find_leaks(lambda: gen) == []
    lifted = lift.lift(lambda: gen)
    assert lifted is not None
    first, second = next(gen)  # a KeyError if a scan had emptied `names`
    assert float(first) == float(second) == 3.0


@pytest.mark.parametrize("make", [_holds_its_locals, _plain])
def test_scanning_a_generator_leak_twin(make: Any) -> None:
    box: list[Any] = []

    def grab(x: Any) -> Any:
        box.append(make(x))
        next(box[-1])
        return x

    with jax.check_tracer_leaks(False):
        jax.jit(grab)(jnp.float32(1.0))
    (leak,) = lift.find_leaks(box[0])
    assert leak.variable in ("a", "v")
    assert leak.tracer == "float32[] from jit(grab)"
    assert lift.find_leaks(box[0])  # found again: the scan changed nothing
    first, second = next(box[0])
    assert first is second
