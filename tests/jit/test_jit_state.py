"""`lift.jit` serves what Python would compute now: captures rebound in place
(cells, defaults, attributes, nested functions), the x64 setting, stages
(`.lower`, `.trace`) sharing the calls' trace, copies of a `lift.jit` function,
`lift.jit` functions nested in each other and passed through transforms."""

from __future__ import annotations

import copy
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import TraceCounter as _Counter

import lift


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
    # jax 0.12.1 deprecates the class's name for this constructor.
    make = getattr(jax.sharding, "make_single_device_sharding", None)
    sharding = (make or jax.sharding.SingleDeviceSharding)(jax.devices()[0])

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


@pytest.mark.parametrize("calls", [0, 2])
@pytest.mark.parametrize("how", [copy.copy, copy.deepcopy])
def test_a_jit_function_copies(calls, how):
    a = jnp.float32(2.0)
    counter = _Counter()

    @lift.jit
    def f(x):
        counter()
        return a * x

    for _ in range(calls):
        f(1.0)
    copy.deepcopy({"step": jax.jit(lambda x: x)})  # what jax.jit allows
    copied = how({"step": f})["step"]
    assert [float(copied(1.0)) for _ in range(2)] == [2.0, 2.0]
    assert copied.__name__ == "f" and copied.program is f.program
    assert counter.traces == 1  # the copy shares the compiled program
    a = jnp.float32(3.0)  # the copy watches the same captures
    assert float(copied(1.0)) == 3.0


def test_a_function_in_a_captured_tuple_is_watched_before_and_after_it_gains_an_attribute():
    def g(x, k=2.0):
        return x * k

    pair = (g,)

    @lift.jit
    def f(x):
        return pair[0](x)

    assert [float(f(1.0)) for _ in range(3)] == [2.0] * 3
    g.__defaults__ = (5.0,)
    assert float(f(1.0)) == 5.0
    g.tag = 1  # from here watched through its attributes
    g.__defaults__ = (7.0,)
    assert [float(f(1.0)) for _ in range(2)] == [7.0] * 2
    g.__defaults__ = (8.0,)
    assert float(f(1.0)) == 8.0


def test_several_functions_each_rebound_after_another_gains_an_attribute():
    a, b = 2.0, 3.0

    def inner(x, k=1.0):
        return x * a * k

    def other(x, k=1.0):
        return x * k

    @lift.jit
    def f(x):
        return inner(x) + other(b)

    assert [float(f(1.0)) for _ in range(3)] == [5.0] * 3
    inner.tag = 1.0
    assert float(f(1.0)) == 5.0
    other.__defaults__ = (2.0,)
    assert [float(f(1.0)) for _ in range(2)] == [8.0] * 2
    inner.__defaults__ = (2.0,)
    assert [float(f(1.0)) for _ in range(2)] == [10.0] * 2
    inner.tag = 2.0
    other.__defaults__ = (3.0,)
    assert [float(f(1.0)) for _ in range(2)] == [13.0] * 2


def test_a_nested_functions_empty_cell_bound_then_deleted():
    b = 1.0

    def h(x):
        return x * c  # noqa: F821 (bound below)

    @lift.jit
    def f(x):
        return h(x) + b

    for _ in range(2):
        with pytest.raises(NameError):
            f(1.0)
    c = 3.0
    assert [float(f(1.0)) for _ in range(2)] == [4.0] * 2
    c = 5.0
    assert float(f(1.0)) == 6.0
    del c
    with pytest.raises(NameError):
        f(1.0)


def test_a_cell_empty_when_lifted_and_bound_later_is_seen():
    """A program traced while a cell was empty (read on a branch not taken):
    binding it later lifts again, where `jax.jit` of the plain closure keeps
    the program it traced. The branch's flag changes in place, unseen."""
    use = [False]

    def h(x):
        return x * c if use[0] else x  # `c` is bound below

    step, plain = lift.jit(h), jax.jit(h)
    assert [float(step(1.0)) for _ in range(3)] == [1.0] * 3
    assert float(plain(1.0)) == 1.0
    use[0] = True
    c = 3.0
    assert [float(step(1.0)) for _ in range(2)] == [3.0] * 2
    assert float(plain(1.0)) == 1.0  # stale: what `lift.jit` does not serve
    assert float(h(1.0)) == c


