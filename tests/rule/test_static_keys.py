"""Static keys are exact and stable: what splits programs is what changes the
computation (a dtype, a value), never an incidental object (an annotation made
anew at every `def`); values JAX cannot hold stay static; every leaf kind
survives every serializer lift supports."""

from __future__ import annotations

import collections
import collections.abc
import copy
import dataclasses
import enum
import functools
import inspect
import math
import pickle
import sys
import textwrap
import typing
from collections.abc import Callable
from typing import Any, Literal

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from helpers import TraceCounter, call_lifted

import lift


def _table(t: Any) -> Any:
    def f(x):
        return x + jnp.asarray(t).astype(jnp.float32).sum()

    return f


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (ml_dtypes.int4, ml_dtypes.uint4),
        (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2),
        (np.int8, np.uint8),
    ],
    ids=["int4-uint4", "float8", "int8-uint8"],
)
def test_static_arrays_of_same_bytes_and_other_dtypes_never_share_a_program(a, b):
    first = np.array([-1, 2], dtype=a) if a is not ml_dtypes.float8_e4m3fn else None
    if first is None:
        first = np.array([1.5, 2.0], dtype=a)
    second = first.view(b)  # the same bytes: `dtype.str` is `'<V1'` for both ml_dtypes
    counter = TraceCounter()
    run = counter.jit(call_lifted)
    for t in (first, second, first):
        got = run(lift.lift(_table(t), static=("t",)), 0.0)
        assert float(got) == pytest.approx(float(_table(t)(0.0)))
    assert counter.traces == 2
    assert lift.diff(
        lift.lift(_table(first), static=("t",)),
        lift.lift(_table(second), static=("t",)),
    )


def test_static_scalars_of_other_ml_dtypes_never_share_a_program():
    a = np.array([3], dtype=ml_dtypes.int4)[0]
    b = np.array([3], dtype=ml_dtypes.uint4)[0]
    keyed = [
        jax.tree_util.tree_structure(lift.lift(_table(v), static=("t",)))
        for v in (a, b)
    ]
    assert keyed[0] != keyed[1]


def _without_future(src: str) -> dict[str, Any]:
    """Run `src` as a module without this one's `from __future__ import
    annotations` (which `exec` inherits): its annotations are objects made at
    every `def`."""
    space: dict[str, Any] = {}
    exec(compile(textwrap.dedent(src), "<test>", "exec", dont_inherit=True), space)
    return space


_jaxtyped = _without_future(
    """
    from jaxtyping import Array, Float

    def make(lr):
        def f(x: Float[Array, "n"]) -> Float[Array, "n"]:
            return x * lr

        return f
    """
)["make"]


def test_annotations_made_anew_at_every_def_do_not_split_programs():
    counter = TraceCounter()
    run = counter.jit(call_lifted)
    lifted = [lift.lift(_jaxtyped(v)) for v in (0.1, 0.2, 0.3)]
    for g in lifted:
        run(g, jnp.ones(2))
    assert counter.traces == 1
    assert lift.diff(lifted[0], lifted[1]) is None
    # The function keeps its annotations, for whatever reads them.
    assert "x" in lift.unlift(lifted[0]).__annotations__
    assert set(lifted[0].__wrapped__.__annotations__) == {"x", "return"}


def _counts(lr: float, factory: str) -> Any:
    scale = 10.0 * lr
    made = {
        "lambda": lambda: 0.0,
        "capturing": lambda: scale,
        "partial": functools.partial(jnp.asarray, 0.0),
    }
    counts = collections.defaultdict(made[factory], {"b": 2.0, "a": 1.0})

    def step(x):
        return x * lr + counts["a"] + counts["b"] + counts.default_factory()

    return step


@pytest.mark.parametrize("factory", ["lambda", "capturing", "partial"])
def test_a_default_factory_made_anew_at_every_closure_does_not_split_programs(
    factory: str,
):
    # Regression: JAX keeps a defaultdict's factory in the treedef, compared by
    # identity: a sweep over closures each making `defaultdict(lambda: 0.0)`
    # compiled once per closure. The factory is a part, compared by its code;
    # what it captures is a leaf like any capture.
    counter = TraceCounter()
    run = counter.jit(call_lifted)
    rates = (0.1, 0.2, 0.3)
    lifted = [lift.lift(_counts(lr, factory)) for lr in rates]
    outs = [float(run(g, 1.0)) for g in lifted]
    assert counter.traces == 1
    captured = 10.0 if factory == "capturing" else 0.0
    assert outs == pytest.approx([lr + 3.0 + captured * lr for lr in rates])
    assert lift.diff(lifted[0], lifted[1]) is None
    # The function holds the defaultdict JAX would rebuild, in your key order.
    held = lift.unlift(lifted[0]).__closure__[0].cell_contents
    assert type(held) is collections.defaultdict and list(held) == ["b", "a"]


