"""Re-lifting a closure shaped like one seen before reuses its skeleton, and only then."""

from __future__ import annotations

import functools
import types
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import HOLD

import lift
from lift import _replay


@pytest.fixture(autouse=True)
def compile_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Compile a shape's replay the second time it is seen, so these tests run it."""
    monkeypatch.setattr(_replay, "REPLAY_AFTER", 0)


def make(lr, n, w):
    def inner(x):
        return x * lr

    def f(x, fns=(inner, inner)):
        return fns[0](x) * n + fns[1](w)

    return f


def skeleton(x: lift.Lifted) -> Any:
    return jax.tree_util.tree_structure(x).node_data()[1]  # type: ignore[index]


def replayed(x: lift.Lifted) -> bool:
    return callable(skeleton(x).replay)


def test_same_shape_shares_the_skeleton_object() -> None:
    a, b, c, d = (
        lift.lift(make(lr, 2, jnp.full(2, lr))) for lr in (0.1, 0.2, 0.3, 0.4)
    )
    assert replayed(d)
    assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
    assert skeleton(c) is skeleton(a) and skeleton(d) is skeleton(a)
    assert jnp.allclose(d(1.0), 0.4 * 2 + 0.4 * 0.4)


@pytest.mark.parametrize(
    ("other", "same_treedef"),
    [
        (lambda: make(0.1, 3, jnp.ones(2)), False),  # a static value differs
        (lambda: make(0.1, 2.0, jnp.ones(2)), False),  # int becomes float: now dynamic
        (lambda: make(jnp.asarray(0.1), 2, jnp.ones(2)), True),  # a leaf's type differs
    ],
)
def test_any_difference_takes_the_full_walk(other, same_treedef: bool) -> None:
    for lr in (0.1, 0.2, 0.3):
        lift.lift(make(lr, 2, jnp.ones(2)))
    a = lift.lift(make(0.1, 2, jnp.ones(2)))
    assert replayed(a)
    b = lift.lift(other())
    assert (
        jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
    ) is same_treedef
    assert jnp.allclose(b(1.0), other()(1.0))


def test_sharing_structure_is_checked() -> None:
    def make2(lr, same):
        def g(x):
            return x * lr

        def h(x):
            return x * lr

        fns = (g, g) if same else (g, h)
        return lambda x: fns[0](x) + fns[1](x)

    lift.lift(make2(0.2, same=False))
    a = lift.lift(make2(0.1, same=False))
    assert replayed(a)
    b = lift.lift(make2(0.1, same=True))
    assert jax.tree_util.tree_structure(a) != jax.tree_util.tree_structure(b)
    assert b(1.0) == pytest.approx(0.2)


def test_cyclic_value_in_a_replayed_position() -> None:
    def make3(items):
        return lambda: len(items)

    assert lift.lift(make3([1, 2]))() == 2
    loop: list[object] = [1]
    loop.append(loop)
    with pytest.raises(
        lift.LiftError,
        match=r"(?s)captures variable 'items', a container that contains itself",
    ):
        lift.lift(make3(loop))


def test_empty_cell_then_filled() -> None:
    def outer(fill):
        def f():
            return later

        if fill:
            later = 1
        return f

    with pytest.raises(NameError, match="later"):
        lift.lift(outer(False))()
    assert lift.lift(outer(True))() == 1


@pytest.mark.parametrize("after", [1, 3, 8])
def test_replay_is_compiled_after_a_count_of_lifts_never_timings(
    monkeypatch: pytest.MonkeyPatch, after: int
) -> None:
    # A shape's first lift builds its skeleton; its replay is compiled at the
    # lift after `REPLAY_AFTER` more, however long anything took.
    namespace: dict[str, Any] = {}  # a shape no other test lifts
    exec("def shape(lr):\n    return lambda x: x * lr\n", namespace)
    shape = namespace["shape"]
    monkeypatch.setattr(_replay, "REPLAY_AFTER", after)
    ticks = iter(range(0, 10**9, 10**6))  # a clock where everything is slow
    monkeypatch.setattr("time.perf_counter", lambda: float(next(ticks)))
    with lift.verifying(False):
        for i in range(1, after + 2):
            assert not replayed(lift.lift(shape(0.1 * i)))
        x = lift.lift(shape(0.7))
        assert skeleton(x).walked == after
    assert replayed(x) and x(2.0) == pytest.approx(1.4)


