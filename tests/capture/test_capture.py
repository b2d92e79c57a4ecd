"""What `lift` captures, what it makes dynamic, and that it never touches the original."""

from __future__ import annotations

import asyncio
import collections
import copy
import functools
import inspect
import math
import types
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import TraceCounter, call_lifted, pairwise

import lift


def leaf_paths(x: object) -> dict[str, object]:
    return {
        jax.tree_util.keystr(p): v
        for p, v in jax.tree_util.tree_flatten_with_path(x)[0]
    }


# -- forms of `lift` ------------------------------------------------------------------


def test_decorator_forms() -> None:
    @lift.lift
    def a(x):
        return x + 1

    @lift.lift(static=("n",))
    def b(x, n=2.0):
        return x * n

    assert lift.is_lifted(a) and lift.is_lifted(b)
    assert a(1) == 2
    assert b(3.0) == 6.0
    assert leaf_paths(b) == {}  # `n` is static


def test_lift_of_lifted_is_itself() -> None:
    f = lift.lift(lambda x: x)
    assert lift.lift(f) is f
    assert lift.Lifted(lambda x: x).__class__ is lift.Lifted


def test_lifted_constructor_is_lift() -> None:
    w = jnp.ones(2)
    fn = lambda x: w * x
    assert jax.tree_util.tree_structure(
        lift.Lifted(fn)
    ) == jax.tree_util.tree_structure(lift.lift(fn))


def test_generator_and_async_functions() -> None:
    w = jnp.asarray(2.0)

    def gen(n):
        for i in range(n):
            yield w * i

    async def coro(x):
        return w * x

    assert [float(v) for v in lift.lift(gen)(3)] == [0.0, 2.0, 4.0]
    assert float(asyncio.run(lift.lift(coro)(3.0))) == 6.0
    assert inspect.isgeneratorfunction(lift.unlift(lift.lift(gen)))


def test_bound_method_of_plain_object_is_static() -> None:
    class Scaler:
        def __init__(self) -> None:
            self.k = 3

        def scale(self, x):
            return self.k * x

    s = Scaler()
    g = lift.lift(s.scale)
    assert g(2) == 6
    assert leaf_paths(g) == {}
    assert g.__name__ == "scale"


def test_partial_args_keywords() -> None:
    def f(a, b, *, c):
        return a + b + c

    p = functools.partial(f, jnp.asarray(1.0), c=2.0)
    g = lift.lift(p)
    assert g(3.0) == 6.0
    assert set(leaf_paths(g)) == {".args[0]", ".keywords['c']"}


class _Weighted(functools.partial):  # pyright: ignore[reportMissingTypeArgument]
    """A partial scaled by a weight kept in a slot."""

    __slots__ = ("weight",)

    def __call__(self, /, *args: Any, **keywords: Any) -> Any:
        return super().__call__(*args, **keywords) * self.weight


class _Scaled(functools.partial):  # pyright: ignore[reportMissingTypeArgument]
    """A partial whose constructor takes other arguments than `partial`'s."""

    def __new__(cls, scale: float) -> Any:
        return super().__new__(cls, lambda x, s: x * s, s=scale)


def test_partial_subclasses_keep_their_slots_and_their_constructor() -> None:
    # Regressions (an adversary's): a subclass's slot was lost in the lifted
    # copy (AttributeError), and one with its own `__new__` was rebuilt by
    # calling it with a partial's arguments (TypeError).
    counter = TraceCounter()
    weighted = _Weighted(lambda x: x)
    weighted.weight = 3.0

    def make(scale: float) -> Callable[[Any], Any]:
        s = _Scaled(scale)

        def step(x: Any) -> Any:
            counter()
            return weighted(x) + s(x)

        return step

    assert make(0.5)(2.0) == 7.0
    run = jax.jit(lambda f, x: f(x))
    assert [float(run(lift.lift(make(k)), 2.0)) for k in (0.5, 1.5)] == [7.0, 9.0]
    assert counter.traces == 2  # the plain call, one trace: the scales are leaves
    assert sorted(leaf_paths(lift.lift(make(0.5)))) == [
        ".captures['s'].keywords['s']",
        ".captures['weighted'].weight",
    ]


def test_a_partial_subclass_whose_func_raises_is_refused_by_name() -> None:
    class Broken(functools.partial):  # pyright: ignore[reportMissingTypeArgument]
        @property
        def func(self) -> Any:  # pyright: ignore[reportIncompatibleVariableOverride]
            raise RuntimeError("no func")

    broken = Broken(lambda a: a, 1.0)

    def step(x: Any) -> Any:
        return broken(x)

    with pytest.raises(
        lift.LiftError,
        match=r"step \(.*test_capture.py:\d+\) captures variable 'broken': a "
        r".*Broken .*, whose function, arguments or keywords lift cannot read: "
        r"reading them raised RuntimeError: no func",
    ):
        lift.lift(step)


@jax.tree_util.register_pytree_node_class
class _Hub:
    """A pytree holding callables among its children (its own method too)."""

    def __init__(self, w: Any, hooks: list[Any] | None = None) -> None:
        self.w = w
        self.hooks = [] if hooks is None else hooks

    def tree_flatten(self) -> tuple[tuple[Any, ...], None]:
        return (self.w, self.hooks), None

    @classmethod
    def tree_unflatten(cls, aux: None, children: Any) -> _Hub:
        return cls(*children)

    def apply(self, x: Any) -> Any:
        return self.w * x


