"""The leak scan itself: what it walks, how it names things, and its bounds."""

from __future__ import annotations

import functools
import re
import sys
import types
import weakref
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from helpers import calls_made, equinox_static, several_devices, suspended

import lift
from lift._leaks.scan import scan_tracers

pytestmark = pytest.mark.lift_allow_leaks

STASH: list[Any] = []


@pytest.fixture(autouse=True)
def _jax_leak_checks_off() -> Iterator[None]:
    with jax.check_tracer_leaks(False):
        yield
    STASH.clear()


def _escaped(dtype: Any = jnp.float32, shape: tuple[int, ...] = ()) -> Any:
    """A tracer whose `jit` has exited."""
    box: list[Any] = []

    def grab(x: Any) -> Any:
        box.append(x)
        return x

    jax.jit(grab)(jnp.zeros(shape, dtype))
    return box[0]


def test_report_reads_like_the_issue() -> None:
    def step(x: Any) -> Any:
        def scaled(y: Any) -> Any:
            return x * y

        STASH.append(scaled)
        return x * 2

    jax.jit(step)(1.0)
    (leak,) = lift.find_leaks(step)
    line = STASH[0].__code__.co_firstlineno
    assert str(leak) == (
        f"STASH[0] -> {STASH[0].__qualname__} ({__file__}:{line}), captured "
        "variable 'x': float32[] from jit(step) — return the value from the "
        f"transformed function instead of storing {STASH[0].__qualname__} in "
        "STASH[0]"
    )
    assert leak.path == "STASH[0].captures['x']"
    assert (leak.function, leak.variable, leak.lineno) == (
        "test_report_reads_like_the_issue.<locals>.step.<locals>.scaled",
        "x",
        line,
    )
    assert leak.tracer == "float32[] from jit(step)"


def test_check_leaks_lists_every_leak() -> None:
    a, b = _escaped(), _escaped(jnp.int32, (2,))
    with pytest.raises(lift.LeakError, match=r"2 tracers escaped") as info:
        lift.check_leaks([a, b])
    lines = str(info.value).splitlines()
    assert lines[1:] == [
        "  roots[0][0]: float32[] from jit(grab) — return the value from the "
        "transformed function instead of storing it",
        "  roots[0][1]: int32[2] from jit(grab) — return the value from the "
        "transformed function instead of storing it",
        "Docs: python -m lift explain leak-report",
    ]
    assert info.value.anchor == "leak-report"
    assert lift.check_leaks([jnp.ones(2)]) is None


def test_live_tracers_are_not_leaks() -> None:
    found: list[list[Any]] = []

    @jax.jit
    def f(x: Any) -> Any:
        found.append(lift.find_leaks(lambda: x, [x]))
        return x

    f(1.0)
    assert found == [[]]


def test_leak_error_is_a_runtime_error() -> None:
    assert issubclass(lift.LeakError, RuntimeError)
    with pytest.raises(RuntimeError, match="escaped"):
        lift.check_leaks(_escaped())


def test_cycles_are_fine() -> None:
    tracer = _escaped()
    a: dict[str, Any] = {}
    b: list[Any] = [a]
    a["b"] = b
    a["t"] = tracer

    def f() -> Any:
        return f, a

    (leak,) = lift.find_leaks(f)
    assert leak.path == f"{f.__qualname__}.captures['a']['t']"


def test_deep_closures_and_containers_do_not_recurse() -> None:
    tracer = _escaped()

    def wrap(g: Any) -> Any:
        return lambda: g

    fn: Any = lambda: tracer
    for _ in range(10_000):
        fn = wrap(fn)
    nested: Any = _escaped()
    for _ in range(100_000):
        nested = [nested]
    assert sys.getrecursionlimit() < 10_000
    leaks = lift.find_leaks(fn, nested)
    assert [leak.variable for leak in leaks] == ["tracer", None]
    assert leaks[0].path.count(".captures['g']") == 10_000


