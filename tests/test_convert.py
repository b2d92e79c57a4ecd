"""`lift.closure_convert`: every closed-over tracer and array becomes a leaf."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lift


class Opaque:
    """Not a pytree: `lift` cannot see what it holds, a trace can."""

    def __init__(self, value: Any) -> None:
        self.value = value


def _dtypes(tree: Any) -> list[str]:
    return sorted(str(jnp.result_type(x)) for x in jax.tree_util.tree_leaves(tree))


def test_hoists_tracers_of_every_dtype() -> None:
    @jax.jit
    def make(x: Any, i: Any, b: Any, key: Any) -> Any:
        hidden = Opaque((x, i, b, key))

        def f(y: Any) -> Any:
            x_, i_, b_, key_ = hidden.value
            noise = jax.random.normal(key_)
            return y * x_ + i_ + b_.astype(jnp.float32) + noise

        return lift.closure_convert(f, jnp.ones(3))

    converted = make(2.0, 3, True, jax.random.key(0))
    assert isinstance(converted, lift.Lifted)
    assert _dtypes(converted) == ["bool", "float32", "int32", "key<fry>"]
    assert lift.find_leaks(converted) == []
    expected = 2.0 + 3 + 1 + jax.random.normal(jax.random.key(0))
    np.testing.assert_allclose(converted(jnp.ones(3)), jnp.full(3, expected), rtol=1e-6)


def test_hoists_concrete_arrays_from_globals_and_attributes() -> None:
    hidden = Opaque(jnp.arange(3.0))
    table = np.ones(3, np.float32)

    def f(y: Any) -> Any:
        return y * hidden.value + table

    converted = lift.closure_convert(f, jnp.ones(3))
    assert _dtypes(converted) == ["float32", "float32"]
    np.testing.assert_allclose(converted(jnp.full(3, 2.0)), [1.0, 3.0, 5.0])


def test_same_code_and_shapes_give_equal_treedefs_and_no_retrace() -> None:
    traces = 0

    def make(scale: Any) -> Any:
        hidden = Opaque(jnp.asarray(scale))
        return lift.closure_convert(lambda y: y * hidden.value, jnp.ones(2))

    @jax.jit
    def apply(fn: Any, y: Any) -> Any:
        nonlocal traces
        traces += 1
        return fn(y)

    a, b = make(2.0), make(3.0)
    assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
    np.testing.assert_allclose(apply(a, jnp.ones(2)), [2.0, 2.0])
    np.testing.assert_allclose(apply(b, jnp.ones(2)), [3.0, 3.0])
    assert traces == 1


def test_converted_inside_jit_twice_gives_equal_treedefs() -> None:
    @jax.jit
    def make(x: Any) -> Any:
        hidden = Opaque(x)
        return lift.closure_convert(lambda y: y + hidden.value, jnp.ones(2))

    a, b = make(jnp.float32(1.0)), make(jnp.float32(5.0))
    assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
    np.testing.assert_allclose(b(jnp.ones(2)), [6.0, 6.0])


def test_different_code_or_shapes_give_different_treedefs() -> None:
    hidden = Opaque(jnp.float32(2.0))
    add = lift.closure_convert(lambda y: y + hidden.value, jnp.ones(2))
    mul = lift.closure_convert(lambda y: y * hidden.value, jnp.ones(2))
    wide = lift.closure_convert(lambda y: y + hidden.value, jnp.ones(3))
    structure = jax.tree_util.tree_structure
    assert structure(add) != structure(mul)
    assert structure(add) != structure(wide)


def test_wrong_shape_names_expected_and_given() -> None:
    hidden = Opaque(jnp.float32(2.0))

    def scale(y: Any) -> Any:
        return y * hidden.value

    converted = lift.closure_convert(scale, jnp.ones(3))
    with pytest.raises(
        lift.LiftError,
        match=r"scale \(.*test_convert.py:\d+\) was closure-converted for arguments "
        r"\(float32\[3\]\) and was called with \(float32\[4\]\)",
    ):
        converted(jnp.ones(4))
    with pytest.raises(lift.LiftError, match=r"\(float32\[3\]\).*\(int32\[3\]\)"):
        converted(jnp.ones(3, jnp.int32))
    with pytest.raises(lift.LiftError, match=r"structured as .*lift.closure_convert"):
        converted(jnp.ones(3), jnp.ones(3))


def test_keyword_arguments_and_pytree_outputs() -> None:
    hidden = Opaque(jnp.float32(2.0))

    def f(y: Any, *, shift: Any) -> dict[str, Any]:
        return {"scaled": y * hidden.value, "shifted": y + shift}

    converted = lift.closure_convert(f, jnp.ones(2), shift=jnp.float32(1.0))
    out = converted(jnp.ones(2), shift=jnp.float32(3.0))
    np.testing.assert_allclose(out["scaled"], [2.0, 2.0])
    np.testing.assert_allclose(out["shifted"], [4.0, 4.0])


def test_keeps_name_qualname_and_doc() -> None:
    def documented(y: Any) -> Any:
        """Doubles."""
        return 2 * y

    converted = lift.closure_convert(documented, jnp.ones(2))
    assert converted.__name__ == "documented"
    assert converted.__qualname__ == documented.__qualname__
    assert converted.__doc__ == "Doubles."


def test_holds_no_reference_to_the_function() -> None:
    hidden = Opaque(jnp.float32(2.0))

    def f(y: Any) -> Any:
        return y * hidden.value

    ref = weakref.ref(f)
    converted = lift.closure_convert(f, jnp.ones(2))
    del f
    gc.collect()
    assert ref() is None
    np.testing.assert_allclose(converted(jnp.ones(2)), [2.0, 2.0])


def test_safe_under_jax_leak_checking() -> None:
    with jax.checking_leaks():

        @jax.jit
        def make(x: Any, i: Any) -> Any:
            hidden = Opaque((x, i))
            return lift.closure_convert(
                lambda y: y * hidden.value[0] + hidden.value[1], jnp.ones(2)
            )

        converted = make(2.0, 1)
        again = make(3.0, 2)
    assert lift.find_leaks(converted, again) == []
    np.testing.assert_allclose(again(jnp.ones(2)), [5.0, 5.0])


def test_gradient_with_respect_to_hoisted_constants() -> None:
    hidden = Opaque(jnp.float32(3.0))
    converted = lift.closure_convert(lambda y: (y * hidden.value).sum(), jnp.ones(2))
    grads = jax.grad(lambda fn: fn(jnp.full(2, 2.0)))(converted)
    (g,) = jax.tree_util.tree_leaves(grads)
    np.testing.assert_allclose(g, 4.0)


class Model(lift.Lifted):
    def log_density(self, y: Any) -> Any:
        return self(y)


def test_subclass_closure_convert_keeps_the_subclass() -> None:
    hidden = Opaque(jnp.float32(2.0))
    model = Model.closure_convert(lambda y: -(y**2) * hidden.value, jnp.float32(1.0))
    assert type(model) is Model
    back = jax.jit(lambda m: m)(model)
    assert type(back) is Model
    np.testing.assert_allclose(back.log_density(jnp.float32(3.0)), -18.0)
    assert lift.closure_convert == lift.Lifted.closure_convert


def test_rejects_non_callables() -> None:
    with pytest.raises(lift.LiftError, match="expects a function, and got int"):
        lift.closure_convert(3, 1.0)  # type: ignore[arg-type]