def test_a_cycle_of_bound_methods_is_refused_naming_the_function_and_variable() -> None:
    # A bound method whose instance holds the method: a cycle of holders no
    # rebuild can close. (An adversary's: the message named neither.)
    hub = _Hub(jnp.asarray(2.0))
    hub.hooks.append(hub.apply)
    apply = hub.apply

    def step(x: Any) -> Any:
        return apply(x)

    with pytest.raises(
        lift.LiftError,
        match=r"(?s)refer to each other in a cycle, which cannot be rebuilt: .*"
        r"step \(.*test_capture.py:\d+\) captures variable 'apply'",
    ):
        lift.lift(step)


def test_pytree_of_functions_keeps_structure() -> None:
    w = jnp.asarray(1.0)
    tree = {"f": lambda x: w * x, "n": 3, "pair": (lambda: 1, 2.0)}
    out = lift.lift(tree)
    assert type(out) is dict and set(out) == {"f", "n", "pair"}
    assert lift.is_lifted(out["f"]) and lift.is_lifted(out["pair"][0])
    assert out["n"] == 3 and out["pair"][1] == 2.0


def test_namedtuple_of_functions() -> None:
    optax = pytest.importorskip("optax")
    opt = lift.lift(optax.sgd(0.1))
    assert type(opt) is type(optax.sgd(0.1))
    assert lift.is_lifted(opt.init) and lift.is_lifted(opt.update)


def test_callable_pytree_kept_with_function_leaves_lifted() -> None:
    w = jnp.asarray(2.0)
    p = jax.tree_util.Partial(lambda f, x: f(x), lambda x: w * x)
    out = lift.lift(p)
    assert type(out) is jax.tree_util.Partial
    assert lift.is_lifted(out.args[0])
    assert out(3.0) == 6.0


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        (len, r"(?s)lift\(\) got the builtin 'len'.*call it from a Python function"),
        (int, r"(?s)lift\(\) got the class int.*lift a function or bound method"),
        (3, r"lift\(\) got int 3, which is neither a function nor a pytree"),
        (jnp.ones(2), r"lift\(\) got ArrayImpl .*neither a function nor a pytree"),
    ],
)
def test_bad_top_level_input(bad: object, match: str) -> None:
    with pytest.raises(lift.LiftError, match=match):
        lift.lift(bad)


def test_callable_object_that_is_not_a_pytree() -> None:
    class Callable_:
        def __call__(self, x):
            return x

    with pytest.raises(
        lift.LiftError,
        match=r"(?s)callable Callable_ object that is not a pytree.*obj.__call__",
    ):
        lift.lift(Callable_())


def test_lift_error_is_type_error_named_lift() -> None:
    assert issubclass(lift.LiftError, TypeError)
    assert lift.LiftError.__module__ == "lift"
    assert issubclass(lift.LeakError, RuntimeError)


# -- the dynamic rule -----------------------------------------------------------------


def test_default_dynamic_rule() -> None:
    captured = {
        "array": jnp.ones(2),
        "numpy": np.ones(2),
        "npscalar": np.float32(1.0),
        "pyfloat": 0.5,
        "pycomplex": 1j,
        "pyint": 3,
        "pybool": True,
        "string": "s",
        "none": None,
        "dtype": jnp.float32,
        "a_type": int,
        "module": math,
        "builtin": len,
        "jitted": jax.jit(lambda x: x),
    }
    array, numpy, npscalar, pyfloat, pycomplex = (
        captured["array"],
        captured["numpy"],
        captured["npscalar"],
        captured["pyfloat"],
        captured["pycomplex"],
    )
    pyint, pybool, string, none, dtype = (
        captured["pyint"],
        captured["pybool"],
        captured["string"],
        captured["none"],
        captured["dtype"],
    )
    a_type, module, builtin, jitted = (
        captured["a_type"],
        captured["module"],
        captured["builtin"],
        captured["jitted"],
    )

    def f():
        return (array, numpy, npscalar, pyfloat, pycomplex, pyint, pybool, string, none)

    def g():
        return (dtype, a_type, module, builtin, jitted)

    assert set(leaf_paths(lift.lift(f))) == {
        f".captures['{n}']"
        for n in ("array", "numpy", "npscalar", "pyfloat", "pycomplex")
    }
    assert leaf_paths(lift.lift(g)) == {}


def test_static_by_name_at_any_depth() -> None:
    lr = jnp.asarray(0.1)
    decay = 0.9

    def inner(x):
        return x * decay

    def outer(x, lr=lr):
        return inner(x) * lr

    assert set(leaf_paths(lift.lift(outer))) == {
        ".captures['lr']",
        ".captures['inner'].captures['decay']",
    }
    assert set(leaf_paths(lift.lift(outer, static=("decay",)))) == {".captures['lr']"}


def test_dynamic_predicate_replaces_rule() -> None:
    n = 3
    lr = 0.1
    f = lift.lift(lambda x: x * n * lr, dynamic=lambda v: isinstance(v, int))
    assert set(leaf_paths(f)) == {".captures['n']"}
    assert f(1.0) == pytest.approx(0.3)


