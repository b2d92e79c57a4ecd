"""Found by attacking the specialized `lift.jit` call (a program per treedef taking
the leaves, the inline fast path, the first call lifting without checking what it
read) and the grouped float conversion of one `lift(pytree)`: each test states
the contract a break violated, and cases around them that held."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import TraceCounter as _Counter

import lift


@pytest.fixture
def x64_off():
    jax.config.update("jax_enable_x64", False)
    yield
    jax.config.update("jax_enable_x64", False)


# -- grouped float conversion: history --------------------------------------------------


def _pair(lr):
    return {"scale": lambda x: x * lr, "shift": lambda x: x + lr}


def test_a_sibling_used_later_converts_at_the_x64_of_its_own_first_use(x64_off):
    fns = lift.lift(_pair(0.1))
    alone = lift.lift(_pair(0.1)["shift"])
    fns["scale"](1.0)  # converts both siblings' floats, at float32
    jax.config.update("jax_enable_x64", True)
    got = fns["shift"](np.float64(0.0))
    expected = alone(np.float64(0.0))
    assert expected.dtype == np.float64 and float(expected) == 0.1
    assert [x.dtype for x in jax.tree.leaves(fns["shift"])] == [
        x.dtype for x in jax.tree.leaves(alone)
    ]
    assert float(got) == 0.1


def test_a_sibling_used_later_is_placed_where_it_is_first_used():
    if len(jax.devices()) < 2:
        pytest.skip("needs several devices")
    other = jax.devices()[1]
    fns = lift.lift(_pair(0.5))
    with jax.default_device(other):
        fns["scale"](1.0)
    alone = lift.lift(_pair(0.5)["shift"])
    assert [x.devices() for x in jax.tree.leaves(alone)] == [{jax.devices()[0]}]
    assert [x.devices() for x in jax.tree.leaves(fns["shift"])] == [{jax.devices()[0]}]


def test_a_sibling_copied_before_conversion_shares_no_buffer_with_it():
    import copy

    fns = lift.lift(_pair(0.5))
    copied = copy.copy(fns["shift"])
    fns["scale"](1.0)  # converts the group, the original "shift" included
    jax.jit(lambda f: f(1.0), donate_argnums=0)(copied)
    assert float(fns["shift"](1.0)) == 1.5
    assert not any(x.is_deleted() for x in jax.tree.leaves(fns["shift"]))


def test_a_sibling_tree_mapped_first_converts_the_group_once_each():
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


# -- lift.jit: ahead of time and calls share one trace ---------------------------------


@pytest.mark.parametrize("stage_first", [True, False])
@pytest.mark.parametrize("stage", ["lower", "trace"])
def test_a_stage_and_calls_of_one_function_trace_once(stage, stage_first):
    counter = _Counter()
    a = jnp.float32(2.0)

    @lift.jit
    def f(x):
        counter()
        return a * x

    if stage_first:
        getattr(f, stage)(1.0)
    for _ in range(3):
        assert float(f(1.0)) == 2.0
    if not stage_first:
        getattr(f, stage)(1.0)
    assert counter.traces == 1


# -- lift.jit: a static capture equal to another closure's ------------------------------


class _Act:
    """Equal by name, as a user's activation registry might define it; what it
    computes also depends on `k`."""

    def __init__(self, name, k):
        self.name = name
        self.k = k

    def __eq__(self, other):
        return type(other) is _Act and other.name == self.name

    def __hash__(self):
        return hash(self.name)

    def __call__(self, x):
        return x * self.k


def test_a_new_trace_runs_with_this_closures_own_static_capture():
    def make(act):
        @lift.jit
        def f(x):
            return act(x)

        return f

    assert float(make(_Act("a", 2))(1.0)) == 2.0
    three = make(_Act("a", 3))
    # A shape not traced before: traced anew, with this closure's `act`.
    np.testing.assert_allclose(three(jnp.ones(2)), [3.0, 3.0])
    reference = jax.jit(lambda act, x: act(x), static_argnums=0)
    reference(_Act("a", 2), 1.0)
    np.testing.assert_allclose(reference(_Act("a", 3), jnp.ones(2)), [3.0, 3.0])


# -- lift.jit: first, second and later calls agree --------------------------------------


def _x64_after(calls):
    lr = 0.1

    @lift.jit
    def f(x):
        return x * lr

    for _ in range(calls):
        f(jnp.float32(1.0))
    jax.config.update("jax_enable_x64", True)
    try:
        return float(f(np.float64(1.0)))
    finally:
        jax.config.update("jax_enable_x64", False)


def test_toggling_x64_gives_the_same_after_one_call_as_after_two(x64_off):
    assert _x64_after(1) == _x64_after(2)


# -- lift.jit: rebinding with the calls that always take `_slow` ------------------------


def test_negative_static_argnums_see_a_rebound_capture():
    counter = _Counter()
    lr = 2.0

    def body(x, n):
        counter()
        return x * lr * n

    f = lift.jit(body, static_argnums=-1)
    assert [float(f(1.0, 2)) for _ in range(3)] == [4.0] * 3
    lr = 3.0
    assert [float(f(1.0, 2)), float(f(1.0, 3))] == [6.0, 9.0]
    assert counter.traces == 2


def test_one_in_sharding_for_every_argument_sees_a_rebound_capture():
    counter = _Counter()
    lr = 2.0
    sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])

    def body(x, y):
        counter()
        return x * lr + y

    f = lift.jit(body, in_shardings=sharding)
    assert [float(f(1.0, 1.0)) for _ in range(3)] == [3.0] * 3
    lr = 3.0
    assert [float(f(1.0, 1.0)) for _ in range(3)] == [4.0] * 3
    assert counter.traces == 1


def test_a_donated_argument_never_deletes_a_captured_array_across_calls():
    counter = _Counter()
    w = jnp.ones(3)

    def body(y):
        counter()
        return w + y

    f = lift.jit(body, donate_argnums=0)
    for _ in range(4):
        y = jnp.ones(3)
        np.testing.assert_allclose(f(y), [2.0] * 3)
        assert not w.is_deleted()
    assert counter.traces == 1


def test_defaults_and_attributes_rebound_after_the_fast_path_is_set():
    def g(x, a=2.0):
        return a * x * getattr(g, "scale", 1.0)

    f = lift.jit(g)
    assert [float(f(1.0)) for _ in range(3)] == [2.0] * 3
    g.__defaults__ = (3.0,)
    assert float(f(1.0)) == 3.0
    g.scale = 2.0
    assert [float(f(1.0)) for _ in range(3)] == [6.0] * 3
    del g.scale
    assert float(f(1.0)) == 3.0


def test_nested_functions_rebound_after_the_fast_path_is_set():
    # Several cells and functions: the fast path checks them all, the nested
    # function's defaults, keyword-only defaults and attributes too.
    def make():
        a, b = 1.0, 2.0

        def inner(x, c=1.0, *, d=1.0):
            return x * c * d * getattr(inner, "scale", 1.0)

        def outer(x):
            return inner(x) + a + b

        return outer, inner

    outer, inner = make()
    f = lift.jit(outer)
    assert [float(f(1.0)) for _ in range(3)] == [4.0] * 3
    inner.__defaults__ = (3.0,)
    assert [float(f(1.0)) for _ in range(2)] == [6.0] * 2
    inner.__kwdefaults__ = {"d": 2.0}
    assert [float(f(1.0)) for _ in range(2)] == [9.0] * 2
    inner.scale = 0.5  # pyright: ignore[reportFunctionMemberAccess]
    assert [float(f(1.0)) for _ in range(2)] == [6.0] * 2
    del inner.scale  # pyright: ignore[reportFunctionMemberAccess]
    assert float(f(1.0)) == 9.0


def test_a_capture_deleted_then_rebound_to_another_kind():
    n = 2

    @lift.jit
    def f(x):
        return x * n

    assert [float(f(1.0)) for _ in range(3)] == [2.0] * 3
    del n
    for _ in range(2):
        with pytest.raises(NameError):
            f(1.0)
    n = jnp.float32(5.0)  # a dynamic capture where a static one was
    assert [float(f(1.0)) for _ in range(2)] == [5.0] * 2
    n = 4
    assert [float(f(1.0)) for _ in range(2)] == [4.0] * 2
