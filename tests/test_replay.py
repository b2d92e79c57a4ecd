"""Re-lifting a closure shaped like one seen before reuses its skeleton, and only then."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

import lift


def make(lr, n, w):
    def inner(x):
        return x * lr

    def f(x, fns=(inner, inner)):
        return fns[0](x) * n + fns[1](w)

    return f


def skeleton(x: lift.Lifted) -> object:
    return jax.tree_util.tree_structure(x).node_data()[1]  # type: ignore[index]


def test_same_shape_shares_the_skeleton_object() -> None:
    # The replay is compiled from the third closure of a shape on (a sweep).
    a, b, c, d = (
        lift.lift(make(lr, 2, jnp.full(2, lr))) for lr in (0.1, 0.2, 0.3, 0.4)
    )
    assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
    assert skeleton(c) is skeleton(a) and skeleton(d) is skeleton(a)
    assert jnp.allclose(d(1.0), 0.4 * 2 + 0.4 * 0.4)


@pytest.mark.parametrize(
    ("other", "same_treedef"),
    [
        (lambda: make(0.1, 3, jnp.ones(2)), False),  # a static value differs
        (lambda: make(0.1, 2.0, jnp.ones(2)), False),  # int becomes float: now dynamic
        (lambda: make(jnp.asarray(0.1), 2, jnp.ones(2)), True),  # a leaf's type differs
    ],
)
def test_any_difference_takes_the_full_walk(other, same_treedef: bool) -> None:
    for lr in (0.1, 0.2, 0.3):  # a compiled replay exists for this shape
        lift.lift(make(lr, 2, jnp.ones(2)))
    a = lift.lift(make(0.1, 2, jnp.ones(2)))
    b = lift.lift(other())
    assert (
        jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
    ) is same_treedef
    assert jnp.allclose(b(1.0), other()(1.0))


def test_sharing_structure_is_checked() -> None:
    def make2(lr, same):
        def g(x):
            return x * lr

        def h(x):
            return x * lr

        fns = (g, g) if same else (g, h)
        return lambda x: fns[0](x) + fns[1](x)

    a = lift.lift(make2(0.1, same=False))
    b = lift.lift(make2(0.1, same=True))
    assert jax.tree_util.tree_structure(a) != jax.tree_util.tree_structure(b)
    assert b(1.0) == pytest.approx(0.2)


def test_cyclic_value_in_a_replayed_position() -> None:
    def make3(items):
        return lambda: len(items)

    assert lift.lift(make3([1, 2]))() == 2
    loop: list[object] = [1]
    loop.append(loop)
    with pytest.raises(
        lift.LiftError,
        match=r"(?s)captures variable 'items', a container that contains itself",
    ):
        lift.lift(make3(loop))


def test_empty_cell_then_filled() -> None:
    def outer(fill):
        def f():
            return later

        if fill:
            later = 1
        return f

    with pytest.raises(NameError, match="later"):
        lift.lift(outer(False))()
    assert lift.lift(outer(True))() == 1