def test_a_defaultdict_factory_captures_are_leaves_with_paths():
    f = lift.lift(_counts(0.5, "capturing"))
    paths = {
        jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(f)[0]
    }
    assert ".captures['counts'].default_factory.captures['scale']" in paths
    assert ".captures['counts']['a']" in paths
    assert float(f(1.0)) == pytest.approx(0.5 + 3.0 + 5.0)


def _nested_counts(lr: float, outer: str) -> Any:
    scale = 10.0 * lr
    inner = collections.defaultdict(lambda: scale, {"a": 1.0})
    table = (
        {"t": inner}
        if outer == "dict"
        else collections.defaultdict(lambda: 0.0, {"t": inner})
    )

    def step(x):
        return x * lr + table["t"]["a"] + table["t"].default_factory()

    return step


@pytest.mark.parametrize("outer", ["dict", "defaultdict"])
def test_a_default_factory_made_anew_inside_another_container_does_not_split_programs(
    outer: str,
):
    counter = TraceCounter()
    run = counter.jit(call_lifted)
    rates = (0.1, 0.2, 0.3)
    lifted = [lift.lift(_nested_counts(lr, outer)) for lr in rates]
    outs = [float(run(g, 1.0)) for g in lifted]
    assert counter.traces == 1
    assert outs == pytest.approx([11.0 * lr + 1.0 for lr in rates])
    paths = {
        jax.tree_util.keystr(p)
        for p, _ in jax.tree_util.tree_flatten_with_path(lifted[0])[0]
    }
    assert paths == {
        ".captures['lr']",
        ".captures['table']['t']['a']",
        ".captures['table']['t'].default_factory.captures['scale']",
    }
    assert "'t': defaultdict(_nested_counts.<locals>.<lambda>(scale=" in repr(lifted[0])
    # The function holds the containers JAX would rebuild.
    held = lift.unlift(lifted[0]).__closure__[1].cell_contents
    assert type(held) is (dict if outer == "dict" else collections.defaultdict)
    assert type(held["t"]) is collections.defaultdict


@pytest.mark.skipif(sys.version_info < (3, 12), reason="type parameters: 3.12+")
def test_type_parameters_do_not_split_programs():
    space = _without_future(
        """
        def make(lr):
            def f[T](x: T) -> T:
                return x * lr
            return f
        """
    )
    counter = TraceCounter()
    run = counter.jit(call_lifted)
    for v in (0.1, 0.2, 0.3):
        assert float(run(lift.lift(space["make"](v)), 1.0)) == pytest.approx(v)
    assert counter.traces == 1


def _unholdable() -> list[Any]:
    out: list[Any] = [np.longdouble, np.clongdouble, np.void]
    for name in ("complex32", "bcomplex32", "float8_e5m3fnu"):
        dtype = getattr(ml_dtypes, name, None)
        if dtype is not None and not _jax_has(dtype):
            out.append(dtype)
    return out


def _jax_has(dtype: Any) -> bool:
    try:
        jax.device_put(np.zeros((), dtype))
    except (TypeError, jax.errors.JaxRuntimeError):  # the latter from jax 0.12.1
        return False
    return True


