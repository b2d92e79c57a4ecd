"""A traced capture needed as a concrete value is explained from lift's own
records (which capture became which leaf, and what the failing instruction
read), under `lift`, `jax.jit`, `lift.jit` and `vmap`; a value traced because
of the function's own argument is never blamed on a capture."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lift


def _positive(v: Any) -> Any:
    return v > 0.0


def _branch_through_a_call(v: Any) -> Any:
    def f(x):
        if _positive(v):  # the bytecode analysis cannot see through the call
            return x * v
        return x

    return f


def _int(v: Any) -> Any:
    def f(x):
        return x * int(v)

    return f


def _item(v: Any) -> Any:
    def f(x):
        return x * v.item()

    return f


def _while(v: Any) -> Any:
    def f(x):
        k = 0
        while _positive(v - k):
            k += 1
            x = x * 2.0
        return x

    return f


def _index(v: Any) -> Any:
    table = [1.0, 2.0, 3.0, 4.0]

    def f(x):
        return table[v] * x

    return f


def _shape(v: Any) -> Any:
    def f(x):
        return jnp.zeros((v,)) + x

    return f


def _array_branch(v: Any) -> Any:
    def f(x):
        if v.sum() > 0:
            return x * 2.0
        return x

    return f


def _format(v: Any) -> Any:
    def f(x):
        return x * len(f"{v:.3g}")

    return f


def _lookup(v: Any) -> Any:
    def f(x):
        return x * {0.5: 2.0}.get(v, 1.0)

    return f


_FORMS = {
    "if through a call": (_branch_through_a_call, 0.5, "in Python control flow"),
    "int()": (_int, 2.0, "where a concrete value is needed"),
    ".item()": (_item, np.float32(2.0), "where a concrete value is needed"),
    "while": (_while, 1.5, "in Python control flow"),
    "list index": (_index, np.int32(1), "as a Python int"),
    "shape": (_shape, np.int32(2), "where a concrete value is needed"),
    "array branch": (_array_branch, np.ones(3, np.float32), "in Python control flow"),
    "format spec": (_format, 0.5, "in a format spec"),
    "dict key": (_lookup, 0.5, "as a hashed Python value"),
}


def _through_jax_jit(fn: Any) -> Any:
    return jax.jit(lambda g, x: g(x))(lift.lift(fn), 1.0)


def _through_lift_jit(fn: Any) -> Any:
    return lift.jit(fn)(1.0)


def _through_vmap(fn: Any) -> Any:
    # The capture batched: a vmap over lifted functions.
    return jax.vmap(lambda g: g(1.0))(
        jax.tree_util.tree_map(lambda a: jnp.stack([a, a]), lift.lift(fn))
    )


@pytest.mark.parametrize(
    "consumer",
    [_through_jax_jit, _through_lift_jit, _through_vmap],
    ids=["jax.jit", "lift.jit", "vmap"],
)
@pytest.mark.parametrize("form", list(_FORMS))
def test_a_capture_needed_concrete_is_named_with_its_fix(form, consumer):
    make, value, use = _FORMS[form]
    fn = make(value)
    with pytest.raises(
        lift.LiftError, match=rf"uses the captured variable 'v' {use}"
    ) as info:
        consumer(fn)
    message = str(info.value)
    assert "__lifted__" not in message
    assert f"{make.__name__}.<locals>.f" in message
    fix = (
        "`lift.jit(lift.lift(f, static=('v',)))`"  # the form that works there
        if consumer is _through_lift_jit
        else "`lift(f, static=('v',))`"
    )
    assert f"Fix: keep it static, {fix}" in message
    # The fix works.
    fixed = lift.lift(fn, static=("v",))
    expected = fn(1.0)
    np.testing.assert_allclose(jax.jit(lambda g, x: g(x))(fixed, 1.0), expected)
    np.testing.assert_allclose(lift.jit(fixed)(1.0), expected)


def _branch_on_argument(v: Any) -> Any:
    def f(x):
        if x > 0:
            return x * v
        return x

    return f


def _branch_on_both(v: Any) -> Any:
    def f(x):
        if x * v > 0:
            return x
        return -x

    return f


@pytest.mark.parametrize("make", [_branch_on_argument, _branch_on_both])
def test_a_branch_on_a_traced_argument_is_not_blamed_on_a_capture(make):
    # `vmap` over both the capture and the argument: the capture is traced, but
    # making it static would not help (the argument is traced too).
    def run(v, x):
        return lift.lift(make(v))(x)

    with pytest.raises(jax.errors.TracerBoolConversionError):
        jax.vmap(run)(jnp.ones(3), jnp.ones(3))
    with pytest.raises(jax.errors.TracerBoolConversionError):
        lift.jit(make(jnp.float32(0.5)))(1.0)
    with pytest.raises(jax.errors.TracerBoolConversionError):
        jax.jit(lambda g, x: g(x))(lift.lift(make(0.5)), 1.0)


def test_a_branch_on_a_capture_under_vmap_over_the_capture_is_named():
    def run(v):
        return lift.lift(_branch_through_a_call(v))(1.0)

    with pytest.raises(
        lift.LiftError, match=r"(?s)captured variable 'v'.*static=\('v',\)"
    ):
        jax.vmap(run)(jnp.ones(3))


def test_a_caught_diagnosis_keeps_nothing_alive() -> None:
    # The error's traceback holds the frames it unwound, not a cycle back to
    # the error: dropped, it frees the lifted function and its traced captures
    # at once, with no garbage collection (a leak check sees nothing kept).
    made: list[weakref.ref[Any]] = []

    def run(v: Any) -> Any:
        lifted = lift.lift(_branch_through_a_call(v))
        made.append(weakref.ref(lifted))
        return lifted(1.0)

    # Off: JAX's filtering (0.8.0) keeps the full traceback in its own frame.
    filtering = jax.config.jax_traceback_filtering  # pyright: ignore[reportAttributeAccessIssue]
    jax.config.update("jax_traceback_filtering", "off")
    enabled = gc.isenabled()
    gc.disable()
    try:
        with pytest.raises(lift.LiftError, match="captured variable 'v'"):
            jax.vmap(run)(jnp.ones(3))
        with pytest.raises(lift.LiftError, match="captured variable 'v'"):
            lift.jit(run)(jnp.ones(()))
        assert len(made) == 2
        assert [ref() for ref in made] == [None, None]
    finally:
        jax.config.update("jax_traceback_filtering", filtering)
        if enabled:
            gc.enable()


def test_selecting_by_a_float_capture_keeps_it_static() -> None:
    # `(a, b)[lr > 0.5]` indexes a Python tuple: a traced `lr` could not.
    def make(lr: float) -> Any:
        def f(x: Any) -> Any:
            return (x, 2 * x)[lr > 0.5]

        return f

    for lr in (0.1, 0.9):
        f = make(lr)
        lifted = lift.lift(f)
        assert lifted(1.0) == f(1.0)
        assert float(jax.jit(lambda g, x: g(x))(lifted, 1.0)) == f(1.0)
        assert jax.tree_util.tree_leaves(lifted) == []


def test_a_capture_hashed_outside_a_trace_is_named() -> None:
    """Eagerly (and under `grad`, with the capture not traced) a float capture
    is a JAX array, which Python cannot hash either: named, with its fix."""

    def make(lr: Any) -> Any:
        return lambda x: x * {0.1: 2.0}.get(lr, 1.0)

    lifted = lift.lift(make(0.1))
    for run in (lambda: lifted(1.0), lambda: jax.grad(lambda x: lifted(x))(1.0)):
        with pytest.raises(
            lift.LiftError, match=r"captured variable 'lr' as a hashed"
        ) as info:
            run()
        assert "which Python cannot hash" in str(info.value)
    fixed = lift.lift(make(0.1), static=("lr",))
    assert float(fixed(1.0)) == 2.0


def test_the_hashed_capture_is_named_before_a_container_holding_one() -> None:
    """`d[k]` hashes `k`: the message names `k` first, not the dict `d` that
    holds an array."""

    def make(k: Any) -> Any:
        d = {k: jnp.ones(())}
        return lambda x: x * d[k]

    with pytest.raises(lift.LiftError) as info:
        jax.jit(lambda g, x: g(x))(lift.lift(make(0.5)), 1.0)
    assert "uses the captured variable 'k' as a hashed" in str(info.value)
