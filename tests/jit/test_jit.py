"""`lift.jit`: one compiled program per code, captures read at call time, and
`jax.jit`'s options relative to the function's own parameters."""

from __future__ import annotations

import dataclasses
import functools
import inspect
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import lift


class Counter:
    """Counts traces: call it inside the traced function."""

    def __init__(self) -> None:
        self.traces = 0

    def __call__(self) -> None:
        self.traces += 1


def make_step(lr: Any, counter: Counter) -> Any:
    @lift.jit
    def step(w, g):
        """One step of gradient descent."""
        counter()
        return w - lr * g

    return step


# -- one program per code -----------------------------------------------------------


def test_dynamic_captures_share_one_trace() -> None:
    counter = Counter()
    w, g = jnp.ones(3), jnp.full(3, 2.0)
    for lr in (0.1, 0.2, 0.3, jnp.asarray(0.4), np.float32(0.5)):
        out = make_step(lr, counter)(w, g)
        np.testing.assert_allclose(out, 1.0 - 2.0 * float(lr), rtol=1e-6)
    # Python floats are weakly typed, float32 arrays are not: two programs.
    assert counter.traces == 2


def test_closure_recreated_every_call_hits_the_cache() -> None:
    counter = Counter()
    w, g = jnp.ones(3), jnp.ones(3)
    for i in range(20):
        w = make_step(0.01 * i, counter)(w, g)
    assert counter.traces == 1
    np.testing.assert_allclose(w, 1.0 - 0.01 * sum(range(20)), rtol=1e-5)


def test_static_captures_trace_once_each() -> None:
    counter = Counter()

    def make_power(n: int) -> Any:
        @lift.jit
        def power(x):
            counter()
            return x**n

        return power

    x = jnp.asarray(3.0)
    for _ in range(2):
        assert [int(make_power(n)(x)) for n in (1, 2, 3)] == [3, 9, 27]
    assert counter.traces == 3


def test_different_code_same_name_never_shares() -> None:
    fs = [lift.jit(lambda x: x + 1), lift.jit(lambda x: x * 10)]
    assert [int(f(jnp.asarray(2))) for f in fs] == [3, 20]


def test_lowered_text_is_identical_across_dynamic_captures() -> None:
    w, g = jnp.ones(3), jnp.ones(3)
    texts = {make_step(lr, Counter()).lower(w, g).as_text() for lr in (0.1, 0.2, 1e-3)}
    assert len(texts) == 1
    (text,) = texts
    assert "jit_step" in text


def test_lowered_text_differs_across_static_captures_and_plain_jit() -> None:
    def make(n: int) -> Any:
        return lift.jit(lambda x: x * n)

    x = jnp.ones(3, jnp.int32)
    assert make(2).lower(x).as_text() != make(3).lower(x).as_text()

    def plain(lr: float) -> Any:
        return jax.jit(lambda x: x * lr)

    # The contrast: `jax.jit` bakes the capture into the program.
    y = jnp.ones(3)
    assert plain(0.1).lower(y).as_text() != plain(0.2).lower(y).as_text()


def test_python_float_capture_is_a_weak_parameter() -> None:
    step = make_step(0.5, Counter())
    out = step(jnp.ones(2, jnp.bfloat16), jnp.ones(2, jnp.bfloat16))
    # Weakly typed, as the Python float it came from: no promotion to float32.
    assert out.dtype == jnp.bfloat16
    # A parameter of the program (its first), not a constant.
    text = step.lower(jnp.ones(2), jnp.ones(2)).as_text()
    assert "%arg0: tensor<f32>" in text
    assert "0.5" not in text


# -- captures are read at call time ------------------------------------------------


