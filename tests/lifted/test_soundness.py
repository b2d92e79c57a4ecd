"""A `Lifted` computes what its function computes, whatever its history.

One table of every way a function can hold a value (`helpers.HOLDERS`) crossed
with every consumer of lift's description of a closure: calling it eagerly and
under `jit`, lifting a shape seen before again, rebuilding, key paths, `repr`,
`diff`, the leak scan and `lift.jit`. Then the cases that were found wrong, one
test each, written from what a user sees.
"""

from __future__ import annotations

import copy
import functools
import gc
import pickle
import re
import weakref
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import (
    HOLDERS,
    OPAQUE_HOLDERS,
    Holder,
    TraceCounter,
    assert_unchanged,
    call_lifted,
    snapshot,
)

import lift
from lift._rule import floats as _floats

_IDS = [h.name for h in HOLDERS]


def _treedef(x: Any) -> Any:
    return jax.tree_util.tree_structure(x)


def _skeleton(x: lift.Lifted[..., Any]) -> Any:
    return _treedef(x).node_data()[1]  # pyright: ignore[reportOptionalSubscript]


def _root(f: Any) -> Any:
    return f.func if isinstance(f, functools.partial) else getattr(f, "__func__", f)


# -- holder x consumer ----------------------------------------------------------------


@pytest.mark.parametrize("holder", HOLDERS, ids=_IDS)
def test_eager_and_jit_compute_what_the_function_does(holder: Holder) -> None:
    f = holder.make(3.0)
    lifted = lift.lift(f)
    assert lifted(2.0) == f(2.0) == 6.0
    counter = TraceCounter()
    jitted = counter.jit(call_lifted)
    for v in (3.0, 4.0, 5.0):
        assert jitted(lift.lift(holder.make(v)), 2.0) == 2.0 * v
    assert counter.traces == 1  # `v` is a leaf wherever it is held


@pytest.mark.parametrize("holder", HOLDERS, ids=_IDS)
def test_lifting_a_shape_again_gives_what_the_first_lift_gave(holder: Holder) -> None:
    walked = [lift.lift(holder.make(v)) for v in (1.0, 2.0)]
    again = lift.lift(holder.make(7.0))
    assert _treedef(again) == _treedef(walked[0])
    assert [float(x) for x in jax.tree_util.tree_leaves(again)] == [7.0]
    assert again(2.0) == 14.0


@pytest.mark.parametrize("holder", HOLDERS, ids=_IDS)
def test_rebuild_leaves_the_original_alone(holder: Holder) -> None:
    f = holder.make(3.0)
    root = _root(f)
    before = snapshot(root)
    plain = lift.unlift(jax.tree_util.tree_map(lambda a: a * 2, lift.lift(f)))
    assert plain(2.0) == 12.0
    assert f(2.0) == 6.0
    assert_unchanged(before, snapshot(root))


@pytest.mark.parametrize("holder", HOLDERS, ids=_IDS)
def test_key_path_names_the_holder(holder: Holder) -> None:
    ((path, leaf),) = jax.tree_util.tree_flatten_with_path(lift.lift(holder.make(3.0)))[
        0
    ]
    assert jax.tree_util.keystr(path) == holder.path
    assert float(leaf) == 3.0


@pytest.mark.parametrize("holder", HOLDERS, ids=_IDS)
def test_repr_shows_the_capture(holder: Holder) -> None:
    text = repr(lift.lift(holder.make(3.0)))
    assert "float32[]=3.0" in text
    if holder.variable is not None:
        assert f"{holder.variable}=" in text


@pytest.mark.parametrize("holder", HOLDERS, ids=_IDS)
def test_diff_sees_no_difference_in_a_dynamic_capture(holder: Holder) -> None:
    a, b = lift.lift(holder.make(1.0)), lift.lift(holder.make(2.0))
    assert lift.diff(a, b) is None
    assert _treedef(a) == _treedef(b)


# A `Lifted` inside a capture was lifted already: its statics were decided then.
_NAMED = [h for h in HOLDERS if h.variable is not None and h.name != "through a Lifted"]


@pytest.mark.parametrize("holder", _NAMED, ids=[h.name for h in _NAMED])
def test_static_by_name_applies_at_every_named_holder(holder: Holder) -> None:
    assert holder.variable is not None
    a = lift.lift(holder.make(1.0), static=(holder.variable,))
    b = lift.lift(holder.make(2.0), static=(holder.variable,))
    assert jax.tree_util.tree_leaves(a) == []
    # A dict declared static is the user's own object, compared whole.
    assert re.search(
        r"= (\{'v': )?1\.0(, 'add': 0\})? vs (\{'v': )?2\.0(, 'add': 0\})?, static "
        "because you declared it static",
        lift.diff(a, b) or "",
    )


@pytest.mark.parametrize("holder", HOLDERS, ids=_IDS)
def test_leak_scan_finds_a_tracer_in_the_holder(holder: Holder) -> None:
    kept: list[Any] = []

    def leak(x: Any) -> Any:
        kept.append(holder.make(x))
        return x

    with jax.check_tracer_leaks(False):
        jax.jit(leak)(1.0)
    (found,) = lift.find_leaks(kept)
    assert found.tracer.startswith("float32[] from jit(leak)")
    if holder.variable is not None and holder.name != "dict in insertion order":
        assert found.variable == holder.variable


@pytest.mark.parametrize("holder", HOLDERS, ids=_IDS)
def test_lift_jit_reads_the_capture_and_compiles_once(holder: Holder) -> None:
    # An object, not a list or a rebound int: a lifted function sees copies of
    # the containers it captured and rebinds its own cells.
    counter = TraceCounter()

    def body(x: Any) -> Any:
        counter.traces += 1
        return x

    outs = []
    for v in (2.0, 3.0):
        f = holder.make(v)
        outs.append(lift.jit(lambda x, f=f: f(body(x)))(1.5))
    assert outs == [3.0, 4.5]
    assert counter.traces == 1