@pytest.mark.parametrize("dtype", _unholdable(), ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("kind", ["array", "scalar"])
def test_values_of_dtypes_jax_cannot_hold_stay_static(dtype, kind):
    value = np.zeros(2, dtype)
    if kind == "scalar":
        value = value[0]

    def make(t):
        def f(x):
            return x + np.size(t)

        return f

    lifted = lift.lift(make(value))
    assert jax.tree_util.tree_leaves(lifted) == []
    counter = TraceCounter()
    run = counter.jit(call_lifted)
    assert float(run(lifted, 1.0)) == 1.0 + np.size(value)
    assert float(run(lift.lift(make(value)), 1.0)) == 1.0 + np.size(value)
    assert counter.traces == 1
    assert float(lift.jit(make(value))(1.0)) == 1.0 + np.size(value)


# -- every leaf kind through every serializer ------------------------------------


def _uses(x: Any, v: Any = None) -> Any:
    """Module level, so that a partial of it pickles."""
    del v
    return x


_LEAVES = {
    "typed key": lambda: jax.random.key(0),
    "typed keys": lambda: jax.random.split(jax.random.key(1), 3),
    "raw key": lambda: jax.random.PRNGKey(0),
    "bfloat16": lambda: jnp.ones(2, jnp.bfloat16),
    "int4": lambda: jnp.array([1, 2], jnp.int4),
    "numpy int4": lambda: np.array([1, 2], ml_dtypes.int4),
    "float8": lambda: jnp.ones(2, jnp.float8_e4m3fn),
    "bool": lambda: jnp.array(True),
    "uint32": lambda: jnp.arange(3, dtype=jnp.uint32),
    "float": lambda: 0.5,
    "complex": lambda: 1 + 2j,
    "numpy float32": lambda: np.float32(0.5),
    "numpy 0-d": lambda: np.array(0.5),
}


def _flax_bytes(x: Any) -> Any:
    serialization = pytest.importorskip("flax.serialization")
    return serialization.from_bytes(x, serialization.to_bytes(x))


def _flax_state(x: Any) -> Any:
    serialization = pytest.importorskip("flax.serialization")
    return serialization.from_state_dict(x, serialization.to_state_dict(x))


_SERIALIZERS = {
    "copy": copy.copy,
    "deepcopy": copy.deepcopy,
    "pickle": lambda x: pickle.loads(pickle.dumps(x)),
    "flax bytes": _flax_bytes,
    "flax state dict": _flax_state,
}


def _data(leaf: Any) -> Any:
    if isinstance(leaf, jax.Array) and jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key):
        return (str(jax.random.key_impl(leaf)), np.asarray(jax.random.key_data(leaf)))
    return (jax.typeof(leaf), np.asarray(leaf))


@pytest.mark.parametrize("serializer", list(_SERIALIZERS))
@pytest.mark.parametrize("leaf", list(_LEAVES))
def test_every_leaf_kind_round_trips_through_every_serializer(leaf, serializer):
    value = _LEAVES[leaf]()
    lifted = lift.lift(functools.partial(_uses, v=value))
    back = _SERIALIZERS[serializer](lifted)
    assert jax.tree_util.tree_structure(back) == jax.tree_util.tree_structure(lifted)
    (a,) = jax.tree_util.tree_leaves(lifted)
    (b,) = jax.tree_util.tree_leaves(back)
    (ta, da), (tb, db) = _data(a), _data(b)
    assert ta == tb
    np.testing.assert_array_equal(da, db)
    counter = TraceCounter()
    run = counter.jit(call_lifted)
    run(lifted, 1.0)
    run(back, 1.0)
    assert counter.traces == 1


def test_a_state_dict_restores_a_typed_key_given_as_key_or_as_its_data():
    serialization = pytest.importorskip("flax.serialization")
    lifted = lift.lift(functools.partial(_uses, v=jax.random.key(0)))
    (name,) = serialization.to_state_dict(lifted)
    assert name == ".keywords['v']"
    for given in (jax.random.key(7), jax.random.key_data(jax.random.key(7))):
        (back,) = jax.tree_util.tree_leaves(
            serialization.from_state_dict(lifted, {name: given})
        )
        assert jax.random.key_impl(back) == jax.random.key_impl(jax.random.key(7))
        np.testing.assert_array_equal(
            jax.random.key_data(back), jax.random.key_data(jax.random.key(7))
        )
    with pytest.raises(
        lift.LiftError,
        match=(
            r"^The state dict's \.keywords\['v'\] holds PRNG key data of shape "
            r"\(3,\), the target's key data \(2,\)\.\nFix: restore into a target "
            r"made with the same keys\.\n"
        ),
    ):
        serialization.from_state_dict(lifted, {name: np.zeros(3, np.uint32)})


class _Model(lift.Lifted):
    """A library author's subclass with its own `__init__` (no options)."""

    def __init__(self, fn):
        super().__init__(fn)


