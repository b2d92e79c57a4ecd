"""`lift.jit` as a drop-in for `jax.jit`, side by side with it: ahead-of-time
stages and `jax.export` for the function's own arguments, every option combined
with static arguments, and captures rebound while the function is lifted."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import lift

_jit_module = importlib.import_module("lift._jit.function")
_verify = importlib.import_module("lift._jit.verify")

JITS: list[Callable[..., Any]] = [jax.jit, lift.jit]


def make_affine() -> Any:
    scale = jnp.full(4, 2.0)
    shift = 0.5

    def affine(x, n, y, *, k=3):
        return x * scale * n + y * k + shift

    return affine


def args() -> tuple[jax.Array, int, jax.Array]:
    return jnp.ones(4), 2, jnp.arange(4.0)


def expected(k: int = 3) -> np.ndarray:
    x, n, y = args()
    return np.asarray(x * 2.0 * n + y * k + 0.5)


# -- ahead of time --------------------------------------------------------------------


@pytest.mark.parametrize("jit", JITS, ids=["jax", "lift"])
def test_lowered_and_compiled_take_the_functions_own_arguments(jit: Any) -> None:
    x, n, y = args()
    lowered = jit(make_affine(), static_argnums=1, donate_argnums=2).lower(x, n, y)
    assert lowered.in_tree == jax.tree_util.tree_structure(((x, y), {}))
    (x_info, y_info), kwargs_info = lowered.args_info
    assert kwargs_info == {}
    assert (x_info.shape, x_info.dtype, x_info.donated) == ((4,), jnp.float32, False)
    assert y_info.donated
    assert lowered.donate_argnums == (1,)
    assert isinstance(lowered.as_text(), str)
    # As `jax.jit`'s (a TPU gives no cost analysis before compiling).
    plain = jax.jit(make_affine(), static_argnums=1).lower(x, n, y)
    assert (lowered.cost_analysis() is None) == (plain.cost_analysis() is None)
    assert lowered.out_info.shape == (4,)

    compiled = lowered.compile()
    assert compiled.in_tree == lowered.in_tree
    assert compiled.args_info == lowered.args_info
    assert compiled.cost_analysis() is not None
    assert "multiply" in (compiled.as_text() or "")
    assert len(compiled.input_shardings[0]) == 2
    np.testing.assert_allclose(compiled(x, jnp.arange(4.0)), expected())

    traced = jit(make_affine(), static_argnums=1).trace(x, n, y)
    assert traced.fun_name == "affine"
    assert traced.in_tree == lowered.in_tree
    assert len(traced.jaxpr.in_avals) == 2  # x and y: the captures are constants
    np.testing.assert_allclose(traced.lower().compile()(x, y), expected())


def test_stages_describe_the_same_as_jax_jit() -> None:
    x, n, y = args()
    stages = [
        jit(make_affine(), static_argnames="n").trace(x, n, y, k=4) for jit in JITS
    ]
    plain, lifted = stages
    assert lifted.in_tree == plain.in_tree
    assert lifted.args_info == plain.args_info
    # Captures are constants of both (a Python float one an array here).
    assert lifted.jaxpr.in_avals == plain.jaxpr.in_avals
    assert lifted.jaxpr.out_avals == plain.jaxpr.out_avals
    lowered = [s.lower() for s in stages]
    assert lowered[1].args_info == lowered[0].args_info
    assert lowered[1].out_tree == lowered[0].out_tree
    compiled = [lo.compile() for lo in lowered]
    assert compiled[1].input_shardings == compiled[0].input_shardings
    assert compiled[1].output_shardings == compiled[0].output_shardings
    for c in compiled:
        np.testing.assert_allclose(c(x, y, k=4), expected(4))


def test_every_stage_member_answers_as_jax_jits_does() -> None:
    x, n, y = args()
    stages = [
        jit(make_affine(), static_argnames="n").trace(x, n, y, k=4) for jit in JITS
    ]
    plain, lifted = stages
    assert lifted.out_info == plain.out_info
    if hasattr(jax.stages.Traced, "out_avals"):  # jax 0.9+
        assert lifted.out_avals == plain.out_avals
        assert type(lifted.lojax) is type(plain.lojax)
    lowered = [s.lower() for s in stages]
    assert lowered[1].in_avals == lowered[0].in_avals
    assert type(lowered[1].compiler_ir()) is type(lowered[0].compiler_ir())
    assert "stablehlo.multiply" in str(lowered[1].compiler_ir())
    compiled = [lo.compile() for lo in lowered]
    assert compiled[1].in_avals == compiled[0].in_avals
    assert compiled[1].input_formats == compiled[0].input_formats
    assert compiled[1].output_formats == compiled[0].output_formats
    assert type(compiled[1].memory_analysis()) is type(compiled[0].memory_analysis())
    assert type(compiled[1].runtime_executable()) is type(
        compiled[0].runtime_executable()
    )
    # The right arguments of another dtype: JAX's own error, as from jax.jit's.
    for c in compiled:
        with pytest.raises(TypeError, match=r"^Argument types differ from the types"):
            c(x.astype(jnp.int32), y, k=4)


def test_a_traced_function_runs_its_jaxpr_as_jax_jits_does() -> None:
    scale = jnp.full(4, 2.0)

    def f(x):
        return x * scale

    if not callable(jax.jit(f).trace(jnp.ones(4))):  # jax 0.8: not callable
        pytest.skip("jax.stages.Traced is callable from jax 0.9")
    for jit in JITS:
        np.testing.assert_allclose(jit(f).trace(jnp.ones(4))(jnp.ones(4)), 2.0)


def test_compiled_binds_the_captures_it_was_lowered_with() -> None:
    scale = 2.0

    @lift.jit
    def f(x):
        return scale * x

    compiled = f.lower(1.0).compile()
    scale = 3.0
    assert float(compiled(1.0)) == 2.0  # as `jax.jit`'s constant would be
    assert float(f(1.0)) == 3.0  # while the function reads its captures anew


def test_compiled_called_with_other_arguments_says_so_in_their_terms() -> None:
    x, n, y = args()
    compiled = lift.jit(make_affine(), static_argnums=1).lower(x, n, y).compile()
    with pytest.raises(
        TypeError, match=r"compiled for arguments PyTreeDef\(\(\(\*, \*\), \{\}\)\)"
    ):
        compiled(x, y, y)


class Affine(eqx.Module):
    a: jax.Array
    b: jax.Array

    @lift.jit
    def apply(self, x):
        return self.a * x + self.b


def test_a_methods_stages_bind_the_instance_as_jax_jit_of_the_bound_method() -> None:
    m = Affine(jnp.asarray(2.0), jnp.asarray(1.0))
    x = jnp.ones(3)
    plain = jax.jit(m.apply.__wrapped__)
    for stage in (m.apply, plain):
        lowered = stage.lower(x)
        assert lowered.in_tree == plain.lower(x).in_tree
        np.testing.assert_allclose(lowered.compile()(x), 3.0)
        np.testing.assert_allclose(stage.trace(x).lower().compile()(x), 3.0)
        exported = jax.export.export(stage)(x)
        np.testing.assert_allclose(exported.call(x), 3.0)


def test_a_bound_lift_jit_method_reads_as_the_method() -> None:
    m = Affine(jnp.asarray(2.0), jnp.asarray(1.0))
    bound = m.apply
    assert bound.__module__ == __name__
    assert bound.__name__ == "apply"  # the function's own attributes, forwarded
    assert bound.__qualname__ == "Affine.apply"
    line = Affine.apply.__wrapped__.__code__.co_firstlineno
    assert re.fullmatch(
        rf"<bound lift\.jit Affine\.apply \({re.escape(__file__)}:{line}\) of "
        r"Affine\(.{1,50}>",
        repr(bound),
    ), repr(bound)


class Scaled(eqx.Module):
    a: jax.Array

    @lift.jit(static_argnums=-1)
    def apply(self, x, n):
        return self.a * x * n


def test_a_methods_stages_count_argument_numbers_from_the_end_as_jax_jit() -> None:
    # Regression: the program of the method alone (its jaxpr, export) counted
    # `-1` from the end of the arguments with the instance, so it made `x`
    # static, not `n`.
    m = Scaled(jnp.asarray(2.0))
    x = jnp.ones(3)
    plain = jax.jit(m.apply.__wrapped__, static_argnums=-1)
    assert str(m.apply.trace(x, 3).jaxpr) == str(plain.trace(x, 3).jaxpr)
    exported = jax.export.export(m.apply)(x, 3)
    np.testing.assert_allclose(exported.call(x), 6.0)


# -- export ------------------------------------------------------------------------


@pytest.mark.parametrize("jit", JITS, ids=["jax", "lift"])
def test_export_takes_the_functions_own_arguments(jit: Any) -> None:
    x, n, y = args()
    exported = jax.export.export(jit(make_affine(), static_argnums=1))(x, n, y)
    assert exported.fun_name == "affine"
    assert exported.in_tree == jax.tree_util.tree_structure(((x, y), {}))
    assert [(a.shape, a.dtype) for a in exported.in_avals] == [((4,), jnp.float32)] * 2
    np.testing.assert_allclose(exported.call(x, y), expected())
    grad = jax.grad(lambda y: exported.call(x, y).sum())(y)
    np.testing.assert_allclose(grad, np.full(4, 3.0))


def test_export_bakes_the_captures_it_sees() -> None:
    scale = 2.0

    @lift.jit
    def f(x):
        return scale * x

    exported = jax.export.export(f)(jax.ShapeDtypeStruct((), jnp.float32))
    scale = 3.0
    assert float(exported.call(1.0)) == 2.0
    assert float(jax.export.export(f)(1.0).call(1.0)) == 3.0
    assert "2.0" in exported.mlir_module() or "2.000000e+00" in exported.mlir_module()


def test_export_with_symbolic_shapes() -> None:
    scale = jnp.asarray(2.0)

    @lift.jit
    def f(x):
        return scale * x

    (b,) = jax.export.symbolic_shape("b")
    exported = jax.export.export(f)(jax.ShapeDtypeStruct((b,), jnp.float32))
    np.testing.assert_allclose(exported.call(jnp.ones(3)), [2.0] * 3)
    np.testing.assert_allclose(exported.call(jnp.ones(5)), [2.0] * 5)


# -- every option with static arguments, as `jax.jit` --------------------------------

MESH = Mesh(np.array(jax.devices()[:4]), ("d",))
ROW = NamedSharding(MESH, PartitionSpec("d"))
REP = NamedSharding(MESH, PartitionSpec())


class Sharded(eqx.Module):
    a: jax.Array

    @lift.jit(in_shardings=(REP, ROW))
    def apply(self, x):
        return self.a * x


def test_a_methods_export_drops_the_instances_input_sharding() -> None:
    # The program of the method alone takes `x` only: `in_shardings` loses the
    # instance's entry with it, as `jax.jit` of the bound method is given.
    m = Sharded(jnp.asarray(2.0))
    x = jnp.ones(4)
    exported = jax.export.export(m.apply)(x)
    plain = jax.export.export(jax.jit(m.apply.__wrapped__, in_shardings=(ROW,)))(x)
    assert exported.in_shardings_hlo == plain.in_shardings_hlo
    np.testing.assert_allclose(exported.call(jax.device_put(x, ROW)), 2.0)


OPTIONS: list[dict[str, Any]] = [
    {},
    {"static_argnums": 1},
    {"static_argnums": -2},
    {"static_argnames": "n"},
    {"static_argnames": ("n", "k")},
    {"static_argnums": 1, "in_shardings": ROW},
    {"static_argnums": (1,), "in_shardings": (ROW, REP)},
    {"static_argnames": "n", "in_shardings": ROW},
    {"static_argnums": -2, "in_shardings": ROW, "out_shardings": REP},
    {"static_argnames": "n", "in_shardings": (REP, ROW), "out_shardings": ROW},
    {"static_argnums": 1, "donate_argnums": 0},
    {"static_argnums": 1, "donate_argnums": (0, 2)},
    {"static_argnames": "n", "donate_argnames": "y"},
    {"static_argnames": "k", "donate_argnames": ("x", "y")},
    {"static_argnums": 1, "donate_argnums": 2, "in_shardings": ROW},
    {"static_argnums": 1, "keep_unused": True},
    {"static_argnums": 1, "donate_argnums": -1},
    {"donate_argnums": -2},
    {"static_argnames": "k", "keep_unused": True, "donate_argnums": 0},
    {"static_argnums": 1, "static_argnames": "k"},
]


def _run(jit: Any, options: dict[str, Any], call: str) -> tuple[Any, ...]:
    """Call a fresh function through `jit` with options; what happened."""
    x, n, y = jnp.ones(4), 2, jnp.arange(4.0)
    f = jit(make_affine(), **options)
    try:
        if call == "positional":
            out = f(x, n, y)
        elif call == "k":
            out = f(x, n, y, k=4)
        else:
            out = f(x, y=y, n=n)
    except Exception as err:  # compared with what `jax.jit` raised
        return ("raised", type(err).__mro__[1:], str(err).splitlines()[0][:40])
    return (
        "returned",
        np.asarray(out).tolist(),
        out.sharding if "out_shardings" in options else None,
        x.is_deleted(),
        y.is_deleted(),
    )


@pytest.mark.parametrize("call", ["positional", "k", "keywords"])
@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(o) or "none")
def test_options_with_static_arguments_behave_as_jax_jit(
    options: dict[str, Any], call: str
) -> None:
    plain, lifted = (_run(jit, options, call) for jit in JITS)
    if plain[0] == "raised":
        # The same kind of error, maybe explained in `lift`'s words.
        assert lifted[0] == "raised", lifted
        assert set(plain[1]) & {TypeError, ValueError} <= set(lifted[1])
    else:
        assert lifted == plain


@pytest.mark.parametrize(
    "options", [o for o in OPTIONS if "in_shardings" in o], ids=lambda o: ",".join(o)
)
def test_compiled_input_shardings_as_jax_jit(options: dict[str, Any]) -> None:
    x, n, y = args()
    plain, lifted = (
        jit(make_affine(), **options).lower(x, n, y).compile() for jit in JITS
    )
    assert lifted.input_shardings == plain.input_shardings
    assert lifted.args_info == plain.args_info


# -- a capture rebound while the function is lifted -----------------------------------


def _racing_lift(
    monkeypatch: pytest.MonkeyPatch, rebind: Callable[[], None]
) -> list[None]:
    """Make the next lift of a `lift.jit` function be followed at once by
    `rebind()`, as if another thread ran between the lift and what `lift.jit`
    records of the captures. Returns a list that grows by one per lift."""
    real = _jit_module.lift
    lifts: list[None] = []
    # These tests count lifts: `lift.verifying()`'s checks would add their own.
    monkeypatch.setattr(_verify.STATE, "on", False)

    def lift_then_rebind(fn: Any, **options: Any) -> Any:
        lifts.append(None)
        out = real(fn, **options)
        if len(lifts) == 1:
            rebind()
        return out

    monkeypatch.setattr(_jit_module, "lift", lift_then_rebind)
    return lifts


def test_capture_rebound_during_the_lift_is_seen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scale = 1.0

    @lift.jit
    def f(x):
        return scale * x

    def rebind() -> None:
        nonlocal scale
        scale = 2.0

    lifts = _racing_lift(monkeypatch, rebind)
    assert float(f(1.0)) in (1.0, 2.0)  # the call overlapped the rebinding
    assert float(f(1.0)) == 2.0
    assert float(f(1.0)) == 2.0
    assert len(lifts) == 2


def test_helper_rebound_during_the_lift_is_seen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def double(x):
        return 2 * x

    def triple(x):
        return 3 * x

    helper = double

    @lift.jit
    def f(x):
        return helper(x) + 1

    def rebind() -> None:
        nonlocal helper
        helper = triple

    _racing_lift(monkeypatch, rebind)
    f(1.0)
    assert float(f(1.0)) == 4.0


def test_default_rebound_during_the_lift_is_seen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def f(x, scale=1.0):
        return scale * x

    jitted = lift.jit(f)

    def rebind() -> None:
        f.__defaults__ = (2.0,)

    _racing_lift(monkeypatch, rebind)
    jitted(1.0)
    assert float(jitted(1.0)) == 2.0


def test_capture_rebound_faster_than_the_lift_is_still_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scale = 0.0

    @lift.jit
    def f(x):
        return scale * x

    real = _jit_module.lift

    def lift_then_rebind(fn: Any, **options: Any) -> Any:
        nonlocal scale
        out = real(fn, **options)
        scale += 1.0  # every time: nothing is ever consistent
        return out

    monkeypatch.setattr(_jit_module, "lift", lift_then_rebind)
    f(1.0)
    monkeypatch.setattr(_jit_module, "lift", real)
    assert float(f(1.0)) == scale


def test_an_undisturbed_lift_happens_once(monkeypatch: pytest.MonkeyPatch) -> None:
    def make(lr: float) -> Any:
        def helper(x):
            return jnp.sin(x) * lr

        @lift.jit
        def step(x):
            return helper(x) + lr

        return step

    lifts = _racing_lift(monkeypatch, lambda: None)
    make(0.1)(1.0)
    make(0.2)(1.0)
    assert len(lifts) == 2  # one per function: the check after it costs no lift