def test_limit_bounds_the_walk() -> None:
    nested: Any = _escaped()
    for _ in range(50):
        nested = [nested]
    assert lift.find_leaks(nested, limit=10) == []
    assert len(lift.find_leaks(nested, limit=100)) == 1


def test_shortest_path_wins_and_each_tracer_is_reported_once() -> None:
    tracer = _escaped()
    deep = {"a": {"b": [tracer]}}
    (leak,) = lift.find_leaks([deep, tracer])
    assert leak.path == "roots[0][1]"


def _two_lambdas(t: Any) -> tuple[Any, Any]:
    """Two functions with one qualified name holding `t` under other names."""
    first, second = t, t
    return (lambda: first), (lambda: second)


@pytest.mark.parametrize(
    "make",
    [
        lambda t: ({"k": t}, [t]),
        lambda t: ({"k": t}, types.SimpleNamespace(v=t)),
        lambda t: ({"k": t}, {"j": t}),
        _two_lambdas,
    ],
    ids=["dict-list", "dict-object", "two-dicts", "two-lambdas"],
)
def test_a_tracer_two_roots_reach_alike_is_named_from_one_whatever_their_order(
    make: Any,
) -> None:
    # Regression: it was named from the root given first.
    roots = make(_escaped())

    def named(order: tuple[Any, ...]) -> list[tuple[str, Any]]:
        # `roots[i]` read as the object it stands for.
        return [
            (
                re.sub(
                    r"^roots\[(\d+)\]", lambda m: f"<{id(order[int(m[1])])}>", leak.path
                ),
                leak.variable,
            )
            for leak in lift.find_leaks(*order)
        ]

    assert named(roots) == named(roots[::-1])
    assert len(named(roots)) == 1


def test_empty_cells_and_unbound_variables() -> None:
    def outer() -> Any:
        def inner() -> Any:
            return later

        found = lift.find_leaks(inner)
        later = 1
        return found

    assert outer() == []


def test_objects_slots_partials_methods_and_kwdefaults() -> None:
    tracer = _escaped()

    class Slots:
        __slots__ = ("x",)

    class Plain:
        def method(self) -> Any:
            return self

    slotted = Slots()
    slotted.x = tracer
    plain = Plain()
    plain.attr = tracer  # type: ignore[attr-defined]

    def fn(a: Any, *, k: Any = tracer) -> Any:
        return a

    part = functools.partial(fn, tracer, k=tracer)
    found = {
        name: lift.find_leaks(obj)
        for name, obj in {
            "slots": slotted,
            "attr": plain,
            "method": plain.method,
            "kwdefault": fn,
            "partial": part,
        }.items()
    }
    assert found["slots"][0].path == "roots[0].x"
    assert found["attr"][0].path == "roots[0].attr"
    assert (found["method"][0].variable, found["method"][0].kind) == (
        "self",
        "bound object",
    )
    assert found["method"][0].detail == "self.attr"
    assert (found["kwdefault"][0].variable, found["kwdefault"][0].kind) == (
        "k",
        "default of parameter",
    )
    assert [(leak.variable, leak.kind) for leak in found["partial"]] == [
        ("a", "partial argument")
    ]


def test_a_bound_lift_jit_methods_instance_is_named_as_a_bound_methods() -> None:
    class Model:
        w: Any = None

        @lift.jit
        def apply(self, x: Any) -> Any:
            return x

    model = Model()
    kept: list[Any] = []

    @jax.jit
    def step(x: Any) -> Any:
        model.w = x
        kept.append(model.apply)
        return x

    step(1.0)
    (leak,) = lift.find_leaks(kept)
    line = Model.apply.__wrapped__.__code__.co_firstlineno
    assert (leak.function, leak.variable, leak.kind, leak.detail) == (
        "test_a_bound_lift_jit_methods_instance_is_named_as_a_bound_methods"
        ".<locals>.Model.apply",
        "self",
        "bound object",
        "self.w",
    )
    assert (leak.filename, leak.lineno) == (__file__, line)


