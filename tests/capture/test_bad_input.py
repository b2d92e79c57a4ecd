"""Bad input: every kind of value, at the top and inside captures.

`lift` either gives a result or raises a `lift.LiftError` that says what it got;
it never hangs, never recurses past Python's limit, and never changes the
function it was given (its code, cells, defaults, `__dict__`, or the objects they
hold).
"""

from __future__ import annotations

import array
import collections
import dataclasses
import decimal
import enum
import fractions
import functools
import io
import re
import threading
import types
import weakref
from collections.abc import Callable
from typing import Any
from unittest import mock

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import (
    HOLD,
    TraceCounter,
    assert_unchanged,
    child_path,
    free_depth,
    in_turn,
    snapshot,
)

import lift


class _CallableObject:
    def __call__(self, x):
        return x


class _Slots:
    __slots__ = ("a",)

    def __init__(self) -> None:
        self.a = 1


class _HashRaises:
    def __hash__(self) -> int:
        raise ValueError("this object refuses to be hashed")


class _EqRaises:
    def __eq__(self, other: object) -> bool:
        raise RuntimeError("this object refuses to be compared")

    def __hash__(self) -> int:
        return 1


class _EqArray:
    def __eq__(self, other: object) -> Any:
        return np.array([True, False])

    def __hash__(self) -> int:
        return 1


class _Hostile:
    """Every attribute access fails (a broken proxy)."""

    def __getattribute__(self, name: str) -> Any:
        raise RuntimeError(f"no attribute {name} for you")


class _Colour(enum.Enum):
    RED = 1


@dataclasses.dataclass
class _Data:
    a: float = 1.0


_Pair = collections.namedtuple("_Pair", "a b")


def _generator():
    yield 1


def _cyclic_list() -> list[Any]:
    x: list[Any] = []
    x.append(x)
    return x


def _cyclic_dict() -> dict[str, Any]:
    x: dict[str, Any] = {}
    x["self"] = x
    return x


def _deep_list(depth: int) -> list[Any]:
    root: list[Any] = []
    node = root
    for _ in range(depth):
        node.append([])
        node = node[0]
    return root


# Every kind of value a user might hand over, made fresh for each test.
VALUES: dict[str, Callable[[], Any]] = {
    "int": lambda: 1,
    "big int": lambda: 10**100,
    "float": lambda: 1.5,
    "nan": lambda: float("nan"),
    "complex": lambda: 1j,
    "bool": lambda: True,
    "str": lambda: "s",
    "bytes": lambda: b"b",
    "None": lambda: None,
    "Ellipsis": lambda: ...,
    "class": lambda: _CallableObject,
    "builtin": lambda: len,
    "builtin method": lambda: [].append,
    "method descriptor": lambda: str.upper,
    "numpy ufunc": lambda: np.add,
    "jnp function": lambda: jnp.sin,
    "jitted function": lambda: jax.jit(lambda x: x),
    "module": lambda: np,
    "numpy array": lambda: np.ones(2),
    "numpy scalar": lambda: np.float32(1),
    "jax array": lambda: jnp.ones(2),
    "bfloat16 array": lambda: jnp.ones(2, jnp.bfloat16),
    "int array": lambda: jnp.arange(3),
    "bool array": lambda: jnp.array([True, False]),
    "prng key": lambda: jax.random.key(0),
    "jnp dtype": lambda: jnp.float32,
    "numpy dtype": lambda: np.dtype("f4"),
    "callable object": lambda: _CallableObject(),
    "slots object": lambda: _Slots(),
    "dataclass": lambda: _Data(),
    "enum": lambda: _Colour.RED,
    "generator object": _generator,
    "staticmethod": lambda: staticmethod(lambda: 1),
    "property": lambda: property(lambda self: 1),
    "set": lambda: {1, 2},
    "frozenset": lambda: frozenset({1}),
    "range": lambda: range(3),
    "slice": lambda: slice(1, 2),
    "weakref": lambda: weakref.ref(_CallableObject),
    "decimal": lambda: decimal.Decimal(1),
    "fraction": lambda: fractions.Fraction(1, 2),
    "array.array": lambda: array.array("f", [1.0]),
    "memoryview": lambda: memoryview(b"ab"),
    "file object": lambda: io.StringIO("x"),
    "MagicMock": lambda: mock.MagicMock(),
    "Mock posing as a partial": lambda: mock.Mock(spec=functools.partial),
    "hash raises": lambda: _HashRaises(),
    "eq raises": lambda: _EqRaises(),
    "eq returns an array": lambda: _EqArray(),
    "hostile object": lambda: _Hostile(),
    "equinox module": lambda: eqx.nn.Linear(2, 2, key=jax.random.key(1)),
    "tree_util.Partial": lambda: jax.tree_util.Partial(
        lambda a, b: a + b, jnp.ones(())
    ),
    "namedtuple": lambda: _Pair(1.0, "x"),
    "dict of functions": lambda: {"f": lambda x: x, "w": 2.0},
    "partial of a builtin": lambda: functools.partial(max, 1),
    "method bound to a class": lambda: types.MethodType(
        lambda cls, x: x, _CallableObject
    ),
    "lambda": lambda: lambda x: x,
    "cyclic list": _cyclic_list,
    "cyclic dict": _cyclic_dict,
    "list 5000 deep": lambda: _deep_list(5000),
}

