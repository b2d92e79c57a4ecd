"""Equal skeletons are one object, so JAX's check of a cached treedef is an
identity; what must stay apart stays apart."""

from __future__ import annotations

import copy
import gc
import pickle
import threading
from typing import Any

import jax
import jax.numpy as jnp
import optax

import lift
from lift._skeleton import skeleton as skeleton_module
from lift._skeleton.skeleton import skeleton_of


def _scale(lr: float) -> Any:
    return lift.lift(lambda g: -lr * g)


def _skeletons(x: Any) -> list[Any]:
    return [skeleton_of(f) for f in jax.tree.leaves(x, is_leaf=lift.is_lifted)]


def test_equal_lifts_share_one_skeleton() -> None:
    a, b = lift.lift(optax.adam(0.1)), lift.lift(optax.adam(0.01))
    assert all(x is y for x, y in zip(_skeletons(a), _skeletons(b), strict=True))
    assert skeleton_of(_scale(0.1)) is skeleton_of(_scale(0.2))


def test_a_jitted_step_with_another_rates_lifted_reuses_its_program() -> None:
    traces = 0

    @jax.jit
    def step(opt: Any, g: jax.Array) -> jax.Array:
        nonlocal traces
        traces += 1
        return opt(g)

    keep = [_scale(r) for r in (0.1, 0.01, 0.001)]
    for f in keep:
        step(f, jnp.ones(3))
    assert traces == 1


def _make(k: int) -> Any:
    if k == 1:
        return lambda x: x * 1
    return lambda x: x * 2


def test_functions_with_different_code_are_never_one() -> None:
    # Same name and line, different constants.
    a, b = lift.lift(_make(1)), lift.lift(_make(2))
    assert skeleton_of(a) is not skeleton_of(b)
    assert jax.tree.structure(a) != jax.tree.structure(b)


def _static_capture(v: Any) -> Any:
    return lift.lift(lambda x: x + v, static="v")


def test_statics_equal_by_python_but_not_by_type_and_value_stay_apart() -> None:
    for u, v in ((0.0, -0.0), (1, 1.0), (1, True), (1.0, True)):
        a, b = _static_capture(u), _static_capture(v)
        assert skeleton_of(a) is not skeleton_of(b), (u, v)
        assert skeleton_of(a) != skeleton_of(b), (u, v)


def _logger(log: list[Any]) -> Any:
    lr = 0.5

    def f(x: Any) -> Any:
        log.append(1)
        return x * lr

    return lift.lift(f)


def test_equal_lists_kept_as_yours_are_not_shared_between_owners() -> None:
    mine, yours = [0], [0]
    a, b = _logger(mine), _logger(yours)
    assert skeleton_of(a) == skeleton_of(b)  # one program serves both
    assert skeleton_of(a) is not skeleton_of(b)
    b(1.0)
    assert (mine, yours) == ([0], [0, 1])


def test_options_are_not_mixed_by_sharing() -> None:
    def make(lr: float) -> Any:
        return lambda x: x * lr

    plain = lift.lift(make(0.5))
    by_rule = lift.lift(make(0.5), dynamic=lambda v: isinstance(v, float))
    assert skeleton_of(plain) == skeleton_of(by_rule)
    assert skeleton_of(plain) is not skeleton_of(by_rule)
    assert skeleton_of(by_rule).options[1] is not None


def test_the_table_forgets_a_skeleton_when_it_dies() -> None:
    gc.collect()
    before = len(skeleton_module._INTERNED)  # pyright: ignore[reportPrivateUsage]
    for k in range(300):
        code = compile(f"lambda x: x * {k}", "<test>", "eval")
        lift.lift(eval(code))
    gc.collect()
    assert len(skeleton_module._INTERNED) <= before + 5  # pyright: ignore[reportPrivateUsage]


def test_copies_and_pickles_share_the_skeleton_while_it_lives() -> None:
    f = lift.lift(_module_level)
    assert skeleton_of(copy.copy(f)) is skeleton_of(f)
    assert skeleton_of(copy.deepcopy(f)) is skeleton_of(f)
    again = pickle.loads(pickle.dumps(f))
    assert skeleton_of(again) is skeleton_of(f)
    assert again(2.0) == f(2.0)


def _module_level(x: Any, scale: float = 3.0) -> Any:
    return x * scale


def test_lifts_from_eight_threads_agree() -> None:
    out: list[Any] = [None] * 8

    def work(i: int) -> None:
        out[i] = [skeleton_of(_scale(0.1 * (i + 1))) for _ in range(200)]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    first = out[0][0]
    assert all(s == first for row in out for s in row)


def _late(k: float) -> Any:
    g: Any  # a cell of `f`, empty until `bind`

    def f(n: Any) -> Any:
        return k if n < 1 else g(n - 1)

    def bind(v: Any) -> None:
        nonlocal g
        g = v

    return f, bind


def test_each_closure_reads_its_own_cell_bound_after_lifting() -> None:
    # `g` is an empty cell in both when lifted, bound after.
    (f2, bind2), (f3, bind3) = _late(2.0), _late(3.0)
    two, three = lift.lift(f2), lift.lift(f3)
    assert skeleton_of(two) is not skeleton_of(three)
    bind2(two)
    bind3(three)
    assert (two(1), three(1)) == (2.0, 3.0)


def _wide(values: list[float], flag: bool) -> Any:
    # One cell a value, so the graph is wider than the nodes lifts share.
    cells = [lambda v=v: v for v in values]

    def f(x: float) -> float:
        return x * sum(c() for c in cells) if flag else x

    return f


def test_fresh_lifts_share_nodes_yet_compute_their_own_values() -> None:
    # Small graphs share cells and templates between fresh lifts; wide ones
    # make their own. Either way each lift computes with its own leaves and
    # statics, and a `tree_map` of one leaves the other as it was.
    for n in (3, 200):
        a = lift.lift(_wide([1.0] * n, True))
        b = lift.lift(_wide([2.0] * n, True))
        c = lift.lift(_wide([2.0] * n, False))
        assert skeleton_of(a) is skeleton_of(b) is not skeleton_of(c)
        assert (a(1.0), b(1.0), c(1.0)) == (n, 2.0 * n, 1.0)
        doubled = jax.tree.map(lambda v: 2 * v, a)
        assert (doubled(1.0), a(1.0)) == (2.0 * n, n)
        grads = jax.tree.leaves(jax.grad(lambda g: g(1.0))(a))
        assert len(grads) == n and all(g == 1.0 for g in grads)
