"""Python floats become arrays: each `Lifted` converts its own scalars, once, at
its first call or flatten, at the float width and on the device in force then,
into buffers of its own; what came before (other functions of one optimizer, a
mesh, a copy, the path a conversion took) never changes the leaves."""

from __future__ import annotations

import copy

import jax
import numpy as np
import pytest

import lift


def _pair(lr):
    return {"scale": lambda x: x * lr, "shift": lambda x: x + lr}


def test_a_function_used_later_converts_at_the_x64_of_its_own_first_use(x64_off):
    fns = lift.lift(_pair(0.1))
    alone = lift.lift(_pair(0.1)["shift"])
    fns["scale"](1.0)  # converts its own floats, at float32
    jax.config.update("jax_enable_x64", True)
    got = fns["shift"](np.float64(0.0))
    expected = alone(np.float64(0.0))
    # float32 would give 0.10000000149; a TPU emulates float64
    # (0.09999999999999998).
    assert expected.dtype == np.float64
    assert float(expected) == pytest.approx(0.1, abs=1e-15)
    assert [x.dtype for x in jax.tree.leaves(fns["shift"])] == [
        x.dtype for x in jax.tree.leaves(alone)
    ]
    assert float(got) == float(expected)


def test_a_function_used_later_is_placed_where_it_is_first_used():
    if len(jax.devices()) < 2:
        pytest.skip("needs several devices")
    other = jax.devices()[1]
    fns = lift.lift(_pair(0.5))
    with jax.default_device(other):
        fns["scale"](1.0)
    alone = lift.lift(_pair(0.5)["shift"])
    assert [x.devices() for x in jax.tree.leaves(alone)] == [{jax.devices()[0]}]
    assert [x.devices() for x in jax.tree.leaves(fns["shift"])] == [{jax.devices()[0]}]


def test_a_function_copied_before_conversion_shares_no_buffer_with_it():
    fns = lift.lift(_pair(0.5))
    copied = copy.copy(fns["shift"])
    fns["scale"](1.0)  # converts "scale"'s floats; "shift" converts its own
    jax.jit(lambda f: f(1.0), donate_argnums=0)(copied)
    assert float(fns["shift"](1.0)) == 1.5
    assert not any(x.is_deleted() for x in jax.tree.leaves(fns["shift"]))


def test_a_function_tree_mapped_first_converts_each_once():
    fns = lift.lift(_pair(0.5))
    doubled = jax.tree.map(lambda x: 2 * x, fns["scale"])
    assert float(doubled(1.0)) == 1.0
    assert float(fns["scale"](1.0)) == 0.5
    assert float(fns["shift"](1.0)) == 1.5
    pointers = [
        x.unsafe_buffer_pointer()
        for x in jax.tree.leaves(fns["scale"]) + jax.tree.leaves(fns["shift"])
    ]
    assert len(set(pointers)) == 2


def test_float_leaves_under_a_mesh_do_not_depend_on_history():
    # Found: a jitted-identity conversion (since retired) gave committed
    # mesh-sharded leaves where jax.device_put gave single-device ones.
    from jax.sharding import AxisType

    if len(jax.devices()) < 2:
        pytest.skip("needs several devices")

    def make(a, b):
        return lift.lift(lambda x: a * x + b)

    def kinds(f):
        return [(str(x.sharding), x.committed, x.weak_type) for x in jax.tree.leaves(f)]

    traces = []

    @jax.jit
    def call(f, x):
        traces.append(None)
        return f(x)

    mesh = jax.make_mesh((len(jax.devices()),), ("x",), axis_types=(AxisType.Explicit,))
    with jax.set_mesh(mesh):
        first = make(0.2, 0.3)
        call(first, 1.0)
        later = make(0.2, 0.3)
        call(later, 1.0)
    assert kinds(first) == kinds(later)
    assert len(traces) == 1


class _Density(lift.Lifted):
    pass


@pytest.mark.filterwarnings("ignore:Some donated buffers were not usable")
@pytest.mark.parametrize("convert", [_Density, lift.Lifted])
def test_a_lifted_made_from_a_called_lifted_shares_no_buffer(convert):
    # Found: Sub(lifted) took the other's converted float buffers once it had been
    # called, so donating one deleted the other's. Fixed since; kept as a guard.
    def make(a, b):
        return lift.lift(lambda x: a * x + b)

    original = make(0.5, 0.25)
    assert original(1.0) == 0.75  # its floats are converted now
    other = convert(original)
    assert other is not original
    jax.jit(lambda f: f(1.0), donate_argnums=0)(other)
    assert original(1.0) == 0.75
