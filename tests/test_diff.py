"""`lift.diff`: why two lifted objects compile separately."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

import lift


def make(lr, steps, w=None):
    w = jnp.ones(2) if w is None else w

    def inner(x):
        return x / steps

    return lift.lift(lambda x: inner(x) * lr * w)


def test_none_when_only_dynamic_values_differ() -> None:
    assert lift.diff(make(0.1, 10), make(0.2, 10)) is None


def test_names_static_difference_by_path_and_values() -> None:
    text = lift.diff(make(0.1, 10), make(0.1, 20))
    assert (
        text
        == ".captures['inner'].captures['steps']: static value 10 != 20 (in make.<locals>.inner)"
    )


def test_none_when_treedefs_are_equal_whatever_the_shapes() -> None:
    # SPEC: `None` when the treedefs are equal. Shapes are jit's business.
    a, b = make(0.1, 10, jnp.ones(2)), make(0.1, 10, jnp.ones(3))
    assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
    assert lift.diff(a, b) is None


def test_names_static_versus_dynamic() -> None:
    text = lift.diff(make(0.1, 10), make(0.1, 10.0))
    assert text is not None
    assert (
        ".captures['inner'].captures['steps']: static in one, dynamic in the other"
        in text
    )


def test_different_code() -> None:
    a = lift.lift(lambda x: x + 1)
    b = lift.lift(lambda x: x + 2)
    text = lift.diff(a, b)
    assert text is not None
    assert text.startswith(": different code: test_different_code.<locals>.<lambda> (")


def test_inside_pytrees() -> None:
    optax = pytest.importorskip("optax")
    a = lift.lift(optax.adam(0.1))
    b = lift.lift(optax.adam(0.2))
    assert lift.diff(a, b) is None
    c = lift.lift(optax.adam(0.1, nesterov=True))
    text = lift.diff(a, c)
    assert text is not None and "nesterov" in text and "False != True" in text


def test_structure_difference() -> None:
    assert lift.diff((make(0.1, 1),), [make(0.1, 1)]) is not None