def test_rebound_dynamic_capture_is_seen_without_retracing() -> None:
    counter = Counter()
    lr = 0.1

    @lift.jit
    def step(w):
        counter()
        return w * lr

    plain = jax.jit(lambda w: w * lr)
    assert float(step(jnp.asarray(1.0))) == pytest.approx(0.1)
    assert float(plain(jnp.asarray(1.0))) == pytest.approx(0.1)
    lr = 0.5
    assert float(step(jnp.asarray(1.0))) == pytest.approx(0.5)
    assert counter.traces == 1
    # `jax.jit` keeps serving the value it traced first.
    assert float(plain(jnp.asarray(1.0))) == pytest.approx(0.1)


def test_rebound_static_capture_retraces() -> None:
    counter = Counter()
    n = 2

    @lift.jit
    def power(x):
        counter()
        return x**n

    assert int(power(jnp.asarray(3))) == 9
    n = 3
    assert int(power(jnp.asarray(3))) == 27
    n = 2
    assert int(power(jnp.asarray(3))) == 9
    assert counter.traces == 2


def test_variable_bound_after_decoration() -> None:
    @lift.jit
    def f(x):
        return x * scale  # noqa: F821 (bound below, after decoration)

    with pytest.raises(NameError, match="scale"):
        f(jnp.asarray(1.0))
    scale = jnp.asarray(4.0)
    assert float(f(jnp.asarray(2.0))) == 8.0
    del scale
    with pytest.raises(NameError, match="scale"):
        f(jnp.asarray(1.0))


def test_rebinding_deep_in_the_graph_is_seen() -> None:
    counter = Counter()
    lr = 0.1

    def schedule():
        return lr

    @lift.jit
    def step(w):
        counter()
        return w * schedule()

    assert float(step(jnp.asarray(1.0))) == pytest.approx(0.1)
    lr = 0.7
    assert float(step(jnp.asarray(1.0))) == pytest.approx(0.7)
    assert counter.traces == 1


def test_nonlocal_rebinding_from_outside_is_seen() -> None:
    def make() -> tuple[Any, Any]:
        w = jnp.asarray(1.0)

        @lift.jit
        def f(x):
            return x * w

        def set_w(value: Any) -> None:
            nonlocal w
            w = value

        return f, set_w

    f, set_w = make()
    assert float(f(jnp.asarray(2.0))) == 2.0
    set_w(jnp.asarray(5.0))
    assert float(f(jnp.asarray(2.0))) == 10.0


def test_captured_tracer_from_an_outer_transform() -> None:
    def loss(w):
        @lift.jit
        def f(x):
            return jnp.sum(w * x)

        return f(jnp.arange(3.0))

    np.testing.assert_allclose(jax.grad(loss)(jnp.ones(3)), jnp.arange(3.0))
    np.testing.assert_allclose(jax.jit(jax.grad(loss))(jnp.ones(3)), jnp.arange(3.0))
    np.testing.assert_allclose(jax.vmap(loss)(jnp.ones((2, 3))), [3.0, 3.0])


def test_long_lived_function_closing_over_a_rebound_tracer_keeps_none() -> None:
    w: Any = jnp.asarray(1.0)

    @lift.jit
    def f(x):
        return x * w

    def outer(v):
        nonlocal w
        w = v
        out = f(2.0)
        w = jnp.asarray(1.0)
        return out

    assert float(jax.grad(outer)(3.0)) == 2.0
    assert not any(
        isinstance(leaf, jax.core.Tracer)
        for leaf in jax.tree_util.tree_leaves(f._fast.lifted)  # pyright: ignore[reportPrivateUsage]
    )
    assert float(f(2.0)) == 2.0


# -- jax.jit's options, relative to fn's parameters ---------------------------------


def test_static_argnames_positional_and_keyword() -> None:
    counter = Counter()
    lr = 0.5

    @lift.jit(static_argnames=("n",))
    def f(x, n):
        counter()
        return x * lr * n

    x = jnp.ones(2)
    assert float(f(x, 2)[0]) == 1.0
    assert float(f(x, n=2)[0]) == 1.0
    assert float(f(x, 4)[0]) == 2.0
    with pytest.raises(
        lift.LiftError,
        match=r"(?s)test_jit.py:\d+\) was called with an unhashable value for the "
        r"parameter 'n'.*tuple instead of a list",
    ):
        f(x, [1])
    assert counter.traces == 3  # n=2 positional, n=2 by keyword, n=4