def test_float_capture_is_weakly_typed_leaf() -> None:
    lr = 0.1
    f = lift.lift(lambda x: x * lr)
    (leaf,) = jax.tree_util.tree_leaves(f)
    assert isinstance(leaf, jax.Array) and leaf.dtype == jnp.float32 and leaf.weak_type
    # Weak typing keeps bfloat16 parameters bfloat16.
    out = jax.jit(lambda g, x: g(x))(f, jnp.ones(2, jnp.bfloat16))
    assert out.dtype == jnp.bfloat16


class Rate(float):
    """A `float` subclass, as a schedule library might define one."""


class Phase(complex):
    pass


@pytest.mark.parametrize("kind", [Rate, Phase], ids=["float", "complex"])
def test_a_float_subclass_capture_is_an_array_leaf_compiled_once(kind: type) -> None:
    # Regression: a `Rate(float)` capture stayed a Python `Rate` leaf, static
    # to `eqx.filter_jit` (one compile per rate) where a `float` is an array.
    counter = TraceCounter()

    def make(lr: Any) -> Any:
        def step(x):
            counter()
            return x * lr

        return step

    f = lift.lift(make(kind(0.5)))
    (leaf,) = jax.tree_util.tree_leaves(f)
    assert isinstance(leaf, jax.Array) and leaf.weak_type
    assert type(leaf) is type(jax.tree_util.tree_leaves(lift.lift(make(0.5)))[0])
    call = eqx.filter_jit(lambda g, x: g(x))
    outs = [
        float(jnp.real(call(lift.lift(make(kind(v))), 2.0))) for v in (0.1, 0.2, 0.3)
    ]
    assert outs == pytest.approx([0.2, 0.4, 0.6])
    assert counter.traces == 1
    assert lift.unlift(f).__closure__[1].cell_contents == kind(0.5)  # yours, as it was


class WarmRate(float):
    """A `float` subclass with a method of its own."""

    def warm(self, step: int) -> float:
        return self * min(1.0, step / 10)


@pytest.mark.parametrize(
    "run",
    [lambda g: g(1.0), lambda g: jax.jit(lambda h, x: h(x))(g, 1.0)],
    ids=["eager", "jax.jit"],
)
def test_a_float_subclass_with_its_own_method_works(
    run: Any,
) -> None:
    lr = WarmRate(0.1)

    def step(x):
        return x * lr.warm(5)

    assert step(1.0) == pytest.approx(0.05)
    # Kept static (its class adds to `float`), as `static=('lr',)` keeps it.
    assert float(run(lift.lift(step))) == pytest.approx(0.05)


def test_a_static_float_subclass_keeps_its_type() -> None:
    lr = Rate(0.5)
    f = lift.lift(lambda x: (type(lr), x * lr), static=("lr",))
    assert jax.tree_util.tree_leaves(f) == []
    assert f(2.0) == (Rate, 1.0)


def test_python_branch_on_float_capture_stays_static() -> None:
    # optax.sm3: `(1.0 - b2) if b2 != 1.0 else 1.0`
    b2 = 1.0

    def accum(g):
        coeff = (1.0 - b2) if b2 != 1.0 else 1.0
        return coeff * g

    def update(g):
        return accum(g)

    f = lift.lift(update)
    assert leaf_paths(f) == {}
    assert jax.jit(lambda f, g: f(g))(f, 2.0) == 2.0


def test_python_branch_on_dynamic_capture_names_it() -> None:
    threshold = jnp.asarray(0.5)

    def clip(x):
        y = threshold
        if y > 0.0:
            return x
        return -x

    with pytest.raises(
        lift.LiftError,
        match=r"(?s)clip .*test_capture.py:\d+\) uses the captured variable 'threshold' in Python "
        r"control flow.*static=\('threshold',\)",
    ):
        jax.jit(lambda f, x: f(x))(lift.lift(clip), 1.0)


class _Key:
    """A dict key hashed by identity, holding what it was given."""

    def __init__(self, v: Any) -> None:
        self.v = v


class _Fill:
    """A default factory that is a callable object, not a pytree: static data."""

    def __init__(self, v: Any) -> None:
        self.v = v

    def __call__(self) -> Any:
        return self.v


class _Box:
    pass


def _in_key(x: Any) -> tuple[Any, str]:
    table = {_Key(x): 1.0}
    return lambda y: y * len(table), (
        r"'table', a pytree whose static data holds a tracer at table\.keys\(\)\[0\]\.v"
    )


def _in_factory(x: Any) -> tuple[Any, str]:
    table = collections.defaultdict(_Fill(x), a=1.0)
    return lambda y: y * len(table), (
        r"'table', a pytree whose static data holds a tracer at "
        r"table\.default_factory\.v"
    )


def _in_a_held_factory(x: Any) -> tuple[Any, str]:
    box = _Box()
    box.table = collections.defaultdict(_Fill(x), a=1.0)  # pyright: ignore[reportAttributeAccessIssue]
    return lambda y: y * len(box.table), (  # pyright: ignore[reportAttributeAccessIssue]
        r"'box', a _Box that is not a pytree and holds a tracer at "
        r"box\.table\.default_factory\.v"
    )


