"""JAX's own `closure_convert` tests, rewritten against `lift.closure_convert`.

From JAX 0.10.2: the `closure_convert` tests of `tests/custom_api_test.py`, and
all of `tests/ode_test.py`, whose `odeint` is a `custom_vjp` built on
`closure_convert`: here `jax.experimental.ode` gets `lift.closure_convert`
through an adapter patched over the name it calls
(`custom_derivatives.closure_convert`).

The documented differences are asserted as such:

- `lift.closure_convert(f, *args)` returns a `Lifted`, called like `f`, not a
  `(function, constants)` pair; its constants are its leaves. `as_pair` below
  gives code written for JAX's pair (odeint) what it expects.
- It hoists every closed-over tracer and array, where JAX hoists only the
  float tracers that differentiation may perturb: integer tracers and arrays
  that are not differentiated are leaves too.

JAX's `ode_test` checks gradients with `check_grads` to second order, which
compiles the solver afresh for every evaluation (several minutes under JAX's
leak checker). Here each test compiles one program: the solution and a
first-order reverse-mode check (the VJP against a central difference along a
random direction), at JAX's own float32 tolerance.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.integrate as osp_integrate
from jax.experimental import ode

import lift

# JAX's ode_test tolerance when float64 is off (`num_float_bits == 32`).
TOL = 1e-1


class Hidden:
    """Not a pytree: `lift` cannot see what it holds, a trace can."""

    def __init__(self, **values: Any) -> None:
        self.__dict__.update(values)


def _kinds(tree: Any) -> list[str]:
    return sorted(str(jax.typeof(leaf).str_short()) for leaf in jax.tree.leaves(tree))


# --- closure_convert from custom_api_test ----------------------------------------


def _cos_after_lifted(fn: Any, x: Any) -> Any:
    """JAX's `cos_after`, with the converted function a differentiable pytree.

    Its rule gives `17 x` for `x` and `42 a` for each constant `a` the function
    closed over: with a `Lifted`, the constants' cotangents are the cotangent
    of the function itself.
    """

    @jax.custom_vjp
    def cos_after(fn: Any, x: Any) -> Any:
        return jnp.cos(fn(x))

    def fwd(fn: Any, x: Any) -> Any:
        return cos_after(fn, x), (fn, x)

    def rev(res: Any, g: Any) -> Any:
        fn, x = res
        return jax.tree.map(lambda a: 42.0 * a, fn), 17.0 * x

    cos_after.defvjp(fwd, rev)
    return cos_after(fn, x)


def _cos_after_pair(fn: Any, x: Any, *args: Any) -> Any:
    """JAX's `cos_after` as written there: constants as extra arguments."""

    @partial(jax.custom_vjp, nondiff_argnums=(0,))
    def cos_after(fn: Any, x: Any, *args: Any) -> Any:
        return jnp.cos(fn(x, *args))

    def fwd(fn: Any, x: Any, *args: Any) -> Any:
        return cos_after(fn, x, *args), (x, args)

    def rev(fn: Any, res: Any, g: Any) -> Any:
        x, args = res
        return (17.0 * x, *[42.0 * a for a in args])

    cos_after.defvjp(fwd, rev)
    return cos_after(fn, x, *args)


def _call_with_consts(treedef: Any, n: int) -> Callable[..., Any]:
    def converted(*args_and_consts: Any) -> Any:
        split = len(args_and_consts) - n
        fn = jax.tree.unflatten(treedef, args_and_consts[split:])
        return fn(*args_and_consts[:split])

    return converted


def as_pair(
    fn: Callable[..., Any], *args: Any, programs: dict[Any, Any] | None = None
) -> tuple[Callable[..., Any], list[Any]]:
    """`jax.closure_convert`'s interface on top of `lift.closure_convert`.

    Returns `(converted, consts)` with `converted(*args, *consts)` equal to
    `fn(*args)`. `converted` depends only on the treedef, so, given a
    `programs` dict, equal conversions return the same function: a `jit` that
    takes it as a static argument (odeint's does) compiles once.
    """
    leaves, treedef = jax.tree.flatten(lift.closure_convert(fn, *args))
    if programs is None:
        return _call_with_consts(treedef, len(leaves)), leaves
    key = (treedef, len(leaves))
    if key not in programs:
        programs[key] = _call_with_consts(treedef, len(leaves))
    return programs[key], leaves