@pytest.mark.parametrize("argnums", [1, (1,), -1])
def test_static_argnums(argnums: Any) -> None:
    counter = Counter()

    @lift.jit(static_argnums=argnums)
    def f(x, mode):
        counter()
        return x + 1 if mode == "inc" else x - 1

    x = jnp.zeros(2)
    assert float(f(x, "inc")[0]) == 1.0
    assert float(f(x, "dec")[0]) == -1.0
    assert float(f(x, "inc")[0]) == 1.0
    assert counter.traces == 2


def test_donation() -> None:
    lr = 0.1

    @lift.jit(donate_argnums=0)
    def f(w, g):
        return w - lr * g

    @lift.jit(donate_argnames="w")
    def h(w, g):
        return w - lr * g

    for fn in (f, h):
        w, g = jnp.ones(4), jnp.ones(4)
        out = fn(w, g)
        np.testing.assert_allclose(out, 0.9)
        assert w.is_deleted()
        assert not g.is_deleted()


def test_keep_unused() -> None:
    unused = jnp.ones(5)

    def make(keep: bool) -> Any:
        @lift.jit(keep_unused=keep)
        def f(x, y):
            del y
            return x + 0 * jnp.sum(unused[:0])

        return f

    kept = make(True).lower(jnp.ones(2), jnp.ones(3)).as_text()
    dropped = make(False).lower(jnp.ones(2), jnp.ones(3)).as_text()
    assert "tensor<3xf32>" in kept
    assert "tensor<3xf32>" not in dropped


def test_shardings() -> None:
    mesh = Mesh(np.array(jax.devices()[:8]), ("d",))
    row = NamedSharding(mesh, PartitionSpec("d"))
    rep = NamedSharding(mesh, PartitionSpec())
    scale = jnp.asarray(2.0)

    def make() -> Any:
        def f(x, y):
            return x * scale + y

        return f

    x = jnp.ones(8)
    for options in (
        {"in_shardings": (row, rep), "out_shardings": rep},
        {"in_shardings": row, "out_shardings": row},
    ):
        f = lift.jit(make(), **options)
        out = f(x, x)
        np.testing.assert_allclose(out, 3.0)
        assert out.sharding == options["out_shardings"]
        assert f.lower(x, x).compile().input_shardings[0] == (
            (row, rep) if isinstance(options["in_shardings"], tuple) else (row, row)
        )


# -- clear errors ------------------------------------------------------------------


def test_error_unknown_static_argname() -> None:
    def f(x, n):
        return x * n

    with pytest.raises(
        lift.LiftError,
        match=r"test_jit.py:\d+\)\) got static_argnames=\('m',\), but `f` has no "
        r"parameter 'm' \(its parameters: x, n\)",
    ):
        lift.jit(f, static_argnames=("m",))


def test_error_static_argnums_out_of_range() -> None:
    def f(x, n):
        return x * n

    with pytest.raises(
        lift.LiftError,
        match=r"static_argnums=\(2,\), but the function has 2 positional "
        r"parameters \(x, n\)",
    ):
        lift.jit(f, static_argnums=2)


def test_error_static_argnums_not_an_int() -> None:
    def f(x, n):
        return x * n

    with pytest.raises(
        lift.LiftError,
        match=r"test_jit.py:\d+\)\) got static_argnums=\(0, 'n'\): 'n' is not an "
        r"int\.\nDocs: python -m lift explain jit-options",
    ):
        lift.jit(f, static_argnums=(0, "n"))


def test_error_positional_only_by_name() -> None:
    def f(x, n, /):
        return x * n

    with pytest.raises(
        lift.LiftError,
        match=r"'n' is a positional-only parameter(?s:.*)static_argnums=\(1,\)",
    ):
        lift.jit(f, static_argnames="n")