@pytest.mark.parametrize("make", [_in_key, _in_factory, _in_a_held_factory])
def test_a_tracer_in_a_dicts_keys_or_factory_is_refused_on_crossing_a_transform(
    make: Callable[[Any], tuple[Any, str]],
) -> None:
    # Regression: JAX keeps a dict's keys and a defaultdict's factory in the
    # treedef, where no walk looked: a tracer there crossed transforms.
    said = make(0.0)[1] + r", from a transform still running"
    called = jax.jit(lambda x: lift.lift(make(x)[0])(2.0))(3.0)
    assert float(called) == 2.0  # called there: kept, as the function keeps it
    for crossing in (
        lambda x: lift.lift(make(x)[0]),  # returned
        lambda x: jax.jit(call_lifted)(lift.lift(make(x)[0]), 2.0),  # given to one
    ):
        with pytest.raises(lift.LiftError, match=said):
            jax.jit(crossing)(3.0)


# -- side effects reach the user's objects --------------------------------------------


def _effect(kind: str, store: Any) -> None:
    """What the lifted code does to the captured container: a log, a cache, a set."""
    if kind == "list":
        store.append("called")
    elif kind == "dict":
        store[len(store)] = "called"
    else:
        store.add("called")


def _in_cell(kind: str, store: Any) -> Any:
    def f(x):
        _effect(kind, store)
        return x * 2.0

    return f


def _in_default(kind: str, store: Any) -> Any:
    def f(x, store=store):
        _effect(kind, store)
        return x * 2.0

    return f


def _in_kwdefault(kind: str, store: Any) -> Any:
    def f(x, *, store=store):
        _effect(kind, store)
        return x * 2.0

    return f


def _use(kind: str, store: Any, x: Any) -> Any:
    _effect(kind, store)
    return x * 2.0


def _in_partial_arg(kind: str, store: Any) -> Any:
    return functools.partial(_use, kind, store)


def _use_keywords(x: Any, *, kind: str, store: Any) -> Any:
    return _use(kind, store, x)


def _in_partial_keyword(kind: str, store: Any) -> Any:
    return functools.partial(_use_keywords, kind=kind, store=store)


def _in_attribute(kind: str, store: Any) -> Any:
    def f(x):
        _effect(kind, f.store)  # type: ignore[attr-defined]
        return x * 2.0

    f.store = store  # type: ignore[attr-defined]
    return f


class _Logger:
    def __init__(self, kind: str, store: Any) -> None:
        self.kind, self.store = kind, store

    def step(self, x: Any) -> Any:
        _effect(self.kind, self.store)
        return x * 2.0


def _in_self(kind: str, store: Any) -> Any:
    return _Logger(kind, store).step


_STORE_HOLDERS = {
    "cell": _in_cell,
    "default": _in_default,
    "kwdefault": _in_kwdefault,
    "partial arg": _in_partial_arg,
    "partial keyword": _in_partial_keyword,
    "attribute": _in_attribute,
    "bound self": _in_self,
}
_CONSUMERS = {
    "eager": lambda fn: lift.lift(fn)(jnp.ones(())),
    "jax.jit": lambda fn: jax.jit(lambda f, x: f(x))(lift.lift(fn), jnp.ones(())),
    "lift.jit": lambda fn: lift.jit(fn)(jnp.ones(())),
    "vmap": lambda fn: jax.vmap(lambda f, x: f(x), in_axes=(None, 0))(
        lift.lift(fn), jnp.ones(3)
    ),
}


# Every kind of container in every holder, and each through every consumer
# (pairwise: 28 of the 84 combinations).
@pytest.mark.parametrize(
    ("kind", "holder", "consumer"),
    pairwise(["list", "dict", "set"], list(_STORE_HOLDERS), list(_CONSUMERS)),
)
def test_a_captured_container_is_the_users_own_object(
    kind: str, holder: str, consumer: str
) -> None:
    store: Any = {"list": list, "dict": dict, "set": set}[kind]()
    fn = _STORE_HOLDERS[holder](kind, store)
    out = _CONSUMERS[consumer](fn)
    assert jnp.allclose(out, 2.0)
    assert "called" in (store.values() if kind == "dict" else store)
    assert len(store) == 1  # once: eagerly, or when traced


_TRACES: list[None] = []  # a global: not captured


def test_a_captured_containers_contents_are_part_of_the_key() -> None:
    traces = _TRACES
    traces.clear()

    def make(seen: list[Any]) -> Any:
        def f(x):
            _TRACES.append(None)
            return x * len(seen)

        return f

    run = jax.jit(lambda f, x: f(x))
    a, b = [1], [1]  # equal contents, equal keys: one program
    assert run(lift.lift(make(a)), 1.0) == 1.0
    assert run(lift.lift(make(b)), 1.0) == 1.0
    assert len(traces) == 1
    b.append(3)  # what the code put there is seen by the next lift
    assert run(lift.lift(make(b)), 1.0) == 2.0
    assert len(traces) == 2


def test_unhashable_static_compares_by_identity() -> None:
    class Config:
        __hash__ = None  # type: ignore[assignment]

    cfg = Config()
    a = lift.lift(lambda x: (cfg, x)[1])
    b = lift.lift(lambda x: (cfg, x)[1])
    assert jax.tree_util.tree_structure(a) != jax.tree_util.tree_structure(
        b
    )  # two codes

    def make(c):
        return lift.lift(lambda x: (c, x)[1])

    assert jax.tree_util.tree_structure(make(cfg)) == jax.tree_util.tree_structure(
        make(cfg)
    )
    assert jax.tree_util.tree_structure(make(cfg)) != jax.tree_util.tree_structure(
        make(Config())
    )