@pytest.mark.parametrize("route", ["lifted", "pair"])
def test_closure_convert(route: str) -> None:
    seen: list[list[str]] = []

    def cos_after(fn: Any, x: Any) -> Any:
        converted = lift.closure_convert(fn, x)
        assert isinstance(converted, lift.Lifted)
        seen.append(_kinds(converted))
        if route == "lifted":
            return _cos_after_lifted(converted, x)
        pure, consts = as_pair(fn, x)
        return _cos_after_pair(pure, x, *consts)

    def dist(c: Any, x: Any) -> Any:
        return jnp.sum((x - c) ** 2.0)

    def solve(c: Any, x: Any) -> Any:
        def closure(x: Any) -> Any:
            return dist(c, x)

        return cos_after(closure, x)

    c, x = 2.0 * jnp.ones(2), jnp.ones(2)
    np.testing.assert_allclose(solve(c, x), jnp.cos(dist(c, x)), rtol=1e-6)
    g_c, g_x = jax.grad(solve, argnums=(0, 1))(c, x)
    np.testing.assert_allclose(g_c, 42.0 * c, rtol=1e-6)
    np.testing.assert_allclose(g_x, 17.0 * x, rtol=1e-6)
    # One constant, `c`, as with JAX (which asserts at most one).
    assert seen == [["float32[2]"]] * len(seen)


@pytest.mark.parametrize("route", ["lifted", "pair"])
def test_closure_convert_mixed_consts(route: str) -> None:
    # Like test_closure_convert, but close over values that participate in AD
    # as well as values that do not (jax issue 6415).
    seen: list[list[str]] = []

    def cos_after(fn: Any, x: Any) -> Any:
        converted = lift.closure_convert(fn, x)
        seen.append(_kinds(converted))
        if route == "lifted":
            return _cos_after_lifted(converted, x)
        pure, consts = as_pair(fn, x)
        return _cos_after_pair(pure, x, *consts)

    def dist(c: Any, s: Any, x: Any) -> Any:
        return jnp.sum(s * (x - c) ** 2.0)

    def solve(c: Any, s: Any, x: Any) -> Any:
        def closure(x: Any) -> Any:
            return dist(c, s, x)

        return cos_after(closure, x)

    c, s, x = 2.0 * jnp.ones(2), 3.0 * jnp.ones(2), jnp.ones(2)
    np.testing.assert_allclose(solve(c, s, x), jnp.cos(dist(c, s, x)), rtol=1e-6)
    g_c, g_x = jax.grad(solve, argnums=(0, 2))(c, s, x)
    np.testing.assert_allclose(g_c, 42.0 * c, rtol=1e-6)
    np.testing.assert_allclose(g_x, 17.0 * x, rtol=1e-6)
    # Documented difference: JAX hoists only `c` (`len(aux_args) <= 1`), lift
    # hoists the undifferentiated `s` too.
    assert seen == [["float32[2]", "float32[2]"]] * len(seen)

    def jax_consts(c: Any, s: Any, x: Any) -> Any:
        _, consts = jax.closure_convert(lambda y: dist(c, s, y), x)
        seen.append([str(jax.typeof(a).str_short()) for a in consts])
        return jnp.sum(jnp.stack(consts))

    jax.grad(jax_consts)(c, s, x)
    assert seen[-1] == ["float32[2]"]


def test_closure_convert_pytree_mismatch() -> None:
    # jax issue 23588: JAX's converted vjp takes the constants as extra
    # arguments, and raises when they come packed. A `Lifted` takes the
    # original arguments only, and names the conversion to redo otherwise.
    def f(x: Any, z: Any) -> Any:
        return z * x

    x, z = 2.0, 3.0
    _, vjp = jax.vjp(f, x, z)
    converted = lift.closure_convert(vjp, x)
    np.testing.assert_allclose(converted(x), (z * x, x * x))
    _, jax_consts = jax.closure_convert(vjp, x)
    with pytest.raises(lift.LiftError, match=r"lift\.closure_convert\("):
        converted(x, jax_consts)
    # Arguments of other shapes: the error names the ones it was converted for.
    with pytest.raises(lift.LiftError, match=r"float32\[\]"):
        converted(jnp.ones(3))