def _escape(make: Callable[[Any], Callable[..., Any]]) -> Callable[..., Any]:
    """The closure `make` builds inside a `jit` from its traced argument, kept
    after the trace has exited (its tracer escaped)."""
    kept: list[Callable[..., Any]] = []

    def body(x: Any) -> Any:
        kept.append(make(x))
        return x

    with jax.check_tracer_leaks(False):
        jax.jit(body)(1.0)
    return kept[0]


@pytest.mark.lift_allow_leaks
@pytest.mark.parametrize(
    ("name", "make"), OPAQUE_HOLDERS, ids=[n for n, _ in OPAQUE_HOLDERS]
)
def test_a_tracer_in_an_opaque_object_is_refused_and_found(
    name: str, make: Callable[[Any], Any]
) -> None:
    def closure(x: Any) -> Callable[[Any], Any]:
        holder = make(x)
        return lambda y: y * holder.v

    # Inside the transform: kept, as the closure itself keeps it there.
    out = jax.jit(lambda x: lift.lift(closure(x))(2.0))(3.0)
    assert float(out) == 6.0
    f = _escape(closure)
    with pytest.raises(
        lift.LiftError,
        match=r"variable 'holder'.*holds a tracer at holder\.v, from a transform "
        r"that has exited",
    ):
        lift.lift(f)
    (found,) = lift.find_leaks(f)
    assert found.path.endswith(".captures['holder'].v")


# -- the cases that were found ----------------------------------------------------------


def test_function_attributes_are_captures() -> None:
    def make(s: float) -> Callable[[float], Any]:
        def f(x):
            return x * f.scale  # pyright: ignore[reportFunctionMemberAccess]

        f.scale = s  # pyright: ignore[reportFunctionMemberAccess]
        return f

    assert lift.lift(make(2.0))(1.0) == 2.0
    assert lift.lift(make(3.0))(1.0) == 3.0  # not the first closure's value
    assert jax.jit(call_lifted)(lift.lift(make(5.0)), 1.0) == 5.0
    # A non-float attribute is static, and part of equality.
    assert lift.diff(lift.lift(make(2.0)), lift.lift(make(3.0))) is None
    a, b = make(2.0), make(2.0)
    a.tag, b.tag = "a", "b"  # pyright: ignore[reportFunctionMemberAccess]
    assert ".__dict__['tag']: tag = 'a' vs 'b', static because it is a str" in (
        lift.diff(lift.lift(a), lift.lift(b)) or ""
    )


def _decorate(fn: Any) -> Any:
    @functools.wraps(fn)
    def wrapper(x: Any) -> Any:
        return fn(x)

    return wrapper


def test_a_tracer_under_wraps_is_a_leaf_not_kept() -> None:
    @jax.jit
    def make(w: Any) -> Any:
        def inner(x: Any) -> Any:
            return x * w

        lifted = lift.lift(_decorate(inner))
        assert len(jax.tree_util.tree_leaves(lifted)) == 1  # `w`, through __wrapped__
        return lifted

    out = make(jnp.ones(3))
    assert jnp.array_equal(out(2.0), jnp.full(3, 2.0))
    assert lift.find_leaks(out) == []


def test_the_skeleton_cache_keeps_no_array_of_the_function_alive() -> None:
    def make(w: Any) -> Any:
        def inner(x: Any) -> Any:
            return x * w

        return _decorate(inner)

    w = jnp.ones(3)
    ref = weakref.ref(w)
    for _ in range(3):  # and lifted again
        lifted = lift.lift(make(w))
        assert lifted(2.0).tolist() == [2.0, 2.0, 2.0]
    del w, lifted
    gc.collect()
    assert ref() is None


def test_a_dict_keeps_its_order() -> None:
    def make(scale: float, add: float) -> Callable[[float], Any]:
        model = {"scale": scale, "add": add}

        def f(x):
            for name, value in model.items():
                x = x * value if name == "scale" else x + value
            return x

        return f

    f = make(3.0, 4.0)
    assert f(1.0) == 7.0
    assert lift.lift(f)(1.0) == 7.0
    assert jax.jit(call_lifted)(lift.lift(f), 1.0) == 7.0
    assert lift.jit(f)(1.0) == 7.0
    # Two insertion orders behave differently, so they are different programs.
    g = lift.lift(lambda: list({"b": 1.0, "a": 2.0}))
    h = lift.lift(lambda: list({"a": 2.0, "b": 1.0}))
    assert g() == ["b", "a"] and h() == ["a", "b"]


def test_a_nested_dict_keeps_its_order_through_jit_and_unlift() -> None:
    cfg = {"z": [1.0, {"y": 2.0, "x": 3.0}], "a": 4.0}
    f = lift.lift(lambda: cfg)
    assert list(f()) == ["z", "a"] and list(f()["z"][1]) == ["y", "x"]
    assert list(lift.unlift(f)()["z"][1]) == ["y", "x"]
    inner = lift.lift(lambda: jnp.stack(list(cfg["z"][1].values())))
    assert jax.jit(call_lifted)(inner).tolist() == [2.0, 3.0]


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (0.0, -0.0),
        (1, 1.0),
        (1, True),
        (frozenset({1}), frozenset({1.0})),
        (range(0), range(1, 1)),
        ((0.0,), (-0.0,)),
        (np.float32(0.0), np.float32(-0.0)),
    ],
    ids=[
        "signed zero",
        "int float",
        "int bool",
        "frozenset",
        "range",
        "nested",
        "numpy",
    ],
)
def test_statics_compare_by_type_and_value(a: Any, b: Any) -> None:
    def make(v: Any) -> Callable[[], Any]:
        return lambda: v

    fa = lift.lift(make(a), static=("v",))
    fb = lift.lift(make(b), static=("v",))
    assert _treedef(fa) != _treedef(fb)
    assert lift.diff(fa, fb) is not None


