"""One rule for every lift: a shape lifted again decides as the full walk does.

Hypothesis builds random closure graphs from a description: nested closures,
partials (arguments and keywords), bound methods (of registered nodes and of
plain objects), defaults, keyword-only defaults and function attributes,
holding tuples, lists, dicts (sorted, unsorted, integer keys), NamedTuples
(plain and registered with a flatten of their own), registered nodes and
dataclasses, and leaves of every kind: Python and NumPy scalars, ml_dtypes,
JAX and NumPy arrays (0-d, boolean, dtypes JAX cannot hold), types, modules,
builtins, plain objects, sets; shared references, cyclic ones, empty cells.
Every function's code is fixed (one factory per kind), so building a
description again gives a closure of the same shape with new dynamic leaves.

The property: lifting one shape again and again (its skeleton then shared
with the shapes lifted before it), and then a perturbed one (a static value, a
leaf's kind, sharing, order changed), gives at every lift exactly what a fresh
full walk gives: the same skeleton (the treedef), the very same leaves, or the
same refusal.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import random
import types
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

import lift
from lift._capture import capture as _capture

# -- leaves ---------------------------------------------------------------------


class _Plain:
    """A plain object (not a pytree): static, by identity."""

    def __init__(self, v: Any) -> None:
        self.v = v


_PLAIN = _Plain(1)
_PLAIN_OTHER = _Plain(2)

# Each kind: the leaf for a seed (dynamic kinds vary with it, static ones not).
_LEAVES: dict[str, Callable[[int], Any]] = {
    "float": lambda i: 0.5 + i,
    "negative zero": lambda i: -0.0,
    "nan": lambda i: math.nan,
    "complex": lambda i: complex(i, 1.0),
    "int": lambda i: 3,
    "big int": lambda i: 2**70,
    "bool": lambda i: True,
    "str": lambda i: "s",
    "bytes": lambda i: b"b",
    "None": lambda i: None,
    "Ellipsis": lambda i: ...,
    "type": lambda i: int,
    "user type": lambda i: _Plain,
    "module": lambda i: np,
    "dtype": lambda i: np.dtype("float32"),
    "builtin": lambda i: len,
    "plain object": lambda i: _PLAIN,
    "frozenset": lambda i: frozenset({1, 2}),
    "range": lambda i: range(3),
    "set": lambda i: {1, "a"},
    "jax f32": lambda i: jnp.full(2, float(i)),
    "jax bf16": lambda i: jnp.full(2, float(i), jnp.bfloat16),
    "jax int32 0-d": lambda i: jnp.asarray(i, jnp.int32),
    "jax bool": lambda i: jnp.asarray([True, False]),
    "numpy f32": lambda i: np.full(3, float(i), np.float32),
    "numpy 0-d": lambda i: np.asarray(float(i)),
    "numpy 0-d bool": lambda i: np.asarray(i % 2 == 0),
    "numpy bool": lambda i: np.asarray([True, i % 2 == 0]),
    "numpy bfloat16": lambda i: np.full(2, i, ml_dtypes.bfloat16),
    "numpy float8": lambda i: np.full(2, i, ml_dtypes.float8_e4m3fn),
    "numpy int4": lambda i: np.full(2, i % 4, ml_dtypes.int4),
    "numpy str": lambda i: np.asarray(["a", "b"]),
    "numpy object": lambda i: np.asarray([_PLAIN], dtype=object),
    "np.float32": lambda i: np.float32(i),
    "np.int8": lambda i: np.int8(i),
    "np.bool_": lambda i: np.bool_(i % 2),
    "np.float64": lambda i: np.float64(i),
    "ml bfloat16": lambda i: ml_dtypes.bfloat16(i),
    "ml float8": lambda i: ml_dtypes.float8_e5m2(i),
    "np.str_": lambda i: np.str_("s"),
    "np.datetime64": lambda i: np.datetime64("2020-01-01"),
}
# Leaves of another kind, for perturbations.
_OTHER_STATIC: dict[str, Any] = {
    "int": 4,
    "bool": False,
    "str": "t",
    "negative zero": 0.0,
    "plain object": _PLAIN_OTHER,
    "frozenset": frozenset({1.0, 2}),
    "range": range(1, 3),
    "type": float,
}

# -- containers -----------------------------------------------------------------


class _Pair(NamedTuple):
    a: Any
    b: Any


class _Swapped(NamedTuple):
    """A NamedTuple registered with a flatten of its own (its items swapped)."""

    a: Any
    b: Any


jax.tree_util.register_pytree_node(
    _Swapped, lambda p: ((p.b, p.a), None), lambda _, c: _Swapped(c[1], c[0])
)


class _Node:
    """A registered node with static data beside its children."""

    def __init__(self, a: Any, b: Any, tag: Any = "t") -> None:
        self.a, self.b, self.tag = a, b, tag

    def method(self, *args: Any) -> Any:
        return self.a


jax.tree_util.register_pytree_node(
    _Node, lambda n: ((n.a, n.b), n.tag), lambda tag, c: _Node(c[0], c[1], tag)
)


@functools.partial(
    jax.tree_util.register_dataclass, data_fields=["a", "b"], meta_fields=["m"]
)
@dataclasses.dataclass
class _Data:
    a: Any
    b: Any
    m: int = 0


class _Obj:
    """A plain object a method is bound to: static as a whole."""

    def __init__(self, a: Any, b: Any) -> None:
        self.a, self.b = a, b

    def method(self, *args: Any) -> Any:
        return self.a


# -- functions: one factory per way of holding, its code fixed -------------------


def _cell(*vs: Any) -> Any:
    a = vs[0] if vs else None
    b = vs[1] if len(vs) > 1 else None
    rest = vs[2:]

    def f(*args: Any) -> Any:
        return (a, b, rest)

    return f


def _default(*vs: Any) -> Any:
    def f(x: Any = vs[0] if vs else None, y: Any = tuple(vs[1:])) -> Any:
        return x, y

    return f


def _kwdefault(*vs: Any) -> Any:
    def f(*, x: Any = vs[0] if vs else None, y: Any = list(vs[1:])) -> Any:  # noqa: B006 (a list, as captured)
        return x, y

    return f


def _attribute(*vs: Any) -> Any:
    def f() -> Any:
        return f.v  # type: ignore[attr-defined]

    f.v = vs  # type: ignore[attr-defined]
    return f


def _body(*args: Any, **kwargs: Any) -> Any:
    return args, kwargs


def _partial(*vs: Any) -> Any:
    return functools.partial(_body, *vs)


def _partial_keywords(*vs: Any) -> Any:
    return functools.partial(_body, **{f"k{i}": v for i, v in enumerate(vs)})


def _node_method(*vs: Any) -> Any:
    return _Node(vs[0] if vs else None, tuple(vs[1:])).method


def _object_method(*vs: Any) -> Any:
    return _Obj(vs[0] if vs else None, tuple(vs[1:])).method


def _nested(*vs: Any) -> Any:
    inner = _cell(*vs)

    def f() -> Any:
        return inner()

    return f


def _recursive(*vs: Any) -> Any:
    def f(n: int = 0) -> Any:
        return vs if n <= 0 else f(n - 1)

    return f


def _empty_cell(*vs: Any) -> Any:
    def f() -> Any:
        return later, vs

    g = f  # `later` is bound after `f` is made: still empty when lifted
    if False:
        later = None
    return g


def _sharing(*vs: Any) -> Any:
    # Two functions sharing one cell.
    def f() -> Any:
        return vs

    def g() -> Any:
        return vs, f

    return g


def _global_fn(*args: Any) -> Any:
    return _global_fn.v  # type: ignore[attr-defined]


def _module_function(*vs: Any) -> Any:
    # Reads its attribute through its global name: static there.
    _global_fn.v = vs  # type: ignore[attr-defined]
    return _global_fn


def _module_function_copy(*vs: Any) -> Any:
    # The same code and globals, not the object its name is bound to.
    fn = _global_fn
    copy = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, None, None)
    copy.__qualname__ = fn.__qualname__
    copy.__annotations__ = fn.__annotations__
    copy.v = vs  # type: ignore[attr-defined]
    return copy


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "module function": _module_function,
    "module function copy": _module_function_copy,
    "cell": _cell,
    "default": _default,
    "kwdefault": _kwdefault,
    "attribute": _attribute,
    "partial": _partial,
    "partial keywords": _partial_keywords,
    "node method": _node_method,
    "object method": _object_method,
    "nested": _nested,
    "recursive": _recursive,
    "empty cell": _empty_cell,
    "sharing": _sharing,
}

# Kinds whose closures differ from another kind's in what the code cannot see.
_SIBLINGS = {"module function": "module function copy"}

# -- descriptions -----------------------------------------------------------------
#
# ("leaf", kind) | ("tuple"|"list"|"pair"|"swapped"|"node"|"data", children)
# | ("dict", keys, children) | ("fn", kind, children) | ("again", n): the n-th
# container or function built so far, once more (a shared reference)
# | ("cycle", kind): a list or registered node that contains itself.

_CONTAINERS = ("tuple", "list", "pair", "swapped", "node", "data")
_KEYS = [("a", "b"), ("b", "a"), (2, 1), (1, "a"), ("a",), ()]


def _descriptions() -> st.SearchStrategy[Any]:
    leaf = st.builds(lambda k: ("leaf", k), st.sampled_from(sorted(_LEAVES)))
    special = st.one_of(
        st.builds(lambda n: ("again", n), st.integers(0, 3)),
        st.builds(lambda k: ("cycle", k), st.sampled_from(["list", "node"])),
    )

    def extend(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return st.one_of(
            st.builds(
                lambda k, c: (k, tuple(c)),
                st.sampled_from(_CONTAINERS),
                st.lists(children, min_size=0, max_size=3),
            ),
            st.sampled_from(_KEYS).flatmap(
                lambda keys: st.builds(
                    lambda c: ("dict", keys, tuple(c)),
                    st.lists(children, min_size=len(keys), max_size=len(keys)),
                )
            ),
            st.builds(
                lambda k, c: ("fn", k, tuple(c)),
                st.sampled_from(sorted(_FUNCTIONS)),
                st.lists(children, min_size=0, max_size=3),
            ),
        )

    value = st.recursive(st.one_of(leaf, leaf, special), extend, max_leaves=12)
    return st.builds(
        lambda k, c: ("fn", k, tuple(c)),
        st.sampled_from(sorted(_FUNCTIONS)),
        st.lists(value, min_size=0, max_size=4),
    )


def build(spec: Any, seed: int) -> Any:
    """A fresh object graph for `spec`, its dynamic leaves made from `seed`."""
    made: list[Any] = []

    def go(s: Any) -> Any:
        tag = s[0]
        if tag == "leaf":
            return _LEAVES[s[1]](seed)
        if tag == "again":
            return made[s[1] % len(made)] if made else None
        if tag == "cycle":
            if s[1] == "list":
                ring: list[Any] = [0.5 + seed]
                ring.append(ring)
                return ring
            node = _Node(0.5 + seed, None)
            node.b = node
            return node
        children = [go(c) for c in s[-1]]
        if tag == "tuple":
            out: Any = tuple(children)
        elif tag == "list":
            out = children
        elif tag == "pair":
            out = _Pair(*[*children, None, None][:2])
        elif tag == "swapped":
            out = _Swapped(*[*children, None, None][:2])
        elif tag == "node":
            out = _Node(*[*children, None, None][:2])
        elif tag == "data":
            out = _Data(*[*children, None, None][:2])
        elif tag == "dict":
            out = dict(zip(s[1], children, strict=True))
        else:
            out = _FUNCTIONS[s[1]](*children)
        made.append(out)
        return out

    return go(spec)


def perturb(spec: Any, rnd: random.Random) -> Any:
    """`spec` with one change somewhere: a static value or a leaf's kind, a
    container's kind or a dict's key order, a shared reference for a fresh one."""
    paths: list[tuple[int, ...]] = []

    def collect(s: Any, path: tuple[int, ...]) -> None:
        paths.append(path)
        if s[0] in ("fn", "dict", *_CONTAINERS):
            for i, c in enumerate(s[-1]):
                collect(c, (*path, i))

    collect(spec, ())
    target = rnd.choice(paths)

    def change(s: Any) -> Any:
        tag = s[0]
        if tag == "leaf":
            if s[1] in _OTHER_STATIC and rnd.random() < 0.5:
                return ("other", s[1])
            return ("leaf", rnd.choice(sorted(_LEAVES)))
        if tag == "dict":
            return ("dict", tuple(reversed(s[1])), tuple(reversed(s[2])))
        if tag in _CONTAINERS:
            return (rnd.choice(_CONTAINERS), s[1])
        if tag == "fn":
            if rnd.random() < 0.3:
                return ("fn", rnd.choice(sorted(_FUNCTIONS)), s[2])
            return ("fn", s[1], (*s[2], ("leaf", rnd.choice(sorted(_LEAVES)))))
        return ("leaf", "float")

    def at(s: Any, path: tuple[int, ...]) -> Any:
        if not path:
            return change(s)
        children = list(s[-1])
        children[path[0]] = at(children[path[0]], path[1:])
        return (*s[:-1], tuple(children))

    return at(spec, target)


def _other_leaf(kind: str) -> Callable[[int], Any]:
    return lambda i: _OTHER_STATIC[kind]


def _build_any(spec: Any, seed: int) -> Any:
    """`build`, with `("other", kind)` leaves: a static of that kind, another value."""

    def swap(s: Any) -> Any:
        if s[0] == "other":
            return ("leaf", f"other {s[1]}")
        if s[0] in ("fn", "dict", *_CONTAINERS):
            return (*s[:-1], tuple(swap(c) for c in s[-1]))
        return s

    return build(swap(spec), seed)


for _kind in _OTHER_STATIC:
    _LEAVES[f"other {_kind}"] = _other_leaf(_kind)

# -- the property -----------------------------------------------------------------


def _full_walk(obj: Any) -> tuple[Any, list[Any]] | str:
    try:
        return _capture._walk(obj, frozenset(), None)
    except lift.LiftError as err:
        return f"LiftError: {err}"


def _fast(obj: Any) -> tuple[Any, list[Any]] | str:
    try:
        return _capture.capture(obj)
    except lift.LiftError as err:
        return f"LiftError: {err}"


def _agree(obj: Any) -> None:
    """That capturing `obj` (a skeleton shared or not) gives what a fresh full
    walk gives."""
    expected = _full_walk(obj)
    got = _fast(obj)
    if isinstance(expected, str) or isinstance(got, str):
        assert got == expected
        return
    skeleton, leaves = got
    walked, walked_leaves = expected
    assert skeleton == walked
    assert hash(skeleton) == hash(walked)
    assert len(leaves) == len(walked_leaves)
    assert all(a is b for a, b in zip(leaves, walked_leaves, strict=True))


_EXAMPLES = 200

_SETTINGS = settings(
    max_examples=_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@_SETTINGS
@given(spec=_descriptions(), rnd=st.randoms(use_true_random=False))
def test_every_lift_of_a_shape_gives_what_the_full_walk_gives(
    spec: Any, rnd: random.Random
) -> None:
    for seed in range(4):
        _agree(build(spec, seed))
    for n in range(3):  # perturbed shapes, after the shape was kept
        _agree(_build_any(perturb(spec, rnd), 100 + n))
    # The same captures in another kind of function (the root's code).
    other = _SIBLINGS.get(spec[1]) or rnd.choice(sorted(_FUNCTIONS))
    _agree(build(("fn", other, spec[2]), 103))
    _agree(build(spec, 104))