def test_globals_named_by_code_including_nested_code() -> None:
    def step() -> Any:
        def inner() -> Any:
            return STASH

        return inner

    STASH.append(_escaped())
    (leak,) = lift.find_leaks(step)
    assert (leak.path, leak.variable, leak.kind) == (
        "STASH[0]",
        "STASH",
        "global variable",
    )
    assert "in global 'STASH' used by" in str(leak)


def test_library_functions_globals_are_not_walked() -> None:
    STASH.append(_escaped())
    # jnp.sum's module names many globals; none of them is STASH, and the walk
    # stays out of library modules.
    assert lift.find_leaks(jnp.sum, functools.reduce) == []


def test_modules_as_roots() -> None:
    module = types.ModuleType("scratch")
    module.kept = [_escaped()]  # type: ignore[attr-defined]
    (leak,) = lift.find_leaks(module)
    assert leak.path == "scratch.kept[0]"


def test_pytree_nodes_are_walked_by_key_path() -> None:
    tracer = _escaped()
    partial = jax.tree_util.Partial(lambda a, b: a + b, tracer)
    (leak,) = lift.find_leaks(partial)
    assert leak.path.startswith("roots[0]")
    assert leak.tracer == "float32[] from jit(grab)"


def test_traced_program_constants() -> None:
    box: list[Any] = []

    @jax.jit
    def f(x: Any) -> Any:
        box.append(jax.make_jaxpr(lambda y: y * x)(1.0))
        return x

    f(2.0)
    (leak,) = lift.find_leaks(box)
    assert leak.path == "roots[0][0].consts[0]"


def test_lifted_captures_are_named() -> None:
    box: list[Any] = []

    def make(x: Any) -> Any:
        def shifted(y: Any) -> Any:
            return y + x

        box.append(lift.lift(shifted))
        return x

    jax.jit(make)(1.0)
    lifted = box[0]
    leaks = lift.find_leaks(lifted)
    assert [(leak.function, leak.variable) for leak in leaks] == [
        (lifted.__qualname__, "x")
    ]
    assert leaks[0].path == f"{lifted.__qualname__}.captures['x']"
    (path, _), *_ = jax.tree_util.tree_flatten_with_path(lifted)[0]
    assert "x" in jax.tree_util.keystr(path)


def test_scan_with_named_roots() -> None:
    (leak,), _ = scan_tracers([("output", {"w": _escaped()})])
    assert leak.path == "output['w']"


def test_objects_that_fail_to_flatten_or_read_are_opaque() -> None:
    class Broken:
        __slots__ = ("x",)

        def __getattribute__(self, name: str) -> Any:
            if name == "x":
                raise RuntimeError("unreadable")
            return object.__getattribute__(self, name)

    assert lift.find_leaks(Broken(), [Broken()]) == []


# -- Tracers of traces still running are never leaks ----------------------------


def _mesh() -> Any:
    return jax.make_mesh((len(jax.devices()),), ("i",))


def test_outer_jit_tracer_inside_shard_map_is_live() -> None:
    from jax.sharding import PartitionSpec as P

    seen: list[list[lift.Leak]] = []

    def outer(x: Any) -> Any:
        c = x.sum()

        def body(y: Any) -> Any:
            seen.append(lift.find_leaks(c, y))
            return y + c

        return jax.shard_map(body, mesh=_mesh(), in_specs=P(), out_specs=P())(x)

    jax.jit(outer)(jnp.arange(4.0))
    assert seen == [[]]


def test_outer_jit_tracer_inside_pmap_is_live() -> None:
    seen: list[list[lift.Leak]] = []

    def outer(x: Any) -> Any:
        c = x.sum()

        def body(y: Any) -> Any:
            seen.append(lift.find_leaks(c))
            return y + c

        return jax.pmap(body)(x)

    jax.jit(outer)(jnp.arange(float(jax.device_count())))
    assert seen == [[]]