# At the top: a value that is neither a function nor a pytree holding one.
NOT_LIFTABLE = {
    "int",
    "big int",
    "float",
    "nan",
    "complex",
    "bool",
    "str",
    "bytes",
    "Ellipsis",
    "class",
    "builtin",
    "builtin method",
    "method descriptor",
    "numpy ufunc",
    "jnp function",
    "jitted function",
    "module",
    "numpy array",
    "numpy scalar",
    "jax array",
    "bfloat16 array",
    "int array",
    "bool array",
    "prng key",
    "jnp dtype",
    "numpy dtype",
    "callable object",
    "slots object",
    "dataclass",
    "enum",
    "generator object",
    "staticmethod",
    "property",
    "set",
    "frozenset",
    "range",
    "slice",
    "weakref",
    "decimal",
    "fraction",
    "array.array",
    "memoryview",
    "file object",
    "MagicMock",
    "Mock posing as a partial",
    "hash raises",
    "eq raises",
    "eq returns an array",
    "hostile object",
}
TOO_DEEP = {"cyclic list", "cyclic dict", "list 5000 deep"}


def _assert_can_still_recurse(levels: int = 500) -> None:
    """A RecursionError escaping from C++ pytree code can leave the interpreter's
    recursion accounting broken; check that it is not."""

    def down(n: int) -> int:
        return n if n == 0 else down(n - 1)

    assert down(levels) == 0


@pytest.mark.parametrize("kind", sorted(set(VALUES) - {"None"}))
def test_at_the_top(kind: str):
    value = VALUES[kind]()
    if kind in NOT_LIFTABLE:
        with pytest.raises(lift.LiftError, match=r"(?s)^lift\(\) got .*\nFix: "):
            lift.lift(value)
    elif kind in TOO_DEEP:
        with pytest.raises(lift.LiftError, match=r"lift\(\) got a \w+ .*(nest|itself)"):
            lift.lift(value)
        _assert_can_still_recurse()
    elif kind in ("lambda", "partial of a builtin", "method bound to a class"):
        lifted = lift.lift(value)
        assert lift.is_lifted(lifted)
        x = 3.0 if kind != "partial of a builtin" else 0.5
        assert lifted(x) == value(x)
    else:
        # A pytree: the same structure back, its function leaves lifted.
        out = lift.lift(value)
        assert type(out) is type(value)
        is_function = lambda x: isinstance(x, types.FunctionType)
        assert jax.tree_util.tree_structure(
            out, is_leaf=lift.is_lifted
        ) == jax.tree_util.tree_structure(value)
        for old, new in zip(
            jax.tree_util.tree_leaves(value, is_leaf=is_function),
            jax.tree_util.tree_leaves(out, is_leaf=lift.is_lifted),
            strict=True,
        ):
            assert (
                lift.is_lifted(new)
                if isinstance(old, types.FunctionType)
                else new is old
            )