def test_tracer_hidden_in_object_points_to_closure_convert() -> None:
    class Box:
        def __init__(self, v):
            self.v = v

    def make(x):
        box = Box([x])
        return lift.lift(lambda y: box.v[0] * y)

    with pytest.raises(
        lift.LiftError,
        match=r"(?s)captures variable 'box', a Box that is not a pytree and holds a tracer at "
        r"box\.v\[0\].*lift\.closure_convert",
    ):
        jax.jit(make)(1.0)


def test_container_too_deep_is_lift_error() -> None:
    deep: list[object] = []
    node = deep
    for _ in range(20_000):
        node.append([])
        node = node[0]  # type: ignore[assignment]
    with pytest.raises(
        lift.LiftError,
        match=r"(?s)captures variable 'deep', a container that contains itself or nests "
        r"more than 400 levels deep.*static=\('deep',\)",
    ):
        lift.lift(lambda: deep)


def test_container_of_moderate_depth_lifts() -> None:
    deep: list[object] = []
    node = deep
    for _ in range(300):
        node.append([])
        node = node[0]  # type: ignore[assignment]
    out = lift.lift(lambda: deep)()
    assert out is deep  # holding no dynamic leaf: the user's own list


def test_cyclic_container_is_lift_error() -> None:
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(
        lift.LiftError,
        match=r"(?s)captures variable 'loop', a container that contains itself",
    ):
        lift.lift(lambda: loop)
    with pytest.raises(lift.LiftError, match=r"(?s)contains itself or nests"):
        lift.lift({"a": loop})


# -- never mutating -------------------------------------------------------------------


def test_never_mutates_function_cells_defaults() -> None:
    w = jnp.ones(2)
    items = [1.0, 2.0]

    def f(x, scale=0.5, *, bias=jnp.zeros(2)):
        return w * x * scale + bias + sum(items)

    def state():
        return (
            f.__code__,
            f.__closure__,
            [c.cell_contents for c in f.__closure__ or ()],
            f.__defaults__,
            dict(f.__kwdefaults__ or {}),
            copy.copy(f.__dict__),
        )

    before = state()
    g = lift.lift(f)
    jax.jit(lambda g, x: g(x))(g, 1.0)
    jax.vmap(lambda g: g(1.0))(jax.tree_util.tree_map(lambda v: jnp.stack([v, v]), g))
    after = state()
    assert before[0] is after[0] and before[1] is after[1] and before[3] is after[3]
    assert all(a is b for a, b in zip(before[2], after[2], strict=True))
    assert before[4].keys() == after[4].keys()
    assert all(before[4][k] is after[4][k] for k in before[4])
    assert before[5] == after[5]
    assert items == [1.0, 2.0]


def test_nonlocal_rebind_of_dynamic_capture_refused() -> None:
    total = jnp.zeros(())

    def add(x):
        nonlocal total
        total = total + x
        return total

    with pytest.raises(
        lift.LiftError,
        match=r"(?s)add .*test_capture.py:\d+\) rebinds the captured variable 'total'.*pass 'total' as an argument",
    ):
        lift.lift(add)


def test_nonlocal_rebind_of_function_capture_refused() -> None:
    def helper(x):
        return x

    def f(x):
        nonlocal helper
        helper = abs
        return x

    with pytest.raises(
        lift.LiftError, match=r"(?s)rebinds the captured variable 'helper'.*a function"
    ):
        lift.lift(f)


def test_nonlocal_rebind_of_static_capture_acts_on_copy() -> None:
    count = 0

    def tick():
        nonlocal count
        count += 1
        return count

    g = lift.lift(tick)
    assert (g(), g()) == (1, 2)
    assert count == 0
    assert tick.__closure__[0].cell_contents == 0  # type: ignore[index]


def test_optax_cosine_schedule_nonlocal() -> None:
    optax = pytest.importorskip("optax")
    schedule = optax.cosine_decay_schedule(0.1, decay_steps=100)
    g = lift.lift(schedule)
    assert g(50) == pytest.approx(schedule(50))
    assert jax.jit(lambda g, c: g(c))(g, 50) == pytest.approx(
        float(schedule(50)), rel=1e-6
    )
    cells = {
        n: c.cell_contents
        for n, c in zip(
            schedule.__code__.co_freevars, schedule.__closure__ or (), strict=True
        )
    }
    assert isinstance(cells["decay_steps"], (int, float))


def test_empty_cell_is_read_when_called() -> None:
    # An empty cell is the user's: Python binds it later, and the lifted
    # function reads it then, as the original does.
    def outer():
        def f():
            return later

        g = lift.lift(f)
        with pytest.raises(NameError, match="later"):
            g()
        later = 1
        return g, f

    g, f = outer()
    assert f() == 1
    assert g() == 1


def test_recursive_and_mutually_recursive() -> None:
    def fact(n):
        return 1 if n <= 1 else n * fact(n - 1)

    def is_even(n):
        return True if n == 0 else is_odd(n - 1)

    def is_odd(n):
        return False if n == 0 else is_even(n - 1)

    assert lift.lift(fact)(5) == 120
    assert lift.lift(is_even)(10) is True
    assert lift.lift(is_odd)(7) is True


