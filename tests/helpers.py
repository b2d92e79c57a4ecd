"""Helpers shared by the tests."""

from __future__ import annotations

import functools
import itertools
import os
import sys
import types
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import jax
import pytest

ROOT = Path(__file__).resolve().parent.parent


def child_path(*first: object) -> str:
    """A `PYTHONPATH` for a Python a test starts: `first` (the clone's root by
    default), then this process's own, where JAX may live."""
    parts = [str(p) for p in first or (ROOT,)]
    return os.pathsep.join([*parts, *filter(None, [os.environ.get("PYTHONPATH")])])


class TraceCounter:
    """Counts how often JAX traces a function: `counter.traces`. Call it inside
    the traced function, or jit through it (`counter.jit(fn)`). (A captured int
    would not count: lift rebuilds a function with fresh cells.)"""

    def __init__(self) -> None:
        self.traces = 0

    def __call__(self) -> None:
        self.traces += 1

    def jit(self, fn: Callable[..., Any], **kwargs: Any) -> Callable[..., Any]:
        def counted(*args: Any, **kw: Any) -> Any:
            self.traces += 1
            return fn(*args, **kw)

        return jax.jit(counted, **kwargs)


# Tests of placement and sharding across devices: on CPU the suite has eight
# (`XLA_FLAGS=--xla_force_host_platform_device_count=8`); on a one-chip
# accelerator as the default device there is one.
several_devices = pytest.mark.skipif(
    len(jax.devices()) < 2,
    reason="needs several devices of the default backend (on CPU: "
    "XLA_FLAGS=--xla_force_host_platform_device_count=8)",
)


def calls_made(fn: Callable[[], Any]) -> int:
    """How many function calls (Python and builtin) running `fn()` makes: a
    measure of work that does not depend on how busy the machine is, so tests
    can say a walk is linear without timing it."""
    count = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal count
        if event in ("call", "c_call"):
            count += 1

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(previous)
    return count


# -- matrices: every pair of values, not every product ------------------------


def pairwise(*axes: Sequence[Any]) -> list[tuple[Any, ...]]:
    """Rows (one value of each axis, in the axes' order) in which every value of
    each axis meets every value of each other axis at least once: the
    all-pairs cover a matrix test takes instead of the full product
    (`itertools.product`). Deterministic. Two axes give the full product;
    each further axis adds few or no rows (3 kinds of list, 7 holders and 4 consumers:
    28 rows for 84).

    In-parameter-order: the product of the two largest axes, then each further
    axis gets the value that meets the most pairs not yet met in each row (ties:
    the value used least), and rows for pairs still missing."""
    sizes = [len(axis) for axis in axes]
    if len(axes) < 2 or 0 in sizes:
        return [tuple(row) for row in itertools.product(*axes)]
    order = sorted(range(len(axes)), key=lambda i: -sizes[i])
    first, second = order[0], order[1]
    rows: list[dict[int, int]] = [
        {first: i, second: j} for i in range(sizes[first]) for j in range(sizes[second])
    ]
    for n, k in enumerate(order[2:], start=2):
        before = order[:n]
        missing = {
            (d, vd, vk)
            for d in before
            for vd in range(sizes[d])
            for vk in range(sizes[k])
        }
        used = [0] * sizes[k]
        for row in rows:

            def gain(v: int, row: dict[int, int] = row) -> int:
                return sum((d, row[d], v) in missing for d in before if d in row)

            best = max(range(sizes[k]), key=lambda v: (gain(v), -used[v], -v))
            row[k] = best
            used[best] += 1
            missing -= {(d, row[d], best) for d in before if d in row}
        start = len(rows)
        for d, vd, vk in sorted(missing):
            for row in rows[start:]:
                if row.get(k) == vk and d not in row:
                    row[d] = vd
                    break
            else:
                rows.append({k: vk, d: vd})
    # Values no pair asked for (in rows added for a missing pair): in turn.
    return [
        tuple(axes[i][row.get(i, r % sizes[i])] for i in range(len(axes)))
        for r, row in enumerate(rows)
    ]