def test_a_closure_over_minus_zero_is_not_served_plus_zeros_program() -> None:
    def make(z: float) -> Callable[[Any], Any]:
        return lambda x: x / z

    one = jnp.float32(1.0)
    assert jax.jit(call_lifted)(lift.lift(make(0.0), static="z"), one) == jnp.inf
    assert jax.jit(call_lifted)(lift.lift(make(-0.0), static="z"), one) == -jnp.inf


def test_dict_keys_compare_by_type() -> None:
    def make(d: dict[Any, float]) -> Callable[[], Any]:
        return lambda: jnp.asarray([isinstance(k, float) for k in d])

    a, b = lift.lift(make({1: 2.0})), lift.lift(make({1.0: 2.0}))
    assert _treedef(a) != _treedef(b)
    assert jax.jit(call_lifted)(a).tolist() == [False]
    assert jax.jit(call_lifted)(b).tolist() == [True]


def test_defaults_after_positional_only_parameters_are_named_right() -> None:
    def make(b: float, c: float) -> Callable[..., Any]:
        def g(a, /, b=b, *, c=c):
            return a * b + c

        return g

    paths = {
        jax.tree_util.keystr(p)
        for p, _ in jax.tree_util.tree_flatten_with_path(lift.lift(make(0.5, 2.0)))[0]
    }
    assert paths == {".captures['b']", ".captures['c']"}
    kept = lift.lift(make(0.5, 2.0), static=("b",))
    assert [float(x) for x in jax.tree_util.tree_leaves(kept)] == [2.0]


def test_float_leaves_do_not_depend_on_history() -> None:
    def make(lr: float) -> Callable[[Any], Any]:
        return lambda x: x * lr

    jax.jit(lambda x: lift.lift(make(x)))(1.0)  # lifted inside a trace first
    jax.vmap(lambda x: lift.lift(make(x))(x))(jnp.ones(2))
    for _ in range(3):
        (leaf,) = jax.tree_util.tree_leaves(lift.lift(make(0.1)))
        assert isinstance(leaf, jax.Array) and leaf.weak_type


def test_eqx_filter_jit_compiles_once_per_structure() -> None:
    eqx = pytest.importorskip("equinox")
    traces = 0

    @eqx.filter_jit
    def step(opt: Any, x: Any) -> Any:
        nonlocal traces
        traces += 1
        return opt(x)

    for lr in (0.1, 0.2, 0.3):
        step(lift.lift(lambda x, lr=lr: x * lr), jnp.ones(2))
    assert traces == 1


def test_a_float_put_in_a_leafs_place_is_a_leaf_like_a_captured_one() -> None:
    eqx = pytest.importorskip("equinox")
    base = lift.lift(lambda x, lr=0.1: x * lr)
    counter = TraceCounter()
    call = counter.jit(call_lifted)
    swept = [eqx.tree_at(lambda f: f.captures["lr"], base, lr) for lr in (0.2, 0.3)]
    swept.append(jax.tree_util.tree_map(lambda _: 0.4, base))
    swept.append(jax.tree_util.tree_map(lambda _: 0.5 + 0j, base))
    for f in swept:
        (leaf,) = jax.tree_util.tree_leaves(f)
        assert isinstance(leaf, jax.Array) and leaf.weak_type
        assert jnp.allclose(f(1.0), leaf)  # called eagerly: the same value
    for f in swept[:3]:
        call(f, jnp.ones(2))
    assert counter.traces == 1
    with jax.enable_x64(True):
        (leaf,) = jax.tree_util.tree_leaves(
            eqx.tree_at(lambda f: f.captures["lr"], base, 0.2)
        )
        assert leaf.dtype == jnp.float64
    # Two made from one float own their buffers: donating one keeps the other.
    a, b = (eqx.tree_at(lambda f: f.captures["lr"], base, 0.25) for _ in range(2))
    jax.jit(call_lifted, donate_argnums=0)(a, 1.0)
    assert b(1.0) == 0.25


def test_trees_of_a_lifteds_structure_keep_their_other_leaves() -> None:
    eqx = pytest.importorskip("equinox")
    f = lift.lift(lambda x, a=jnp.ones(3), b=2.0: x * a + b)
    # `in_axes` given as a tree of the function's structure: ints and None.
    axes = jax.tree_util.tree_map(lambda _: 0, f)
    axes = eqx.tree_at(
        lambda g: g.captures["b"], axes, None, is_leaf=lambda x: x is None
    )
    assert jax.tree_util.tree_leaves(axes, is_leaf=lambda x: x is None) == [0, None]
    batched = jax.tree_util.tree_map(lambda x: jnp.stack([x, x]), f)
    batched = eqx.tree_at(lambda g: g.captures["b"], batched, jnp.asarray(2.0))
    out = jax.vmap(call_lifted, in_axes=(axes, None))(batched, 1.0)
    assert out.shape == (2, 3)
    # equinox's masks are booleans; an int in a float's place stays an int.
    mask = jax.tree_util.tree_map(eqx.is_inexact_array, f)
    assert jax.tree_util.tree_leaves(mask) == [True, True]
    assert jax.tree_util.tree_leaves(jax.tree_util.tree_map(lambda _: 3, f)) == [3, 3]
    sentinel = object()
    marked = jax.tree_util.tree_map(lambda _: sentinel, f)
    assert jax.tree_util.tree_leaves(marked) == [sentinel, sentinel]


def test_weak_typing_keeps_a_bf16_model_bf16() -> None:
    scale = lift.lift(lambda x, s=0.5: x * s)
    x = jnp.ones(3, jnp.bfloat16)
    assert scale(x).dtype == jnp.bfloat16
    assert jax.jit(call_lifted)(scale, x).dtype == jnp.bfloat16


def test_x64_is_respected() -> None:
    with jax.enable_x64(True):
        (leaf,) = jax.tree_util.tree_leaves(lift.lift(lambda x, lr=0.1: x * lr))
        assert leaf.dtype == jnp.float64
    (leaf,) = jax.tree_util.tree_leaves(lift.lift(lambda x, lr=0.1: x * lr))
    assert leaf.dtype == jnp.float32