def test_shared_cells_stay_shared() -> None:
    def make():
        n = 0

        def inc():
            nonlocal n
            n += 1

        def get():
            return n

        def both():
            inc()
            inc()
            return get()

        return both

    assert lift.lift(make())() == 2


def test_globals_not_captured() -> None:
    g = lift.lift(lambda x: x * GLOBAL_SCALE)
    assert leaf_paths(g) == {}
    assert g(2.0) == 6.0


GLOBAL_SCALE = 3.0


def test_ten_thousand_nested_closures() -> None:
    fns = [lambda x: x + 1]
    for _ in range(10_000):
        prev = fns[-1]
        fns.append(
            lambda x, prev=prev: prev(x)
        )  # defaults nest, calls do not recurse in lift
    g = lift.lift(fns[-1])
    assert len(jax.tree_util.tree_leaves(g)) == 0
    assert isinstance(lift.unlift(g), types.FunctionType)


# -- introspection ---------------------------------------------------------------------


def test_introspection() -> None:
    lr = 0.1

    def step(x: float, n: int = 2) -> float:
        """Doc of step."""
        return x * lr * n

    g = lift.lift(step)
    assert g.__name__ == "step"
    assert g.__qualname__ == step.__qualname__
    assert g.__doc__ == "Doc of step."
    assert g.__module__ == __name__
    assert g.__wrapped__ is step
    assert inspect.signature(g) == inspect.signature(step)
    h = jax.jit(lambda g: g)(g)
    assert h.__name__ == "step" and h.__doc__ == "Doc of step."
    assert inspect.signature(h) == inspect.signature(step)


def test_repr_names_captures() -> None:
    w = jnp.ones((2, 3))
    lr = 0.1
    n = 4

    def step(x):
        return w * lr * n * x

    text = repr(lift.lift(step))
    assert text.startswith("Lifted(test_repr_names_captures.<locals>.step")
    assert "w=float32[2,3]" in text and "lr=float32[]=0.1" in text and "n=4" in text


def test_key_paths_name_variables() -> None:
    lr = 0.1
    w = jnp.ones(2)

    def inner(x):
        return x * lr

    def outer(x, params=(w, {"b": w})):
        return inner(x) + params[0]

    assert set(leaf_paths(lift.lift(outer))) == {
        ".captures['inner'].captures['lr']",
        ".captures['params'][0]",
        ".captures['params'][1]['b']",
    }


def test_key_paths_inside_a_container() -> None:
    lr = 0.1
    assert set(leaf_paths({"opt": lift.lift(lambda: lr)})) == {"['opt'].captures['lr']"}


@jax.tree_util.register_pytree_node_class
class _Checked:
    """A pytree whose constructor, which its unflatten calls, checks its child."""

    def __init__(self, w: jax.Array) -> None:
        if not hasattr(w, "shape"):
            raise TypeError(f"_Checked needs an array, got {type(w).__name__}")
        self.w = w

    def tree_flatten(self) -> tuple[tuple[jax.Array], None]:
        return (self.w,), None

    @classmethod
    def tree_unflatten(cls, aux: None, children: tuple[jax.Array]) -> _Checked:
        return cls(*children)


def test_a_pytree_checking_its_children_is_keyed_by_position_and_jits_once() -> None:
    def make(w: jax.Array) -> Any:
        c = _Checked(w)
        return lift.lift(lambda x: x * c.w)

    a, b, c = make(jnp.ones(2)), make(2 * jnp.ones(2)), make(jnp.ones(3))
    # Key paths and the repr do not rebuild it around placeholders it refuses;
    # its child is keyed by position, as JAX keys a node registered without keys.
    assert set(leaf_paths({"f": a})) == {"['f'].captures['c'][<flat index 0>]"}
    assert repr(a).endswith("(c=_Checked(float32[2])))")
    traces = TraceCounter()
    jitted = traces.jit(lambda f: f(1.0))
    assert list(jitted(a)) == [1.0, 1.0] and list(jitted(b)) == [2.0, 2.0]
    assert traces.traces == 1
    assert lift.diff(a, b) is None
    assert "float32[2]" in str(lift.diff(a, c)) and "float32[3]" in str(lift.diff(a, c))


def test_captures_property() -> None:
    lr = 0.1
    n = 3
    g = lift.lift(lambda x, scale=2.0: x * lr * n * scale)
    assert g.captures == {"lr": 0.1, "n": 3, "scale": 2.0}
    # In the repr's order: free variables, then defaults.
    assert list(g.captures) == ["lr", "n", "scale"]
    assert repr(g).endswith("(lr=float32[]=0.1, n=3, scale=float32[]=2.0))")


def test_unlift_gives_plain_function_with_current_leaves() -> None:
    w = jnp.asarray(1.0)
    g = lift.lift(lambda x: w * x)
    doubled = jax.tree_util.tree_map(lambda v: 2 * v, g)
    f = lift.unlift(doubled)
    assert isinstance(f, types.FunctionType)
    assert f(3.0) == 6.0
    tree = lift.unlift({"g": g, "k": 1})
    assert isinstance(tree["g"], types.FunctionType) and tree["k"] == 1


def test_method_binding_on_class() -> None:
    class A:
        scale = 2.0

        @lift.lift
        def f(self, x):
            return self.scale * x

    assert A().f(3.0) == 6.0


# -- subclasses ------------------------------------------------------------------------