def in_turn(
    values: Sequence[Any], others: Sequence[Any], per: int = 1
) -> list[tuple[Any, Any]]:
    """Each of `values` with `per` of `others`, taken in turn (the turn running on
    from one value to the next), so that every one of `others` meets about
    `len(values) * per / len(others)` values: the cut of a two-axis matrix whose
    second axis matters as a whole, not for each value."""
    return [
        (v, others[(i * per + k) % len(others)])
        for i, v in enumerate(values)
        for k in range(min(per, len(others)))
    ]


def call_lifted(g: Any, *args: Any) -> Any:
    """`g(*args)`: the trampoline tests jit with a `Lifted` argument."""
    return g(*args)


# -- "the function was not changed" ------------------------------------------------


def snapshot(fn: Any) -> dict[str, Any]:
    """Everything of `fn` that `lift` must leave alone, by identity."""
    cells = []
    for cell in fn.__closure__ or ():
        try:
            cells.append((cell, cell.cell_contents))
        except ValueError:
            cells.append((cell, "<empty>"))
    contents = [c for _, c in cells]
    return {
        "code": fn.__code__,
        "closure": fn.__closure__,
        "cells": cells,
        "defaults": fn.__defaults__,
        "default items": list(fn.__defaults__ or ()),
        "kwdefaults": fn.__kwdefaults__,
        "kwdefault items": dict(fn.__kwdefaults__ or {}),
        "dict": dict(fn.__dict__),
        "container items": [
            list(c.values()) if isinstance(c, dict) else list(c)
            for c in [*contents, *(fn.__defaults__ or ())]
            if type(c) in (list, dict)
        ],
    }


def assert_unchanged(before: dict[str, Any], after: dict[str, Any]) -> None:
    """`snapshot` taken before equals one taken after, by identity."""
    # `type(...) in` rather than `isinstance`: a hostile object may fail on
    # `__class__`, which `isinstance` reads.
    for key, old in before.items():
        new = after[key]
        if type(old) in (list, tuple):
            assert len(old) == len(new), key
            for a, b in zip(old, new, strict=True):
                if type(a) in (tuple, list):
                    assert all(x is y for x, y in zip(a, b, strict=True)), key
                else:
                    assert a is b, key
        elif type(old) is dict:
            assert old.keys() == new.keys(), key
            assert all(old[k] is new[k] for k in old), key
        else:
            assert old is new, key


# -- every way a function can hold a value -------------------------------------------


class Box(NamedTuple):
    """A pytree object, as a bound method's `self`."""

    v: Any

    def scaled(self, x: Any) -> Any:
        return x * self.v


class Slotted:
    """Not a pytree: its slots are opaque to lift (a tracer there is refused)."""

    __slots__ = ("v",)

    def __init__(self, v: Any) -> None:
        self.v = v


class Plain:
    def __init__(self, v: Any) -> None:
        self.v = v


class OneSlot:
    __slots__ = "v"  # a single string is a legal `__slots__`

    def __init__(self, v: Any) -> None:
        self.v = v


def times(x: Any, v: Any) -> Any:
    """How a holder's function uses its value unless told otherwise: `x * v`."""
    return x * v


class UsingBox:
    """A registered pytree node holding `v` (its child) and how its method uses
    it (static data): a bound method's `self` for any `use`."""

    def __init__(self, v: Any, use: Callable[[Any, Any], Any]) -> None:
        self.v = v
        self.use = use

    def method(self, x: Any) -> Any:
        return self.use(x, self.v)


jax.tree_util.register_pytree_node(
    UsingBox,
    lambda b: ((b.v,), b.use),
    lambda use, children: UsingBox(children[0], use),
)

# A holder's maker: `make(v, use)` is a function `f` with `f(x) == use(x, v)`
# that holds `v` its own way (`use` defaults to `times`).
Make = Callable[..., Callable[..., Any]]


def _cell(v: Any, use: Callable[[Any, Any], Any] = times) -> Callable[..., Any]:
    def f(x):
        return use(x, v)

    return f


def _default(v: Any, use: Callable[[Any, Any], Any] = times) -> Callable[..., Any]:
    def f(x, v=v):
        return use(x, v)

    return f


def _kwdefault(v: Any, use: Callable[[Any, Any], Any] = times) -> Callable[..., Any]:
    def f(x, *, v=v):
        return use(x, v)

    return f


def _posonly_default(
    v: Any, use: Callable[[Any, Any], Any] = times
) -> Callable[..., Any]:
    def f(x, /, v=v, *, c=2):
        return use(x, v) if c == 2 else None

    return f