def test_donating_one_lifted_never_touches_another() -> None:
    @functools.partial(jax.jit, donate_argnums=0)
    def step(state: Any, g: Any) -> Any:
        opt, opt_state = state
        updates, opt_state = opt.update(g, opt_state)
        return opt, opt_state, updates

    params = jnp.ones(3)
    first = lift.lift(optax.adam(0.1))
    step((first, first.init(params)), params)
    # The rates, b1, b2 and eps of a new optimizer are its own buffers.
    second = lift.lift(optax.adam(0.1))
    _, _, updates = step((second, second.init(params)), params)
    assert updates.shape == (3,)


def test_a_lifted_with_two_equal_floats_can_be_donated() -> None:
    f = lift.lift(lambda x, a=0.5, b=0.5: x * a * b)
    g, out = jax.jit(lambda f, x: (f, f(x)), donate_argnums=0)(f, jnp.ones(2))
    assert jnp.allclose(out, 0.25) and g(1.0) == 0.25


def _counting_conversions(monkeypatch: Any) -> list[int]:
    """How many floats each conversion of Python scalars took, in order."""

    calls: list[int] = []
    convert = _floats._to_arrays  # pyright: ignore[reportPrivateUsage]

    def counting(values: list[Any]) -> list[Any]:
        calls.append(len(values))
        return convert(values)

    monkeypatch.setattr(_floats, "_to_arrays", counting)
    return calls


@pytest.mark.parametrize("first", ["flatten", "call init", "call update"])
def test_each_function_of_one_optimizer_converts_its_own_floats_at_its_first_use(
    first: str, monkeypatch: Any
) -> None:
    calls = _counting_conversions(monkeypatch)
    opt = lift.lift(optax.adamw(0.1, weight_decay=0.01))
    params = jnp.ones(3)
    alone = lift.lift(optax.adamw(0.1, weight_decay=0.01).update)
    calls.clear()
    if first == "flatten":
        jax.tree_util.tree_leaves(opt)
        used = [opt.init, opt.update]
    elif first == "call init":
        opt.init(params)
        used = [opt.init]
    else:
        opt.update(params, optax.adamw(0.1).init(params), params)
        used = [opt.update]
    # One conversion for each function used, of all its floats; none for the other.
    made = list(calls)
    sizes = [len(jax.tree_util.tree_leaves(f)) for f in used]
    assert made == [n for n in sizes if n]
    floats = jax.tree_util.tree_leaves(opt)
    # The same leaves as the update function lifted alone, in buffers of its own.
    update_leaves = jax.tree_util.tree_leaves(opt.update)
    assert [_leaf_bits(x) for x in update_leaves] == [
        _leaf_bits(x) for x in jax.tree_util.tree_leaves(alone)
    ]
    pointers = {x.unsafe_buffer_pointer() for x in floats}
    assert len(pointers) == len(floats)
    # Donating the update function's buffers leaves the init function's alone.
    assert jax.tree_util.tree_leaves(opt.init)  # weight_decay: a float of init's
    jax.jit(lambda u: u, donate_argnums=0)(opt.update)
    assert all(x.is_deleted() for x in update_leaves)
    assert not any(x.is_deleted() for x in jax.tree_util.tree_leaves(opt.init))
    state = opt.init(params)
    assert all(jnp.all(x == 0) for x in jax.tree_util.tree_leaves(state)[1:])


class Box:
    """Not a pytree: a tracer in it is hidden from lift and from JAX."""

    def __init__(self, v: Any) -> None:
        self.v = v


def test_a_live_hidden_tracer_stays_unflattenable_beside_a_sibling() -> None:
    def inside(x: Any) -> Any:
        box = Box(x)
        pair = lift.lift((lambda y: y * box.v, lambda y, lr=0.5: y * lr))
        jax.tree_util.tree_leaves(pair[1])  # converts the group's floats
        doubled = pair[0](2.0)  # the live one is still called
        with pytest.raises(lift.LiftError, match=r"from a transform still running"):
            jax.tree_util.tree_leaves(pair[0])
        return doubled, pair[1](x)

    doubled, halved = jax.jit(inside)(3.0)
    assert float(doubled) == 6.0 and float(halved) == 1.5


def _leaf_bits(x: Any) -> tuple[Any, ...]:
    return (type(x), x.dtype, x.weak_type, np.asarray(x).tobytes())


def test_a_function_of_an_optimizer_converts_after_the_others_are_gone(
    monkeypatch: Any,
) -> None:
    calls = _counting_conversions(monkeypatch)
    opt = lift.lift(optax.adamw(0.1, weight_decay=0.01))
    update = opt.update
    del opt
    gc.collect()
    calls.clear()
    leaves = jax.tree_util.tree_leaves(update)
    assert calls == [len(leaves)]
    # A copy converts its own, and the optimizer's functions each theirs.
    twin = lift.lift(optax.adamw(0.1, weight_decay=0.01))
    copied = copy.copy(twin.update)
    calls.clear()
    jax.tree_util.tree_leaves(copied)
    jax.tree_util.tree_leaves(twin)
    sizes = [len(jax.tree_util.tree_leaves(f)) for f in (twin.init, twin.update)]
    assert calls == [len(leaves), *(n for n in sizes if n)]


def test_calling_before_and_after_a_flatten_is_bit_identical() -> None:
    opt = optax.adam(0.1)
    lifted = lift.lift(opt)
    params = {"w": jnp.linspace(-1.0, 1.0, 5)}
    g = jax.tree_util.tree_map(lambda p: p * 0.3, params)
    before = lifted.update(g, lifted.init(params))[0]
    again = jax.tree_util.tree_map(lambda a: a, lifted)
    after = again.update(g, again.init(params))[0]
    assert jnp.array_equal(before["w"], after["w"])
    nested = lift.lift(lambda g, s: lifted.update(g, s))
    inner = nested(g, lifted.init(params))[0]
    assert jnp.array_equal(before["w"], inner["w"])