def test_checked_jit_inside_shard_map_under_jit() -> None:
    from jax.sharding import PartitionSpec as P

    def outer(x: Any) -> Any:
        c = x.sum()
        body = lift.checked(jax.jit)(lambda y: y + c)
        return jax.shard_map(body, mesh=_mesh(), in_specs=P(), out_specs=P())(x)

    assert float(jax.jit(outer)(jnp.ones(2))[0]) == 3.0


def test_shard_map_twin_an_escaped_tracer_is_still_found() -> None:
    from jax.sharding import PartitionSpec as P

    def outer(x: Any) -> Any:
        c = x.sum()

        def body(y: Any) -> Any:
            STASH.append(c)
            return y + c

        return jax.shard_map(body, mesh=_mesh(), in_specs=P(), out_specs=P())(x)

    jax.jit(outer)(jnp.arange(4.0))
    (leak,) = lift.find_leaks(STASH)
    assert leak.tracer == "float32[] from jit(outer)"


# -- Holders beyond closures: each pair is a leak and its clean twin ------------


def test_generator_locals_name_the_generator() -> None:
    gen = suspended(_escaped())
    (leak,) = lift.find_leaks(gen)
    assert (leak.function, leak.variable) == ("suspended.<locals>.gen", "v")
    assert leak.kind == "local variable of a suspended generator"
    assert leak.lineno == gen.gi_code.co_firstlineno


def test_generator_scan_does_not_keep_its_locals_alive() -> None:
    import weakref

    class Big:
        pass

    def gen() -> Iterator[Any]:
        big = Big()
        ref.append(weakref.ref(big))
        yield None
        del big
        yield None

    ref: list[Any] = []
    g = gen()
    next(g)
    assert lift.find_leaks(g) == []
    next(g)
    assert ref[0]() is None  # the scan left no snapshot of `big` behind


def test_checked_jit_finds_a_namespace_it_stored_into() -> None:
    ns = types.SimpleNamespace()

    def step(x: Any) -> Any:
        ns.last = x
        return x

    with pytest.raises(lift.LeakError, match=r"ns\.last: float32\[\] from jit"):
        lift.checked(jax.jit)(step)(1.0)
    del ns.last
    assert lift.checked(jax.jit)(lambda x: x + 1)(1.0) == 2.0


# -- Advice fits the holder ------------------------------------------------------

_REGISTRY: list[Any] = []


def test_a_stored_lifted_function_is_told_to_return_not_to_lift() -> None:
    def make(x: Any) -> Any:
        def shifted(y: Any) -> Any:
            return y + x

        _REGISTRY.append(lift.lift(shifted))
        return x

    try:
        jax.jit(make)(1.0)
        (leak,) = lift.find_leaks(_REGISTRY)
    finally:
        _REGISTRY.clear()
    assert leak.path == "roots[0][0].captures['x']"
    assert leak.variable == "x"
    assert "is already lifted" in leak.hint
    assert "return it from the transformed function" in leak.hint
    assert "lift the function" not in str(leak)


def test_a_plain_closure_is_told_to_lift_or_pass_twin() -> None:
    def make(x: Any) -> Any:
        def shifted(y: Any) -> Any:
            return y + x

        _REGISTRY.append(shifted)
        return x

    try:
        jax.jit(make)(1.0)
        (leak,) = lift.find_leaks(_REGISTRY)
    finally:
        _REGISTRY.clear()
    assert leak.hint == "lift the function or pass x as an argument"


def test_a_static_field_is_told_to_return_the_value() -> None:
    with pytest.warns(UserWarning, match="A JAX array is being set as static"):
        state = equinox_static(_escaped())
    (leak,) = lift.find_leaks(state)
    assert leak.path == "roots[0].<static>[1]"
    assert leak.hint.startswith("static data of ")
    assert "make the field a pytree node" in leak.hint
    with pytest.raises(lift.LeakError, match=r"<static>\[1\]: float32\[\] from jit"):
        lift.check_leaks(state)


def test_static_field_clean_twin() -> None:
    assert lift.find_leaks(equinox_static(len)) == []