def test_maybe_perturbed_int_regression() -> None:
    # jax discussion 9951: JAX's conversion of `lambda: x` for an integer `x`
    # made in a jit has no constants. lift hoists it: one int32 leaf.
    @jax.jit
    def f() -> Any:
        x = jnp.array(1)
        _, aux_args = jax.closure_convert(lambda: x)
        assert aux_args == []
        converted = lift.closure_convert(lambda: x)
        return jax.tree.leaves(converted), converted()

    leaves, value = f()
    assert _kinds(leaves) == ["int32[]"]
    assert int(leaves[0]) == 1
    assert int(value) == 1


def test_hoists_integer_tracers_jax_keeps_in_its_closure() -> None:
    @jax.jit
    def f(x: Any, i: Any, flag: Any) -> Any:
        hidden = Hidden(x=x, i=i, flag=flag)

        def g(y: Any) -> Any:
            return jnp.where(hidden.flag, y * hidden.x + hidden.i, y)

        _, jax_consts = jax.closure_convert(g, x)
        converted = lift.closure_convert(g, x)
        # JAX hoists the float tracer only; the integer and the boolean stay in
        # its converted function's closure.
        assert _kinds(jax_consts) == ["float32[]"]
        return jax.tree.leaves(converted), converted(x)

    leaves, value = f(jnp.float32(2.0), 3, True)
    assert _kinds(leaves) == ["bool[]", "float32[]", "int32[]"]
    np.testing.assert_allclose(value, 2.0 * 2.0 + 3)


# --- tests/ode_test.py, with odeint converting through lift ----------------------