def _attribute(v: Any, use: Callable[[Any, Any], Any] = times) -> Callable[..., Any]:
    def f(x):
        return use(x, f.v)  # pyright: ignore[reportFunctionMemberAccess]

    f.v = v  # pyright: ignore[reportFunctionMemberAccess]
    return f


def _partial_arg(v: Any, use: Callable[[Any, Any], Any] = times) -> Callable[..., Any]:
    return functools.partial(lambda v, x: use(x, v), v)


def _partial_keyword(
    v: Any, use: Callable[[Any, Any], Any] = times
) -> Callable[..., Any]:
    return functools.partial(lambda x, v: use(x, v), v=v)


def _bound_self(v: Any, use: Callable[[Any, Any], Any] = times) -> Callable[..., Any]:
    if use is times:
        return Box(v).scaled
    return UsingBox(v, use).method


def _self_itself(v: Any, use: Callable[[Any, Any], Any] = times) -> Callable[..., Any]:
    return types.MethodType(lambda self, x: use(x, self), v)


# The ways a function holds a value by itself, for any value and any use: what
# the matrices of values (hostile objects, shapes lifted again) take their
# holders from. `HOLDERS` below adds the ways through other functions and
# containers, for values a function multiplies by.
HOLD: dict[str, Make] = {
    "cell": _cell,
    "default": _default,
    "kwdefault": _kwdefault,
    "positional-only default": _posonly_default,
    "function attribute": _attribute,
    "partial argument": _partial_arg,
    "partial keyword": _partial_keyword,
    "bound self": _bound_self,
    "self itself": _self_itself,
}


def _dict(v: Any) -> Callable[..., Any]:
    d = {"v": v, "add": 0}  # insertion order differs from sorted order

    def f(x):
        out = x
        for key, value in d.items():
            out = out * value if key == "v" else out + value
        return out

    return f


def _nested(v: Any) -> Callable[..., Any]:
    def inner(x):
        return x * v

    def f(x):
        return inner(x)

    return f


def _shared_cell(v: Any) -> Callable[..., Any]:
    def a(x):
        return x * v

    def f(x):
        return a(x) + 0.0 * v

    return f


def _recursive(v: Any) -> Callable[..., Any]:
    def f(x, n=1):
        return x * v if n == 0 else f(x, n - 1)

    return f


def _with_empty_cell(v: Any) -> Callable[..., Any]:
    def f(x):
        if x is None:
            return late
        return x * v

    return f
    late = None  # unreachable: `late` stays an empty cell


def _wrapped(v: Any) -> Callable[..., Any]:
    def inner(x):
        return x * v

    @functools.wraps(inner)
    def f(x):
        return f.__wrapped__(x)  # pyright: ignore[reportFunctionMemberAccess]

    return f


def _in_tuple(v: Any) -> Callable[..., Any]:
    fns = (lambda x: x * v, lambda y: y)

    def f(x):
        return fns[1](fns[0](x))

    return f


class Pair(NamedTuple):
    w: Any
    n: int


def _in_namedtuple(v: Any) -> Callable[..., Any]:
    pair = Pair(v, 3)

    def f(x):
        return x * pair.w * pair.n / 3

    return f


def _mutual(v: Any) -> Callable[..., Any]:
    def even(x, n=2):
        return x * v if n == 0 else odd(x, n - 1)

    def odd(x, n):
        return even(x, n - 1)

    return even


def _through_lifted(v: Any) -> Callable[..., Any]:
    import lift

    inner = lift.lift(lambda x: x * v)

    def f(x):
        return inner(x)

    return f


class Holder(NamedTuple):
    """A way to hold a value `v`: `make(v)(x) == x * v`.

    `path` is the `keystr` of the leaf `v` becomes; `variable` the name under
    which `static=` and leak reports know it (`None` for a partial's argument).
    """

    name: str
    make: Callable[[Any], Callable[..., Any]]
    path: str
    variable: str | None