def test_error_static_and_donated() -> None:
    def f(x, n):
        return x * n

    with pytest.raises(
        lift.LiftError, match="marks the parameter 'n' both static and donated"
    ):
        lift.jit(f, static_argnums=1, donate_argnames="n")


def test_error_not_callable() -> None:
    with pytest.raises(
        lift.LiftError, match=r"lift.jit\(\) got int 3, which is not callable"
    ):
        lift.jit(3)  # pyright: ignore[reportArgumentType, reportCallIssue]


def test_error_non_array_argument_names_the_parameter() -> None:
    @lift.jit
    def f(x, mode):
        return x

    with pytest.raises(
        lift.LiftError,
        match=r"(?s)called with a str for its parameter 'mode'.*Fix: mark it "
        r"static, `lift.jit\(f, static_argnames=\('mode',\)\)`",
    ):
        f(jnp.ones(2), "fast")


def test_a_parameter_named_as_the_lifted_function_is_the_users() -> None:
    # Regression: `lift.jit` passes the lifted function first, as `__lifted__`
    # (`__lifted___` when the function has a parameter of that name); a non-array
    # for the function's own `__lifted__` got JAX's error, unexplained.
    def f(__lifted__, y):
        return __lifted__ * y

    jitted = lift.jit(f)
    assert float(jitted(2.0, 3.0)) == 6.0
    with pytest.raises(
        lift.LiftError,
        match=r"called with a str for its parameter '__lifted__'(?s:.*)Fix: mark it "
        r"static, `lift.jit\(f, static_argnames=\('__lifted__',\)\)`",
    ):
        jitted("2", 3.0)


def test_a_partial_inspect_cannot_read_fails_when_called_as_jax_jit() -> None:
    # `inspect.signature` refuses a partial with more arguments than its function
    # takes: `lift.jit` takes any arguments, and the call fails in the function.
    def f(x):
        return x * 2

    bad = functools.partial(f, 1.0, 2.0)
    with pytest.raises(ValueError, match="partial object"):
        inspect.signature(bad)
    for jit in (jax.jit, lift.jit):
        with pytest.raises(TypeError, match=r"f\(\) takes 1 positional argument"):
            jit(bad)()


def test_options_given_as_a_dict_share_one_program_across_closures() -> None:
    counter = Counter()

    def make(scale: float) -> Any:
        @lift.jit(compiler_options={})
        def f(x):
            counter()
            return x * scale

        return f

    assert [float(make(s)(jnp.asarray(1.0))) for s in (2.0, 3.0)] == [2.0, 3.0]
    assert counter.traces == 1


# -- introspection and forms --------------------------------------------------------


def test_name_doc_signature_wrapped() -> None:
    def step(w: jax.Array, g: jax.Array, *, scale: float = 1.0) -> jax.Array:
        """Docs of step."""
        return w - scale * g

    f = lift.jit(step)
    assert f.__name__ == "step"
    assert f.__qualname__ == step.__qualname__
    assert f.__doc__ == "Docs of step."
    assert f.__module__ == __name__
    assert f.__wrapped__ is step
    assert inspect.signature(f) == inspect.signature(step)
    assert "step" in repr(f)
    assert "test_jit.py" in repr(f)


def test_partial_and_bound_method() -> None:
    counter = Counter()

    def scaled(x, lr):
        counter()
        return x * lr

    class Holder:
        def __init__(self, w: Any) -> None:
            self.w = w

        def apply(self, x):
            counter()
            return x * self.w

    x = jnp.ones(2)
    assert [
        float(lift.jit(functools.partial(scaled, lr=lr))(x)[0]) for lr in (0.5, 2.0)
    ] == [0.5, 2.0]
    assert counter.traces == 1
    # A bound method of an object that is not a pytree: `self` is a static capture.
    h = Holder(2)
    assert float(lift.jit(h.apply)(x)[0]) == 2.0