def _scaled(x, a=jnp.float32(2.0)):
    return a * x


def test_a_subclass_with_its_own_init_pickles():
    m = _Model(_scaled)
    again = pickle.loads(pickle.dumps(m))
    assert type(again) is _Model
    assert again(1.0) == 2.0


# -- statics compared by their class's own `__eq__` --------------------------------


@dataclasses.dataclass(frozen=True)
class _Head:
    width: int
    activation: Callable[[Any], Any] = dataclasses.field(
        default=jnp.tanh, compare=False
    )


def test_statics_equal_by_their_eq_share_a_program_as_jax_static_arguments_do() -> None:
    # A class's own `__eq__`/`__hash__` key a static, as JAX keys
    # `static_argnums`: what it ignores (`compare=False`) never splits programs.
    def make(head: _Head) -> Callable[[Any], Any]:
        def apply(x: Any) -> Any:
            return head.activation(x) * head.width

        return apply

    heads = [_Head(2, jnp.tanh), _Head(2, jax.nn.relu)]
    by_jax = jax.jit(lambda head, x: make(head)(x), static_argnums=0)
    expected = [float(by_jax(head, -1.0)) for head in heads]
    assert expected[1] == expected[0]  # JAX serves the first program for both
    got = [float(lift.jit(make(head))(-1.0)) for head in heads]
    assert got == pytest.approx(expected)
    first, second = (lift.lift(make(head)) for head in heads)
    assert lift.diff(first, second) is None  # one program serves both
    wider = lift.lift(make(_Head(3, jnp.tanh)))
    assert "width=2" in (lift.diff(first, wider) or "")
    assert float(lift.jit(make(_Head(3, jnp.tanh)))(-1.0)) == pytest.approx(
        3 * float(jnp.tanh(-1.0))
    )


# -- a float-valued Enum member ------------------------------------------------


class _Rate(float, enum.Enum):
    SLOW = 0.01
    FAST = 0.1


def test_a_float_enum_member_keeps_its_identity_under_jit() -> None:
    # A float by `isinstance`, but static: a tracer in its place would have
    # neither its identity nor its `.value`.
    def make(rate: _Rate) -> Callable[[Any], Any]:
        def f(x: Any) -> Any:
            if rate is _Rate.FAST:
                return x * 2
            return x * rate.value

        return f

    for rate in _Rate:
        f = make(rate)
        assert jax.jit(call_lifted)(lift.lift(f), 1.0) == pytest.approx(f(1.0))
        assert jax.tree_util.tree_leaves(lift.lift(f)) == []


# -- annotations -----------------------------------------------------------------


def test_a_rebuilt_lifted_keeps_its_own_signature() -> None:
    # Annotations are not part of the key (one program serves both closures),
    # but each `Lifted`, rebuilt from its leaves or unlifted, carries its own.
    def make(scale: float, kind: type) -> Callable[[Any], Any]:
        def f(x: Any) -> Any:
            return x * scale

        # As a module without `from __future__ import annotations` has them.
        f.__annotations__ = {"x": kind, "return": kind}
        return f

    first = lift.lift(make(1.0, int))
    g = make(2.0, str)
    lifted = lift.lift(g)
    rebuilt = jax.tree_util.tree_map(lambda v: v, lifted)
    assert inspect.signature(rebuilt) == inspect.signature(g)
    assert lift.unlift(lifted).__annotations__ == g.__annotations__
    structure = jax.tree_util.tree_structure
    assert structure(first) == structure(lifted)


# -- values JAX's `==` (or a type expression's) takes for equal --------------------


class _Box:
    """A registered node whose static (aux) data is the value itself."""

    def __init__(self, value: Any) -> None:
        self.value = value


jax.tree_util.register_pytree_node(
    _Box, lambda b: ((), b.value), lambda value, _: _Box(value)
)


class _Float(float):
    pass


class _SlottedFloat(float):
    __slots__ = ("unit",)


def _slotted(v: float) -> _SlottedFloat:
    rate = _SlottedFloat(v)
    rate.unit = "per step"
    return rate


class _Tuple(tuple):
    pass


def _in_aux(v: Any) -> Any:
    return _Box(v)


def _in_equinox_static(v: Any) -> Any:
    import equinox as eqx

    class Holder(eqx.Module):
        value: Any = eqx.field(static=True)

    return Holder(v)


