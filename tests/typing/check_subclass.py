"""How a type checker sees `Lifted` subclasses, under pyright's strict mode.

Checked by pyright in CI with the project's configuration; never run. A library
author writes `class Model(lift.Lifted)` with no type arguments: strict mode
accepts it, `Model(f)` and `@Model` are `Model` (its methods known, not
`Unknown`), and calling one gives `Any`. A generic subclass keeps the
function's signature. Each `# pyright: ignore[...]` marks a line that must be
rejected.
"""

# pyright: strict, reportUnnecessaryTypeIgnoreComment=true

from __future__ import annotations

from typing import Any, Generic, assert_type

import jax
from typing_extensions import ParamSpec, TypeVar

import lift

P = ParamSpec("P")
R = TypeVar("R")


def double(x: jax.Array, /) -> jax.Array:
    return 2 * x


# -- a subclass without type arguments -------------------------------------------


class Model(lift.Lifted):
    def simulate(self, key: jax.Array) -> tuple[jax.Array, float]:
        return self(key), 0.0

    def describe(self) -> str:
        return self.__qualname__


def use(model: Model, key: jax.Array) -> None:
    assert_type(model.simulate(key), tuple[jax.Array, float])
    model.simulate("key")  # pyright: ignore[reportArgumentType]


model = Model(double)
assert_type(model, Model)
assert_type(model.describe(), str)
assert_type(model(1.0), Any)
model.simulat(1.0)  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]


@Model
def decorated(x: jax.Array, /) -> jax.Array:
    return x


assert_type(decorated, Model)
assert_type(decorated.describe(), str)
assert_type(Model.closure_convert(double, 1.0), Model)


def takes_lifted(f: lift.Lifted[..., Any]) -> None: ...


takes_lifted(model)


# -- a generic subclass: the function's signature is kept -------------------------


class Density(lift.Lifted[P, R], Generic[P, R]):
    def log_prob(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self(*args, **kwargs)


@Density
def normal(x: float, /) -> float:
    return -0.5 * x**2


assert_type(normal, Density[[float], float])
assert_type(normal.log_prob(1.0), float)
assert_type(normal(1.0), float)
normal.log_prob("x")  # pyright: ignore[reportArgumentType]
assert_type(Density(double), Density[[jax.Array], jax.Array])
# `lift.lift` of a subclass's instance is that subclass, as at run time.
assert_type(lift.lift(normal), Density[[float], float])
assert_type(lift.lift(model, static="n"), Model)


# -- `lift.lift` keeps the signature; a bare `Lifted` defaults to any -------------


assert_type(lift.lift(double), lift.Lifted[[jax.Array], jax.Array])
lift.lift(double)(1.0, 2.0)  # pyright: ignore[reportCallIssue]


def any_lifted(f: lift.Lifted) -> Any:
    return f(1.0)
