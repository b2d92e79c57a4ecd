"""Size: chains of thousands of nested closures and functions with thousands of
captures.

Every walk in `lift` is iterative, so depth is bounded by memory, not by Python's
recursion limit. The chains here are built so that *calling* them does not
recurse either (each step returns the function it holds, and a loop drives the
chain), except in the one test where the original function itself recurses and
the recursion limit is raised for both.

That each walk is linear is checked by counting work, not by timing it: the
function calls an operation makes (`helpers.calls_made`) on a graph twice as
large must be at most about twice as many, whatever the machine's load.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import calls_made

import lift

# A closure chain as deep as the docs promise (docs/how-it-works.md) for the
# walks every lift makes; the other shapes and operations at three times
# Python's default recursion limit (1 000), which a recursive walk would
# already fail, at a third of the cost.
DEPTH = 10_000
PAST_THE_LIMIT = 3_000
WIDTH = 3_000


def _step(prev: Any, w: Any) -> Callable[[Any], Any]:
    def step(x):
        return prev, x + w

    return step


def _drive(fn: Any, x: Any) -> tuple[Any, int]:
    """Run a chain built by `_step`: each call returns the next function."""
    steps = 0
    while fn is not None:
        fn, x = fn(x)
        steps += 1
    return x, steps


def _closure_chain(n: int) -> Any:
    fn = None
    for i in range(n):
        fn = _step(fn, np.float32(i % 7))
    return fn


def test_closure_chain_10000_deep_lifts_flattens_and_calls():
    fn = _closure_chain(DEPTH)
    expected, steps = _drive(fn, np.float32(0))
    assert steps == DEPTH
    lifted = lift.lift(fn)
    leaves, treedef = jax.tree_util.tree_flatten(lifted)
    again = jax.tree_util.tree_unflatten(treedef, leaves)
    assert len(leaves) == DEPTH
    assert jax.tree_util.tree_structure(lift.lift(_closure_chain(DEPTH))) == treedef
    out, steps = _drive(again, np.float32(0))
    assert steps == DEPTH
    assert out == expected


def test_closure_chain_10000_deep_key_paths():
    lifted = lift.lift(_closure_chain(DEPTH))
    pairs, _ = jax.tree_util.tree_flatten_with_path(lifted)
    first = jax.tree_util.keystr(pairs[0][0])
    assert len(pairs) == DEPTH
    assert first.startswith(".captures[")


def _double(g: Any) -> Any:
    return jax.tree_util.tree_map(lambda v: 2 * v, g)


def test_deep_closure_chain_through_jit():
    # Tracing and lowering are lift's part; XLA compiling a program with
    # thousands of parameters and results takes tens of seconds on its own, so
    # the compiled round trip runs at 1 000 deep.
    lifted = lift.lift(_closure_chain(PAST_THE_LIMIT))
    lowered = jax.jit(_double).lower(lifted)
    shapes = jax.eval_shape(_double, lifted)
    assert lowered.out_info is not None
    assert lift.is_lifted(shapes)
    assert jax.tree_util.tree_structure(shapes) == jax.tree_util.tree_structure(lifted)

    lifted = lift.lift(_closure_chain(1_000))
    doubled = jax.jit(_double)(lifted)
    out, steps = _drive(doubled, np.float32(0))
    assert steps == 1_000
    assert out == 2 * _drive(lifted, np.float32(0))[0]


def test_deep_recursive_chain_needs_the_same_recursion_as_the_original():
    def link(prev, w):
        def f(x):
            return x + w if prev is None else prev(x) + w

        return f

    fn = None
    for _ in range(PAST_THE_LIMIT):
        fn = link(fn, 1.0)
    lifted = lift.lift(fn)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(PAST_THE_LIMIT * 3 + 1000)  # the original needs it too
    try:
        assert fn(0.0) == PAST_THE_LIMIT
        assert lifted(0.0) == PAST_THE_LIMIT
    finally:
        sys.setrecursionlimit(limit)


def test_lexically_nested_closures():
    # Python's parser limits how deep `def` can nest in source; 90 levels, each
    # capturing the variable of every level above it.
    depth = 90
    lines = ["def level0(x0):"]
    for i in range(1, depth):
        lines.append("    " * i + f"def level{i}(x{i}):")
    total = " + ".join(f"x{i}" for i in range(depth))
    lines.append("    " * depth + f"return lambda y: y + {total}")
    for i in range(depth - 1, 0, -1):
        lines.append("    " * i + f"return level{i}")
    namespace: dict[str, Any] = {}
    exec(compile("\n".join(lines), "<nested>", "exec"), namespace)
    fn: Any = namespace["level0"]
    for i in range(depth):
        fn = fn(float(i))
    lifted = lift.lift(fn)
    assert len(jax.tree_util.tree_leaves(lifted)) == depth
    assert lifted(1.0) == fn(1.0)
    assert jax.jit(lambda g, y: g(y))(lifted, 1.0) == pytest.approx(fn(1.0))


def test_deep_partial_chain():
    def step(prev, w, x):
        return prev, x + w

    fn: Any = None
    for i in range(PAST_THE_LIMIT):
        fn = functools.partial(step, fn, np.float32(i % 5))
    expected, _ = _drive(fn, np.float32(0))
    lifted = lift.lift(fn)
    leaves, treedef = jax.tree_util.tree_flatten(lifted)
    assert len(leaves) == PAST_THE_LIMIT
    out, steps = _drive(jax.tree_util.tree_unflatten(treedef, leaves), np.float32(0))
    assert (out, steps) == (expected, PAST_THE_LIMIT)


def test_deep_chain_through_tuples():
    def step(pair):
        def f(x):
            return pair[1], x + pair[0]

        return f

    fn: Any = None
    for i in range(PAST_THE_LIMIT):
        fn = step((np.float32(i % 3), fn))
    expected, _ = _drive(fn, np.float32(0))
    lifted = lift.lift(fn)
    leaves, treedef = jax.tree_util.tree_flatten(lifted)
    out, steps = _drive(jax.tree_util.tree_unflatten(treedef, leaves), np.float32(0))
    assert (out, steps) == (expected, PAST_THE_LIMIT)


def _wide(n: int) -> Callable[..., Any]:
    names = [f"a{i}" for i in range(n)]
    source = (
        f"def make({', '.join(names)}):\n"
        f"    def wide(x):\n"
        f"        return x + sum(({', '.join(names)},))\n"
        f"    return wide\n"
    )
    namespace: dict[str, Any] = {}
    exec(compile(source, "<wide>", "exec"), namespace)
    return namespace["make"]


def test_function_with_thousands_of_free_variables():
    values = [np.float32(i % 11) for i in range(WIDTH)]
    fn = _wide(WIDTH)(*values)
    lifted = lift.lift(fn)
    pairs, treedef = jax.tree_util.tree_flatten_with_path(lifted)
    assert len(pairs) == WIDTH
    assert {jax.tree_util.keystr(p) for p, _ in pairs} == {
        f".captures['a{i}']" for i in range(WIDTH)
    }
    assert lifted(np.float32(1)) == fn(np.float32(1))
    again = jax.tree_util.tree_unflatten(treedef, [v + 1 for _, v in pairs])
    assert again(np.float32(1)) == fn(np.float32(1)) + WIDTH
    assert f"a{WIDTH - 1}=" in repr(lifted)


def test_thousands_of_defaults_and_a_capture_of_thousands_of_elements():
    # NumPy arrays: eager JAX ops under `JAX_CHECK_TRACER_LEAKS` run a gc each,
    # and summing thousands of them would take minutes.
    ws: list[Any] = [np.asarray(i % 13, np.float32) for i in range(WIDTH - 1)]
    ws.append(jnp.asarray(5.0))
    names = [f"d{i}" for i in range(WIDTH)]
    source = f"def f(x, {', '.join(f'{n}=None' for n in names)}):\n    return x + sum(({', '.join(names)},))\n"
    namespace: dict[str, Any] = {}
    exec(compile(source, "<defaults>", "exec"), namespace)
    fn = namespace["f"]
    fn.__defaults__ = tuple(ws)

    def from_list(x, ws=ws):
        return x + sum(ws)

    for g in (fn, from_list):
        lifted = lift.lift(g)
        leaves = jax.tree_util.tree_leaves(lifted)
        assert len(leaves) == WIDTH
        assert lifted(1.0) == g(1.0)


def _partial_chain(n: int) -> Any:
    def step(prev: Any, w: Any, x: Any) -> Any:
        return prev, x + w

    fn: Any = None
    for i in range(n):
        fn = functools.partial(step, fn, np.float32(i % 5))
    return fn


def _tuple_chain(n: int) -> Any:
    def step(pair: Any) -> Any:
        def f(x: Any) -> Any:
            return pair[1], x + pair[0]

        return f

    fn: Any = None
    for i in range(n):
        fn = step((np.float32(i % 3), fn))
    return fn


def _wide_fn(n: int) -> Any:
    return _wide(n)(*[np.float32(i % 11) for i in range(n)])


def _flatten_unflatten(fn: Any) -> Any:
    lifted = lift.lift(fn)
    return lambda: jax.tree_util.tree_unflatten(
        *reversed(jax.tree_util.tree_flatten(lifted))
    )


# (what, how a graph of size n is built, the operation on it, measured)
LINEAR = [
    ("lift of a closure chain", _closure_chain, lambda fn: lambda: lift.lift(fn)),
    ("flatten and unflatten of a closure chain", _closure_chain, _flatten_unflatten),
    (
        "tree_flatten_with_path of a closure chain",
        _closure_chain,
        lambda fn: functools.partial(
            jax.tree_util.tree_flatten_with_path, lift.lift(fn)
        ),
    ),
    ("lift of a partial chain", _partial_chain, lambda fn: lambda: lift.lift(fn)),
    ("lift of a chain through tuples", _tuple_chain, lambda fn: lambda: lift.lift(fn)),
    ("lift of a wide function", _wide_fn, lambda fn: lambda: lift.lift(fn)),
    ("flatten of a wide function", _wide_fn, _flatten_unflatten),
    (
        "find_leaks over a closure chain",
        _closure_chain,
        lambda fn: lambda: lift.find_leaks(fn),
    ),
    (
        "diff of two closure chains",
        _closure_chain,
        lambda fn: functools.partial(lift.diff, lift.lift(fn), lift.lift(fn)),
    ),
]


@pytest.mark.parametrize(
    ("what", "build", "operation"), LINEAR, ids=[w for w, *_ in LINEAR]
)
def test_work_grows_linearly_with_the_graph(
    what: str,
    build: Callable[[int], Any],
    operation: Callable[[Any], Callable[[], Any]],
):
    # Doubling a graph must not quadruple the work to walk it. Each size is
    # built afresh, after a warm-up that fills the per-code-object caches.
    operation(build(50))()
    small, large = (calls_made(operation(build(n))) for n in (500, 1_000))
    assert large <= 2.3 * small, f"{what}: {small} calls at 500, {large} at 1 000"


def test_leak_scan_diff_and_repr_of_a_deep_chain():
    a = lift.lift(_closure_chain(PAST_THE_LIMIT))

    # The same length of chain, but a different function at the very bottom.
    def last(x, tag="other"):
        return None, x

    fn: Any = last
    for i in range(1, PAST_THE_LIMIT):
        fn = _step(fn, np.float32(i % 7))
    b = lift.lift(fn)
    assert lift.find_leaks(a) == []
    assert lift.find_leaks(_closure_chain(PAST_THE_LIMIT)) == []
    assert lift.diff(a, lift.lift(_closure_chain(PAST_THE_LIMIT))) is None
    explained = lift.diff(a, b)
    assert explained is not None
    text = repr(a)
    assert text.startswith("Lifted(")


def test_captured_containers_nested_300_deep():
    nested: Any = np.float32(1)
    for _ in range(300):
        nested = (nested,)

    def f(x):
        v = nested
        while isinstance(v, tuple):
            v = v[0]
        return x + v

    lifted = lift.lift(f)
    leaves = jax.tree_util.tree_leaves(lifted)
    assert len(leaves) == 1
    assert lifted(1.0) == 2.0
    assert jax.jit(lambda g, x: g(x))(lifted, 1.0) == 2.0


def test_lifting_a_closure_over_a_large_object_array_does_not_walk_its_elements():
    def over(v):
        return lambda: v

    def work(n: int) -> int:
        names = np.empty(n, dtype=object)
        names[:] = [None] * n
        lift.lift(over(names))  # the first walk
        return calls_made(lambda: lift.lift(over(names)))  # and again

    work(10)
    # An object array is one static leaf: the work does not grow with its length.
    assert work(300_000) <= work(1_000) + 20
