"""`lift.closure_convert`: every closed-over tracer and array becomes a leaf."""

from __future__ import annotations

import functools
import gc
import re
import weakref
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import TraceCounter

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
    with pytest.raises(
        lift.LiftError, match=r"(?s)structured as .*lift\.closure_convert"
    ):
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


@pytest.mark.lift_allow_leaks  # a converted function stored on purpose
def test_errors_and_leak_reports_show_the_functions_own_file_and_line() -> None:
    # The converted function runs lift's code; messages name the user's.
    stored: list[Any] = []

    def scaled(y: Any) -> Any:
        return y * 2

    line = re.escape(f"test_convert.py:{scaled.__code__.co_firstlineno})")
    converted = lift.closure_convert(scaled, jnp.ones(2))
    with pytest.raises(lift.LiftError, match=rf"scaled \(.*{line} was closure-conv"):
        converted(jnp.ones(3))

    @jax.jit
    def step(x: Any) -> Any:
        hidden = Opaque(x)

        def scale(y: Any) -> Any:
            return y * hidden.value

        stored.append((scale.__code__.co_firstlineno, lift.closure_convert(scale, x)))
        return x

    with jax.check_tracer_leaks(False):
        leaks = lift.find_leaks(step(1.0), stored)
    assert [(leak.filename, leak.lineno) for leak in leaks] == [
        (__file__, stored[0][0])
    ]
    stored.clear()


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


# -- Custom derivative rules and callbacks ----------------------------------------
#
# A printed program shows a rule or a callback by name only. Conversions whose
# rules close over different values must not share a program: `jax.jit` would
# reuse the first one's compiled code for the second.


def _structure(x: Any) -> Any:
    return jax.tree_util.tree_structure(x)


def _jvp_scaled(scale: float) -> Any:
    @jax.custom_jvp
    def f(x: Any) -> Any:
        return jnp.sin(x)

    @f.defjvp
    def f_jvp(primals: Any, tangents: Any) -> Any:
        ((x,), (t,)) = primals, tangents
        return f(x), scale * t

    return lift.closure_convert(lambda y: f(y).sum(), jnp.ones(2))


def _vjp_scaled(scale: float) -> Any:
    @jax.custom_vjp
    def f(x: Any) -> Any:
        return jnp.sin(x)

    def fwd(x: Any) -> tuple[Any, None]:
        return f(x), None

    def bwd(res: None, g: Any) -> tuple[Any]:
        del res
        return (scale * g,)

    f.defvjp(fwd, bwd)
    return lift.closure_convert(lambda y: f(y).sum(), jnp.ones(2))


@pytest.mark.parametrize("make", [_jvp_scaled, _vjp_scaled], ids=["jvp", "vjp"])
def test_rules_closing_over_different_floats_never_share_a_program(make: Any) -> None:
    grad = jax.jit(jax.grad(lambda fn, y: fn(y), argnums=1))
    two, five = make(2.0), make(5.0)
    assert _structure(two) != _structure(five)
    np.testing.assert_allclose(grad(two, jnp.ones(2)), [2.0, 2.0])
    np.testing.assert_allclose(grad(five, jnp.ones(2)), [5.0, 5.0])


def test_nondiff_arguments_of_a_rule_are_part_of_the_program() -> None:
    @functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
    def f(scale: float, x: Any) -> Any:
        return jnp.sin(x)

    def fwd(scale: float, x: Any) -> tuple[Any, None]:
        return f(scale, x), None

    def bwd(scale: float, res: None, g: Any) -> tuple[Any]:
        del res
        return (scale * g,)

    f.defvjp(fwd, bwd)
    grad = jax.jit(jax.grad(lambda fn, y: fn(y), argnums=1))
    two = lift.closure_convert(lambda y: f(2.0, y).sum(), jnp.ones(2))
    five = lift.closure_convert(lambda y: f(5.0, y).sum(), jnp.ones(2))
    assert _structure(two) != _structure(five)
    np.testing.assert_allclose(grad(five, jnp.ones(2)), [5.0, 5.0])