def test_an_outer_jit_sees_a_capture_of_an_inner_jit_rebound():
    inner_counter, outer_counter = _Counter(), _Counter()
    lr = 2.0

    @lift.jit
    def inner(x):
        inner_counter()
        return x * lr

    b = 1.0

    @lift.jit
    def outer(x):
        outer_counter()
        return inner(x) + b

    assert float(inner(1.0)) == 2.0
    assert [float(outer(1.0)) for _ in range(3)] == [3.0] * 3
    lr = 5.0
    assert [float(outer(1.0)), float(inner(1.0)), float(outer(1.0))] == [6.0, 5.0, 6.0]
    assert (inner_counter.traces, outer_counter.traces) == (1, 1)


def test_an_outer_jit_sees_a_bound_inner_jit_methods_instance_and_rebound_capture():
    # Regression: a captured bound `lift.jit` method was a static value of the
    # outer program (by identity): its capture, rebound, was never seen, and
    # each new instance compiled anew.
    counter = _Counter()
    scale = 2.0

    class Model(eqx.Module):
        w: jax.Array

        @lift.jit
        def apply(self, x):
            return self.w * x * scale

    def make(w):
        apply = Model(jnp.asarray(w)).apply

        @lift.jit
        def step(x):
            counter()
            return apply(x) + 1.0

        return step, apply

    step, apply = make(1.0)
    assert float(step(1.0)) == 3.0
    scale = 3.0
    assert float(apply(1.0)) == 3.0
    assert float(step(1.0)) == 4.0
    assert float(make(2.0)[0](1.0)) == 7.0  # another instance's array, one program
    assert counter.traces == 1


def test_a_bound_lift_jit_method_lifts_with_its_instances_arrays_as_leaves():
    # It was refused as "a callable object that is not a pytree".
    class Model(eqx.Module):
        w: jax.Array

        @lift.jit
        def apply(self, x):
            return self.w * x

    w = jnp.asarray(2.0)
    lifted = lift.lift(Model(w).apply)
    assert jax.tree_util.tree_leaves(lifted) == [w]
    assert float(lifted(3.0)) == 6.0
    assert float(lift.jit(Model(w).apply)(3.0)) == 6.0


def test_an_inner_jits_static_capture_needs_the_callers_static_too():
    # The caller lifts the inner function's captures by its own `static=`:
    # without the name, `edges` is a tracer in the caller's program, which the
    # inner function refuses by name with the fix; with it, both keep it
    # static and a rebinding is seen.
    edges = np.array([0.0, 1.0, 4.0])

    @lift.jit(static=("edges",))
    def bucket(x):
        return x * float(np.diff(edges).max())  # NumPy at trace time

    @lift.jit
    def step(x):
        return bucket(x) + 1.0

    @lift.jit(static=("edges",))
    def fixed(x):
        return bucket(x) + 1.0

    assert float(bucket(1.0)) == 3.0
    with pytest.raises(
        lift.LiftError,
        match=r"(?s)bucket \(.*test_jit_state.py:\d+\) captures variable 'edges' "
        r"as static, but it holds a tracer.*calling this one made it a tracer, "
        r"give the caller the same `static=` too \(`@lift.jit\(static=\('edges',\)\)`\)",
    ):
        step(1.0)
    assert float(fixed(1.0)) == 4.0
    edges = np.array([0.0, 2.0])
    assert float(fixed(1.0)) == 3.0


def test_an_attribute_set_on_a_lift_jit_helper_is_read_and_watched():
    # Regression (an adversary's): a `lift.jit` helper was rebuilt from its
    # function alone, so the lifted caller lost `helper.scale`
    # (AttributeError); now it is a capture of the caller like a function's
    # attribute: a leaf, and a new value is seen without retracing.
    counter = _Counter()

    @lift.jit
    def helper(x):
        return x

    helper.scale = 2.0  # pyright: ignore[reportAttributeAccessIssue]

    def step(x):
        counter()
        return helper(x) * helper.scale  # pyright: ignore[reportFunctionMemberAccess]

    assert float(lift.lift(step)(1.0)) == 2.0
    jitted = lift.jit(step)
    assert float(jitted(1.0)) == 2.0
    helper.scale = 3.0  # pyright: ignore[reportAttributeAccessIssue]
    assert float(jitted(1.0)) == 3.0
    assert counter.traces == 2  # the eager lift's call, and one trace