def test_lift_of_none_is_the_decorator_form():
    decorator = lift.lift(None)
    assert lift.is_lifted(decorator(lambda x: x))


class _Table:
    """Not a pytree: its refusal looks at what its attributes hold."""

    def __init__(self, table: dict[str, Any]) -> None:
        self.table = table


def _dict_holding_itself() -> dict[str, Any]:
    table: dict[str, Any] = {"len": len}
    table["self"] = table
    return table


def _deep_dicts(depth: int) -> dict[str, Any]:
    root: dict[str, Any] = {"one": 1}
    node = root
    for _ in range(depth):
        node["next"] = node = {"one": 1}
    return root


@pytest.mark.parametrize(
    "make", [_dict_holding_itself, lambda: _deep_dicts(5000)], ids=["cyclic", "deep"]
)
def test_refusing_an_object_holding_a_cyclic_dict_keeps_the_recursion_budget(
    make: Callable[[], dict[str, Any]],
):
    # A module's `__builtins__` is such a dict once `exec` gave the builtins'
    # own dict that key (a dataclass made where `__name__` is unset does).
    # JAX's flattening of it raises from deep inside, and its frames stayed
    # counted (jax 0.8.0 to 0.12.1): the next deep call failed.
    # In a thread of its own: a budget it loses is that thread's alone.
    table = make()
    seen: list[Any] = []

    def refuse() -> None:
        before = free_depth()
        try:
            lift.lift(_Table(table))
        except BaseException as err:  # a `RecursionError` too, to report
            seen.append(err)
        seen.append(free_depth() - before)

    thread = threading.Thread(target=refuse)
    thread.start()
    thread.join()
    err, lost = seen
    assert isinstance(err, lift.LiftError), err
    assert re.match(r"lift\(\) got _Table .*\nFix: ", str(err), re.S)
    assert lost == 0


# -- inside captures ----------------------------------------------------------------


def _uses(x: Any, v: Any) -> Any:
    """How the holders' functions use a hostile value: they only compare it."""
    return x if v is not _Colour else 0


def _underlying(holder: Any) -> Any:
    if isinstance(holder, functools.partial):
        return holder.func
    if isinstance(holder, types.MethodType):
        return holder.__func__
    return holder


def _call(g: Any, x: Any) -> Any:
    return g(x)


_jit_call = jax.jit(_call)

# The ways a function holds a value by itself (`helpers.HOLD`): a cell, a
# default, a keyword-only and a positional-only default, a function attribute,
# a partial's argument and keyword, a bound method's `self` (the value itself:
# a pytree `self` holding it hands it to JAX's flattening, whose rules apply).
HOLDERS = tuple(h for h in HOLD if h != "bound self")


# Values that are bad in a way each holder meets on its own path (hashing a
# default or a partial's keywords, comparing a function attribute, recursing
# into a container): in every holder.
IN_EVERY_HOLDER = TOO_DEEP | {
    "None",
    "hash raises",
    "eq raises",
    "eq returns an array",
    "hostile object",
    "MagicMock",
    "Mock posing as a partial",
}
# The rest in two holders each, taken in turn by kind of value, so that every
# holder meets arrays and Python numbers (leaves), pytrees holding functions,
# and other static objects.
_LEAVES = [
    "float",
    "nan",
    "complex",
    "numpy array",
    "numpy scalar",
    "jax array",
    "bfloat16 array",
    "int array",
    "bool array",
    "prng key",
]
_PYTREES = [
    "equinox module",
    "tree_util.Partial",
    "namedtuple",
    "dict of functions",
    "lambda",
    "partial of a builtin",
    "method bound to a class",
    "jitted function",
]
assert {*_LEAVES, *_PYTREES} <= set(VALUES) - IN_EVERY_HOLDER
_STATIC = sorted(set(VALUES) - IN_EVERY_HOLDER - {*_LEAVES, *_PYTREES})