def test_a_lifted_holding_a_live_hidden_tracer_is_called_but_not_flattened() -> None:
    def make(x: Any) -> Any:
        box = Box(x)
        return lift.lift(lambda y: y * box.v)

    said = (
        r"captures variable 'box', a Box that is not a pytree and holds a tracer "
        r"at box\.v, from a transform still running(?s:.*)lift\.closure_convert"
    )
    assert float(jax.jit(lambda x: make(x)(2.0))(3.0)) == 6.0  # called there
    for crossing in (
        lambda x: make(x),  # returned
        lambda x: jax.jit(call_lifted)(make(x), 2.0),  # given to a transform
        lambda x: jax.tree_util.tree_leaves(make(x)),
    ):
        with pytest.raises(lift.LiftError, match=said):
            jax.jit(crossing)(3.0)
    # The way across: the tracer as a leaf.
    converted = jax.jit(lambda x: lift.closure_convert(make(x), 1.0))(3.0)
    assert float(converted(2.0)) == 6.0


@pytest.mark.lift_allow_leaks
def test_a_tracer_hidden_in_an_object_is_refused_when_the_shape_was_lifted_before() -> (
    None
):
    class Holder:  # not a pytree
        def __init__(self, v: Any) -> None:
            self.v = v

    box = Holder(1.0)

    def make() -> Callable[[Any], Any]:
        return lambda x: x * box.v

    for _ in range(3):
        lift.lift(make())

    @jax.jit
    def inside(x: Any) -> Any:
        box.v = x
        try:
            return lift.lift(make())(2.0)  # a live tracer: kept
        finally:
            box.v = 1.0

    assert float(inside(3.0)) == 6.0

    def sneak(x: Any) -> Any:
        box.v = x
        return x

    with jax.check_tracer_leaks(False):
        jax.jit(sneak)(2.0)
    with pytest.raises(lift.LiftError, match=r"holds a tracer at box\.v"):
        lift.lift(make())
    box.v = 1.0


def test_a_tracer_hidden_in_an_object_inside_a_container_is_named_by_its_position() -> (
    None
):
    class Box:
        def __init__(self, v: Any) -> None:
            self.v = v

    def make(boxes: Any) -> Any:
        return lambda x: x * boxes["b"][1].v

    # Exited: refused, the path going through the dict and the list.
    with pytest.raises(
        lift.LiftError,
        match=r"variable 'boxes', a list holding an object that is not a pytree and "
        r"holds a tracer at "
        r"boxes\['b'\]\[1\]\.v, from a transform that has exited",
    ):
        lift.lift(make({"b": [Box(1.0), Box(_escaped_tracer())]}))

    # Still running: kept, and the refusal to flatten names the same path.
    @jax.jit
    def inside(x: Any) -> Any:
        f = lift.lift(make({"b": [Box(1.0), Box(x)]}))
        with pytest.raises(
            lift.LiftError, match=r"tracer at boxes\['b'\]\[1\]\.v, from"
        ):
            jax.tree_util.tree_leaves(f)
        return f(2.0)

    assert float(inside(3.0)) == 6.0


def _escaped_tracer() -> Any:
    kept: list[Any] = []
    with jax.check_tracer_leaks(False):
        jax.jit(lambda x: kept.append(x) or x)(1.0)
    return kept[0]


def _classes() -> tuple[type, type, type]:
    import abc

    class Base:
        pass

    class Registry(Base):
        names = ("a",)

        def method(self) -> None:
            pass

    class Abstract(abc.ABC):  # noqa: B024  (a metaclass of its own)
        pass

    return Base, Registry, Abstract


def _changes(escaped: Any) -> list[Callable[[type, type, type], type]]:
    """Each puts `escaped` in a class's data and returns the class captured."""

    def put(cls: type, name: str, value: Any) -> None:
        setattr(cls, name, value)

    return [
        lambda b, r, a: put(r, "names", escaped) or r,  # data of the same name
        lambda b, r, a: put(r, "method", escaped) or r,  # a method replaced
        lambda b, r, a: put(b, "extra", [escaped]) or r,  # a base gains data
        lambda b, r, a: put(a, "kept", escaped) or a,  # with a metaclass
    ]


@pytest.mark.lift_allow_leaks
@pytest.mark.parametrize("change", range(4))
@pytest.mark.parametrize("where", ["cell", "list", "static="])
def test_a_class_holding_an_escaped_tracer_is_refused_wherever_it_is_captured(
    change: int, where: str
) -> None:
    def over(v: Any) -> Callable[[], Any]:
        return lambda: v

    def through_list(v: Any) -> Callable[[], Any]:
        return lambda: [v]

    make = {
        "cell": lambda c: lift.lift(over(c)),
        "list": lambda c: lift.lift(through_list(c)),
        "static=": lambda c: lift.lift(over(c), static=("v",)),
    }[where]
    base, registry, abstract = _classes()
    for _ in range(3):  # clean: lifted, its skeleton kept
        make(registry)
        make(abstract)
    captured = _changes(_escaped_tracer())[change](base, registry, abstract)
    with pytest.raises(lift.LiftError, match="holds a tracer"):
        make(captured)
    assert lift.find_leaks(over(captured))


def test_branch_analysis_of_a_shared_cell_is_the_union() -> None:
    def make(b2: float) -> tuple[Callable[..., Any], Callable[..., Any]]:
        def reads(x):
            return x * b2

        def branches(x):
            return x * (1.0 - b2) if b2 != 1.0 else x

        return reads, branches

    for order in (0, 1):
        reads, branches = make(0.5)
        pair = (reads, branches) if order == 0 else (branches, reads)
        lifted = lift.lift(lambda x: pair[0](x) + pair[1](x))
        assert jax.jit(call_lifted)(lifted, 2.0) == 2.0