class Model(lift.Lifted):
    def simulate(self, x):
        return self(x)


def test_subclass_is_pytree_and_survives_transforms() -> None:
    w = jnp.asarray(2.0)

    @Model
    def m(x):
        return w * x

    assert isinstance(m, Model)
    assert m.simulate(3.0) == 6.0
    assert isinstance(jax.jit(lambda m: m)(m), Model)
    assert isinstance(
        jax.vmap(lambda m: m, axis_size=2)(
            jax.tree_util.tree_map(lambda v: jnp.stack([v, v]), m)
        ),
        Model,
    )
    assert isinstance(jax.grad(lambda m: m(1.0))(m), Model)
    assert isinstance(Model(lambda: w), Model)
    leaves, treedef = jax.tree_util.tree_flatten(m)
    assert isinstance(jax.tree_util.tree_unflatten(treedef, leaves), Model)


def test_subclass_and_base_differ_in_treedef() -> None:
    w = jnp.asarray(2.0)
    fn = lambda x: w * x
    assert jax.tree_util.tree_structure(Model(fn)) != jax.tree_util.tree_structure(
        lift.lift(fn)
    )


# -- equality and compilation ------------------------------------------------------------


def test_same_code_equal_statics_share_program() -> None:
    def make(lr, n):
        return lift.lift(lambda x: x * lr * n)

    counter = TraceCounter()
    apply = counter.jit(lambda g, x: g(x))
    assert apply(make(0.1, 2), 1.0) == pytest.approx(0.2)
    assert apply(make(0.3, 2), 1.0) == pytest.approx(0.6)
    assert counter.traces == 1
    assert apply(make(0.3, 3), 1.0) == pytest.approx(0.9)
    assert counter.traces == 2


def test_same_qualname_different_code_never_equal() -> None:
    def make():
        return lambda x: x + 1.0, lambda x: x + 2.0

    a, b = (lift.lift(f) for f in make())
    assert a.__qualname__ == b.__qualname__
    assert jax.tree_util.tree_structure(a) != jax.tree_util.tree_structure(b)
    apply = jax.jit(lambda g, x: g(x))
    assert apply(a, 4.0) == 5.0
    assert apply(b, 4.0) == 6.0


def test_static_int_and_bool_never_mix() -> None:
    def make(flag):
        return lift.lift(lambda x: x if flag is True else -x)

    apply = jax.jit(lambda g, x: g(x))
    assert apply(make(True), 1.0) == 1.0
    assert apply(make(1), 1.0) == -1.0


def test_key_paths_of_a_deep_chain_are_elided_and_linear() -> None:
    def make(prev, w):
        def step(x):
            return prev, x + w

        return step

    g = None
    for i in range(2000):
        g = make(g, float(i))
    paths = list(leaf_paths(lift.lift(g)))
    assert len(paths) == 2000
    assert paths[0] == ".captures['w']"
    assert paths[-1].startswith(".captures['prev']" * 8 + "...(")
    assert paths[-1].endswith(".captures['prev']" * 7 + ".captures['w']")
    assert len(set(paths)) == len(paths)


def test_signed_zero_float_captures_keep_their_sign() -> None:
    def make(z):
        return lift.lift(lambda: z)

    for _ in range(2):  # the second time from the cache of converted scalars
        plus, minus = (jax.tree_util.tree_leaves(make(z))[0] for z in (0.0, -0.0))
        assert not jnp.signbit(plus)
        assert jnp.signbit(minus)


def _appends(params: Any) -> Any:
    def f(x):
        params.append(x)
        return x

    return f


def _stores_item(params: Any) -> Any:
    def f(x, k=0):
        params[k] = x
        return x

    return f


def _deletes_item(params: Any) -> Any:
    def f(x):
        del params[0]
        return x

    return f


def _updates_default(params: Any) -> Any:
    def f(x, params=params):
        params.update(b=x)
        return x

    return f


def _pops_kwdefault(params: Any) -> Any:
    def f(x, *, params=params):
        params.pop()
        return x

    return f


def _inner_appends(params: Any) -> Any:
    def f(x):
        def inner():
            params.append(x)

        inner()
        return x

    return f


@pytest.mark.parametrize(
    ("make", "value"),
    [
        (_appends, [jnp.ones(2)]),
        (_stores_item, [0.5]),
        (_stores_item, {0: jnp.ones(1)}),
        (_deletes_item, [0.5, 1.0]),
        (_updates_default, {"a": 0.1}),
        (_pops_kwdefault, [0.1]),
        (_inner_appends, [np.float32(1.0)]),
    ],
    ids=["append", "item", "dict item", "del item", "update", "pop", "inner"],
)
def test_a_call_mutating_a_container_that_holds_leaves_is_refused(
    make: Any, value: Any
) -> None:
    kind = type(value).__name__
    before = repr(value)
    with pytest.raises(
        lift.LiftError,
        match=rf"(?s){make.__name__}.<locals>.f \(.*test_capture.py:\d+\) mutated the "
        rf"captured variable 'params' in place while it ran: a {kind} that lift "
        r"rebuilds around its leaves \(it holds dynamic values.*reached lift's "
        r"copy and your.*Fix: pass 'params' as an argument.*"
        r"mutates-a-rebuilt-container",
    ):
        lift.lift(make(value))(1.0)
    assert repr(value) == before  # your object: untouched