def test_tree_util_partial_arguments_name_function_and_parameter() -> None:
    def scale(factor: Any, y: Any) -> Any:
        return factor * y

    (leak,) = lift.find_leaks(jax.tree_util.Partial(scale, _escaped()))
    assert (leak.function, leak.variable) == (scale.__qualname__, "factor")
    assert leak.kind == "partial argument"
    assert lift.find_leaks(jax.tree_util.Partial(scale, jnp.ones(()))) == []


def test_function_attribute_names_function_and_attribute() -> None:
    def holder() -> None:
        pass

    holder.state = _escaped()  # type: ignore[attr-defined]
    (leak,) = lift.find_leaks(holder)
    assert (leak.function, leak.variable) == (holder.__qualname__, "state")
    assert leak.kind == "function attribute"


@several_devices
def test_pmap_tracers_are_described_as_pmap() -> None:
    box: list[Any] = []

    def f(x: Any) -> Any:
        box.append(x)
        return x

    jax.pmap(f)(jnp.ones(2))
    (leak,) = lift.find_leaks(box)
    assert leak.tracer == "float32[] from pmap"
    assert lift.find_leaks(jax.pmap(lambda x: x)(jnp.ones(2))) == []  # twin


def _unflattenable_jit() -> Any:
    """A `lift.jit` function whose flatten raises: it captures a list that
    contains itself."""
    loop: list[Any] = []
    loop.append(loop)

    @lift.jit
    def cyclic(y: Any) -> Any:
        return y if loop else -y

    return cyclic


def _jit_over(v: Any) -> Any:
    @lift.jit
    def scaled(y: Any) -> Any:
        return y * v

    return scaled


def test_report_is_the_same_whatever_the_order_of_roots() -> None:
    # The walk used to decide how to open a type from its first instance: after
    # a `lift.jit` function whose flatten raised, the next was opened as a
    # plain object (and told to lift what is already lifted).
    bad, good = _unflattenable_jit(), _jit_over(_escaped())
    with pytest.raises(lift.LiftError, match="contains itself"):
        jax.tree_util.tree_leaves(bad)
    (first,) = lift.find_leaks(bad, good)
    (second,) = lift.find_leaks(good, bad)
    assert first.path.replace("roots[1]", "roots[0]") == second.path
    assert (first.function, first.variable, first.hint) == (
        second.function,
        second.variable,
        second.hint,
    )
    assert "is already lifted" in first.hint


def test_report_is_the_same_whatever_the_order_of_roots_twin() -> None:
    bad, good = _unflattenable_jit(), _jit_over(jnp.float32(2.0))
    assert lift.find_leaks(bad, good) == lift.find_leaks(good, bad) == []


class _Holder:
    def __init__(self, value: Any) -> None:
        self.value = value


def test_a_tracer_two_roots_reach_is_named_from_the_same_one_in_any_order() -> None:
    tracer = _escaped()
    model = _Holder(tracer)
    cache = {"last": tracer}

    def uses_model() -> Any:
        return model

    def uses_cache() -> Any:
        return cache

    def report(*roots: Any) -> list[tuple[str, Any, Any]]:
        return [(x.path, x.function, x.variable) for x in lift.find_leaks(*roots)]

    assert report(uses_model, uses_cache) == report(uses_cache, uses_model)
    assert len(report(uses_model, uses_cache)) == 1


def test_a_weak_reference_is_followed_to_what_it_refers_to() -> None:
    holder = _Holder(_escaped())
    ref = weakref.ref(holder)

    def reads() -> Any:
        return ref().value  # pyright: ignore[reportOptionalMemberAccess]

    (leak,) = lift.find_leaks(reads)
    assert leak.path.endswith("['ref']().value")
    assert (leak.function, leak.variable) == (reads.__qualname__, "ref")
    assert leak.detail == "ref().value"