class Linear(eqx.Module):
    w: jax.Array
    scale: float = eqx.field(static=True)

    @lift.jit
    def __call__(self, x):
        COUNTER()
        return self.scale * self.w * x


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Affine:
    a: jax.Array
    b: jax.Array

    @lift.jit(static_argnames=("twice",))
    def apply(self, x, twice=False):
        """Apply the map."""
        COUNTER()
        y = self.a * x + self.b
        return self.a * y + self.b if twice else y


COUNTER = Counter()


def test_methods_of_pytree_classes() -> None:
    before = COUNTER.traces
    x = jnp.ones(2)
    for w in (1.0, 2.0, 3.0):
        assert float(Linear(jnp.full(2, w), 2.0)(x)[0]) == 2.0 * w
    assert COUNTER.traces == before + 1
    assert float(Linear(jnp.full(2, 1.0), 5.0)(x)[0]) == 5.0  # a new static field
    assert COUNTER.traces == before + 2

    m = Affine(jnp.asarray(2.0), jnp.asarray(1.0))
    assert float(m.apply(1.0)) == 3.0
    assert float(m.apply(1.0, twice=True)) == 7.0
    assert float(Affine(jnp.asarray(3.0), jnp.asarray(0.0)).apply(1.0)) == 3.0
    assert COUNTER.traces == before + 4
    assert m.apply.__doc__ == "Apply the map."
    assert list(inspect.signature(m.apply).parameters) == ["x", "twice"]
    assert "jit_apply" in m.apply.lower(1.0).as_text()
    assert len(m.apply.trace(1.0).jaxpr.in_avals) == 1  # x: `m` is bound
    assert Affine.apply.__wrapped__.__name__ == "apply"


def test_nested_in_jax_jit_and_vmap() -> None:
    lr = jnp.asarray(0.5)

    @lift.jit
    def f(x):
        return x * lr

    np.testing.assert_allclose(jax.jit(f)(jnp.ones(2)), 0.5)
    np.testing.assert_allclose(jax.vmap(f)(jnp.ones((3, 2))), 0.5)
    np.testing.assert_allclose(jax.grad(lambda x: jnp.sum(f(x)))(jnp.ones(2)), 0.5)


def test_lift_options_pass_through() -> None:
    counter = Counter()

    def make(b: float) -> Any:
        @lift.jit(static=("b",))
        def f(x):
            counter()
            return x * b

        return f

    assert float(make(2.0)(jnp.asarray(1.0))) == 2.0
    assert float(make(3.0)(jnp.asarray(1.0))) == 3.0
    assert counter.traces == 2


def test_jit_of_jit_function_rewraps_the_original() -> None:
    f = lift.jit(lambda x: x + 1)
    g = lift.jit(f, static_argnums=())
    assert g.__wrapped__ is f.__wrapped__
    assert int(g(jnp.asarray(1))) == 2


def test_captured_jit_function_is_a_pytree() -> None:
    counter = Counter()

    def make(lr: float) -> Any:
        @lift.jit
        def inner(x):
            counter()
            return x * lr

        @lift.jit
        def outer(x):
            counter()
            return inner(x) + 1

        return outer

    for lr in (0.1, 0.2, 0.3):
        np.testing.assert_allclose(make(lr)(jnp.ones(2)), 1 + lr, rtol=1e-6)
    assert counter.traces == 2  # inner once, outer once
    paths = [
        jax.tree_util.keystr(p)
        for p, _ in jax.tree_util.tree_flatten_with_path(make(0.5))[0]
    ]
    assert paths == [".__wrapped__.captures['inner'].__wrapped__.captures['lr']"]
    outer = make(0.5)
    rebuilt = jax.tree_util.tree_map(lambda x: x * 2, outer)
    assert rebuilt.__name__ == "outer"
    assert float(rebuilt(jnp.asarray(1.0))) == 2.0
    assert float(jax.jit(lambda f, x: f(x))(outer, jnp.asarray(1.0))) == 1.5