def test_a_lift_jit_closure_kept_in_a_registry_it_reads_runs():
    # Regression (an adversary's): checking the registry's keys opened the
    # `lift.jit` function found in it as a pytree node, which lifted it, which
    # checked the registry again: RecursionError.
    registry: dict[str, Any] = {"steps": [], "w": 2.0}

    @lift.jit
    def step(x):
        return x * registry["w"]

    registry["steps"].append(step)
    assert float(step(1.0)) == 2.0
    registry = {"steps": [step], "w": 4.0}
    assert float(step(1.0)) == 4.0


@pytest.mark.parametrize("names", [["k"], {"k"}, ("k",)], ids=type)
def test_helpers_given_static_names_as_a_list_or_set_share_one_program(names):
    # An adversary's: the names, a list kept in the helper's part of its
    # caller's key, were compared by identity: a compile per closure.
    counter = _Counter()

    def make(lr, k):
        @lift.jit(static=names)
        def helper(x):
            return x * lr * k

        @lift.jit
        def step(x):
            counter()
            return helper(x) + 1.0

        return step

    assert [float(make(lr, 2)(1.0)) for lr in (0.5, 0.25, 0.125)] == [2.0, 1.5, 1.25]
    assert counter.traces == 1


def test_an_inner_jit_called_alone_then_inside_jax_jit_traces_once():
    counter = _Counter()
    a = jnp.float32(2.0)

    @lift.jit
    def inner(x):
        counter()
        return a * x

    inner(1.0)
    assert float(jax.jit(lambda x: inner(x))(1.0)) == 2.0
    assert counter.traces == 1


def test_nested_jits_under_disable_jit_after_compiling():
    a = 2.0

    @lift.jit
    def inner(x):
        return x * a

    @lift.jit
    def outer(x):
        return inner(x) + 1.0

    outer(1.0)
    with jax.disable_jit():
        assert [float(outer(1.0)) for _ in range(2)] == [3.0] * 2


def test_a_jit_closure_over_a_tracer_keeps_nothing_after_the_trace():
    counter = _Counter()

    def outer(y):
        @lift.jit
        def inner(x):
            counter()
            return x * y

        return inner(1.0) + inner(2.0)

    with jax.checking_leaks():
        assert float(jax.jit(outer)(3.0)) == 9.0
    assert counter.traces == 1


def test_a_jit_function_as_a_transformed_argument_keeps_no_tracer():
    a = jnp.float32(2.0)

    @lift.jit
    def f(x):
        return a * x

    with jax.checking_leaks():
        assert float(jax.jit(lambda g, x: g(x))(f, 1.0)) == 2.0
        grads = jax.grad(lambda g: g(1.0))(f)
    assert float(jax.tree.leaves(grads)[0]) == 1.0
    assert float(f(1.0)) == 2.0
    assert lift.find_leaks(f) == []


# Found after the cached call began watching what the walk read: a function
# with keyword-only defaults is watched part by part, and its defaults tuple
# was compared as if it were one of those parts (its first items with `==`).


def test_defaults_rebound_to_an_equal_tuple_beside_keyword_only_defaults():
    def step(x, mode="sgd", *, lr=0.5):
        return x * lr if mode == "sgd" else x

    jitted = lift.jit(step)
    assert float(jitted(1.0)) == 0.5
    step.__defaults__ = ("".join(["s", "gd"]),)  # equal, another object
    assert float(jitted(1.0)) == 0.5
    step.__defaults__ = ()  # none, as Python has for a function without
    with pytest.raises(TypeError, match="mode"):
        jitted(1.0)


def test_a_default_array_rebound_to_another_shape_beside_keyword_only_defaults():
    def init(x, w=jnp.ones(3), *, scale=2.0):
        return (x * w * scale).sum()

    jitted = lift.jit(init)
    assert float(jitted(1.0)) == 6.0
    init.__defaults__ = (jnp.ones(4),)
    assert float(jitted(1.0)) == 8.0