HOLDERS: tuple[Holder, ...] = (
    Holder("cell", _cell, ".captures['v']", "v"),
    Holder("default", _default, ".captures['v']", "v"),
    Holder("kwdefault", _kwdefault, ".captures['v']", "v"),
    Holder("positional-only default", _posonly_default, ".captures['v']", "v"),
    Holder("function attribute", _attribute, ".__dict__['v']", "v"),
    Holder("partial argument", _partial_arg, ".args[0]", None),
    Holder("partial keyword", _partial_keyword, ".keywords['v']", "v"),
    Holder("bound self", _bound_self, ".__self__.v", None),
    Holder("dict in insertion order", _dict, ".captures['d']['v']", "d"),
    Holder("nested closure", _nested, ".captures['inner'].captures['v']", "v"),
    Holder("shared cell", _shared_cell, ".captures['v']", "v"),
    Holder("recursive cell", _recursive, ".captures['v']", "v"),
    Holder("beside an empty cell", _with_empty_cell, ".captures['v']", "v"),
    Holder("function in a tuple", _in_tuple, ".captures['fns'][0].captures['v']", "v"),
    Holder("NamedTuple field", _in_namedtuple, ".captures['pair'].w", "pair"),
    Holder("mutual recursion", _mutual, ".captures['v']", "v"),
    Holder(
        "through a Lifted", _through_lifted, ".captures['inner'].captures['v']", "v"
    ),
    Holder(
        "functools.wraps' __wrapped__",
        _wrapped,
        ".__dict__['__wrapped__'].captures['v']",
        "v",
    ),
)

# Objects that are not pytrees: what they hold is static to lift, and a tracer
# inside them is refused by `lift` and found by the leak scan.
OPAQUE_HOLDERS: tuple[tuple[str, Callable[[Any], Any]], ...] = (
    ("__slots__ as a tuple", Slotted),
    ("__slots__ as a string", OneSlot),
    ("__dict__", Plain),
)


# -- every kind of object a tracer can be stored in ------------------------------------


def suspended(v: Any) -> Any:
    """A generator suspended at its second `yield`, holding `v` in a local."""

    def gen(v: Any) -> Any:
        yield None
        yield v

    g = gen(v)
    next(g)
    return g


def equinox_static(v: Any) -> Any:
    """An equinox module holding `v` in a `static=True` field (treedef aux data)."""
    import equinox as eqx

    class Opt(eqx.Module):
        tx: Any = eqx.field(static=True)
        lr: Any = 0.1

    return Opt(tx=v)


def flax_static(v: Any) -> Any:
    """A flax struct holding `v` in a `pytree_node=False` field."""
    import jax.numpy as jnp
    from flax import struct

    @struct.dataclass
    class State:
        params: Any
        tx: Any = struct.field(pytree_node=False)

    return State(params=jnp.ones(2), tx=v)


def lru_cached(v: Any) -> Any:
    """A bounded `functools.lru_cache` function that returned `v` for key 1."""
    pool = [v]

    @functools.lru_cache(maxsize=8)
    def bounded(k: int) -> Any:
        return pool.pop()

    bounded(1)
    return bounded


def cached(v: Any) -> Any:
    """An unbounded `functools.cache` function that returned `v` for key 1."""
    pool = [v]

    @functools.cache
    def unbounded(k: int) -> Any:
        return pool.pop()

    unbounded(1)
    return unbounded


def object_array(v: Any) -> Any:
    import numpy as np

    out = np.empty((2, 2), dtype=object)
    out[1, 0] = v
    return out


def thread_local(v: Any) -> Any:
    import threading

    local = threading.local()
    local.state = v
    return local


def class_attribute(v: Any) -> Any:
    """An instance whose class (not the instance) holds `v`."""
    cls = type("Registry", (), {"registry": [v]})
    return cls()


def method_closure(v: Any) -> Any:
    """An instance whose class's method closes over `v`."""

    class Model:
        def method(self) -> Any:
            return v

    return Model()


def property_closure(v: Any) -> Any:
    class Model:
        @property
        def value(self) -> Any:
            return v

    return Model()


def staticmethod_closure(v: Any) -> Any:
    class Model:
        @staticmethod
        def make() -> Any:
            return v

    return Model()


def classmethod_closure(v: Any) -> Any:
    class Model:
        @classmethod
        def make(cls) -> Any:
            return v

    return Model()


def context(v: Any) -> Any:
    """A `contextvars.Context` in which a variable holds `v`."""
    import contextvars

    var: contextvars.ContextVar[Any] = contextvars.ContextVar("state")
    ctx = contextvars.copy_context()
    ctx.run(var.set, v)
    return ctx