def _show(v: Any) -> str:
    """What the function computes from the value: its repr, signed zero included."""
    v = getattr(v, "value", v)
    if isinstance(v, tuple):
        return repr(tuple((type(x).__name__, repr(x)) for x in v))
    return f"{type(v).__name__}:{v!r}"


def _with_attribute(v: float, unit: Any = "per step") -> _Float:
    rate = _Float(v)
    rate.unit = unit  # type: ignore[attr-defined]
    return rate


_LOOSE_PAIRS = {
    "aux-zeros": (_in_aux(0.0), _in_aux(-0.0), ()),
    "aux-int-bool": (_in_aux(1), _in_aux(True), ()),
    "aux-int-float": (_in_aux(1), _in_aux(1.0), ()),
    "aux-unhashable": (_in_aux([0.0]), _in_aux([-0.0]), ()),
    "aux-unhashable-tuple": (_in_aux(([0.0],)), _in_aux(([-0.0],)), ()),
    "aux-unhashable-dict": (_in_aux({"a": [0.0]}), _in_aux({"a": [-0.0]}), ()),
    "complex-signed-zero": (complex(1.0, 0.0), complex(1.0, -0.0), ("v",)),
    "equinox-static-field": (_in_equinox_static(1), _in_equinox_static(True), ()),
    "equinox-static-list": (_in_equinox_static([1]), _in_equinox_static([True]), ()),
    "float-subclass": (_Float(0.0), _Float(-0.0), ("v",)),
    "float-subclass-with-attribute": (
        _with_attribute(0.0),
        _with_attribute(-0.0),
        ("v",),
    ),
    "float-subclass-with-unhashable-attribute": (
        _with_attribute(0.0, [1]),
        _with_attribute(-0.0, [1]),
        ("v",),
    ),
    # Regression: a subclass with slots was compared by the built-in's `==`.
    "float-subclass-with-slots": (_slotted(0.0), _slotted(-0.0), ("v",)),
    "tuple-subclass": (_Tuple((1,)), _Tuple((1.0,)), ("v",)),
    "literal-order": (Literal["adam", "sgd"], Literal["sgd", "adam"], ()),
    "union-order": (int | str, str | int, ()),
    "generic-alias-args": (list[1], list[True], ()),  # type: ignore[valid-type]
    "abc-callable-args": (
        collections.abc.Callable[[int | str], str],
        collections.abc.Callable[[str | int], str],
        (),
    ),
}


def _shows(v: Any) -> Callable[[], str]:
    def f() -> str:
        if (
            isinstance(v, type)
            or hasattr(v, "__origin__")
            or type(v).__name__ == "UnionType"
        ):
            return repr(typing.get_args(v))
        return _show(v)

    return f


@pytest.mark.parametrize("again", [False, True], ids=["first-lift", "lifted-before"])
@pytest.mark.parametrize(
    ("a", "b", "static"), list(_LOOSE_PAIRS.values()), ids=list(_LOOSE_PAIRS)
)
def test_values_equal_only_loosely_are_different_statics(a, b, static, again):
    """`0.0 == -0.0`, `1 == True`, `int | str == str | int`: JAX and Python
    take them for equal, but the function computes differently with each. A
    capture holding one never runs with the other, however it is held (a
    node's static data, a subclass of a built-in, a type expression) and
    whatever was lifted before."""
    fa, fb = _shows(a), _shows(b)
    assert fa() != fb()  # the case: the plain functions differ
    for _ in range(3 if again else 1):
        la = lift.lift(fa, static=static)
    lb = lift.lift(fb, static=static)
    assert (la(), lb()) == (fa(), fb())
    assert jax.tree_util.tree_structure(la) != jax.tree_util.tree_structure(lb)
    assert lift.diff(la, lb) is not None
    with lift.verifying():
        assert lift.lift(fb, static=static)() == fb()