def test_callbacks_closing_over_different_values_give_their_own_results() -> None:
    def make(offset: float) -> Any:
        def f(y: Any) -> Any:
            spec = jax.ShapeDtypeStruct(y.shape, y.dtype)
            return jax.pure_callback(lambda v: v + np.float32(offset), spec, y)

        return lift.closure_convert(f, jnp.ones(2))

    apply = jax.jit(lambda fn, y: fn(y))
    one, seven = make(1.0), make(7.0)
    assert _structure(one) != _structure(seven)
    np.testing.assert_allclose(apply(one, jnp.zeros(2)), [1.0, 1.0])
    np.testing.assert_allclose(apply(seven, jnp.zeros(2)), [7.0, 7.0])


def test_nested_jit_constants_never_share_a_program() -> None:
    def make(value: float) -> Any:
        table = np.full(3, value, np.float32)
        return lift.closure_convert(
            lambda y: jax.jit(lambda z: z + table)(y), jnp.ones(3)
        )

    apply = jax.jit(lambda fn, y: fn(y))
    one, five = make(1.0), make(5.0)
    assert _structure(one) != _structure(five)
    np.testing.assert_allclose(apply(one, jnp.zeros(3)), [1.0] * 3)
    np.testing.assert_allclose(apply(five, jnp.zeros(3)), [5.0] * 3)


def _library_losses(y: Any) -> Any:
    import optax

    labels = jnp.arange(y.shape[0]) % 2
    return (
        optax.softmax_cross_entropy_with_integer_labels(y[:, None] * y, labels).sum()
        + optax.huber_loss(y).sum()
        + optax.sigmoid_binary_cross_entropy(y, labels.astype(y.dtype)).sum()
    )


LIBRARY = [
    ("relu", jax.nn.relu),
    ("softplus", jax.nn.softplus),
    ("gelu", jax.nn.gelu),
    ("silu", jax.nn.silu),
    ("logaddexp", lambda y: jnp.logaddexp(y, 1.0)),
    ("logsumexp", jax.scipy.special.logsumexp),
    ("log_softmax", jax.nn.log_softmax),
    ("optax", _library_losses),
]


@pytest.mark.parametrize(("name", "fn"), LIBRARY, ids=[n for n, _ in LIBRARY])
def test_library_rules_give_equal_treedefs_and_one_trace(name: str, fn: Any) -> None:
    del name
    counter = TraceCounter()

    def make(scale: float) -> Any:
        hidden = Opaque(jnp.float32(scale))
        return lift.closure_convert(lambda y: fn(y * hidden.value).sum(), jnp.ones(4))

    apply = counter.jit(jax.grad(lambda f, y: f(y), argnums=1))
    a, b = make(2.0), make(3.0)
    assert _structure(a) == _structure(b)
    y = jnp.linspace(-1.0, 1.0, 4)
    np.testing.assert_allclose(
        apply(a, y), jax.grad(lambda z: fn(2.0 * z).sum())(y), rtol=1e-5
    )
    np.testing.assert_allclose(
        apply(b, y), jax.grad(lambda z: fn(3.0 * z).sum())(y), rtol=1e-5
    )
    assert counter.traces == 1


def test_rule_capturing_a_tracer_is_refused() -> None:
    @jax.jit
    def make(scale: Any) -> Any:
        @jax.custom_jvp
        def f(x: Any) -> Any:
            return jnp.sin(x)

        @f.defjvp
        def scaled_jvp(primals: Any, tangents: Any) -> Any:
            return f(primals[0]), scale * tangents[0]

        return lift.closure_convert(lambda y: f(y).sum(), jnp.ones(2))

    with pytest.raises(
        lift.LiftError,
        # The rule captures the custom_jvp object too, whose rule holds `scale`:
        # whichever way the walk meets the tracer first, the message names it.
        match=r"(?s)the custom_jvp rule .*scaled_jvp \(.*test_convert.py:\d+\) "
        r"captures a tracer.*variable 'scale'.*Fix: make it an argument of "
        r"the custom_jvp function",
    ):
        make(jnp.float32(2.0))