@pytest.mark.parametrize(
    ("kind", "holder"),
    [
        (k, h)
        for k in sorted(IN_EVERY_HOLDER)
        for h in HOLDERS
        if (k, h) != ("None", "self itself")  # `types.MethodType` refuses `None`
    ]
    + in_turn([*_LEAVES, *_PYTREES, *_STATIC], HOLDERS, per=2),
)
def test_inside_captures(kind: str, holder: str):
    value = VALUES[kind]()
    fn = HOLD[holder](value, _uses)
    inner = _underlying(fn)
    before = snapshot(inner)
    partial_state = (
        (fn.func, fn.args, dict(fn.keywords))
        if isinstance(fn, functools.partial)
        else None
    )
    expected = fn(3.0)
    if kind in TOO_DEEP:
        with pytest.raises(lift.LiftError, match=r"(?s)(nest|itself).*\nFix: "):
            lift.lift(fn)
        _assert_can_still_recurse()
    else:
        lifted = lift.lift(fn)
        assert lifted(3.0) == expected
        leaves, treedef = jax.tree_util.tree_flatten(lifted)
        again = jax.tree_util.tree_unflatten(treedef, leaves)
        assert again(3.0) == expected
        assert jax.tree_util.tree_structure(lift.lift(fn)) == treedef
        assert _jit_call(lifted, 3.0) == expected
        repr(lifted)
    assert_unchanged(before, snapshot(inner))
    if partial_state is not None:
        assert isinstance(fn, functools.partial)
        assert fn.func is partial_state[0]
        assert fn.args is partial_state[1] or fn.args == partial_state[1]
        assert all(fn.keywords[k] is v for k, v in partial_state[2].items())
    assert fn(3.0) == expected


def test_mutating_a_captured_container_of_leaves_is_refused_not_copied():
    items = [jnp.ones(2), 2.0]
    table = {"w": jnp.ones(2)}

    def f(x):
        items.append(x)  # lift would rebuild `items` around its leaves
        table["last"] = x
        return len(items)

    lifted = lift.lift(f)  # refused by the call that changes the copy
    with pytest.raises(
        lift.LiftError, match=r"mutated the captured variable 'items' in place"
    ):
        lifted(1.0)
    assert len(items) == 2
    assert "last" not in table
    assert f(1.0) == 3  # the function itself is untouched


def test_empty_cell_raises_nameerror_until_python_binds_it():
    def make():
        def f(x):
            return later + x

        before = f.__closure__[0]  # type: ignore[index]
        lifted = lift.lift(f)
        with pytest.raises(NameError, match="later"):
            lifted(1.0)
        later = 1.0
        assert f(1.0) == 2.0  # the original's cell was not replaced
        assert f.__closure__[0] is before  # type: ignore[index]
        return lifted

    lifted = make()
    assert lifted(1.0) == 2.0  # read when called, as Python reads it


def test_cells_empty_when_lifted_are_one_program_until_python_binds_them():
    def make(value: float) -> Any:
        def f(x):
            return later + x

        lifted = lift.lift(f)
        if value:
            later = value
        return lifted

    structure = jax.tree_util.tree_structure
    assert structure(make(0.0)) == structure(make(0.0))  # both still empty
    bound = make(1.0)
    assert structure(bound) != structure(make(1.0))  # each reads its own cell
    assert structure(bound) != structure(make(0.0))
    assert bound(1.0) == 2.0


def test_rebinding_a_dynamic_capture_is_a_lifterror_naming_it():
    def make():
        w = jnp.ones(2)

        def f(x):
            nonlocal w
            w = w + x
            return w

        return f

    f = make()
    before = snapshot(f)
    with pytest.raises(
        lift.LiftError, match=r"f \(.*test_bad_input.py:\d+\) rebinds.*'w'"
    ):
        lift.lift(f)
    assert_unchanged(before, snapshot(f))