def test_reading_a_container_that_holds_leaves_or_a_local_of_its_name_is_fine() -> None:
    params = [jnp.ones(2), 0.5]

    def f(x):
        def inner():
            params = []  # a local of its own
            params.append(x)
            return params

        return params[0] * params[1] * x + len(inner())

    assert jnp.allclose(lift.lift(f)(2.0), 2.0)


# A message whose fix keeps a capture static says so in the form that works
# where the error was raised: `lift(f, static=...)` for `lift.lift`,
# `lift.jit(lift.lift(f, static=...))` under `lift.jit`; both forms then work.


def _rebinds(n: Any) -> Any:
    def f(x):
        nonlocal n
        n = n + 1
        return x * n

    return f


def _mixed_keys(n: Any) -> Any:
    table = {1: n, "a": n}

    def f(x):
        return x * table[1]

    return f


def _cyclic(n: Any) -> Any:
    ring: list[Any] = [n]
    ring.append(ring)

    def f(x):
        return x * ring[0]

    return f


def _shape(n: Any) -> Any:
    def f(x):
        return jnp.zeros(int(n)) + x

    return f


_STATIC_FIXES: dict[str, tuple[Any, Any, str, dict[str, Any]]] = {
    "rebinds": (_rebinds, jnp.ones(()), "n", {}),
    "flattening refused": (_mixed_keys, 0.5, "table", {}),
    "container cycle": (_cyclic, 0.5, "ring", {}),
    "concrete value": (_shape, 2.0, "n", {}),
    "dynamic predicate": (_shape, "2", "n", {"dynamic": lambda leaf: True}),
}


@pytest.mark.parametrize("case", list(_STATIC_FIXES))
def test_a_static_fix_is_written_for_lift_jit_under_lift_jit(case: str) -> None:
    make, value, name, options = _STATIC_FIXES[case]
    lift_form = rf"`lift\(f, static=\('{name}',\)\)`"
    jit_form = rf"`lift\.jit\(lift\.lift\(f, static=\('{name}',\)\)\)`"
    with pytest.raises(lift.LiftError, match=rf"Fix: .*{lift_form}"):
        jax.jit(lambda g, x: g(x))(lift.lift(make(value), **options), 1.0)
    with pytest.raises(lift.LiftError, match=rf"Fix: .*{jit_form}"):
        lift.jit(make(value), **options)(1.0)
    if case != "rebinds":  # (an array cannot be made static; a float can)
        expected = make(value)(1.0)
        assert np.allclose(
            lift.jit(lift.lift(make(value), static=(name,)))(1.0), expected
        )
        assert np.allclose(lift.lift(make(value), static=(name,))(1.0), expected)


def test_a_static_fix_under_lift_jit_lower_and_trace() -> None:
    jit_form = r"`lift\.jit\(lift\.lift\(f, static=\('n',\)\)\)`"
    for stage in ("lower", "trace"):
        with pytest.raises(lift.LiftError, match=rf"Fix: .*{jit_form}"):
            getattr(lift.jit(_shape(2.0)), stage)(1.0)


def test_the_rebinding_fix_works_under_lift_jit_for_a_float() -> None:
    f = lift.jit(lift.lift(_rebinds(1.0), static=("n",)))
    assert float(f(1.0)) == 2.0


def test_a_lifted_on_a_class_binds_self_and_reads_as_itself_from_the_class():
    def make(scale: float) -> Any:
        return lift.lift(lambda self, x: scale * x + self.offset)

    method = make(2.0)

    class Model:
        step = method
        offset = 1.0

    assert Model.step is method
    assert float(Model().step(3.0)) == 7.0


def test_lifting_a_pytree_of_lifted_functions_with_options_applies_them():
    def make(lr: float, n: int) -> Any:
        return lift.lift(lambda x: lr * x * n)

    made = lift.lift({"f": make(0.5, 3)}, static=("n",))
    assert isinstance(made["f"], lift.Lifted)
    assert jax.tree.leaves(made) == [0.5]  # `n` is now part of the program
    assert float(made["f"](2.0)) == 3.0


def test_a_lifted_partial_of_a_callable_pytree_is_named_partial() -> None:
    class Affine(eqx.Module):
        w: jax.Array

        def __call__(self, b: Any, x: Any) -> Any:
            return self.w * x + b

    g = lift.lift(functools.partial(Affine(jnp.ones(2)), 1.0))
    assert g.__name__ == g.__qualname__ == "partial"
    assert jnp.array_equal(g(jnp.ones(2)), jnp.full(2, 2.0))


def test_functions_sharing_one_tuple_of_defaults_keep_their_own_names() -> None:
    # Python makes one constant tuple `(None,)` for both `def`s, and the walk
    # reads a tuple of defaults once: each function keeps its parameter's name,
    # and `static=` still applies.
    def make(lr: float) -> Any:
        def f(x: Any, params: Any = None) -> Any:
            return x * lr

        def g(x: Any, p: Any = None) -> Any:
            return x * lr

        return f, g

    f, g = make(0.1)
    assert f.__defaults__ is g.__defaults__
    for fn, name in ((f, "params"), (g, "p"), (f, "params"), (g, "p")):
        assert list(lift.lift(fn).captures) == ["lr", name]
        assert jax.tree.leaves(lift.lift(fn, static=(name,))) == [0.1]
