"""One suite every closure shape must pass: round trip, no retrace, vmap, grad.

Each shape is a factory `make(w)` returning a callable whose output depends on the
captured array `w` (a float32[3]); `x` is the argument.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import TraceCounter

import lift


def closure(w: jax.Array) -> Callable[..., Any]:
    def f(x):
        return jnp.sum(w * x)

    return f


def lambda_(w: jax.Array) -> Callable[..., Any]:
    return lambda x: jnp.sum(w * x)


def default(w: jax.Array) -> Callable[..., Any]:
    def f(x, w=w):
        return jnp.sum(w * x)

    return f


def kwdefault(w: jax.Array) -> Callable[..., Any]:
    def f(x, *, w=w):
        return jnp.sum(w * x)

    return f


def partial_arg(w: jax.Array) -> Callable[..., Any]:
    def f(w, x):
        return jnp.sum(w * x)

    return functools.partial(f, w)


def partial_keyword(w: jax.Array) -> Callable[..., Any]:
    def f(x, w):
        return jnp.sum(w * x)

    return functools.partial(f, w=w)


def nested(w: jax.Array) -> Callable[..., Any]:
    def inner(x):
        return w * x

    def outer(x):
        return jnp.sum(inner(x))

    return outer


def in_tuple(w: jax.Array) -> Callable[..., Any]:
    fns = (lambda x: w * x, lambda y: jnp.sum(y))

    def f(x):
        return fns[1](fns[0](x))

    return f


def in_dict(w: jax.Array) -> Callable[..., Any]:
    params = {"w": w, "scale": 1.0}

    def f(x):
        return jnp.sum(params["w"] * x) * params["scale"]

    return f


class Pair(NamedTuple):
    w: jax.Array
    n: int


def in_namedtuple(w: jax.Array) -> Callable[..., Any]:
    pair = Pair(w, 3)

    def f(x):
        return jnp.sum(pair.w * x) * pair.n / 3

    return f


@jax.tree_util.register_pytree_node_class
class Linear:
    def __init__(self, w: jax.Array) -> None:
        self.w = w

    def __call__(self, x: jax.Array) -> jax.Array:
        return jnp.sum(self.w * x)

    def apply(self, x: jax.Array) -> jax.Array:
        return self(x)

    def tree_flatten(self) -> tuple[tuple[jax.Array], None]:
        return (self.w,), None

    @classmethod
    def tree_unflatten(cls, aux: None, children: tuple[jax.Array]) -> Linear:
        return cls(*children)


def bound_method(w: jax.Array) -> Callable[..., Any]:
    return Linear(w).apply


def recursive(w: jax.Array) -> Callable[..., Any]:
    def f(x, n=2):
        if n == 0:
            return jnp.sum(w * x)
        return f(x, n - 1)

    return f


def mutually_recursive(w: jax.Array) -> Callable[..., Any]:
    def even(x, n=2):
        return jnp.sum(w * x) if n == 0 else odd(x, n - 1)

    def odd(x, n):
        return even(x, n - 1)

    return even


def through_lifted(w: jax.Array) -> Callable[..., Any]:
    inner = lift.lift(lambda x: w * x)

    def f(x):
        return jnp.sum(inner(x))

    return f


def numpy_scalar(w: jax.Array) -> Callable[..., Any]:
    scale = np.float32(1.0)  # a NumPy scalar: dynamic too
    return lambda x: jnp.sum(w * x) * scale


SHAPES = [
    closure,
    lambda_,
    default,
    kwdefault,
    partial_arg,
    partial_keyword,
    nested,
    in_tuple,
    in_dict,
    in_namedtuple,
    bound_method,
    recursive,
    mutually_recursive,
    through_lifted,
    numpy_scalar,
]

X = jnp.asarray([1.0, 2.0, 3.0])
W1 = jnp.asarray([1.0, 0.0, 0.0])
W2 = jnp.asarray([0.0, 1.0, 2.0])


@pytest.fixture(params=SHAPES, ids=lambda s: s.__name__)
def make(request: pytest.FixtureRequest) -> Callable[[jax.Array], Callable[..., Any]]:
    return request.param


def test_call_matches(make: Callable[[jax.Array], Callable[..., Any]]) -> None:
    assert lift.lift(make(W2))(X) == make(W2)(X)


def test_round_trip(make: Callable[[jax.Array], Callable[..., Any]]) -> None:
    g = lift.lift(make(W2))
    leaves, treedef = jax.tree_util.tree_flatten(g)
    again = jax.tree_util.tree_unflatten(treedef, leaves)
    assert type(again) is type(g)
    assert again(X) == make(W2)(X)
    assert jax.tree_util.tree_structure(again) == treedef


def test_no_retrace_when_capture_changes(
    make: Callable[[jax.Array], Callable[..., Any]],
) -> None:
    counter = TraceCounter()
    apply = counter.jit(lambda g, x: g(x))
    assert apply(lift.lift(make(W1)), X) == make(W1)(X)
    assert apply(lift.lift(make(W2)), X) == make(W2)(X)
    assert counter.traces == 1


def test_vmap_over_captures(make: Callable[[jax.Array], Callable[..., Any]]) -> None:
    batch = jax.vmap(lambda w: lift.lift(make(w)))(jnp.stack([W1, W2]))
    out = jax.vmap(lambda g: g(X))(batch)
    np.testing.assert_allclose(out, [make(W1)(X), make(W2)(X)])


def test_grad_through_captures(make: Callable[[jax.Array], Callable[..., Any]]) -> None:
    grads = jax.grad(lambda g: g(X))(lift.lift(make(W2)))
    leaves = [
        leaf for leaf in jax.tree_util.tree_leaves(grads) if jnp.shape(leaf) == (3,)
    ]
    # d/dw sum(w * x) = x, for the one captured w.
    assert len(leaves) == 1
    np.testing.assert_allclose(leaves[0], X)


def test_returned_from_jit_holds_arrays(
    make: Callable[[jax.Array], Callable[..., Any]],
) -> None:
    g = jax.jit(lambda w: lift.lift(make(w)))(W2)
    assert all(isinstance(leaf, jax.Array) for leaf in jax.tree_util.tree_leaves(g))
    assert not any(
        isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(g)
    )
    assert g(X) == make(W2)(X)
