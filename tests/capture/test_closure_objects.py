"""Objects that are not pytrees but keep closures in their attributes (numpyro's
optimizers and `SVI`, evosax strategies): `lift.lift` refuses them naming the
attributes and the two routes that work, and those routes compile once."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from helpers import TraceCounter

import lift


class _Optimizer:
    """A plain class holding closures over its step size, as numpyro's do."""

    def __init__(self, step_size: float) -> None:
        self.step_size_name = "sgd"
        self.init_fn = lambda params: params
        self.update_fn = lambda grads, params: params - step_size * grads


class _Trainer:
    """Holds an object that holds functions, and a function of its own."""

    def __init__(self, optimizer: _Optimizer) -> None:
        self.loss = lambda params: jnp.sum(params**2)
        self.optim = optimizer
        self.steps = 3


def test_the_refusal_names_the_attributes_holding_functions_and_the_routes() -> None:
    with pytest.raises(
        lift.LiftError,
        match=(
            r"^lift\(\) got _Optimizer <.*>, an object that is not a pytree but "
            r"holds functions in its attributes: obj\.init_fn, obj\.update_fn\. "
            r"(?s:.*)Fix: build the object where the value is traced\. Either "
            r"inside a function that captures the float, compiled with "
            r"`lift\.jit`.*\n    def make_step\(lr\):\n        @lift\.jit\n"
            r"(?s:.*)obj = _Optimizer\(\.\.\., lr, \.\.\.\)(?s:.*)or pass the float "
            r"as an argument of your own jitted step:\n    @jax\.jit\n    def "
            r"step\(lr, state, batch\):(?s:.*)\nDocs: python -m lift explain "
            r"lift-got-an-object-holding-functions$"
        ),
    ):
        lift.lift(_Optimizer(0.1))


def test_the_refusal_looks_one_object_deep() -> None:
    with pytest.raises(
        lift.LiftError,
        match=r"holds functions in its attributes: obj\.loss, obj\.optim\.init_fn, "
        r"obj\.optim\.update_fn\. (?s:.*)obj = _Trainer\(\.\.\., _Optimizer\(lr\), ",
    ):
        lift.lift(_Trainer(_Optimizer(0.1)))


def test_an_object_holding_no_function_keeps_the_plain_refusal() -> None:
    class Settings:
        def __init__(self) -> None:
            self.lr = 0.1

    with pytest.raises(
        lift.LiftError, match=r"neither a function nor a pytree holding functions"
    ):
        lift.lift(Settings())


def test_both_routes_compile_once_for_every_rate() -> None:
    params, grads = jnp.ones(3), jnp.full(3, 0.5)
    plain, captured, argument = TraceCounter(), TraceCounter(), TraceCounter()

    def make_plain(lr: float) -> Any:
        optimizer = _Optimizer(lr)

        @jax.jit
        def step(params: Any) -> Any:
            plain()
            return optimizer.update_fn(grads, params)

        return step

    def make_captured(lr: float) -> Any:
        @lift.jit
        def step(params: Any) -> Any:
            captured()
            return _Optimizer(lr).update_fn(grads, params)

        return step

    @jax.jit
    def step_with(lr: Any, params: Any) -> Any:
        argument()
        return _Optimizer(lr).update_fn(grads, params)

    for lr in (0.3, 0.1, 0.03, 0.01):
        want = make_plain(lr)(params)
        assert jnp.array_equal(make_captured(lr)(params), want)
        assert jnp.array_equal(step_with(lr, params), want)
    assert (plain.traces, captured.traces, argument.traces) == (4, 1, 1)


# -- numpyro -------------------------------------------------------------------------


def test_numpyro_objects_are_refused_naming_their_closures() -> None:
    pytest.importorskip("numpyro")
    from numpyro.infer import SVI, Trace_ELBO
    from numpyro.optim import Adam

    with pytest.raises(
        lift.LiftError,
        match=r"obj\.init_fn, obj\.update_fn, obj\.get_params_fn\. (?s:.*)"
        r"obj = Adam\(\.\.\., lr, \.\.\.\)",
    ):
        lift.lift(Adam(0.1))
    svi = SVI(lambda: None, lambda: None, Adam(0.1), Trace_ELBO())
    # The rate goes into the optimizer SVI holds, not into SVI.
    with pytest.raises(
        lift.LiftError,
        match=r"obj\.model, obj\.guide, .*obj\.optim\.init_fn(?s:.*)"
        r"\n            obj = SVI\(\.\.\., optim=Adam\(lr\), \.\.\.\)\n(?s:.*)"
        r"\n        obj = SVI\(\.\.\., optim=Adam\(lr\), \.\.\.\)\n",
    ):
        lift.lift(svi)


def test_numpyro_svi_sweep_compiles_once_and_matches_plain() -> None:
    numpyro = pytest.importorskip("numpyro")
    dist = pytest.importorskip("numpyro.distributions")
    from numpyro.infer import SVI, Trace_ELBO
    from numpyro.optim import Adam

    data = jnp.linspace(0.0, 2.0, 20)

    def model(data: Any) -> None:
        mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
        numpyro.sample("obs", dist.Normal(mu, 1.0), obs=data)

    def guide(data: Any) -> None:
        loc = numpyro.param("loc", 0.0)
        numpyro.sample("mu", dist.Normal(loc, 1.0))

    def fit(svi: Any, key: Any) -> Any:
        state = svi.init(key, data)
        state, _ = jax.lax.scan(lambda s, _: svi.update(s, data), state, length=20)
        return svi.get_params(state)["loc"]

    plain, captured, factory = TraceCounter(), TraceCounter(), TraceCounter()
    key = jax.random.key(0)

    def run_plain(lr: float) -> Any:
        svi = SVI(model, guide, Adam(lr), Trace_ELBO())

        @jax.jit
        def run(key: Any) -> Any:
            plain()
            return fit(svi, key)

        return run(key)

    def make_run(lr: float) -> Any:
        @lift.jit
        def run(key: Any) -> Any:
            captured()
            return fit(SVI(model, guide, Adam(lr), Trace_ELBO()), key)

        return run

    @jax.jit
    def run_with(make_optimizer: Any, key: Any) -> Any:
        factory()
        return fit(SVI(model, guide, make_optimizer(), Trace_ELBO()), key)

    for lr in (0.3, 0.1, 0.03, 0.01):
        want = run_plain(lr)
        assert make_run(lr)(key) == want
        make = lift.lift(functools.partial(Adam, step_size=lr))
        assert run_with(make, key) == want
    assert (plain.traces, captured.traces, factory.traces) == (4, 1, 1)


# -- evosax --------------------------------------------------------------------------


def test_an_evosax_strategy_is_refused_naming_its_optimizer() -> None:
    # Building the strategy inside a traced function compiles once per sweep
    # (docs/guides/closure-objects.md), but evosax 0.3 jits its methods with
    # the strategy as a static argument, so JAX's cache keeps the strategy and
    # the tracers it holds: JAX's leak checker reports it. Only the refusal is
    # tested here.
    pytest.importorskip("evosax.algorithms")  # evosax 0.3 and later
    import optax
    from evosax.algorithms import Open_ES

    with pytest.raises(
        lift.LiftError,
        match=r"holds functions in its attributes: .*obj\.optimizer.*\n"
        r"Fix: build the object where the value is traced(?s:.*)"
        r"obj = Open_ES\(\.\.\., optimizer=optax\.adam\(lr\), \.\.\.\)",
    ):
        lift.lift(Open_ES(8, jnp.zeros(4), optimizer=optax.adam(0.1)))