def context_var(v: Any) -> Any:
    import contextvars

    return contextvars.ContextVar("state", default=v)


class _Target:
    """An object alive for the session: what a finalizer or weak value needs."""

    state: Any = None


_TARGETS: list[_Target] = []


def _noop(*args: Any) -> None:
    del args


def finalizer(v: Any) -> Any:
    """A `weakref.finalize` that will call a function with `v`."""
    import weakref

    target = _Target()
    _TARGETS.append(target)
    return weakref.finalize(target, _noop, v)


def weak_values(v: Any) -> Any:
    import weakref

    target = _Target()
    target.state = v
    values: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
    values["k"] = target
    values.target = target  # pyright: ignore[reportAttributeAccessIssue] (alive as long as the dict)
    return values


def closure_of(v: Any) -> Callable[[], Any]:
    return lambda: v


class Store(NamedTuple):
    """An object `make(v)` that holds `v` where no pytree reaches it.

    `path`: a regular expression for the path from the object (written `x`) to
    `v`, as leak reports and lift's refusal (`holds a tracer at ...`) name it;
    `pytree`: whether the object is a pytree holding `v` in its static data;
    `report`: what a `LeakError`'s line says (from `x`), when a function is the
    holder it names (`x.func -> f (file:line), captured variable 'v'`), else
    `path`; `registered`: the object is kept by a registry of the standard
    library for as long as its target lives (`weakref.finalize`).
    """

    name: str
    make: Callable[[Any], Any]
    path: str
    pytree: bool = False
    report: str | None = None
    registered: bool = False


def _namespace(v: Any) -> Any:
    import types

    return types.SimpleNamespace(state=v)


def _argparse(v: Any) -> Any:
    import argparse

    return argparse.Namespace(state=v)


def _proxy(v: Any) -> Any:
    import types

    return types.MappingProxyType({"k": v})


def _chained(v: Any) -> Any:
    """An error raised while handling another, which holds `v`."""
    try:
        try:
            raise KeyError(v)
        except KeyError:
            raise ValueError("while handling it") from None
    except ValueError as e:
        e.__traceback__ = None
        return e


def _tree_partial(v: Any) -> Any:
    return jax.tree_util.Partial(closure_of(v))


class _History(list[Any]):
    """A `list` subclass that keeps attributes of its own."""


class _Table(dict[str, Any]):
    """A `dict` subclass that keeps attributes of its own."""


def _list_attribute(v: Any) -> Any:
    history = _History([1.0])
    history.best = v  # pyright: ignore[reportAttributeAccessIssue]
    return history


def _dict_attribute(v: Any) -> Any:
    table = _Table(lr=1.0)
    table.best = v  # pyright: ignore[reportAttributeAccessIssue]
    return table


def _dict_key(v: Any) -> Any:
    handle = _Target()
    handle.state = closure_of(v)
    return {handle: "state"}  # a key holding an object


# Alive for the whole run: a weak reference to it keeps its callback.
_REFERENT = _Target()


def _weakref_callback(v: Any) -> Any:
    return weakref.ref(_REFERENT, lambda _: v)


def _future(v: Any) -> Any:
    import asyncio

    loop = asyncio.new_event_loop()
    loop.close()  # the future keeps it; no callback is ever scheduled
    future = asyncio.Future(loop=loop)
    future.set_result(v)
    return future