@jax.custom_jvp
def _cos(x: Any) -> Any:
    return jnp.cos(x)


@_cos.defjvp
def _cos_jvp(primals: Any, tangents: Any) -> Any:
    return _cos(primals[0]), -jnp.sin(primals[0]) * tangents[0]


def test_the_rule_capturing_a_tracer_is_named_past_clean_ones_in_a_checkpoint() -> None:
    # `jax.checkpoint` holds its program open (no constants): its rules are
    # read all the same, a clean one passed over for the one holding `scale`.
    @jax.jit
    def make(scale: Any) -> Any:
        @jax.custom_jvp
        def f(x: Any) -> Any:
            return jnp.sin(x)

        @f.defjvp
        def scaled_jvp(primals: Any, tangents: Any) -> Any:
            return f(primals[0]), scale * tangents[0]

        remat = jax.checkpoint(lambda y: f(_cos(y)))
        return lift.closure_convert(lambda y: remat(y).sum(), jnp.ones(2))

    with pytest.raises(
        lift.LiftError,
        match=r"(?s)the custom_jvp rule .*scaled_jvp \(.*test_convert.py:\d+\) "
        r"captures a tracer.*variable 'scale'.*float32\[\]",
    ):
        make(jnp.float32(2.0))


def test_callback_capturing_a_hidden_tracer_is_refused() -> None:
    @jax.jit
    def make(offset: Any) -> Any:
        hidden = Opaque(offset)

        def callback(v: Any) -> Any:
            return v + np.asarray(hidden.value)

        def f(y: Any) -> Any:
            return jax.pure_callback(callback, jax.ShapeDtypeStruct((2,), y.dtype), y)

        return lift.closure_convert(f, jnp.ones(2))

    with pytest.raises(
        lift.LiftError,
        match=r"(?s)the pure_callback callback .*callback \(.*test_convert.py:\d+\) "
        r"captures a tracer that lift cannot make a leaf \(.*'hidden', a Opaque "
        r".*Fix: pass it to the callback as an argument",
    ):
        make(jnp.float32(2.0))


def test_rule_passing_the_value_as_an_argument_is_hoisted() -> None:
    @jax.custom_jvp
    def f(x: Any, scale: Any) -> Any:
        return jnp.sin(x)

    @f.defjvp
    def f_jvp(primals: Any, tangents: Any) -> Any:
        (x, scale), (t, _) = primals, tangents
        return f(x, scale), scale * t

    @jax.jit
    def make(scale: Any) -> Any:
        return lift.closure_convert(lambda y: f(y, scale).sum(), jnp.ones(2))

    two, five = make(jnp.float32(2.0)), make(jnp.float32(5.0))
    assert _structure(two) == _structure(five)
    assert lift.find_leaks(two, five) == []
    grad = jax.jit(jax.grad(lambda fn, y: fn(y), argnums=1))
    np.testing.assert_allclose(grad(five, jnp.ones(2)), [5.0, 5.0])


def test_tracer_bound_as_a_static_rule_argument_is_refused() -> None:
    @functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
    def f(scale: Any, x: Any) -> Any:
        return scale * x

    @f.defjvp
    def f_jvp(scale: Any, primals: Any, tangents: Any) -> Any:
        return f(scale, primals[0]), scale * tangents[0]

    # JAX's own checker reports the leak first when it is on.
    with (
        jax.check_tracer_leaks(False),
        pytest.raises(
            lift.LiftError,
            match=r"custom_jvp rule .*f_jvp .* captures a tracer in a static argument "
            r"JAX binds to it \(`nondiff_argnums`\).*\nFix: pass arrays as ordinary "
            r"arguments",
        ),
    ):
        lift.closure_convert(lambda y: f(2 * y, y), jnp.float32(1.0))