def test_branch_in_a_nested_function_keeps_a_numpy_mask_static() -> None:
    freeze = optax.freeze(np.array(False))
    lifted = lift.lift(freeze)
    params = {"w": jnp.ones(2)}
    state = jax.jit(lambda t, p: t.init(p))(lifted, params)
    updates, _ = jax.jit(lambda t, g, s: t.update(g, s))(lifted, params, state)
    assert jnp.array_equal(updates["w"], jnp.ones(2))


def test_a_control_flow_error_names_the_function_that_branched() -> None:
    w = jnp.asarray(0.5)

    def reads(x):
        return x * w

    def branches(x):
        return x if w > 0 else -x

    lifted = lift.lift(lambda x: reads(x) + branches(x))
    with pytest.raises(
        lift.LiftError,
        match=r"branches \(.*\) uses the captured variable 'w' in Python control flow",
    ):
        jax.jit(call_lifted)(lifted, 1.0)


def test_a_float_used_as_a_shape_is_not_called_control_flow() -> None:
    n = jnp.asarray(3)
    lifted = lift.lift(lambda: jnp.zeros(int(n)))
    with pytest.raises(
        lift.LiftError,
        match=r"uses the captured variable 'n' (as a Python int|where a concrete value "
        r"is needed \(a shape)",
    ) as caught:
        jax.jit(call_lifted)(lifted)
    assert "control flow" not in str(caught.value)


def test_partial_of_a_lifted_function_without_a_closure() -> None:
    def f(a, x):
        return a * x

    p = lift.lift(functools.partial(lift.lift(f), 2.0))
    assert p(3.0) == 6.0


def test_copy_deepcopy_and_pickle() -> None:
    lifted = lift.lift(optax.adam(0.1))
    params = jnp.ones(2)
    for other in (copy.copy(lifted), copy.deepcopy(lifted)):
        assert _treedef(other) == _treedef(lifted)
        assert jnp.array_equal(
            other.init(params).__class__
            and other.update(params, other.init(params))[0],
            lifted.update(params, lifted.init(params))[0],
        )
    module_level = lift.lift(functools.partial(_scale, 2.0))
    again = pickle.loads(pickle.dumps(module_level))
    assert again(3.0) == 6.0 and _treedef(again) == _treedef(module_level)


def _scale(a: Any, x: Any) -> Any:
    return a * x


def test_non_numeric_numpy_captures_are_static() -> None:
    names = np.array(["ab", "c"])
    objects = np.array([object()], dtype=object)
    lifted = lift.lift(lambda: jnp.asarray(len(names[0]) + objects.shape[0]))
    assert jax.tree_util.tree_leaves(lifted) == []
    assert jax.jit(call_lifted)(lifted) == 3


def test_unknown_static_names_are_a_lifterror() -> None:
    with pytest.raises(
        lift.LiftError,
        match=r"no captured variable is called 'limt' \(did you mean 'limit'\?\)",
    ):
        lift.lift(lambda x, limit=1.0: x + limit, static=("limt",))


# -- lift.jit follows the same description ------------------------------------------


def test_a_nested_lift_jit_helper_sees_its_rebound_capture() -> None:
    def make() -> tuple[Any, Callable[[float], None]]:
        lr = 0.1

        @lift.jit
        def helper(x: Any) -> Any:
            return x * lr

        @lift.jit
        def step(x: Any) -> Any:
            return helper(x) + 1.0

        def set_lr(value: float) -> None:
            nonlocal lr
            lr = value

        return step, set_lr

    step, set_lr = make()
    assert step(1.0) == 1.1
    set_lr(0.5)
    assert step(1.0) == 1.5  # not the value traced first


def test_a_lift_jit_closure_may_call_itself() -> None:
    def make(scale: float) -> Any:
        @lift.jit(static_argnums=1)
        def power(x: Any, n: int) -> Any:
            return x if n == 0 else scale * power(x, n - 1)

        return power

    assert make(2.0)(1.0, 3) == 8.0
    assert make(3.0)(1.0, 2) == 9.0


def test_wraps_wrappers_resolve_options_against_their_own_signature() -> None:
    def decorate(fn: Any) -> Any:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs)

        return wrapper

    def first(a: Any, b: Any) -> Any:
        return a + b

    def second(b: Any, a: Any) -> Any:
        return a + b

    for fn, donated in ((first, 0), (second, 1)):
        args = (jnp.ones(3), jnp.full(3, 2.0))
        lift.jit(decorate(fn), donate_argnames=("a",))(*args)
        assert [a.is_deleted() for a in args] == [i == donated for i in range(2)]


# -- found by trying to break it ------------------------------------------------------


def _module_level_scaled(x: Any) -> Any:
    return x * _module_level_scaled.scale  # pyright: ignore[reportFunctionMemberAccess]


def test_a_module_level_function_reading_its_own_attribute() -> None:
    f = _module_level_scaled
    try:
        f.scale = 2.0  # pyright: ignore[reportFunctionMemberAccess]
        assert jax.jit(call_lifted)(lift.lift(f), 1.0) == 2.0
        f.scale = 3.0  # pyright: ignore[reportFunctionMemberAccess]
        # Read through the module global, not the rebuilt function: static.
        assert jax.jit(call_lifted)(lift.lift(f), 1.0) == 3.0
        jitted = lift.jit(f)
        assert jitted(1.0) == 3.0
        f.scale = 4.0  # pyright: ignore[reportFunctionMemberAccess]
        assert jitted(1.0) == 4.0
    finally:
        del f.scale  # pyright: ignore[reportFunctionMemberAccess]