# The one table of stored-tracer holders: the leak scan (`find_leaks`,
# `check_leaks`, `checking_leaks`, `checked`) finds a tracer in each, and
# `lift.lift` refuses a closure capturing one that holds a live tracer.
STORES: tuple[Store, ...] = (
    Store("SimpleNamespace", _namespace, r"x\.state"),
    Store("argparse.Namespace", _argparse, r"x\.state"),
    Store("threading.local", thread_local, r"x\.state"),
    Store("MappingProxyType", _proxy, r"x\['k'\]"),
    Store(
        "suspended generator",
        suspended,
        r"x\.<locals>\.v",
        report=r"x -> suspended\.<locals>\.gen \(.*\), local variable of a "
        r"suspended generator 'v'",
    ),
    Store("object array", object_array, r"x\[\(1, 0\)\]"),
    Store("bound builtin method", lambda v: [v].append, r"x\.__self__\[0\]"),
    Store("lru_cache", lru_cached, r"x\.<cache>\[1\]"),
    Store("cache", cached, r"x\.<cache>\[1\]"),
    Store("class attribute", class_attribute, r"x\.__class__\.registry\[0\]"),
    Store(
        "method",
        method_closure,
        r"x\.__class__\.method\.captures\['v'\]",
        report=r"x\.__class__\.method -> method_closure\.<locals>\.Model\.method "
        r"\(.*\), captured variable 'v'",
    ),
    Store(
        "property",
        property_closure,
        r"x\.__class__\.value\.fget\.captures\['v'\]",
        report=r"x\.__class__\.value\.fget -> property_closure\.<locals>\.Model\."
        r"value \(.*\), captured variable 'v'",
    ),
    Store(
        "staticmethod",
        staticmethod_closure,
        r"x\.__class__\.make\.__func__\.captures\['v'\]",
        report=r"x\.__class__\.make\.__func__ -> staticmethod_closure\.<locals>\."
        r"Model\.make \(.*\), captured variable 'v'",
    ),
    Store(
        "classmethod",
        classmethod_closure,
        r"x\.__class__\.make\.__func__\.captures\['v'\]",
        report=r"x\.__class__\.make\.__func__ -> classmethod_closure\.<locals>\."
        r"Model\.make \(.*\), captured variable 'v'",
    ),
    Store("contextvars.Context", context, r"x\['state'\]"),
    Store("contextvars.ContextVar", context_var, r"x\.<value>"),
    Store("weakref.finalize", finalizer, r"x\.args\[0\]", registered=True),
    Store("WeakValueDictionary", weak_values, r"x\['k'\]\.state"),
    Store("map iterator", lambda v: map(str, [v]), r"x(\.<referent \d>|\[0\])+"),
    Store("kept exception", lambda v: ValueError("kept", v), r"x\.args\[1\]"),
    Store("list subclass attribute", _list_attribute, r"x\.best"),
    Store("dict subclass attribute", _dict_attribute, r"x\.best"),
    Store(
        "weakref callback",
        _weakref_callback,
        r"x\.__callback__\.captures\['v'\]",
        report=r"x\.__callback__ -> _weakref_callback\.<locals>\.<lambda> \(.*\), "
        r"captured variable 'v'",
    ),
    Store("asyncio.Future result", _future, r"x\._result"),
    Store(
        "dict key",
        _dict_key,
        r"x\.keys\(\)\[0\]\.state\.captures\['v'\]",
        pytree=True,
        report=r"x\.keys\(\)\[0\]\.state -> closure_of\.<locals>\.<lambda> \(.*\), "
        r"captured variable 'v'",
    ),
    Store(
        "chained exception",
        lambda v: _chained(v),
        r"x\.__context__\.args\[0\]",
    ),
    Store(
        "tree_util.Partial",
        _tree_partial,
        r"x\.func\.captures\['v'\]",
        pytree=True,
        report=r"x\.func -> closure_of\.<locals>\.<lambda> \(.*\), captured "
        r"variable 'v'",
    ),
    Store(
        "equinox static field",
        lambda v: equinox_static(closure_of(v)),
        r"x\.<static>.*\.captures\['v'\]",
        pytree=True,
        report=r"x\.<static>\[\d\] -> closure_of\.<locals>\.<lambda> \(.*\), "
        r"captured variable 'v'",
    ),
    Store(
        "flax pytree_node=False",
        lambda v: flax_static(closure_of(v)),
        r"x\.<static>.*\.captures\['v'\]",
        pytree=True,
        report=r"x\.<static>\[\d\] -> closure_of\.<locals>\.<lambda> \(.*\), "
        r"captured variable 'v'",
    ),
)


def plugin_args() -> list[str]:
    """pytest arguments that load lift's plugin: none when it is installed (its
    entry point loads it), `-p lift._leaks.plugin` from a source tree."""
    import importlib.metadata

    installed = any(
        ep.value == "lift._leaks.plugin"
        for ep in importlib.metadata.entry_points(group="pytest11")
    )
    return [] if installed else ["-p", "lift._leaks.plugin"]


def free_depth() -> int:
    """How many more Python frames fit below this one."""
    n = 0

    def down() -> None:
        nonlocal n
        n += 1
        down()

    try:
        down()
    except RecursionError:
        pass
    return n
