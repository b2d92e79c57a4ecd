"""A captured list or dict of ints or strings (a lookup table) is your own
object, compared by type and value, in order: the key made in C must say what
the general key says."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

import lift
from lift._copies.own import atoms_key


def _over(table: Any) -> Any:
    lr = 0.5

    def f(x: Any) -> Any:
        return x * lr + len(table)

    return lift.lift(f)


def _same(a: Any, b: Any) -> bool:
    return jax.tree.structure(_over(a)) == jax.tree.structure(_over(b))


def test_equal_tables_compile_once() -> None:
    traces = 0

    @jax.jit
    def call(f: Any, x: jax.Array) -> jax.Array:
        nonlocal traces
        traces += 1
        return f(x)

    for _ in range(3):
        call(_over(list(range(1000))), jnp.ones(()))
        call(_over({i: str(i) for i in range(1000)}), jnp.ones(()))
    assert traces == 2


def test_tables_differ_by_type_value_and_order() -> None:
    assert _same([1, 2], [1, 2])
    assert not _same([1, 2], [1, True])
    assert not _same([1, 2], [2, 1])
    assert not _same(["a"], [b"a"])
    assert _same({1: "a", 2: "b"}, {1: "a", 2: "b"})
    assert not _same({1: "a"}, {True: "a"})
    assert not _same({1: "a", 2: "b"}, {2: "b", 1: "a"})
    assert not _same({1: 0}, {1: False})


def test_a_table_is_your_own_object() -> None:
    table = list(range(10_000))
    lr = 0.5

    def f(x: Any) -> Any:
        table.append(len(table))
        return x * lr

    lift.lift(f)(1.0)
    assert len(table) == 10_001


def test_the_key_made_in_c_is_taken_only_for_exact_scalars() -> None:
    assert atoms_key([1, "a", None, True, b"x"]) is not None
    assert atoms_key({1: 2}) is not None
    assert atoms_key([1.0]) is None  # floats: 0.0 is not -0.0
    assert atoms_key([(1,)]) is None
    assert atoms_key({1: [2]}) is None