def test_a_dead_weak_reference_holds_nothing() -> None:
    holder = _Holder(_escaped())
    ref = weakref.ref(holder)
    del holder

    def reads() -> Any:
        return ref()

    found = lift.find_leaks(reads)
    assert found == [] and found.unopened == ()


class _Failure(Exception):
    def __init__(self, message: str, value: Any) -> None:
        super().__init__(message)
        self.value = value


def test_a_kept_exception_is_opened_its_args_attributes_and_chain() -> None:
    caught = ValueError("not finite", _escaped())
    chained = RuntimeError("step failed")
    chained.__cause__ = ValueError("inner", _escaped())
    errors = [caught, _Failure("diverged", _escaped()), chained]

    def reads() -> Any:
        return errors

    found = lift.find_leaks(reads)
    assert {leak.variable for leak in found} == {"errors"}
    assert sorted(leak.path.partition("['errors']")[2] for leak in found) == [
        "[0].args[1]",
        "[1].value",
        "[2].__cause__.args[1]",
    ]


def test_a_kept_exception_without_tracers_is_clean() -> None:
    errors = [ValueError("not finite", 1.0), _Failure("diverged", jnp.ones(2))]

    def reads() -> Any:
        return errors

    found = lift.find_leaks(reads)
    assert found == [] and found.unopened == ()


class _HoldsItself:
    """A registered pytree node one of whose children is the node itself."""

    def __init__(self, a: Any) -> None:
        self.a, self.me = a, self


jax.tree_util.register_pytree_with_keys(
    _HoldsItself,
    lambda n: (
        ((jax.tree_util.GetAttrKey("a"), n.a), (jax.tree_util.GetAttrKey("me"), n.me)),
        None,
    ),
    lambda _, c: _HoldsItself(c[0]),
)


@pytest.mark.parametrize("held", ["tracer", "clean"])
def test_a_pytree_node_that_holds_itself_is_opened_once(held: str) -> None:
    # JAX's flattening recurses without end on it: the scan opens it one level
    # (and on Python 3.13 the endless recursion in C++ broke the interpreter
    # for the rest of the process, pytest's reporting included).
    node = _HoldsItself(_escaped() if held == "tracer" else 1.0)
    STASH.append(node)
    leaks = lift.find_leaks(node)
    if held == "tracer":
        assert [leak.path for leak in leaks] == ["roots[0].a"]
    else:
        assert leaks == []
    nested: list[Any] = []
    for _ in range(300):
        nested = [nested]
    assert repr(nested).count("[") == 301  # the interpreter still recurses


def test_a_lift_jit_closure_that_calls_itself_is_walked_as_one_node() -> None:
    # Flattened, a `lift.jit` function is its function lifted afresh, whose
    # cell holds the `lift.jit` function again: the scan then met new objects
    # without end, up to its bound (142 s of a test under the plugin).
    def make(scale: Any) -> Any:
        @lift.jit(static_argnums=1)
        def power(x: Any, n: int) -> Any:
            return x if n == 0 else scale * power(x, n - 1)

        return power

    def make_plain(scale: Any) -> Any:
        def power(x: Any, n: int) -> Any:
            return x if n == 0 else scale * power(x, n - 1)

        return power

    power, plain = make(2.0), make_plain(2.0)
    assert power(1.0, 3) == 8.0
    # 147 calls against 84 for the same closure without lift.jit.
    assert calls_made(lambda: lift.find_leaks(power)) < 3 * calls_made(
        lambda: lift.find_leaks(plain)
    )
    STASH.append(make(_escaped()))
    (leak,) = lift.find_leaks(STASH)
    assert leak.path == "roots[0][0].__wrapped__.captures['scale']"
    assert leak.variable == "scale"
    assert "is already lifted" in leak.hint