def test_tracer_hidden_in_an_object_is_a_lifterror_naming_it():
    class Box:
        def __init__(self, v: Any) -> None:
            self.v = v

    def traced(x):
        box = Box(x)

        def f(y):
            return box.v * y

        # Kept while its transform runs (called there); refused once flattened.
        assert lift.lift(f)(2.0) is not None
        with pytest.raises(lift.LiftError, match=r"(?s)'box'.*box\.v.*closure_convert"):
            jax.tree_util.tree_leaves(lift.lift(f))
        return x

    jax.jit(traced)(1.0)


def test_tracer_forced_static_is_a_lifterror():
    def traced(x):
        def f(y):
            return x * y

        with pytest.raises(lift.LiftError, match=r"'x' as static.*tracer"):
            lift.lift(f, static=("x",))
        return x

    jax.jit(traced)(1.0)


def test_a_leaf_refused_inside_a_container_is_named_by_its_position():
    def make(v):
        return lambda x: x * v["w"][1]

    def traced(x):
        with pytest.raises(
            lift.LiftError,
            match=r"'v' as static, but it holds a tracer at v\['w'\]\[1\] \(",
        ):
            lift.lift(make({"w": [1.0, x]}), static=("v",))
        return x

    jax.jit(traced)(1.0)
    with pytest.raises(
        lift.LiftError,
        match=r"'v', a str at v\['w'\]\[1\], which your `dynamic=` predicate made",
    ):
        lift.lift(make({"w": [1.0, "s"]}), dynamic=lambda x: True)


def test_tracer_in_a_deque_is_a_lifterror():
    def traced(x):
        holder = collections.deque([1, x])

        def f(y):
            return y if holder else 0

        assert lift.lift(f)(2.0) == 2.0  # kept while its transform runs
        with pytest.raises(lift.LiftError, match=r"'holder'.*tracer"):
            jax.tree_util.tree_leaves(lift.lift(f))
        return x

    jax.jit(traced)(1.0)


# -- bad options -------------------------------------------------------------------


def _plain(w: Any) -> Callable[..., Any]:
    def f(x):
        return w * x

    return f


def test_static_names_that_are_not_captured_are_a_lifterror_with_the_nearest():
    def make(limit: float) -> Callable[..., Any]:
        def f(x):
            return jnp.minimum(x, limit)

        return f

    with pytest.raises(
        lift.LiftError,
        match=r"no captured variable is called 'limt' \(did you mean 'limit'\?\)\.\n"
        r"Captured variables: 'limit'\.",
    ):
        lift.lift(make(2.0), static=("limt",))
    with pytest.raises(
        lift.LiftError, match=r"no captured variable is called 'nope'\."
    ):
        lift.lift(_plain(2.0), static=("nope",))
    # A name captured by any function of a pytree is known.
    opt = optax.adam(0.1)
    assert lift.lift(opt, static=("b1",)) is not None
    with pytest.raises(lift.LiftError, match=r"'b11' \(did you mean 'b1'\?\)"):
        lift.lift(opt, static=("b11",))


@pytest.mark.parametrize("static", [(1,), [None], 3.0])
def test_static_that_is_not_names_is_a_lifterror(static: Any):
    with pytest.raises(lift.LiftError, match=r"static"):
        lift.lift(_plain(2.0), static=static)


def test_dynamic_that_is_not_callable_is_a_lifterror():
    with pytest.raises(lift.LiftError, match=r"dynamic"):
        lift.lift(_plain(2.0), dynamic="yes")  # type: ignore[arg-type]


def test_dynamic_predicate_that_raises_propagates_unchanged():
    def predicate(x: Any) -> bool:
        raise KeyError("predicate failed")

    f = _plain(2.0)
    before = snapshot(f)
    with pytest.raises(KeyError, match="predicate failed"):
        lift.lift(f, dynamic=predicate)
    assert_unchanged(before, snapshot(f))


