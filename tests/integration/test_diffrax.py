"""diffrax and optimistix: a vector field or root-find function closing over a
parameter, lifted, compiles once for every value, goes through `jax.jit`, and is
differentiated and vmapped with respect to what it captured."""

from __future__ import annotations

from typing import Any

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
import pytest

import lift

RATES = (0.5, 1.0, 1.5, 2.0, 2.5)


@pytest.fixture(autouse=True)
def _without_jax_leak_checker() -> Any:
    # diffrax 0.7.2 and optimistix 0.1.0 trip JAX's own leak checker with plain
    # closures and lifted ones alike: it finds a tracer still referenced at trace
    # exit and fails in `_why_alive` with an IndexError (jax issue 26560) before
    # it can say where. These tests are about compilation and derivatives.
    before = jax.config.jax_check_tracer_leaks
    jax.config.update("jax_check_tracer_leaks", False)
    yield
    jax.config.update("jax_check_tracer_leaks", before)


Y0 = jnp.asarray(1.0)


def make_field(k: Any) -> Any:
    """dy/dt = -k y, closing over the decay rate `k`: y(1) = exp(-k)."""

    def field(t: Any, y: jax.Array, args: Any) -> jax.Array:
        return -k * y

    return field


def final(field: Any, adjoint: Any = None) -> jax.Array:
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(field),
        diffrax.Tsit5(),
        t0=0.0,
        t1=1.0,
        dt0=0.05,
        y0=Y0,
        adjoint=diffrax.RecursiveCheckpointAdjoint() if adjoint is None else adjoint,
    )
    assert sol.ys is not None
    return sol.ys[-1]


def _counted(jit: Any) -> tuple[Any, list[int]]:
    traces = [0]

    def solve(field: Any) -> jax.Array:
        traces[0] += 1
        return final(field)

    return jit(solve), traces


def test_filter_jit_sweep_compiles_once_lifted_and_per_value_plain() -> None:
    plain, plain_traces = _counted(eqx.filter_jit)
    lifted, lifted_traces = _counted(eqx.filter_jit)
    for k in RATES:
        want = float(np.exp(-k))
        np.testing.assert_allclose(plain(make_field(k)), want, rtol=1e-5)
        np.testing.assert_allclose(lifted(lift.lift(make_field(k))), want, rtol=1e-5)
    assert plain_traces[0] == len(RATES)
    assert lifted_traces[0] == 1


def test_jax_jit_takes_the_lifted_closure() -> None:
    solve, traces = _counted(jax.jit)
    with pytest.raises(TypeError, match=r"abstract array|not a valid JAX type"):
        solve(make_field(1.0))
    for k in RATES:
        np.testing.assert_allclose(
            solve(lift.lift(make_field(k))), np.exp(-k), rtol=1e-5
        )
    assert traces[0] == 1


@pytest.mark.parametrize(
    "adjoint",
    [diffrax.RecursiveCheckpointAdjoint(), diffrax.BacksolveAdjoint()],
    ids=["checkpoint", "backsolve"],
)
def test_grad_with_respect_to_the_captured_parameter(adjoint: Any) -> None:
    k = 1.3
    grad = eqx.filter_jit(jax.grad(lambda f: final(f, adjoint)))
    grads = grad(lift.lift(make_field(jnp.asarray(k))))
    assert lift.is_lifted(grads)
    h = 1e-2
    solve = eqx.filter_jit(final)
    finite = (
        solve(lift.lift(make_field(k + h))) - solve(lift.lift(make_field(k - h)))
    ) / (2 * h)
    np.testing.assert_allclose(grads.captures["k"], finite, rtol=1e-3)
    np.testing.assert_allclose(grads.captures["k"], -np.exp(-k), rtol=1e-4)


def test_backsolve_refuses_a_plain_closure_over_a_traced_parameter() -> None:
    # What lifting fixes: the adjoint's custom VJP cannot see a closed-over value.
    # (JAX does not export the exception's class: jax 0.10.2 and 0.8.0.)
    from jax._src.interpreters.ad import CustomVJPException

    grad = jax.jit(jax.grad(lambda k: final(make_field(k), diffrax.BacksolveAdjoint())))
    with pytest.raises(CustomVJPException, match="closed-over value"):
        grad(1.3)


def test_vmap_over_captures() -> None:
    rates = jnp.asarray(RATES)
    fields = jax.vmap(lambda k: lift.lift(make_field(k)))(rates)
    assert jax.tree.leaves(fields)[0].shape == (len(RATES),)
    got = eqx.filter_jit(jax.vmap(final))(fields)
    np.testing.assert_allclose(got, np.exp(-np.asarray(RATES)), rtol=1e-5)


# -- optimistix ------------------------------------------------------------------


def make_residual(c: Any) -> Any:
    """y**2 - c, closing over `c`: its root from 1.0 is sqrt(c)."""

    def residual(y: jax.Array, args: Any) -> jax.Array:
        return y**2 - c

    return residual


def _root(fn: Any) -> jax.Array:
    solver = optx.Newton(rtol=1e-6, atol=1e-6)
    return optx.root_find(fn, solver, jnp.asarray(1.0)).value


def test_root_find_sweep_compiles_once_lifted() -> None:
    counts = {"plain": 0, "lifted": 0}

    @eqx.filter_jit
    def root(fn: Any, kind: str) -> jax.Array:
        counts[kind] += 1
        return _root(fn)

    for c in (2.0, 3.0, 4.0, 5.0, 6.0):
        np.testing.assert_allclose(root(make_residual(c), "plain"), np.sqrt(c))
        np.testing.assert_allclose(
            root(lift.lift(make_residual(c)), "lifted"), np.sqrt(c)
        )
    assert counts == {"plain": 5, "lifted": 1}


def test_root_find_grad_and_vmap_over_the_capture() -> None:
    grads = jax.grad(_root)(lift.lift(make_residual(jnp.asarray(4.0))))
    np.testing.assert_allclose(grads.captures["c"], 0.25, rtol=1e-5)  # 1 / (2 sqrt c)
    cs = jnp.asarray([2.0, 9.0])
    fns = jax.vmap(lambda c: lift.lift(make_residual(c)))(cs)
    np.testing.assert_allclose(
        eqx.filter_jit(jax.vmap(_root))(fns), np.sqrt(cs), rtol=1e-6
    )