def test_numpy_capture_and_no_capture() -> None:
    counter = Counter()
    w = np.arange(3.0)

    @lift.jit
    def f(x):
        counter()
        return x * w

    @lift.jit
    def g(x):
        counter()
        return x + 1

    np.testing.assert_allclose(f(2.0), [0.0, 2.0, 4.0])
    np.testing.assert_allclose(f(2.0), [0.0, 2.0, 4.0])
    w = np.ones(3)
    np.testing.assert_allclose(f(2.0), [2.0, 2.0, 2.0])
    assert [float(g(1.0)), float(g(2.0))] == [2.0, 3.0]
    assert counter.traces == 2


def test_error_method_of_a_class_that_is_not_a_pytree() -> None:
    class Plain:
        @lift.jit
        def apply(self, x):
            return x

    with pytest.raises(
        lift.LiftError,
        match=r"(?s)called with a .*Plain for its parameter 'self'.*Fix: make the "
        r"class a pytree",
    ):
        Plain().apply(jnp.ones(2))


def test_closures_differing_in_a_static_capture_compile_one_program_each() -> None:
    counter = Counter()

    def make(n: int, lr: float) -> Any:
        @lift.jit
        def step(w: Any) -> Any:
            counter()
            return w * lr + n

        return step

    w = jnp.ones(2)
    for lr in (0.5, 0.25):
        for n in (1, 2, 3):
            assert jnp.allclose(make(n, lr)(w), lr + n)
    # One program per static `n`: the rates are its parameters.
    assert counter.traces == 3


# -- what Python would compute now ---------------------------------------------------


def test_keyword_only_defaults_changed_in_place_are_seen() -> None:
    @lift.jit
    def step(w, *, lr=0.1):
        return w * lr

    for _ in range(3):  # the fast path is set
        assert float(step(1.0)) == pytest.approx(0.1)
    step.__wrapped__.__kwdefaults__["lr"] = 0.5  # pyright: ignore[reportOptionalSubscript]
    assert float(step(1.0)) == pytest.approx(0.5)
    step.__wrapped__.__kwdefaults__["lr"] = 2  # an int: static, another program
    assert float(step(1.0)) == 2.0


def test_keyword_only_defaults_changed_in_place_are_seen_deep_in_the_graph() -> None:
    def helper(x, *, lr=0.1):
        return x * lr

    k = jnp.asarray(1.0)

    @lift.jit
    def step(w):
        return helper(w) * k

    for _ in range(3):
        assert float(step(1.0)) == pytest.approx(0.1)
    helper.__kwdefaults__["lr"] = 0.5  # pyright: ignore[reportOptionalSubscript]
    assert float(step(1.0)) == pytest.approx(0.5)


def test_defaults_replaced_and_attributes_changed_in_place_are_seen() -> None:
    def helper(x, lr=0.1):
        return x * lr * helper.scale  # type: ignore[attr-defined]

    helper.scale = 1.0  # type: ignore[attr-defined]

    @lift.jit
    def step(w):
        return helper(w)

    for _ in range(3):
        assert float(step(1.0)) == pytest.approx(0.1)
    helper.__defaults__ = (0.2,)
    assert float(step(1.0)) == pytest.approx(0.2)
    helper.__dict__["scale"] = 3.0
    assert float(step(1.0)) == pytest.approx(0.6)
    vars(helper).update(scale=5.0)
    assert float(step(1.0)) == pytest.approx(1.0)


def test_x64_switched_on_after_a_32_bit_call_is_seen() -> None:
    lr = 0.1

    @lift.jit
    def step(w):
        return w * lr

    for _ in range(3):
        assert step(1.0).dtype == jnp.float32
    with jax.enable_x64(True):
        out = step(np.float64(1.0))
        # float32 would give 0.10000000149; float64 on a TPU, which emulates
        # it, 0.09999999999999998.
        assert out.dtype == jnp.float64 and float(out) == pytest.approx(0.1, abs=1e-15)
        assert float(step(np.float64(1.0))) == pytest.approx(0.1, abs=1e-15)
    assert step(1.0).dtype == jnp.float32