@pytest.fixture
def routed(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Route odeint's `closure_convert` through lift; record each conversion.

    Records the kinds of the constants (`float32[3]`), never the constants: a
    tracer kept after its transform exits would be a leak.
    """
    conversions: list[list[str]] = []
    programs: dict[Any, Any] = {}

    def closure_convert(fn: Callable[..., Any], *args: Any) -> Any:
        pure, consts = as_pair(fn, *args, programs=programs)
        conversions.append(_kinds(consts))
        return pure, consts

    monkeypatch.setattr(ode.custom_derivatives, "closure_convert", closure_convert)
    return conversions


def _pairing(a: Any, b: Any) -> float:
    # Bilinear, not conjugating: a VJP is the transpose of the JVP.
    return sum(
        float(np.sum(np.asarray(x) * np.asarray(y)).real)
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


def _normal(rng: np.random.RandomState, like: Any) -> np.ndarray:
    x = np.asarray(like)
    if np.iscomplexobj(x):
        return np.asarray(rng.randn(*x.shape) + 1j * rng.randn(*x.shape))
    return np.asarray(rng.randn(*x.shape))


def check_vjp(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    reference: Callable[..., Any],
    tol: float = 1e-2,
    *,
    leak_checked: bool = True,
) -> Any:
    """Check `fn` and its reverse-mode derivative at `args` against `reference`.

    `fn(*args)` and its VJP run in one compiled program. `reference` computes
    the same solution in float64 NumPy (scipy or a closed form): the solution
    must match it, and `<vjp(v), u>` must match `reference`'s central
    difference along `u`, for random `u` and `v`. JAX's test uses
    `check_grads(..., modes=["rev"], order=2)`, one program per evaluation,
    at tolerance 1e-1. Returns `fn(*args)`.

    `leak_checked=False` runs it without JAX's leak checker, whose pass over
    the heap at every trace exit doubles the time: for dynamics that close
    over nothing, where the caller asserts that no conversion had a constant.
    """
    args = jax.tree.map(np.asarray, args)
    expected = reference(*args)
    rng = np.random.RandomState(0)
    u = jax.tree.map(lambda a: _normal(rng, a), args)
    v = jax.tree.map(lambda o: _normal(rng, o).astype(np.float32), expected)

    @jax.jit
    def solve_and_vjp(args: Any, v: Any) -> Any:
        out, vjp = jax.vjp(fn, *args)
        return out, vjp(v)

    with jax.check_tracer_leaks(leak_checked):
        out, cotangents = solve_and_vjp(args, v)
    jax.tree.map(
        lambda o, e: np.testing.assert_allclose(o, e, rtol=tol, atol=tol), out, expected
    )
    h = 1e-6
    plus = reference(*jax.tree.map(lambda a, d: a + h * d, args, u))
    minus = reference(*jax.tree.map(lambda a, d: a - h * d, args, u))
    numeric = jax.tree.map(lambda p, m: (p - m) / (2 * h), plus, minus)
    np.testing.assert_allclose(
        _pairing(cotangents, u), _pairing(v, numeric), rtol=tol, atol=tol
    )
    return out


def _scipy(fun: Callable[..., Any], as_list: bool = False) -> Callable[..., Any]:
    """`fun(np, y, t, *args)` solved by scipy in float64, shaped like odeint's."""

    def solve(y0: Any, ts: Any, *args: Any) -> Any:
        ys = osp_integrate.odeint(
            partial(fun, np), np.array(y0), ts, args, rtol=1e-10, atol=1e-10
        )
        return list(ys.T) if as_list else ys

    return solve


def test_pend_grads(routed: list[list[str]]) -> None:
    def pend(_np: Any, y: Any, _: Any, m: Any, g: Any) -> Any:
        theta, omega = y
        return [omega, -m * omega - g * _np.sin(theta)]

    y0 = [np.pi - 0.1, 0.0]
    ts = np.linspace(0.0, 1.0, 11)
    args = (0.25, 9.8)
    integrate = partial(ode.odeint, partial(pend, jnp))
    check_vjp(
        integrate, (y0, ts, *args), _scipy(pend, as_list=True), leak_checked=False
    )
    # `partial(pend, jnp)` holds only the module `jnp`, static: no constants.
    assert routed and all(c == [] for c in routed)


def test_pytree_state(routed: list[list[str]]) -> None:
    """odeint with y(t) values that are pytrees."""

    def dynamics(y: Any, _t: Any) -> Any:
        return jax.tree.map(jnp.negative, y)

    def exact(y0: Any, ts: Any) -> Any:
        decay = np.exp(-(ts - ts[0]))
        return tuple(np.multiply.outer(decay, y) for y in y0)

    y0 = (np.array(-0.1), np.array([[[0.1]]]))
    ts = np.linspace(0.0, 1.0, 11)
    check_vjp(partial(ode.odeint, dynamics), (y0, ts), exact, leak_checked=False)
    assert routed and all(c == [] for c in routed)  # no constants


def test_weird_time_pendulum_grads(routed: list[list[str]]) -> None:
    """Gradients are correct when the dynamics depend on t."""

    def dynamics(_np: Any, y: Any, t: Any) -> Any:
        return _np.array([y[1] * -t, -1 * y[1] - 9.8 * _np.sin(y[0])])

    y0 = np.array([np.pi - 0.1, 0.0])
    ts = np.linspace(0.0, 1.0, 11)
    integrate = partial(ode.odeint, partial(dynamics, jnp))
    check_vjp(integrate, (y0, ts), _scipy(dynamics), leak_checked=False)
    assert routed and all(c == [] for c in routed)  # no constants


def test_decay(routed: list[list[str]]) -> None:
    def decay(_np: Any, y: Any, t: Any, arg1: Any, arg2: Any) -> Any:
        return -_np.sqrt(t) - y + arg1 - _np.mean((y + arg2) ** 2)

    rng = np.random.RandomState(0)
    args = (rng.randn(3), rng.randn(3))
    y0 = rng.randn(3)
    ts = np.linspace(0.1, 0.2, 4)
    integrate = partial(ode.odeint, partial(decay, jnp))
    check_vjp(integrate, (y0, ts, *args), _scipy(decay), leak_checked=False)
    assert routed and all(c == [] for c in routed)  # no constants


def _swoop(_np: Any, y: Any, t: Any, arg1: Any, arg2: Any) -> Any:
    return _np.array(y - _np.sin(t) - _np.cos(t) * arg1 + arg2)


@pytest.mark.parametrize(
    ("y0", "args"),
    [
        pytest.param(np.linspace(0.1, 0.9, 10), (0.1, 0.2), id="swoop"),
        pytest.param(np.linspace(1.1, 10.9, 10), (0.1, 0.3), id="swoop_bigger"),
    ],
)
def test_swoop(routed: list[list[str]], y0: Any, args: Any) -> None:
    ts = np.array([0.1, 0.2])
    integrate = partial(ode.odeint, partial(_swoop, jnp))
    check_vjp(integrate, (y0, ts, *args), _scipy(_swoop), leak_checked=False)
    assert routed and all(c == [] for c in routed)  # no constants


def test_odeint_vmap_grad(routed: list[list[str]]) -> None:
    # jax issue 2531
    def dx_dt(x: Any, *args: Any) -> Any:
        return 0.1 * x

    def g(x: Any) -> Any:
        # Two initial values for the ODE, run at once.
        y0_arr = jnp.array([[x, 0.1], [x, 0.2]])
        t = jnp.array([0.0, 5.0])
        y = jax.vmap(lambda y0: ode.odeint(dx_dt, y0, t))(y0_arr)
        return y[:, -1].sum()

    # JAX compares with the gradients of two runs without vmap; the exact one
    # is d/dx (2 x e^0.5 + 0.3 e^0.5) = 2 e^0.5. (No constants, so no leak
    # check: see `check_vjp`.)
    with jax.check_tracer_leaks(False):
        grad = jax.jit(jax.grad(g))(2.0)
    np.testing.assert_allclose(grad, 2 * np.exp(0.5), rtol=1e-5)
    assert routed and all(c == [] for c in routed)


def test_disable_jit_odeint_with_vmap(routed: list[list[str]]) -> None:
    # jax issue 2598. Op by op, every operation of the solver would compile
    # afresh under JAX's leak checker (it turns its caches off): over a minute.
    # No transformation here keeps a trace past its end; vmap's is checked by
    # the other tests.
    with jax.disable_jit(), jax.check_tracer_leaks(False):
        t = jnp.array([0.0, 1.0])
        x0_eval = jnp.zeros((5, 2))
        f = lambda x0: ode.odeint(lambda x, _t: x, x0, t)
        out = jax.vmap(f)(x0_eval)
    np.testing.assert_array_equal(out, np.zeros((5, 2, 2)))
    assert routed


def test_grad_closure(routed: list[list[str]]) -> None:
    # simplification of jax issue 2718
    def experiment(x: Any) -> Any:
        def model(y: Any, t: Any) -> Any:
            return -x * y

        history = ode.odeint(model, 1.0, np.arange(0, 10, 0.1))
        return history[-1]

    check_vjp(experiment, (0.01,), lambda x: np.exp(-x * 9.9))
    # The closed-over `x`, a tracer of the check's jit, hoisted as the constant.
    assert routed[0] == ["float32[]"]


def test_grad_closure_with_vmap(routed: list[list[str]]) -> None:
    # jax issue 2718
    @jax.jit
    def experiment(x: Any) -> Any:
        def model(y: Any, t: Any) -> Any:
            return -x * y

        history = ode.odeint(model, 1.0, np.arange(0, 10, 0.1))
        return history[-1]

    t = np.arange(0.0, 1.0, 0.125)
    # In one outer jit, so that the backward pass is not run op by op (each op
    # compiled afresh under JAX's leak checker).
    h, g = jax.jit(jax.vmap(jax.value_and_grad(experiment)))(t)
    # Exact: y(9.9) = exp(-9.9 x), dy/dx = -9.9 exp(-9.9 x).
    np.testing.assert_allclose(h, np.exp(-9.9 * t), rtol=1e-4)
    np.testing.assert_allclose(g, -9.9 * np.exp(-9.9 * t), rtol=1e-4)
    assert routed


def test_forward_mode_error(routed: list[list[str]]) -> None:
    # jax issue 3558
    def f(k: Any) -> Any:
        return ode.odeint(lambda x, t: k * x, 1.0, jnp.linspace(0, 1.0, 50)).sum()

    with pytest.raises(TypeError, match=r"can't apply forward-mode.*"):
        jax.jacfwd(f)(3.0)
    assert routed


def test_closure_nondiff(routed: list[list[str]]) -> None:
    # jax issue 3584
    def dz_dt(z: Any, t: Any) -> Any:
        return jnp.stack([z[0], z[1]])

    def f(z: Any) -> Any:
        return jnp.sum(ode.odeint(dz_dt, z, jnp.arange(10.0)))

    with jax.check_tracer_leaks(False):  # no constants: see `check_vjp`
        grad = jax.jit(jax.grad(f))(jnp.ones(2))
    np.testing.assert_allclose(
        grad, np.full(2, np.exp(np.arange(10.0)).sum()), rtol=1e-4
    )
    assert routed and all(c == [] for c in routed)


def test_complex_odeint(routed: list[list[str]]) -> None:
    # jax issues 3986 and 8757
    def dy_dt(y: Any, t: Any, alpha: Any) -> Any:
        return alpha * y * jnp.exp(-t).astype(y.dtype)

    def f(y0: Any, ts: Any, alpha: Any) -> Any:
        return ode.odeint(dy_dt, y0, ts, alpha).real

    def exact(y0: Any, ts: Any, alpha: Any) -> Any:
        return (y0 * np.exp(alpha * (np.exp(-ts[0]) - np.exp(-ts)))).real

    alpha = np.complex64(3 + 4j)
    y0 = np.complex64(1 + 2j)
    ts = np.linspace(0.0, 1.0, 11)
    # The backward pass ravels all parameters into one array, so dtype
    # promotion is unavoidable.
    with jax.numpy_dtype_promotion("standard"):
        check_vjp(f, (y0, ts, alpha), exact, leak_checked=False)
    assert routed and all(c == [] for c in routed)  # no constants


def test_hmax(routed: list[list[str]]) -> None:
    """Max step size control."""

    def rhs(y: Any, t: Any) -> Any:
        return jnp.piecewise(
            t,
            [t <= 2.0, (t >= 5.0) & (t <= 7.0)],
            [
                lambda s: jnp.array(1.0),
                lambda s: jnp.array(-1.0),
                lambda s: jnp.array(0.0),
            ],
        )

    ys = ode.odeint(
        func=rhs, y0=jnp.array(0.0), t=jnp.array([0.0, 5.0, 10.0]), hmax=1.0
    )
    assert jnp.abs(ys[1] - 2.0) < 1e-4
    assert jnp.abs(ys[2]) < 1e-4
    assert routed


# --- the differences, through odeint ---------------------------------------------


def _decay_to(rate: Any, scale: Any, power: Any) -> Any:
    hidden = Hidden(rate=rate, scale=scale, power=power)

    def model(y: Any, t: Any) -> Any:
        return -hidden.rate * hidden.scale * y**hidden.power

    return ode.odeint(model, 1.0, jnp.linspace(0.0, 1.0, 5))[-1]


def test_odeint_hoists_integer_and_undifferentiated_constants(
    routed: list[list[str]],
) -> None:
    # y' = -rate * scale * y: y(1) = exp(-1).
    value = jax.jit(_decay_to)(0.5, jnp.float32(2.0), 1)
    np.testing.assert_allclose(value, np.exp(-1.0), rtol=1e-5)
    # All three captures are constants: the float ones and the integer power.
    # JAX's `closure_convert` hoists the floats only (they are jit tracers).
    assert routed == [["float32[]", "float32[]", "int32[]"]]


def test_odeint_cannot_differentiate_with_a_hoisted_integer(
    routed: list[list[str]],
) -> None:
    # A consequence of hoisting integers: odeint passes the constants to its
    # custom_vjp as differentiable arguments, and its backward pass fails on an
    # integer argument (float0 cotangent) -- as it does when a user passes an
    # integer argument to JAX's own odeint, shown second. Through JAX's
    # `closure_convert` the integer stays in the closure and this works.
    with pytest.raises(ValueError, match=r"float0"):
        jax.jit(jax.grad(_decay_to))(0.5, jnp.float32(2.0), 1)
    assert routed[0] == ["float32[]", "float32[]", "int32[]"]

    def model(y: Any, t: Any, rate: Any, power: Any) -> Any:
        return -rate * y**power

    def with_integer_argument(rate: Any) -> Any:
        return ode.odeint(model, 1.0, jnp.linspace(0.0, 1.0, 5), rate, 1)[-1]

    with pytest.raises(ValueError, match=r"float0"):
        jax.jit(jax.grad(with_integer_argument))(0.5)
