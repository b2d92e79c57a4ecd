"""An error raised by lift shows the user's frames, not lift's own, as JAX's
filtered tracebacks do (SPEC 5): at lift time (`lift.lift`, `Lifted(fn)`,
`lift.jit`), at call time (a `Lifted`, a `lift.jit` function, a method), and
whole with `JAX_TRACEBACK_FILTERING=off`."""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

import jax
import jax.numpy as jnp
import optax
import pytest

import lift

LIFT_DIR = str(Path(lift.__file__).resolve().parent)


@pytest.fixture(params=["auto", "off"])
def mode(request: pytest.FixtureRequest) -> Iterator[str]:
    before = jax.config.jax_traceback_filtering
    jax.config.update("jax_traceback_filtering", request.param)
    try:
        yield request.param
    finally:
        jax.config.update("jax_traceback_filtering", before)


def _frames(call: Callable[[], object]) -> tuple[int, int, BaseException]:
    """The frames of lift's files and of this file in the traceback of the
    error `call` raises."""
    with pytest.raises(Exception) as info:
        call()
    files = [f.filename for f in traceback.extract_tb(info.value.__traceback__)]
    ours = sum(str(Path(f).resolve()).startswith(LIFT_DIR) for f in files)
    return ours, files.count(__file__), info.value


def _lift_time() -> None:
    lift.lift(lambda: 0, static="nothing")


def _lift_decorator() -> None:
    @lift.lift(static="nothing")
    def f():
        return 0


def _replace() -> None:
    lr = 0.1
    lift.replace(lift.lift(lambda x: x * lr), nothing=1.0)


def _closure_convert() -> None:
    lift.closure_convert(lambda x: x, "not an array")


def _at_lift():
    return lift.lift(optax.sgd(optax.cosine_decay_schedule(0.1, 100)), static="lr")


def _lifted_class():
    return lift.Lifted(lambda: 0, static="nothing")


def _jit_decoration():
    return lift.jit(staticmethod(lambda x: x))


def _jit_call():
    n = 3.0
    return lift.jit(lambda x: jnp.zeros(int(n)) + x)(1.0)


def _lifted_call():
    n = 3.0
    return jax.jit(lambda f: f())(lift.lift(lambda: jnp.zeros(int(n))))


def _lifted_eager_mutation():
    seen = [1.0]

    def fill():
        seen.append(2.0)

    return lift.lift(fill)()


class _Model:
    scale = 2.0

    @lift.jit
    def apply(self, x):
        return jnp.zeros(int(self.scale)) + x


def _method_call():
    return _Model().apply(1.0)


CASES = {
    "lift.lift": _lift_time,
    "@lift.lift(static=...)": _lift_decorator,
    "lift.lift(optax.sgd(schedule), static=unknown)": _at_lift,
    "lift.Lifted": _lifted_class,
    "lift.replace": _replace,
    "lift.jit(staticmethod)": _jit_decoration,
    "lift.jit call": _jit_call,
    "Lifted call under jax.jit": _lifted_call,
    "Lifted eager call": _lifted_eager_mutation,
    "lift.jit method call": _method_call,
}


@pytest.mark.parametrize("case", CASES)
def test_lift_error_shows_the_users_frames_not_lifts(mode: str, case: str) -> None:
    ours, users, error = _frames(CASES[case])
    assert isinstance(error, lift.LiftError), error
    assert users >= 2  # the test and the case
    if mode == "off":
        assert ours > 0  # whole, as JAX leaves its own
    else:
        assert ours == 0


def test_the_users_own_error_inside_a_lifted_call_keeps_the_users_frames() -> None:
    def broken(x):
        return x / 0

    ours, users, error = _frames(lambda: lift.lift(broken)(1))
    assert isinstance(error, ZeroDivisionError)
    assert (ours, users) == (0, 3)  # `_frames`, the lambda, `broken`


def test_jaxs_error_inside_closure_convert_shows_no_lift_frame(mode: str) -> None:
    ours, users, error = _frames(_closure_convert)
    assert isinstance(error, TypeError) and "abstract array" in str(error)
    assert users >= 2
    assert (ours > 0) if mode == "off" else (ours == 0)