def test_a_float_subclass_with_slots_is_keyed_by_what_its_slots_hold() -> None:
    # Regression: two rates equal as floats but for their slots shared a program.
    def make(rate: _SlottedFloat) -> Any:
        return lambda x: x * (2.0 if rate.unit == "per step" else 3.0)

    per_epoch = _SlottedFloat(1.0)
    per_epoch.unit = "per epoch"
    run = jax.jit(call_lifted)
    assert float(run(lift.lift(make(_slotted(1.0)), static=("rate",)), 1.0)) == 2.0
    assert float(run(lift.lift(make(per_epoch), static=("rate",)), 1.0)) == 3.0
    again = _slotted(1.0)
    assert jax.tree_util.tree_structure(
        lift.lift(make(again), static=("rate",))
    ) == jax.tree_util.tree_structure(lift.lift(make(_slotted(1.0)), static=("rate",)))


def test_equal_type_expressions_still_share_a_program() -> None:
    """Keyed exactly, equal ones (made anew) are still one program."""

    def make(choices: Any) -> Callable[[float], Any]:
        def f(x: float) -> Any:
            return x * len(typing.get_args(choices))

        return f

    counter = TraceCounter()
    run = counter.jit(call_lifted)
    for _ in range(3):
        run(lift.lift(make(Literal["adam", "sgd"])), 1.0)
        run(lift.lift(make(int | str)), 1.0)
        run(lift.lift(make(_Box(0.5))), 1.0)
    assert counter.traces == 3


class _Count(int):
    """A subclass of `int` with an `__eq__` of its own: keyed by it."""

    def __eq__(self, other: object) -> bool:
        return int(self) == other

    __hash__ = int.__hash__


def _nested_frozenset(depth: int) -> frozenset[Any]:
    value: frozenset[Any] = frozenset()
    for _ in range(depth):
        value = frozenset({value})
    return value


def _nested_list(depth: int) -> list[Any]:
    value: list[Any] = [0.0]
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "make",
    [
        lambda: _nested_frozenset(80),  # a static value nested past the keyed depth
        lambda: _Box(_nested_list(80)),  # node data nested past it
        lambda: _Box(bytearray(b"ab")),  # node data neither hashable nor a container
    ],
    ids=["deep-static", "deep-aux", "unhashable-aux"],
)
def test_statics_lift_cannot_key_by_value_are_kept_by_identity(make: Any) -> None:
    value, equal = make(), make()
    structure = jax.tree_util.tree_structure
    same = [lift.lift(lambda v=value: jnp.float32(1.0), static=("v",)) for _ in "ab"]
    assert structure(same[0]) == structure(same[1])
    other = lift.lift(lambda v=equal: jnp.float32(1.0), static=("v",))
    assert structure(other) != structure(same[0])


def test_a_builtin_subclass_with_its_own_eq_shares_a_program_by_it() -> None:
    def make(n: _Count) -> Any:
        return lambda x: x * n

    structure = jax.tree_util.tree_structure
    one, again = (lift.lift(make(_Count(3)), static=("n",)) for _ in "ab")
    assert structure(one) == structure(again)
    assert float(one(2.0)) == 6.0


@pytest.mark.parametrize(
    ("hold", "read"),
    [
        (lambda v: v, lambda h: h),
        (lambda v: (v, 1), lambda h: h[0]),
        (lambda v: complex(1.0, v), lambda h: h.imag),
        (_in_aux, lambda h: h.value),
    ],
    ids=["float", "in-a-tuple", "complex", "aux"],
)
def test_static_nans_of_either_sign_never_share_a_program(hold: Any, read: Any) -> None:
    """`nan` and `-nan` are one float to `==` and `hash`, but `copysign` reads
    their sign: a static float is keyed by its bits, as `0.0` and `-0.0` are."""

    def make(v: Any) -> Any:
        held = hold(v)
        return lambda x: x * math.copysign(1.0, read(held))

    nan = float("nan")
    counter = TraceCounter()
    run = counter.jit(call_lifted)
    for v, sign in ((nan, 1.0), (-nan, -1.0), (0.0, 1.0), (-0.0, -1.0), (-nan, -1.0)):
        assert make(v)(1.0) == sign
        assert float(run(lift.lift(make(v), static="held"), 1.0)) == sign
    # JAX compares a node's aux data with `==`: a nan there never equals itself.
    assert counter.traces == (5 if hold is _in_aux else 4)
    if type(hold(nan)) in (float, tuple):  # `lift.diff` shows the sign
        diff = lift.diff(
            lift.lift(make(nan), static="held"), lift.lift(make(-nan), static="held")
        )
        assert diff is not None and "nan vs -nan" in diff.replace(")", "")
