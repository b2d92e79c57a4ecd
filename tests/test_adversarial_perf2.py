"""A second attack on the specialized `lift.jit` call (the fast path over several
functions and cells, the unverified first-call snapshot, `CALLING.treedef`) and
on `lift.jit` functions as objects: each test states the contract a break
violated, and cases around them that held."""

from __future__ import annotations

import copy

import jax
import jax.numpy as jnp
import pytest
from helpers import TraceCounter as _Counter

import lift
from lift import _programs

# -- a `lift.jit` function as an object ---------------------------------------------------


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


# -- rebinding in a graph of several functions and cells (held) ------------------------


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


# -- a `lift.jit` function captured by another, and nested calls (held) -----------------


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


# -- leaks (held) ----------------------------------------------------------------------


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
    assert lift.find_leaks(_programs.CALLING.__dict__) == []


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
    assert lift.find_leaks(f, _programs.CALLING.__dict__) == []