def test_verifying_compiles_a_replay_at_the_first_relift(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def shape(lr):
        return lambda x: x - lr

    monkeypatch.setattr(_replay, "REPLAY_AFTER", 10**9)
    with lift.verifying():
        assert not replayed(lift.lift(shape(0.1)))
        assert not replayed(lift.lift(shape(0.2)))
        c = lift.lift(shape(0.3))
    assert replayed(c) and c(1.0) == pytest.approx(0.7)


def test_a_cell_shared_by_two_functions_must_stay_shared() -> None:
    def pair(lr):
        def g(x):
            return x * lr

        def h(x):
            return x + lr

        return g, h

    def both(g, h):
        return lambda x: g(x) + h(x)

    for lr in (0.1, 0.2):
        lift.lift(both(*pair(lr)))
    a = lift.lift(both(*pair(0.3)))
    assert replayed(a) and len(jax.tree_util.tree_leaves(a)) == 1
    g, _ = pair(0.4)
    _, h = pair(0.5)
    b = lift.lift(both(g, h))  # the same code, but two `lr` cells, not one
    assert jax.tree_util.tree_structure(b) != jax.tree_util.tree_structure(a)
    assert len(jax.tree_util.tree_leaves(b)) == 2
    assert b(1.0) == pytest.approx(0.4 + 1.5)


def test_empty_cells_are_never_replayed() -> None:
    def outer():
        def f():
            return later

        if False:
            later = 1
        return f

    # Each closure's empty cell is its own (Python may bind it later): never
    # replayed from another closure's skeleton.
    for _ in range(3):
        x = lift.lift(outer())
    assert not replayed(x)
    with pytest.raises(NameError, match="later"):
        x()


def test_one_cell_twice_in_a_closure() -> None:
    # Only `types.FunctionType` makes such a closure; the replay must still bind
    # the cell once and check its second place against it.
    def outer():
        a = b = None

        def f():
            return a + b

        return f

    template = outer()

    def make(v):
        cell = types.CellType(v)
        return types.FunctionType(
            template.__code__, template.__globals__, "f", None, (cell, cell)
        )

    for v in (1.0, 2.0):
        lift.lift(make(v))
    x = lift.lift(make(3.0))
    assert replayed(x) and x() == 6.0
    assert len(jax.tree_util.tree_leaves(x)) == 1
    y = lift.lift(
        types.FunctionType(
            template.__code__,
            template.__globals__,
            "f",
            None,
            (types.CellType(1.0), types.CellType(2.0)),
        )
    )
    assert jax.tree_util.tree_structure(y) != jax.tree_util.tree_structure(x)
    assert y() == 3.0


class _Pair(NamedTuple):
    first: Any
    second: Any


class _Reversed(NamedTuple):
    first: Any
    second: Any

    def __iter__(self) -> Any:  # JAX's flattening reads the items, not this
        return iter((self.second, self.first))


def _fn(k: float) -> Any:
    return lambda x: x * k


def _holding(items: Any) -> Any:
    return lambda x: [
        f(x) if callable(f) else len(f) if isinstance(f, tuple) else f for f in items
    ]


@pytest.mark.parametrize(
    "items",
    [
        lambda: (_fn(0.5), _fn(2.0)),
        lambda: [_fn(0.5), _fn(2.0)],
        lambda: _Pair(_fn(0.5), _fn(2.0)),
        lambda: _Reversed(_fn(0.5), _fn(2.0)),
        lambda: (_fn(0.5), 3.0, "s", 2),
        lambda: (),
    ],
)
@pytest.mark.parametrize(
    "other",
    [
        lambda: (_fn(0.5), _fn(2.0)),
        lambda: [_fn(0.5), _fn(2.0)],
        lambda: (_fn(0.5),),
        lambda: (_fn(0.5), _fn(2.0), _fn(3.0)),
        lambda: _Pair(_fn(0.5), _fn(2.0)),
        lambda: _Reversed(_fn(0.5), _fn(2.0)),
        lambda: (_fn(0.5), (_fn(2.0),)),
        lambda: (_fn(0.5), None),
        lambda: (_fn(0.5), 3.0, "s", 2),
        lambda: (_fn(0.5), 3.0, "t", 2),
        lambda: (_fn(0.5), jnp.ones(2), "s", 2),
        lambda: (_fn(0.5), 3.0, "s", 2.0),
        lambda: (_fn(0.5), 3.0, "s", True),
        lambda: (_fn(0.5), _fn(0.5), "s", 2),
        lambda: (),
        lambda: [],
    ],
)
def test_a_replayed_tuple_of_functions_gives_what_the_full_walk_gives(
    items: Any, other: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for _ in range(3):
        lift.lift(_holding(items()))
    assert replayed(lift.lift(_holding(items())))
    fn = _holding(other())
    leaves, treedef = jax.tree_util.tree_flatten(lift.lift(fn))
    with monkeypatch.context() as m:
        m.setattr(_replay, "replay", lambda skeleton, obj: None)
        from lift import _capture

        m.setattr(_capture, "replay", lambda skeleton, obj: None)
        full_leaves, full_treedef = jax.tree_util.tree_flatten(lift.lift(fn))
    assert treedef == full_treedef
    assert [type(x) for x in leaves] == [type(x) for x in full_leaves]
    assert all(jnp.array_equal(a, b) for a, b in zip(leaves, full_leaves, strict=True))
    assert lift.lift(fn)(2.0) == fn(2.0)


class _SelfListing(NamedTuple):
    fn: Any
    other: Any


# Registered as a node of its own, whose children include itself: a cycle that
# only the guarded flattening notices.
jax.tree_util.register_pytree_node(
    _SelfListing, lambda x: ((x.fn, x), None), lambda _, c: _SelfListing(*c)
)


def test_a_namedtuple_registered_as_its_own_node_is_flattened_guarded() -> None:
    with pytest.raises(lift.LiftError, match="contains itself"):
        lift.lift(_SelfListing(_fn(0.5), None))
    # A plain NamedTuple of functions takes the short way, with the same result.
    pair = lift.lift(_Pair(_fn(0.5), _fn(2.0)))
    assert type(pair) is _Pair and pair.second(1.0) == 2.0


class _Patched(NamedTuple):
    first: Any
    second: Any


def test_a_namedtuple_given_its_own_iteration_after_replay_is_read_as_jax_reads_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def make() -> Any:
        return _holding(_Patched(_fn(0.5), _fn(2.0)))

    for _ in range(3):
        lift.lift(make())
    assert replayed(lift.lift(make()))
    monkeypatch.setattr(
        _Patched,
        "__iter__",
        lambda self: iter((tuple.__getitem__(self, 1), tuple.__getitem__(self, 0))),
    )
    fn = make()
    leaves, treedef = jax.tree_util.tree_flatten(lift.lift(fn))
    with monkeypatch.context() as m:
        from lift import _capture

        m.setattr(_capture, "replay", lambda skeleton, obj: None)
        full_leaves, full_treedef = jax.tree_util.tree_flatten(lift.lift(fn))
    assert treedef == full_treedef
    assert [float(x) for x in leaves] == [float(x) for x in full_leaves] == [0.5, 2.0]


# -- the replay decides as the full walk does ---------------------------------------


class _Swapped(NamedTuple):
    a: Any
    b: Any


# Registered with a flatten of its own, which reads its fields in another order
# than the tuple's.
jax.tree_util.register_pytree_node(
    _Swapped, lambda x: ((x.b, x.a), None), lambda _, c: _Swapped(c[1], c[0])
)


def test_a_namedtuple_with_its_own_flatten_is_replayed_in_its_order() -> None:
    def make(a: float, b: float) -> Any:
        pair = _Swapped(a, b)
        return lambda: pair.a - pair.b

    with lift.verifying():
        for i in range(4):
            x = lift.lift(make(1.0 + i, 10.0))
            assert float(x()) == pytest.approx(1.0 + i - 10.0)
    assert replayed(x)


class _Node:
    def __init__(self) -> None:
        self.child: Any = None


jax.tree_util.register_pytree_node(
    _Node, lambda n: ((n.child,), None), lambda _, c: _Node()
)


def test_a_cyclic_registered_node_is_refused_after_replays_as_at_first() -> None:
    def make(node: Any) -> Any:
        return lambda: node

    with lift.verifying():
        for _ in range(3):
            assert replayed(lift.lift(make(_Node()))) or True
        node = _Node()
        node.child = node
        with pytest.raises(
            lift.LiftError, match="captures variable 'node', a container"
        ):
            lift.lift(make(node))
    # The interpreter is fine afterwards (no recursion accounting left broken).
    assert lift.lift(make(_Node()))() is not None


class _Box:
    def __init__(self, value: Any) -> None:
        self.value = value


def test_a_hidden_tracer_of_a_running_jit_is_refused_after_replays_as_at_first() -> (
    None
):
    def make(box: Any) -> Any:
        return lambda x: box.value * x

    box = _Box(1.0)
    for _ in range(4):  # the same box, lifted until its shape is replayed
        lift.lift(make(box))
    seen: list[str] = []

    @jax.jit
    def f(x):
        box.value = x
        try:
            jax.tree_util.tree_leaves(lift.lift(make(box)))
        except lift.LiftError as err:
            seen.append(str(err))
        finally:
            box.value = 1.0
        return x

    with lift.verifying():
        f(1.0)
    assert len(seen) == 1 and "holds a tracer at box.value" in seen[0]


# A matrix: each value in each holder, lifted several times, every lift after the
# first replayed and checked against the full walk (`lift.verifying`).

_VALUES: dict[str, Any] = {
    "float": lambda i: 0.5 + i,
    "array": lambda i: jnp.full(2, float(i)),
    "numpy": lambda i: np.float32(i),
    "numpy 0-d bool": lambda i: np.asarray(True),
    "int": lambda i: 3,
    "str": lambda i: "s",
    "None": lambda i: None,
    "tuple": lambda i: (0.5 + i, 2, "s"),
    "list": lambda i: [0.5 + i, jnp.ones(1)],
    "dict": lambda i: {"b": 0.5 + i, "a": 2},
    "dict int keys": lambda i: {2: 0.5 + i, 1: 1.0},
    "namedtuple": lambda i: _Pair(0.5 + i, 3),
    "own flatten": lambda i: _Swapped(0.5 + i, 7.0),
    "function": lambda i: _fn(0.5 + i),
    "nested": lambda i: ((0.5 + i, [_fn(0.5 + i)]), {"k": (1, 2.0)}),
    "partial": lambda i: functools.partial(_add, 0.5 + i),
}


def _add(a: Any, b: Any) -> Any:
    return a + b


def _use(v: Any) -> Any:
    return jax.tree_util.tree_map(
        lambda leaf: leaf(1.0) if callable(leaf) else leaf,
        v,
        is_leaf=callable,
    )


def _uses(x: Any, v: Any) -> Any:
    return _use(v)


@pytest.mark.parametrize(
    ("holder", "value"),
    # `types.MethodType` refuses `None` as `self`.
    [(h, v) for h in HOLD for v in _VALUES if (h, v) != ("self itself", "None")],
)
def test_every_lift_of_a_shape_is_what_the_full_walk_gives(
    holder: str, value: str
) -> None:
    values = _VALUES[value]

    def make(v: Any) -> Any:
        return HOLD[holder](v, _uses)

    with lift.verifying():  # raises at the first lift that differs
        for i in range(5):
            fn = make(values(i))
            x = lift.lift(fn)
            expected, got = fn(None), x(None)
            assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(
                expected
            )
            for a, b in zip(
                jax.tree_util.tree_leaves(got),
                jax.tree_util.tree_leaves(expected),
                strict=True,
            ):
                assert type(a) is type(b) if isinstance(b, str) else np.allclose(a, b)
    # Dicts in an order JAX's flattening loses always take the walk.
    if value not in ("dict int keys", "dict"):
        assert replayed(x)


def _module_level(x: Any) -> Any:
    return x * _module_level.scale  # type: ignore[attr-defined]


_module_level.scale = 0.5  # type: ignore[attr-defined]


def _copy_of(fn: Any) -> Any:
    copy = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, None, None)
    copy.__qualname__ = fn.__qualname__
    copy.__annotations__ = fn.__annotations__
    copy.__dict__.update(fn.__dict__)
    return copy


@pytest.mark.parametrize("verify", [False, True])
def test_attributes_read_through_a_global_are_the_walks_decision_after_replays(
    verify: bool,
) -> None:
    # A module-level function reading its attribute through its global name
    # keeps the attribute static; a copy of it (same code and globals, not the
    # object the name is bound to) reads the copy's attribute, a leaf. Lifted
    # after the original's shape is replayed, the copy is what the walk says.
    from lift import _capture

    with lift.verifying(verify):
        for _ in range(3):
            assert not jax.tree_util.tree_leaves(lift.lift(_module_level))
        copy = _copy_of(_module_level)
        skeleton, leaves = _capture.capture(copy)
    walked, walked_leaves = _capture._walk(copy, frozenset(), None)
    assert skeleton == walked
    assert leaves == walked_leaves == [0.5]


def test_a_dict_in_its_own_order_then_in_sorted_order_is_the_walks() -> None:
    # JAX's treedef of {"b": .., "a": ..} and {"a": .., "b": ..} is one; the
    # walk records the first's insertion order, so the two skeletons differ.
    from lift import _capture

    def make(d: Any) -> Any:
        return lambda: d

    for _ in range(3):
        _capture.capture(make({"b": 1.0, "a": 2.0}))
    sorted_one = make({"a": 2.0, "b": 1.0})
    skeleton, leaves = _capture.capture(sorted_one)
    walked, walked_leaves = _capture._walk(sorted_one, frozenset(), None)
    assert skeleton == walked and leaves == walked_leaves
    assert list(lift.lift(sorted_one)()) == ["a", "b"]