def test_scanning_a_lifted_function_converts_none_of_its_floats() -> None:
    # A scan (and the plugin's look at a test's locals at a trace exit) opens a
    # `Lifted` as the function it stands for, without converting its floats:
    # they are converted at the function's own first use, on its device.
    if len(jax.devices()) < 2:
        pytest.skip("needs several devices")
    scale = 0.5

    def make() -> Any:
        return lift.lift(lambda x: scale * x)

    f = make()
    with jax.default_device(jax.devices()[1]):
        assert lift.find_leaks(f) == []
    assert float(f(2.0)) == 1.0
    assert [x.devices() for x in jax.tree.leaves(f)] == [{jax.devices()[0]}]


def test_whose_code_is_the_users_is_one_rule() -> None:
    # The leak scan (its functions' globals, a traceback's frames, the modules
    # scanned) and the frame look at a trace's exit ask the one rule, by the
    # module's name: never where its file lies.
    import os

    import numpy as np
    import pluggy

    from lift._base import owners
    from lift._capture import refusals as describe
    from lift._holders import closure
    from lift._leaks import (
        caches,
        checking as _checking,
        frames,
        objects,
        scan as _leak_scan,
    )

    is_user_module = owners.is_user_module
    for module in (_checking, frames, describe, objects, closure):
        assert module.is_user_module is is_user_module
    for module in (_leak_scan, caches):
        assert module.is_user_function is owners.is_user_function
    # Exec'd code (no module) is the user's, and so is any library but JAX,
    # lift, NumPy, pytest and the standard library, wherever it is installed.
    assert is_user_module(None)
    assert is_user_module("__main__")
    assert is_user_module("mypkg.models")
    assert is_user_module("optax._src.alias")
    for library in (os, np, jax, pytest, pluggy, lift, jax.numpy, np.linalg):
        assert not is_user_module(library.__name__)
    assert not is_user_module("importlib._bootstrap")


