"""How a type checker sees lift's public API.

Checked by pyright in CI with the project's configuration; never run. Each
`assert_type` is a claim about an inferred type. Each `# pyright: ignore[...]`
marks a call that must be rejected: unnecessary ignores are errors here, so a
call that type checks by mistake fails the check.
"""

# pyright: reportUnnecessaryTypeIgnoreComment=true

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Generic, NamedTuple, assert_type

import jax
import jax.numpy as jnp
import optax
from typing_extensions import ParamSpec, TypeVar

import lift

P = ParamSpec("P")
R = TypeVar("R")

x = jnp.ones(3)


def double(x: jax.Array, /) -> jax.Array:
    return 2 * x


def power(x: jax.Array, n: int, *, scale: float = 1.0) -> jax.Array:
    return scale * x**n


# -- `Lifted` is generic over the function's parameters and return type -----------

lifted = lift.Lifted(double)
assert_type(lifted, lift.Lifted[[jax.Array], jax.Array])
assert_type(lifted(x), jax.Array)
lifted("x")  # pyright: ignore[reportArgumentType]
assert_type(lifted.__wrapped__(x), jax.Array)

lifted_power = lift.Lifted(power)
assert_type(lifted_power(x, 2, scale=0.5), jax.Array)
lifted_power(x, scale=0.5)  # pyright: ignore[reportCallIssue]
lifted_power(x, 2, bias=1.0)  # pyright: ignore[reportCallIssue]

# A `Lifted` lifts to itself, with its type.
assert_type(lift.lift(lifted), lift.Lifted[[jax.Array], jax.Array])


# -- `lift(f)` and `@lift` keep `f`'s signature --------------------------------------

assert_type(lift.lift(double), lift.Lifted[[jax.Array], jax.Array])
assert_type(lift.lift(power)(x, 2), jax.Array)
assert_type(lift.lift(lambda: 1.0)(), float)


class Model:
    def apply(self, x: jax.Array, /) -> jax.Array:
        return x

    def __call__(self, x: jax.Array, /) -> jax.Array:
        return x


# A bound method keeps its signature, without `self`.
assert_type(lift.lift(Model().apply), lift.Lifted[[jax.Array], jax.Array])

# A partial keeps its return type.
assert_type(lift.lift(functools.partial(power, n=2))(x), jax.Array)


@lift.lift
def decorated(x: jax.Array, y: float, /) -> tuple[jax.Array, float]:
    return x, y


assert_type(decorated, lift.Lifted[[jax.Array, float], tuple[jax.Array, float]])


@lift.lift(static=("n",))
def with_static(x: jax.Array, /) -> jax.Array:
    return x


assert_type(with_static, lift.Lifted[[jax.Array], jax.Array])
with_static("x")  # pyright: ignore[reportArgumentType]


@lift.lift(dynamic=lambda leaf: isinstance(leaf, jax.Array))
def with_dynamic(x: jax.Array, /) -> int:
    return 0


assert_type(with_dynamic, lift.Lifted[[jax.Array], int])


@lift.lift(dynamic="lr")
def with_dynamic_name(x: jax.Array, lr: float = 0.1, /) -> jax.Array:
    return lr * x


with_dynamic_name(jnp.ones(()))
assert_type(
    lift.lift(optax.adam(0.1), dynamic=("b1", "b2")),
    optax.GradientTransformationExtraArgs,
)
lift.lift(with_dynamic_name, dynamic=1)  # pyright: ignore[reportArgumentType, reportCallIssue]

# The function's name, as a `Lifted` carries it.
assert_type(lifted.__name__, str)


# -- pytrees in, the same type out ---------------------------------------------------

assert_type(lift.lift(optax.adam(0.1)), optax.GradientTransformationExtraArgs)
table = {"f": double}
assert_type(lift.lift(table), dict[str, Callable[[jax.Array], jax.Array]])


class Pair(NamedTuple):
    forward: Any
    scale: float


assert_type(lift.lift(Pair(double, 1.0)), Pair)

# A callable object is not a function: it is kept, as a pytree, with its type
# (at run time one that is not a pytree is refused).
assert_type(lift.lift(Model()), Model)


# -- `Lifted` subclasses -----------------------------------------------------------


class Density(lift.Lifted[P, R], Generic[P, R]):
    def log_prob(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self(*args, **kwargs)


@Density
def normal(x: jax.Array, /) -> jax.Array:
    return -0.5 * x**2


assert_type(normal, Density[[jax.Array], jax.Array])
assert_type(normal.log_prob(x), jax.Array)
normal.log_prob("x")  # pyright: ignore[reportArgumentType]
assert_type(Density.closure_convert(double, x), Density[..., Any])


class Plain(lift.Lifted[..., Any]):
    def describe(self) -> str:
        return type(self).__name__


@Plain
def plain(x: jax.Array) -> jax.Array:
    return x


assert_type(plain, Plain)
assert_type(plain.describe(), str)


# -- helpers -----------------------------------------------------------------------

assert_type(lift.is_lifted(lifted), bool)
assert_type(lift.diff(lifted, lifted), str | None)
assert_type(lift.closure_convert(double, x), lift.Lifted[..., Any])


# -- `lift.jit` --------------------------------------------------------------------


@lift.jit
def step(x: jax.Array, lr: float) -> jax.Array:
    return x - lr * x


assert_type(step(x, 0.1), jax.Array)
step(x)  # pyright: ignore[reportCallIssue]
step.lower(x, 0.1)


@lift.jit(static_argnames="n")
def jit_power(x: jax.Array, n: int) -> jax.Array:
    return x**n


assert_type(jit_power(x, 2), jax.Array)
jit_power(x, "2")  # pyright: ignore[reportArgumentType]

assert_type(lift.jit(double)(x), jax.Array)


# -- leak checking -----------------------------------------------------------------

assert_type(lift.find_leaks(lifted, [x]), lift.Leaks)
assert_type(lift.find_leaks(lifted)[0], lift.Leak)
assert_type(lift.check_leaks(lifted), None)
# `checked` returns the transform as it was typed.
assert_type(lift.checked(jax.vmap)(double)(x), jax.Array)
with lift.checking_leaks():
    pass


@lift.checking_leaks()
def checked_test() -> int:
    return 1


assert_type(checked_test(), int)

# `replace` keeps the type it is given: a `Lifted` of the same signature.
assert_type(lift.replace(lifted, scale=2.0), lift.Lifted[[jax.Array], jax.Array])