def test_a_default_device_set_after_a_call_is_seen() -> None:
    lr = 0.1

    @lift.jit
    def step():
        return lr * 2

    devices = jax.devices()
    for _ in range(3):
        step()
    for device in devices[1:3]:
        with jax.default_device(device):
            assert step().devices() == {device}
            assert step().devices() == {device}


# -- in-place changes ------------------------------------------------------------


def test_lift_jit_sees_a_captured_partials_keyword_changed_in_place() -> None:
    # As `f.__kwdefaults__['lr'] = 0.5` is seen, so is `p.keywords['lr']`:
    # Python reads both at each call.
    def scaled(w: Any, lr: float) -> Any:
        return w * lr

    def make(p: Any) -> Any:
        @lift.jit
        def step(w: Any) -> Any:
            return p(w)

        return step

    p = functools.partial(scaled, lr=0.1)
    step = make(p)
    step(1.0)
    step(1.0)
    p.keywords["lr"] = 0.5
    assert float(step(1.0)) == pytest.approx(0.5)


def _tripled(x: Any) -> Any:
    return x * 3.0


def test_lift_jit_sees_its_functions_code_replaced_in_place() -> None:
    # As IPython's autoreload does.
    def step(x: Any) -> Any:
        return x * 2.0

    compiled = lift.jit(step)
    assert float(compiled(1.0)) == 2.0
    assert float(compiled(1.0)) == 2.0
    step.__code__ = _tripled.__code__
    assert float(compiled(1.0)) == step(1.0) == 3.0


def test_lift_jit_sees_a_captured_dict_rebound_without_retracing() -> None:
    traces = Counter()

    def make() -> tuple[Any, Any]:
        config = {"lr": 0.1}

        @lift.jit
        def step(w: Any) -> Any:
            traces()
            return w * config["lr"]

        def set_lr(lr: float) -> None:
            nonlocal config
            config = {**config, "lr": lr}

        return step, set_lr

    step, set_lr = make()
    assert float(step(1.0)) == pytest.approx(0.1)
    set_lr(0.5)
    assert float(step(1.0)) == pytest.approx(0.5)
    assert traces.traces == 1


def test_verifying_reports_a_captured_dict_changed_in_place() -> None:
    # A cached call does not walk captured containers: documented, and reported.
    config = {"lr": 0.1}

    @lift.jit
    def step(w: Any) -> Any:
        return w * config["lr"]

    step(1.0)
    step(1.0)
    config["lr"] = 0.5
    with lift.verifying(), pytest.raises(lift.LiftError, match=r"changed in place"):
        step(1.0)
    with lift.verifying(False):
        assert float(step(1.0)) == pytest.approx(0.1)  # what was lifted last


def test_verifying_passes_a_list_of_yours_that_now_holds_an_unhashable_value() -> None:
    # A list the function keeps as your own object (a log) is not part of what
    # a cached call promises, even once it holds what cannot be keyed.
    log: list[Any] = ["a"]

    @lift.jit
    def step(w: Any) -> Any:
        return w * len(log)

    step(1.0)
    log.append(bytearray(b"unhashable"))
    with lift.verifying():
        assert float(step(1.0)) == 1.0  # what was compiled


def test_lift_jit_over_an_nnx_model_as_an_argument_sees_the_optimizers_update() -> None:
    import optax
    from flax import nnx

    model = nnx.Linear(2, 1, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)
    x = jnp.ones((1, 2))

    @lift.jit
    def loss(model: Any, x: Any) -> Any:
        return jnp.sum(model(x) ** 2)

    before = float(loss(model, x))
    assert before == pytest.approx(float(jnp.sum(model(x) ** 2)))
    grads = nnx.grad(lambda m: jnp.sum(m(x) ** 2))(model)
    optimizer.update(model, grads)
    after = float(loss(model, x))
    assert after == pytest.approx(float(jnp.sum(model(x) ** 2)))
    assert after != pytest.approx(before)