@pytest.mark.parametrize("kind", ["OrderedDict", "defaultdict"])
def test_dict_subclasses_keep_order_and_key_types(kind: str) -> None:
    import collections

    def make(*items: tuple[Any, float]) -> Callable[[float], Any]:
        d: Any = (
            collections.OrderedDict(items)
            if kind == "OrderedDict"
            else collections.defaultdict(float, items)
        )

        def f(x):
            for k, v in d.items():
                x = x * v if k in ("scale", True) else x + v + len(str(k))
            return x

        return f

    assert lift.lift(make(("scale", 3.0), ("add", 1.0)))(1.0) == 7.0
    lift.lift(make((1, 1.0)))
    assert lift.lift(make((True, 1.0)))(0.0) == make((True, 1.0))(0.0)
    a, b = lift.lift(make((0.0, 1.0))), lift.lift(make((-0.0, 1.0)))
    assert _treedef(a) != _treedef(b)


def test_statics_equal_by_their_own_eq_are_not_swapped() -> None:
    import dataclasses
    import decimal

    @dataclasses.dataclass(frozen=True)
    class Cfg:
        sign: float

    def make(cfg: Cfg) -> Callable[[Any], Any]:
        return lambda x: x * jnp.copysign(1.0, cfg.sign)

    for _ in range(3):
        lift.lift(make(Cfg(0.0)))
    assert lift.lift(make(Cfg(-0.0)))(1.0) == -1.0

    def text(d: decimal.Decimal) -> Callable[[Any], Any]:
        return lambda x: x + len(str(d))

    lift.lift(text(decimal.Decimal("1.0")))
    assert lift.lift(text(decimal.Decimal("1.00")))(0.0) == 4.0


def test_numpy_leaves_are_classified_alike_when_the_shape_was_lifted_before() -> None:
    def make(m: Any) -> Callable[[Any], Any]:
        def f(x):
            if m:
                return x + 1.0
            return x - 1.0

        return f

    for _ in range(3):
        lift.lift(make(np.array([1.0], np.float32)))
    zero_d = lift.lift(make(np.array(1.0, np.float32)))
    assert jax.tree_util.tree_leaves(zero_d) == []  # static, as the walk decides
    assert jax.jit(call_lifted)(zero_d, 1.0) == 2.0


@pytest.mark.lift_allow_leaks
def test_tracers_in_static_pytree_data_or_opaque_objects_are_refused() -> None:
    class Box:
        pass

    def partial(s: Any) -> Callable[[Any], Any]:
        p = jax.tree_util.Partial(lambda x: x * s)
        return lambda x: p(x)

    def attribute(s: Any) -> Callable[[Any], Any]:
        b = Box()
        b.fn = lambda x: x * s  # pyright: ignore[reportAttributeAccessIssue]
        return lambda x: b.fn(x)  # pyright: ignore[reportAttributeAccessIssue]

    def argument(s: Any) -> Callable[[Any], Any]:
        c = Box()
        c.p = functools.partial(lambda a, x: a * x, s)  # pyright: ignore[reportAttributeAccessIssue]
        return lambda x: c.p(x)  # pyright: ignore[reportAttributeAccessIssue]

    def helper(s: Any) -> Callable[[Any], Any]:
        def helper(x: Any) -> Any:
            return x * s

        return lambda x: helper(x)

    cases = [
        (partial, r"static data holds a tracer"),
        (attribute, r"holds a tracer at b\.fn\.captures\['s'\]"),
        (argument, r"holds a tracer at c\.p\.args\[0\]"),
    ]
    for make, said in cases:
        # Inside the transform, called there: kept and computed.
        assert float(jax.jit(lambda s, make=make: lift.lift(make(s))(3.0))(2.0)) == 6.0
        escaped = _escape(make)
        with pytest.raises(lift.LiftError, match=said):
            lift.lift(escaped)
    # A function made static by name, holding a tracer: the same.
    inside = jax.jit(lambda s: lift.lift(helper(s), static=("helper",))(3.0))
    assert float(inside(2.0)) == 6.0
    with pytest.raises(lift.LiftError, match=r"tracer"):
        lift.lift(_escape(helper), static=("helper",))


@pytest.mark.lift_allow_leaks
def test_slots_given_as_an_iterator_are_read() -> None:
    class Slots:
        __slots__ = iter(["a"])

        def __init__(self, a: Any) -> None:
            self.a = a

    def make(s: Any) -> Callable[[Any], Any]:
        holder = Slots(s)
        return lambda x: x * holder.a

    with pytest.raises(lift.LiftError, match=r"holds a tracer at holder\.a"):
        lift.lift(_escape(make))


def test_lift_jit_sees_rebound_attributes_and_defaults() -> None:
    def make() -> Any:
        def g(x):
            return x * g.scale  # pyright: ignore[reportFunctionMemberAccess]

        g.scale = 2.0  # pyright: ignore[reportFunctionMemberAccess]
        return g

    g = make()
    jg = lift.jit(g)
    assert jg(1.0) == 2.0
    g.scale = 3.0  # pyright: ignore[reportFunctionMemberAccess]
    assert jg(1.0) == 3.0

    def h(x, s=2.0):
        return x * s

    jh = lift.jit(h)
    assert jh(1.0) == 2.0
    h.__defaults__ = (5.0,)
    assert jh(1.0) == 5.0

    # An attribute set after the first calls, on a function that had none.
    def make_plain() -> Any:
        def p(x):
            return x * getattr(p, "scale", 1.0)

        return p

    p = make_plain()
    jp = lift.jit(p)
    assert jp(1.0) == jp(1.0) == 1.0
    p.scale = 4.0  # pyright: ignore[reportFunctionMemberAccess]
    assert jp(1.0) == 4.0

    def k(x, *, s=2.0):
        return x * s

    jk = lift.jit(k)
    assert jk(1.0) == jk(1.0) == 2.0
    k.__kwdefaults__ = {"s": 6.0}
    assert jk(1.0) == 6.0


def test_a_cycle_through_a_registered_node_is_a_lifterror() -> None:
    import dataclasses

    @jax.tree_util.register_dataclass
    @dataclasses.dataclass
    class Node:
        child: Any
        w: float

    box: list[Any] = []
    node = Node(box, 1.0)
    box.append(node)
    with pytest.raises(lift.LiftError, match=r"contains itself"):
        lift.lift(lambda x: x * node.w)
    assert lift.lift(lambda x: x)(1.0) == 1.0  # the interpreter is intact