def test_dynamic_predicate_making_a_string_a_leaf_is_a_lifterror():
    with pytest.raises(lift.LiftError, match=r"'w'.*str"):
        lift.lift(_plain("s"), dynamic=lambda x: True)


# -- the other entry points, on the same values ----------------------------------------


@pytest.mark.parametrize("kind", sorted(VALUES))
def test_leak_scan_takes_any_value(kind: str):
    value = VALUES[kind]()

    def holder(x):
        return x if value is not None else 0

    assert lift.find_leaks(value) == []
    assert lift.find_leaks(holder) == []
    assert lift.check_leaks(value, holder) is None


@pytest.mark.parametrize("kind", sorted(set(VALUES) - TOO_DEEP))
def test_unlift_diff_and_is_lifted_take_any_value(kind: str):
    value = VALUES[kind]()
    assert not lift.is_lifted(value)
    out = lift.unlift(value)
    assert out is value or jax.tree_util.tree_structure(out) == (
        jax.tree_util.tree_structure(value)
    )
    # `diff` compares any two pytrees: a Lifted and anything else differ.
    explained = lift.diff(lift.lift(_plain(2.0)), value)
    assert isinstance(explained, str)
    assert explained


# jaxlib's pytree flattening with a Python `is_leaf` over a cyclic or very deep
# container leaves the interpreter's recursion accounting broken for the rest
# of the process (every later call raises RecursionError), so these run in a
# process of their own, which then checks that it can still recurse.
_TOO_DEEP_SCRIPT = """
import os, sys
# the test file, and helpers.py beside conftest.py a folder up
sys.path[:0] = [sys.argv[1], os.path.dirname(sys.argv[1])]
import lift
from test_bad_input import VALUES, _plain

def depth(n=0):
    return n if n == 300 else depth(n + 1)

value = VALUES[sys.argv[2]]()
for name, call in [
    ("unlift", lambda: lift.unlift(value)),
    ("diff", lambda: lift.diff(lift.lift(_plain(2.0)), value)),
]:
    try:
        call()
    except lift.LiftError as e:
        assert "nest" in str(e) or "itself" in str(e), str(e)
        print(name, "LiftError")
    else:
        print(name, "returned")
    depth()
print("ok")
"""


@pytest.mark.parametrize("kind", sorted(TOO_DEEP))
def test_unlift_and_diff_of_cyclic_or_deep_containers(kind: str):
    import os
    import subprocess
    import sys

    tests = os.path.dirname(os.path.abspath(__file__))
    done = subprocess.run(
        [sys.executable, "-c", _TOO_DEEP_SCRIPT, tests, kind],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **os.environ,
            "PYTHONPATH": child_path(os.path.dirname(tests), tests),
        },
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["unlift", "LiftError", "diff", "LiftError", "ok"]


@pytest.mark.parametrize(
    "kind",
    sorted(
        NOT_LIFTABLE
        - {
            "class",
            "builtin",
            "builtin method",
            "method descriptor",
            "numpy ufunc",
            "jnp function",
            "jitted function",
            "callable object",
            "weakref",
            "MagicMock",
            "Mock posing as a partial",
            "staticmethod",
            "jnp dtype",
        }
    ),
)
def test_lift_jit_of_a_value_that_is_not_callable_is_a_lifterror(kind: str):
    with pytest.raises(lift.LiftError, match=r"jit"):
        lift.jit(VALUES[kind]())


def _escaped_tracer():
    kept = []
    with jax.check_tracer_leaks(False):
        jax.jit(lambda x: kept.append(x) or x)(1.0)
    return kept[0]


