"""GenJAX: a `@gen` function keeps the user's function in a static field
(`Fn.source`, a `Const`), so one closing over a `jit` tracer and returned from
`jit` leaks; `lift.find_leaks` names the function, the variable and the line.
The fix a library makes — hold `lift.lift(fn)` in a data field — leaks nothing,
and its models compile once per structure and map under `vmap`."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lift

# genjax 1.0 needs Python >= 3.12 and jax >= 0.11.1, < 0.12: it is in no extra,
# and this file runs where it was installed beside lift.
genjax = pytest.importorskip(
    "genjax",
    reason="genjax is not installed (genjax 1.0 needs Python >= 3.12 and jax < 0.12)",
)
from genjax import Pytree, gen, normal  # noqa: E402

YS = jnp.array([1.0, 2.0, 4.0])


@pytest.fixture
def _without_jax_leak_checker() -> Any:
    # The leaking half leaks on purpose: JAX's own checker would fail the `jit`
    # that returns the model before lift is asked about it.
    before = jax.config.jax_check_tracer_leaks
    jax.config.update("jax_check_tracer_leaks", False)
    yield
    jax.config.update("jax_check_tracer_leaks", before)


@Pytree.dataclass
class Dynamic(Pytree):
    """What `Fn` reads as `source.value`, held as a pytree node, not static."""

    value: Any


@Pytree.dataclass
class LiftedFn(genjax.Fn):
    """GenJAX's `Fn` with its function in a data field: `lift.lift(fn)`."""

    source: Any


def lifted_gen(fn: Any) -> Any:
    return LiftedFn(source=Dynamic(lift.lift(fn)))


def _fit(make: Any, n: int = 1) -> Any:
    """A `jit`ted function returning a model of `n` choices closing over the
    mean of its argument, made into a generative function by `make`."""

    @jax.jit
    def fit(ys: jax.Array) -> Any:
        mean = jnp.mean(ys)

        def model(x: Any) -> Any:
            for i in range(n):
                normal(mean * x, 1.0) @ f"y{i}"
            return mean

        return make(model)

    return fit


@pytest.mark.lift_allow_leaks
@pytest.mark.usefixtures("_without_jax_leak_checker")
def test_a_gen_function_over_a_tracer_leaks_through_its_static_source() -> None:
    model = _fit(gen)(YS)
    assert isinstance(model, genjax.Fn)
    leaks = lift.find_leaks(model)
    assert len(leaks) == 1
    (leak,) = leaks
    source = model.source.value
    assert leak.function == "_fit.<locals>.fit.<locals>.model"
    assert leak.variable == "mean"
    assert leak.filename == __file__
    assert leak.lineno == source.__code__.co_firstlineno
    assert leak.path.startswith("roots[0].source.<static>")
    with pytest.raises(
        lift.LeakError,
        match=r"\.model \(.*test_genjax\.py:\d+\), captured variable 'mean'",
    ):
        lift.check_leaks(model)
    # What a user meets without lift: the tracer surfaces at the next use.
    with pytest.raises(jax.errors.UnexpectedTracerError, match="unexpected tracer"):
        model.simulate(2.0)


def test_the_fix_holds_a_lifted_function_and_leaks_nothing() -> None:
    model = _fit(lifted_gen)(YS)
    assert isinstance(model, genjax.Fn)
    assert lift.find_leaks(model) == []
    assert lift.check_leaks(model) is None
    [mean] = jax.tree_util.tree_leaves(model)
    np.testing.assert_allclose(mean, jnp.mean(YS))

    # The same model, built eagerly with GenJAX's own `gen`: the same scores.
    @gen
    def reference(x: Any) -> Any:
        return normal(jnp.mean(YS) * x, 1.0) @ "y0"

    choices = {"y0": jnp.asarray(1.5)}
    got, _ = model.assess(choices, 2.0)
    want, _ = reference.assess(choices, 2.0)
    np.testing.assert_allclose(got, want, rtol=1e-6)

    trace = model.simulate(2.0)
    assert sorted(trace.get_choices()) == ["y0"]
    _, weight, _ = model.update(trace, {"y0": jnp.asarray(0.5)}, 2.0)
    new_score, _ = reference.assess({"y0": jnp.asarray(0.5)}, 2.0)
    old_score, _ = reference.assess(trace.get_choices(), 2.0)
    np.testing.assert_allclose(weight, new_score - old_score, rtol=1e-5)


def test_lifted_models_compile_once_per_structure_and_map_under_vmap() -> None:
    traces = [0]

    def sample(model: Any) -> jax.Array:
        traces[0] += 1
        return model.simulate(2.0).get_choices()["y0"]

    simulate = jax.jit(genjax.seed(sample))
    key = jax.random.key(0)
    fit = _fit(lifted_gen)
    samples = [simulate(key, fit(YS * scale)) for scale in (0.5, 1.0, 2.0)]
    assert traces[0] == 1
    # The same noise around each model's own mean (times x = 2): the means
    # reached the one program.
    means = [float(jnp.mean(YS * scale)) for scale in (0.5, 1.0, 2.0)]
    np.testing.assert_allclose(np.diff(samples), 2.0 * np.diff(means), rtol=1e-5)
    # Two choices instead of one: another structure, another program.
    simulate(key, _fit(lifted_gen, n=2)(YS))
    assert traces[0] == 2

    models = jax.vmap(fit)(jnp.stack([YS * 0.5, YS, YS * 2.0]))
    assert isinstance(models, LiftedFn)
    choices = {"y0": jnp.asarray(1.0)}
    batched = jax.vmap(lambda m: m.assess(choices, 2.0)[0])(models)
    one_by_one = [fit(YS * s).assess(choices, 2.0)[0] for s in (0.5, 1.0, 2.0)]
    np.testing.assert_allclose(batched, jnp.stack(one_by_one), rtol=1e-6)