def test_dict_keys_jax_cannot_sort_are_a_lifterror_or_static() -> None:
    cfg = {"lr": 0.1, 0: 2.0}
    with pytest.raises(lift.LiftError, match=r"JAX's pytree flattening refuses"):
        lift.lift(lambda x, cfg=cfg: x * cfg[0])
    assert lift.lift(lambda x, cfg=cfg: x * cfg[0], static="cfg")(1.0) == 2.0


def test_a_partials_attributes_are_kept() -> None:
    def g(a, x):
        return a * x

    p = functools.update_wrapper(functools.partial(g, 2.0), g)
    p.scale = 3.0  # pyright: ignore[reportAttributeAccessIssue]
    f = lambda x: p(x) * p.scale  # pyright: ignore[reportAttributeAccessIssue]
    assert lift.lift(f)(1.0) == f(1.0) == 6.0


def test_pickle_keeps_options_and_survives_a_transform() -> None:
    lifted = lift.lift(functools.partial(_scale, 2.0), static=())
    doubled = jax.tree_util.tree_map(lambda a: a * 2, lifted)
    again = pickle.loads(pickle.dumps(doubled))
    assert again(3.0) == 12.0


def _scale_by_default(x: Any, a: float = 2.0) -> Any:
    return a * x


def test_pickle_of_a_transformed_module_level_function_and_of_a_closure() -> None:
    doubled = jax.tree_util.tree_map(lambda a: a * 2, lift.lift(_scale_by_default))
    assert pickle.loads(pickle.dumps(doubled))(3.0) == 12.0

    def make(a: float) -> Any:
        return lambda x: a * x

    rebuilt = jax.tree_util.tree_map(lambda a: a * 2, lift.lift(make(2.0)))
    with pytest.raises(
        lift.LiftError,
        match=r"^pickle needs the function test_pickle_.*\.make\.<locals>\.<lambda> \(.*"
        r"test_soundness\.py:\d+\) importable by name, and this `Lifted` was "
        r"rebuilt from leaves",
    ):
        pickle.dumps(rebuilt)


def test_a_traced_argument_is_not_blamed_on_a_capture() -> None:
    def make(s: float) -> Callable[..., Any]:
        def f(x, n):
            y = x * s
            if n > 0:
                return y
            return x

        return f

    with pytest.raises(jax.errors.TracerBoolConversionError):
        jax.jit(lambda g, x, n: g(x, n))(lift.lift(make(2.0)), 1.0, 1)


def test_a_branch_on_an_attribute_or_dict_value_names_the_capture() -> None:
    def make(b2: Any) -> Callable[[Any], Any]:
        cfg = {"b2": b2}

        def f(x):
            return x if cfg["b2"] != 1.0 else -x

        return f

    with pytest.raises(
        lift.LiftError, match=r"captured variable 'cfg' in Python control flow"
    ):
        jax.jit(call_lifted)(lift.lift(make(jnp.asarray(0.5))), 1.0)


def test_a_lifted_pytree_keeps_its_dict_order() -> None:
    f = lambda x: x
    assert list(lift.lift({"b": f, "a": f})) == ["b", "a"]


@pytest.mark.lift_allow_leaks
def test_a_tracer_in_a_suspended_generator_is_refused() -> None:
    def produce(x: Any) -> Any:
        kept = x  # noqa: F841  (held by the suspended frame)
        yield 1
        yield 2

    def make(s: Any) -> Callable[[Any], Any]:
        running = produce(s)
        next(running)
        return lambda x: (running, x)

    assert jax.jit(lambda s: lift.lift(make(s))(2.0)[1])(1.0) == 2.0
    with pytest.raises(lift.LiftError, match=r"holds a tracer at running\.<locals>\.x"):
        lift.lift(_escape(make))


# -- a subclass whose own `__init__` takes other arguments ---------------------------


class _FnOnly(lift.Lifted):
    """A library's subclass with an `__init__` of its own that takes `fn` alone."""

    def __init__(self, fn: Any) -> None:
        super().__init__(fn)


class _WithNote(lift.Lifted):
    """One whose `__init__` needs more than `fn`."""

    def __init__(self, fn: Any, note: str) -> None:
        super().__init__(fn)


def _scaled(x: Any, a: Any = 2.0) -> Any:
    return a * x


_REMADE: dict[str, Callable[[Any], Any]] = {
    "pickle": lambda f: pickle.loads(pickle.dumps(f)),
    "copy": copy.copy,
    "deepcopy": copy.deepcopy,
    "lift static=": lambda f: lift.lift(f, static="a"),
    "lift dynamic=": lambda f: lift.lift(f, dynamic=lambda v: isinstance(v, float)),
    "tree_map": lambda f: jax.tree.map(lambda v: v, f),
    "jax.jit": lambda f: jax.jit(lambda f: f)(f),
    "closure_convert": lambda f: type(f).closure_convert(_scaled, 1.0),
}


@pytest.mark.parametrize("how", list(_REMADE))
@pytest.mark.parametrize("cls", [_FnOnly, _WithNote])
def test_what_lift_makes_of_a_subclass_instance_keeps_its_class(
    cls: type[lift.Lifted], how: str
) -> None:
    # lift builds these instances itself, never through the subclass's `__init__`.
    f = cls(_scaled) if cls is _FnOnly else cls(_scaled, "note")  # pyright: ignore[reportCallIssue]
    again = _REMADE[how](f)
    assert type(again) is cls
    assert again(3.0) == 6.0
    if how == "lift static=":
        assert jax.tree.leaves(again) == []  # `a` is static now
        with pytest.raises(lift.LiftError, match=rf"^{cls.__name__}\(_scaled "):
            lift.lift(f, static="nope")