def test_a_closure_over_a_class_holding_an_escaped_tracer_is_refused_like_an_instance():
    class Registry:
        pass

    Registry.value = _escaped_tracer()

    def over(v):
        return lambda: v

    assert lift.find_leaks(over(Registry))  # the leak checker sees it
    with pytest.raises(
        lift.LiftError, match=r"'v', a Registry that .* tracer at v\.__class__\.value"
    ):
        lift.lift(over(Registry()))  # refused through an instance
    # and through the class itself, named as a class (it said "a type")
    the_class = r"'v', the class .*<locals>\.Registry that .* tracer at v\.value"
    with pytest.raises(lift.LiftError, match=the_class):
        lift.lift(over(Registry))
    with pytest.raises(lift.LiftError, match="tracer"):
        lift.lift(over((Registry, 1.0)))  # and in a container beside a leaf


# -- functools.singledispatch ------------------------------------------------------


@functools.singledispatch
def _convert(x: Any) -> Any:
    return x * 2


@_convert.register
def _(x: int) -> Any:
    return x * 3


def test_a_closure_over_a_singledispatch_function_lifts() -> None:
    # Its registry is a dict keyed by types, which JAX cannot sort: holding no
    # float or array, it is static as a whole.
    def make(conv: Callable[[Any], Any]) -> Callable[[Any], Any]:
        return lambda x: conv(x) + 1.0

    f = make(_convert)
    assert float(lift.lift(f)(2.0)) == f(2.0) == 5.0
    assert float(jax.jit(lambda g, x: g(x))(lift.lift(f), 2.0)) == 5.0
    structure = jax.tree_util.tree_structure
    assert structure(lift.lift(f)) == structure(lift.lift(make(_convert)))


def test_a_dict_of_unsortable_keys_holding_a_float_is_still_refused() -> None:
    table = {int: 0.5, str: 1.5}
    with pytest.raises(lift.LiftError, match=r"JAX's pytree flattening refuses"):
        lift.lift(lambda x: x * table[int])


class _Phase(enum.Enum):
    TRAIN = 1
    EVAL = 2


def test_a_dict_keyed_by_enum_members_is_told_the_fix_that_works() -> None:
    # Regression: the fix said "use dict keys of one type", which an Enum's
    # members are; they do not sort. The OrderedDict it now names works and
    # keeps the rates leaves: one trace for two.
    def make(lr: float, kind: Callable[..., Any]) -> Callable[..., Any]:
        rates = kind({_Phase.TRAIN: lr, _Phase.EVAL: 0.0})

        def step(x: Any) -> Any:
            counter()
            return x * rates[_Phase.TRAIN]

        return step

    counter = TraceCounter()
    with pytest.raises(
        lift.LiftError,
        match=r"captures variable 'rates', which JAX's pytree flattening refuses "
        r"\(dict keys .* cannot be sorted .*\)\.\nFix: use dict keys that sort "
        r"\(strings, or numbers of one type; an `Enum`'s members do not\), a "
        r"`collections\.OrderedDict`",
    ):
        lift.lift(make(0.5, dict))
    out = [
        float(lift.jit(make(lr, collections.OrderedDict))(2.0)) for lr in (0.5, 0.25)
    ]
    assert out == [1.0, 0.5]
    assert counter.traces == 1


@pytest.mark.parametrize(
    "table",
    [
        {int: 0, str: [[0]] * 1_001},  # over a thousand lists
        {int: 0, str: tuple({"n": 0} for _ in range(1_001))},  # over a thousand dicts
    ],
    ids=["lists", "dicts"],
)
def test_a_registry_too_large_to_walk_is_refused_with_the_static_fix(
    table: Any,
) -> None:
    # Kept static whole only after a walk through it: a bounded one.
    with pytest.raises(
        lift.LiftError,
        match=r"<lambda> \(.*test_bad_input\.py:\d+\) captures variable 'table', "
        r"which JAX's pytree flattening refuses \(dict keys .* cannot be sorted .*"
        r"\nFix: use dict keys that sort .*, a `collections\.OrderedDict` "
        r"\(flattened in its own order, unsorted\), or keep it static with "
        r"`lift\(f, static=\('table',\)\)`",
    ):
        lift.lift(lambda x: x * len(table))