class _Proxy:
    """A callable proxy whose every other attribute fails (not AttributeError)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return args

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"the proxy has no {name}")


class _NoFunc(functools.partial):  # pyright: ignore[reportMissingTypeArgument]
    @property
    def func(self) -> Any:  # pyright: ignore[reportIncompatibleVariableOverride]
        raise RuntimeError("no func")


def test_a_leak_through_a_method_of_a_partial_whose_func_raises_is_named() -> None:
    # Regression (an adversary's): naming the bound method's function read
    # the partial's raising `func`, and find_leaks raised RuntimeError.
    class Box:
        v: Any = None

    box = Box()
    box.v = _escaped()
    (leak,) = lift.find_leaks(types.MethodType(_NoFunc(print), box))
    assert (leak.variable, leak.detail) == ("self", "self.v")


def test_a_leak_in_a_partial_keyword_of_a_proxy_is_named() -> None:
    # Regression (an adversary's): the report read the proxy's `__qualname__`
    # and `__code__`, whose RuntimeError came out of find_leaks and out of
    # `checking_leaks()` instead of a LeakError.
    (leak,) = lift.find_leaks(functools.partial(_Proxy(), v=_escaped()))
    assert (leak.variable, leak.function) == ("v", "_Proxy")
    held: list[Any] = []

    def f(x: Any) -> Any:
        held.append(functools.partial(_Proxy(), v=x))
        return x

    with (
        pytest.raises(lift.LeakError, match="partial argument 'v'"),
        lift.checking_leaks(),
    ):
        jax.jit(f)(1.0)


def test_a_leak_through_a_partial_of_a_bound_method_names_the_parameter_it_fills() -> (
    None
):
    # Regression (an adversary's): `partial(model.scale, t)` fills `x`, `self`
    # being bound already; the scan counted from the function's first
    # parameter and blamed `self`.
    class Model:
        def scale(self, x: Any) -> Any:
            return x

    (leak,) = lift.find_leaks(functools.partial(Model().scale, _escaped()))
    assert (leak.variable, leak.kind) == ("x", "partial argument")


def test_a_tracer_set_on_a_lift_jit_functions_attribute_is_named() -> None:
    # Regression (an adversary's): a `lift.jit` function was opened by its
    # wrapped function alone, and a tracer stored on it was missed.
    @lift.jit
    def helper(x: Any) -> Any:
        return x

    helper.saved = _escaped()  # pyright: ignore[reportAttributeAccessIssue]
    (leak,) = lift.find_leaks(helper)
    assert (leak.variable, leak.kind, leak.lineno) == (
        "saved",
        "function attribute",
        helper.__wrapped__.__code__.co_firstlineno,
    )


def test_a_tracer_in_a_partial_subclasss_slot_is_found() -> None:
    # Regression (an adversary's): a partial subclass was opened by its
    # function, arguments, keywords and `__dict__`, never its slots.
    class Tagged(functools.partial):  # pyright: ignore[reportMissingTypeArgument]
        __slots__ = ("tag",)

    p = Tagged(lambda a: a, 1)
    p.tag = _escaped()
    (leak,) = lift.find_leaks(p)
    assert leak.path == "roots[0].tag"


def _closure_with_an_empty_cell(value: Any) -> Any:
    """The cells of a function whose variable `late` is never assigned."""

    def inner() -> Any:
        return late, value

    cells = inner.__closure__
    if cells is not None:
        return cells
    late = None  # never run: makes `late` a cell variable
    return late


def test_an_empty_cell_kept_on_its_own_holds_nothing() -> None:
    # A function's cells kept apart from it (its `__closure__`): the empty one
    # is skipped, the tracer in the other found.
    with pytest.raises(lift.LeakError, match=r"roots\[0\]\[1\]\.cell_contents: "):
        lift.check_leaks(_closure_with_an_empty_cell(_escaped()))
    assert lift.check_leaks(_closure_with_an_empty_cell(jnp.ones(2))) is None


def _finished() -> Any:
    def gen() -> Iterator[int]:
        yield 1

    g = gen()
    assert list(g) == [1]
    return g


def test_a_finished_generator_holds_nothing() -> None:
    with pytest.raises(lift.LeakError, match=r"roots\[0\]\[1\]: float32\[\]"):
        lift.check_leaks([_finished(), _escaped()])
    assert lift.check_leaks([_finished(), jnp.ones(2)]) is None


class _NoRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def test_a_key_whose_library_repr_fails_is_named_by_its_type() -> None:
    # `frozenset.__repr__` runs the repr of each member, which raises here.
    key = frozenset({_NoRepr()})
    with pytest.raises(lift.LeakError) as info:
        lift.check_leaks({key: _escaped()})
    assert f"roots[0][<builtins.frozenset object at {id(key):#x}>]: float32[]" in str(
        info.value
    )
    assert lift.check_leaks({key: jnp.ones(2)}) is None


def test_a_tracer_a_pending_finalizer_passes_as_a_keyword_is_named() -> None:
    class Resource:
        pass

    def release(*, handle: Any) -> None:
        del handle

    resource = Resource()
    leaky = weakref.finalize(resource, release, handle=_escaped())
    clean = weakref.finalize(resource, release, handle=jnp.ones(2))
    try:
        with pytest.raises(
            lift.LeakError, match=r"roots\[0\]\.keywords\['handle'\]: float32\[\]"
        ):
            lift.check_leaks(leaky)
        assert lift.check_leaks(clean) is None
    finally:
        leaky.detach()
        clean.detach()


def test_each_placed_leak_comes_with_its_own_tracer():
    """The plugin keeps each named leak with its tracer, to fail a test once
    per leak: the pairing holds when the roots meet the tracers in another
    order than they were given."""
    from lift._leaks.checking import place_escaped

    kept: list[Any] = []

    @jax.jit
    def f(x):
        kept.extend([x[:1], x[:2], x[:3]])
        return x

    f(jnp.zeros(4))
    first, second, third = kept
    roots = [("c", [third]), ("a", {"k": first}), ("b", (second,))]
    placed = place_escaped([first, second, third], roots)
    assert [leak.path for leak in placed.leaks] == ["c[0]", "a['k']", "b[0]"]
    assert [t.shape for t in placed.named] == [(3,), (1,), (2,)]
    assert not placed.unplaced and not placed.kept
