"""Properties of `lift` over generated closure programs (hypothesis).

A program is a description (nested tuples) of functions built from a fixed set
of factories, one per way a function can hold a value: closure cells, defaults,
keyword-only defaults, `functools.partial` arguments and keywords, a bound
method's `self`, recursive and mutually recursive functions, a function with an
empty cell, two functions sharing a cell, generator and async functions.
Captured values are arrays of random shapes and dtypes (float32, float16,
bfloat16, int32, bool, complex64), Python floats, complex numbers, ints, bools,
strings, `None`, tuples, dicts, NamedTuples, `jax.tree_util.Partial`, and other
generated functions (held once, held twice, or already lifted), nested up to
six deep. Because the factories' code is fixed, two programs have equal
treedefs exactly when their descriptions agree on everything static.

Properties checked:

- `lift(f)(x) == f(x)` eagerly (bit for bit) and through one shared
  `jax.jit(lambda g, x: g(x))` (to float tolerance);
- flatten/unflatten round-trips; treedefs are equal exactly when the code and
  the static captures are equal;
- `vmap` over stacked captures equals a Python loop;
- `f`, its cells, defaults and partial arguments are unchanged afterwards.

Profiles, chosen with the environment variable `LIFT_HYPOTHESIS_PROFILE`:

- `ci` (the default): deterministic, 300 examples of the eager properties,
  75 of the treedef property and 12 through `jit` and `vmap` (each compiles a
  new program); the file takes about 21 s of CPU, where 1 000 took 48 s.
  Breadth is the `long` profile's job.
- `dev`: a quick random run while editing (a third of `ci`).
- `long`: for local runs before a release, about seventy times `ci`, random,
  with the example database: `LIFT_HYPOTHESIS_PROFILE=long scripts/test.sh
  tests/lifted/test_properties.py`.
"""

from __future__ import annotations

import functools
import math
import os
import types
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import several_devices
from hypothesis import HealthCheck, given, settings, strategies as st

import lift

settings.register_profile(
    "ci",
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "dev",
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "long",
    max_examples=20_000,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
_PROFILE = os.environ.get("LIFT_HYPOTHESIS_PROFILE", "ci")
# Applied to this module's tests only (not loaded globally), so that other
# hypothesis tests keep their own settings.
_SETTINGS = settings.get_profile(_PROFILE)
_EXAMPLES = _SETTINGS.max_examples
# Examples of the expensive properties, relative to the profile's budget: every
# new treedef compiles once under `jit`.
_TREEDEF_EXAMPLES = max(10, _EXAMPLES // 4)
_JIT_EXAMPLES = max(10, _EXAMPLES // 25)


# -- what generated functions do with their captures ------------------------------


def _is_traced(v: Any) -> bool:
    return isinstance(v, jax.core.Tracer)


def _use(v: Any, x: Any) -> Any:
    """A float32 scalar (or `x`-shaped) summary of a captured value.

    Concrete values are reduced with NumPy (cheap, and bit-identical whether a
    Python float or the float32 array lift made of it comes in); traced values
    with `jax.numpy`.
    """
    if v is None:
        return np.float32(0)
    if isinstance(v, str):
        return np.float32(len(v))
    if isinstance(v, dict):
        return _total([_use(w, x) for w in v.values()])
    if isinstance(v, tuple | list):
        return _total([_use(w, x) for w in v])
    if callable(v):
        out = v(x)
        return jnp.mean(out) if _is_traced(out) else np.mean(out, dtype=np.float32)
    xp: Any = jnp if _is_traced(v) else np
    a = xp.asarray(v)
    if xp.iscomplexobj(a):
        a = xp.real(a)
    a = a.astype(xp.float32)
    return xp.sum(a, dtype=xp.float32)


def _total(parts: list[Any]) -> Any:
    out: Any = np.float32(0)
    for p in parts:
        out = p + out if _is_traced(p) else out + p
    return out


def _plus(x: Any, s: Any) -> Any:
    return s + x if _is_traced(s) else x + s


# One factory per way of holding a value. Their code objects are fixed, so
# equal descriptions give equal code.


def _make_cell(v):
    def cell(x):
        return _plus(x, _use(v, x))

    return cell


def _make_cell2(v, w):
    def cell2(x):
        return _plus(_plus(x, _use(v, x)), _use(w, x))

    return cell2


def _make_default(v):
    def default(x, v=v):
        return _plus(x, _use(v, x))

    return default


def _make_attribute(v):
    def attribute(x):
        return _plus(x, _use(attribute.v, x))  # pyright: ignore[reportFunctionMemberAccess]

    attribute.v = v  # pyright: ignore[reportFunctionMemberAccess]
    return attribute


def _make_ordered(v):
    # Keys out of sorted order, combined in order by an operation that does not
    # commute: a reordered dict computes something else.
    table = {"z": v, "a": 2, "m": "b"}

    def ordered(x):
        out = x
        for value in table.values():
            out = _plus(out * np.float32(0.5), _use(value, x))
        return out

    return ordered


_ZEROS = {"+0": 0.0, "-0": -0.0, "1.5": 1.5}


def _make_signed(v, zero):
    z = _ZEROS[zero]

    def signed(x):
        # A Python branch on `z` keeps it static; its sign must then count.
        if z == 0.0:
            return _plus(x * np.float32(math.copysign(1.0, z)), _use(v, x))
        return _plus(x, _use(v, x))

    return signed


def _make_kwdefault(v):
    def kwdefault(x, *, v=v):
        return _plus(x, _use(v, x))

    return kwdefault


def _partial_body(v, x):
    return _plus(x, _use(v, x))


def _partial_keyword_body(x, v):
    return _plus(x, _use(v, x))


class _Box(NamedTuple):
    v: Any

    def method(self, x):
        return _plus(x, _use(self.v, x))


def _make_recursive(v, n):
    def recursive(x, n=n):
        if n == 0:
            return _plus(x, _use(v, x))
        return recursive(x, n - 1)

    return recursive


_NEVER = object()


def _make_empty(v):
    def unbound():
        return later

    def empty(x):
        return _plus(x, _use(v, x)) if unbound is not None else x

    if v is _NEVER:
        later = None  # never runs: `later` is a cell that stays empty
    return empty


def _make_twins(v):
    # Two functions sharing the cell of `v`; the outer one also holds the inner.
    def inner(x):
        return _plus(x, _use(v, x))

    def twins(x):
        return _plus(inner(x), _use(v, x))

    return twins


def _make_mutual(v):
    def even(x, n=2):
        return _plus(x, _use(v, x)) if n == 0 else odd(x, n - 1)

    def odd(x, n):
        return even(x, n - 1)

    return even


def _make_generator(v):
    def produce(x):
        yield _plus(x, _use(v, x))

    def consume(x):
        return next(produce(x))

    return consume


def _make_coroutine(v):
    async def produce(x):
        return _plus(x, _use(v, x))

    def consume(x):
        running = produce(x)
        try:
            running.send(None)
        except StopIteration as stop:
            return stop.value
        raise AssertionError("the coroutine did not finish")

    return consume


class _Pair(NamedTuple):
    a: Any
    b: Any


# -- descriptions of programs -------------------------------------------------------

_DTYPES = ("float32", "float16", "bfloat16", "int32", "bool", "complex64")
_SHAPES = ((), (1,), (3,), (2, 3), (0,))
_FUNCTIONS = (
    "cell",
    "default",
    "kwdefault",
    "partial",
    "partial_keyword",
    "method",
    "empty",
    "twins",
    "mutual",
    "generator",
    "coroutine",
    "attribute",
    "ordered",
)

_floats = st.floats(-100, 100, allow_nan=False, width=32)
_arrays = st.tuples(
    st.just("array"),
    st.sampled_from(_SHAPES),
    st.sampled_from(_DTYPES),
    st.integers(0, 2**16),
    st.booleans(),  # NumPy or JAX
)
_atoms = st.one_of(
    _arrays,
    st.tuples(st.just("float"), _floats),
    st.tuples(st.just("complex"), _floats, _floats),
    st.tuples(st.just("int"), st.integers(-100, 100)),
    st.tuples(st.just("bool"), st.booleans()),
    st.tuples(st.just("str"), st.text("abc", max_size=3)),
    st.just(("none",)),
)


def _function(
    values: st.SearchStrategy[Any], plain: st.SearchStrategy[Any]
) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.tuples(st.sampled_from(_FUNCTIONS), values),
        st.tuples(st.just("cell2"), values, plain),
        st.tuples(st.just("recursive"), values, st.integers(0, 3)),
        st.tuples(st.just("signed"), values, st.sampled_from(sorted(_ZEROS))),
    )


def _containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.tuples(st.just("tuple"), st.lists(children, max_size=3).map(tuple)),
        st.tuples(
            st.just("dict"),
            st.dictionaries(st.sampled_from("pqrs"), children, max_size=3).map(
                lambda d: tuple(sorted(d.items()))
            ),
        ),
        st.tuples(st.just("pair"), children, children),
        st.tuples(st.just("tree_util_partial"), children),
    )


# Values without functions in them, a few containers deep.
_plain = st.recursive(_atoms, _containers, max_leaves=4)


def _holding(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A value holding the function `inner` directly or inside a container."""
    fn = st.tuples(st.just("fn"), inner)
    return st.one_of(
        fn,
        st.tuples(st.just("tuple"), st.tuples(_plain, fn)),
        st.tuples(st.just("tuple"), st.tuples(fn, fn)),
        st.tuples(
            st.just("dict"),
            st.tuples(st.tuples(st.just("p"), fn), st.tuples(st.just("q"), _plain)),
        ),
        st.tuples(st.just("pair"), fn, _plain),
        st.tuples(st.just("shared"), inner),  # one function object, held twice
        st.tuples(st.just("lifted"), inner),  # a Lifted inside a capture
    )


def _programs_of_depth(n: int) -> st.SearchStrategy[Any]:
    """Functions nested exactly `n` deep (a function holding a function ...)."""
    program = _function(_plain, _plain)
    for _ in range(n - 1):
        program = _function(_holding(program), _plain)
    return program


MAX_DEPTH = 6
programs = st.one_of(*(_programs_of_depth(n) for n in range(1, MAX_DEPTH + 1)))


def _array(shape: tuple[int, ...], dtype: str, seed: int, use_jax: bool) -> Any:
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        a = rng.random(shape) < 0.5
    elif dtype == "int32":
        a = rng.integers(-50, 50, shape).astype(np.int32)
    elif dtype == "complex64":
        a = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(
            np.complex64
        )
    else:
        a = rng.standard_normal(shape).astype(np.float32).astype(jnp.dtype(dtype))
    return jnp.asarray(a) if use_jax else a


class Built:
    """A program made real, with every function, partial and method made."""

    def __init__(self) -> None:
        self.made: list[Any] = []

    def value(self, spec: tuple[Any, ...]) -> Any:
        kind = spec[0]
        if kind == "array":
            return _array(*spec[1:])
        if kind == "float":
            return float(spec[1])
        if kind == "complex":
            return complex(spec[1], spec[2])
        if kind in ("int", "bool", "str"):
            return spec[1]
        if kind == "none":
            return None
        if kind == "tuple":
            return tuple(self.value(s) for s in spec[1])
        if kind == "dict":
            return {k: self.value(s) for k, s in spec[1]}
        if kind == "pair":
            return _Pair(self.value(spec[1]), self.value(spec[2]))
        if kind == "tree_util_partial":
            return jax.tree_util.Partial(_partial_body, self.value(spec[1]))
        if kind == "shared":
            fn = self.function(spec[1])
            return (fn, fn)
        if kind == "lifted":
            return lift.lift(self.function(spec[1]))
        assert kind == "fn"
        return self.function(spec[1])

    def function(self, spec: tuple[Any, ...]) -> Any:
        kind = spec[0]
        v = self.value(spec[1])
        if kind == "cell":
            fn: Any = _make_cell(v)
        elif kind == "cell2":
            fn = _make_cell2(v, self.value(spec[2]))
        elif kind == "default":
            fn = _make_default(v)
        elif kind == "kwdefault":
            fn = _make_kwdefault(v)
        elif kind == "partial":
            fn = functools.partial(_partial_body, v)
        elif kind == "partial_keyword":
            fn = functools.partial(_partial_keyword_body, v=v)
        elif kind == "method":
            fn = _Box(v).method
        elif kind == "recursive":
            fn = _make_recursive(v, spec[2])
        elif kind == "twins":
            fn = _make_twins(v)
        elif kind == "mutual":
            fn = _make_mutual(v)
        elif kind == "generator":
            fn = _make_generator(v)
        elif kind == "coroutine":
            fn = _make_coroutine(v)
        elif kind == "attribute":
            fn = _make_attribute(v)
        elif kind == "ordered":
            fn = _make_ordered(v)
        elif kind == "signed":
            fn = _make_signed(v, spec[2])
        else:
            assert kind == "empty"
            fn = _make_empty(v)
        self.made.append(fn)
        return fn


def build(spec: tuple[Any, ...]) -> tuple[Any, list[Any]]:
    built = Built()
    fn = built.function(spec)
    return fn, built.made


def static_key(spec: Any, flows: bool | None = None) -> Any:
    """The description with every dynamic value replaced by one marker.

    A program holding `recursive` (whose code branches on its parameter `n`)
    keeps a NumPy boolean scalar static, by value: it may flow into such a
    branch (optax's `masked`)."""
    if flows is None:
        flows = _holds(spec, "recursive")
    if not isinstance(spec, tuple):
        return spec
    kind = spec[0] if spec else None
    if (
        kind == "array"
        and flows
        and spec[1] == ()
        and spec[2] == "bool"
        and not spec[4]
    ):
        return ("numpy bool", bool(_array(*spec[1:])))
    if kind in ("array", "float", "complex"):
        return ("leaf",)
    if kind in ("int", "bool", "str"):
        return (kind, spec[1])
    return tuple(static_key(s, flows) for s in spec)


def _holds(spec: Any, kind: str) -> bool:
    """Whether a factory of `kind` appears anywhere in `spec`."""
    stack = [spec]
    while stack:
        s = stack.pop()
        if isinstance(s, tuple):
            if s and s[0] == kind:
                return True
            stack.extend(s)
    return False


def depth(spec: Any) -> int:
    if not isinstance(spec, tuple) or not spec:
        return 0
    inner = max((depth(s) for s in spec), default=0)
    return inner + (
        1 if spec[0] in (*_FUNCTIONS, "cell2", "recursive", "signed") else 0
    )


def _dynamic_leaves(spec: Any) -> bool:
    return static_key(spec) != spec


def _perturb(spec: Any, rnd: Any) -> Any:
    """Another program of the same shape: new dynamic values, and now and then a
    changed static one."""
    if not isinstance(spec, tuple) or not spec:
        return spec
    kind = spec[0]
    if kind in ("array", "float", "complex"):
        choice = rnd.randrange(3)
        if choice == 0:
            return ("float", float(np.float32(rnd.uniform(-100, 100))))
        if choice == 1:
            return ("complex", 1.0, -2.0)
        return (
            "array",
            rnd.choice(_SHAPES),
            rnd.choice(_DTYPES),
            rnd.randrange(2**16),
            rnd.random() < 0.5,
        )
    change = rnd.random() < 0.08
    if kind == "int":
        return ("int", spec[1] + 1) if change else spec
    if kind == "bool":
        return ("bool", not spec[1]) if change else spec
    if kind == "str":
        return ("str", spec[1] + "a") if change else spec
    if kind == "none" and change:
        return ("int", 0)
    return tuple(_perturb(s, rnd) for s in spec)


# -- checking that nothing of the original changed ------------------------------------


def _state(obj: Any) -> tuple[Any, ...]:
    """What `lift` must not touch in a function, partial or method, by identity."""
    if isinstance(obj, functools.partial):
        return ("partial", obj.func, obj.args, *obj.args, *obj.keywords.items())
    if isinstance(obj, types.MethodType):
        return ("method", obj.__func__, obj.__self__, *obj.__self__)
    cells: list[Any] = []
    for cell in obj.__closure__ or ():
        try:
            cells.append((cell, cell.cell_contents))
        except ValueError:
            cells.append((cell, "<empty>"))
    return (
        obj.__code__,
        obj.__closure__,
        *cells,
        obj.__defaults__,
        *(obj.__defaults__ or ()),
        *(obj.__kwdefaults__ or {}).items(),
        tuple(obj.__dict__.items()),
    )


def _contents(value: Any) -> list[Any]:
    """Everything inside captured containers, by identity (iteratively)."""
    out: list[Any] = []
    stack = [value]
    while stack:
        v = stack.pop()
        out.append(v)
        if isinstance(v, dict):
            out.append(tuple(v))
            stack.extend(v.values())
        elif isinstance(v, tuple | list):
            stack.extend(v)
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, tuple) and isinstance(b, tuple) and type(a) is tuple:
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a is b


def _snapshot(made: list[Any]) -> list[tuple[Any, ...]]:
    return [(*_state(obj), *_contents(_state(obj))) for obj in made]


# -- the properties ---------------------------------------------------------------------

_X = np.asarray([0.5, -1.0, 2.0], np.float32)


def _call(g: Any, x: Any) -> Any:
    return g(x)


@jax.jit
def _jit_calls(g: Any, stacked: Any, x: Any) -> tuple[Any, Any]:
    """`g(x)`, and `vmap` of the call over `stacked`, in one compiled program (one
    compilation per example is the cost of this property)."""
    mapped = (
        jax.vmap(_call, in_axes=(0, None))(stacked, x) if stacked is not None else None
    )
    return g(x), mapped


def _low_precision(leaves: list[Any]) -> bool:
    return any(
        getattr(leaf, "dtype", None) in (jnp.bfloat16, jnp.float16) for leaf in leaves
    )


def _close(a: Any, b: Any, leaves: list[Any]) -> None:
    tol = 5e-2 if _low_precision(leaves) else 2e-5
    a, b = np.asarray(a), np.asarray(b)
    scale = max(1.0, float(np.max(np.abs(b), initial=0.0)))
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol * scale)


@settings(_SETTINGS)
@given(programs)
def test_lifted_equals_original_eagerly_and_round_trips(spec):
    fn, made = build(spec)
    before = _snapshot(made)
    expected = fn(_X)

    lifted = lift.lift(fn)
    assert lift.is_lifted(lifted)
    out = lifted(_X)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(expected), strict=True)

    leaves, treedef = jax.tree_util.tree_flatten(lifted)
    again = jax.tree_util.tree_unflatten(treedef, leaves)
    assert jax.tree_util.tree_structure(again) == treedef
    assert all(
        a is b for a, b in zip(jax.tree_util.tree_leaves(again), leaves, strict=True)
    )
    np.testing.assert_array_equal(
        np.asarray(again(_X)), np.asarray(expected), strict=True
    )
    plain = lift.unlift(lifted)
    assert isinstance(plain, type(fn))
    assert not lift.is_lifted(plain)
    np.testing.assert_array_equal(
        np.asarray(plain(_X)), np.asarray(expected), strict=True
    )
    assert jax.tree_util.tree_structure(lift.lift(plain)) == treedef
    paths = [
        jax.tree_util.keystr(p)
        for p, _ in jax.tree_util.tree_flatten_with_path(lifted)[0]
    ]
    assert len(set(paths)) == len(paths) == len(leaves)
    repr(lifted)

    assert all(_same(a, b) for a, b in zip(before, _snapshot(made), strict=True))
    np.testing.assert_array_equal(np.asarray(fn(_X)), np.asarray(expected), strict=True)


@settings(_SETTINGS, max_examples=_TREEDEF_EXAMPLES)
@given(programs, st.randoms(use_true_random=False))
def test_treedefs_equal_exactly_when_code_and_statics_are(spec, rnd):
    other = _perturb(spec, rnd)
    a, _ = build(spec)
    b, _ = build(other)
    same = jax.tree_util.tree_structure(lift.lift(a)) == jax.tree_util.tree_structure(
        lift.lift(b)
    )
    assert same == (static_key(spec) == static_key(other)), (
        static_key(spec),
        static_key(other),
    )
    # `diff` explains a difference of treedefs or of leaf types (SPEC: `None`
    # exactly when one `jax.jit` program serves both).
    la, lb = lift.lift(a), lift.lift(b)
    explained = lift.diff(la, lb)
    types_a = [jax.typeof(x) for x in jax.tree_util.tree_leaves(la)]
    types_b = [jax.typeof(x) for x in jax.tree_util.tree_leaves(lb)]
    assert (explained is None) == (same and types_a == types_b), explained


@settings(_SETTINGS, max_examples=_JIT_EXAMPLES)
@given(programs, st.integers(1, 3))
def test_jit_and_vmap_over_stacked_captures(spec, copies):
    fn, made = build(spec)
    before = _snapshot(made)
    lifted = lift.lift(fn)
    leaves, treedef = jax.tree_util.tree_flatten(lifted)

    # `copies` variants with shifted leaves, stacked, then mapped over (a
    # program without leaves has nothing to map over).
    variants = [
        jax.tree_util.tree_unflatten(treedef, [_shift(leaf, i) for leaf in leaves])
        for i in range(copies)
    ]
    stacked = (
        jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *variants) if leaves else None
    )
    single, mapped = _jit_calls(lifted, stacked, _X)
    _close(single, fn(_X), leaves)
    if leaves:
        _close(mapped, np.stack([np.asarray(v(_X)) for v in variants]), leaves)

    assert all(_same(a, b) for a, b in zip(before, _snapshot(made), strict=True))


def _shift(leaf: Any, i: int) -> Any:
    a = jnp.asarray(leaf)
    if a.dtype == jnp.bool_:
        return a ^ bool(i % 2)
    return a + jnp.asarray(i, a.dtype)


def test_generated_programs_reach_six_deep():
    # The strategy must actually produce the depths it promises.
    deepest = 0

    @settings(max_examples=200, derandomize=True, database=None)
    @given(programs)
    def probe(spec):
        nonlocal deepest
        deepest = max(deepest, depth(spec))

    probe()
    assert deepest == MAX_DEPTH


# -- converting Python scalars ------------------------------------------------
#
# A `Lifted` converts its Python floats and complexes to weakly typed arrays the
# first time it is flattened or called: each must be what `jax.device_put` of
# that scalar alone gives, in a buffer of its own.


def _leaf_facts(leaf: Any) -> tuple[Any, ...]:
    assert isinstance(leaf, jax.Array)
    return (
        type(leaf),
        leaf.dtype,
        leaf.weak_type,
        leaf.sharding,
        leaf._committed,  # pyright: ignore[reportAttributeAccessIssue]
        np.asarray(leaf).tobytes(),
    )


def _lifted_and_alone(values: list[Any]) -> tuple[list[Any], list[Any]]:
    fn = functools.partial(lambda *a: a, *values)
    lifted = jax.tree_util.tree_leaves(lift.lift(fn))
    return lifted, [jax.device_put(v) for v in values]


_SCALAR_VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, width=64),
    st.complex_numbers(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1e300, -1e-300, 0.1]),
)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(values=st.lists(_SCALAR_VALUES, min_size=1, max_size=70))
def test_captured_scalars_become_what_device_put_gives_each(values: list[Any]) -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # 1e300 overflows float32
        for x64 in (False, True):
            with jax.enable_x64(x64):
                a, b = _lifted_and_alone(values)
                assert [_leaf_facts(x) for x in a] == [_leaf_facts(x) for x in b]
                pointers = {x.unsafe_buffer_pointer() for x in a}
                assert len(pointers) == len(a)  # one buffer each


def test_conversion_keeps_the_soundness_rules() -> None:
    # Two equal floats are two buffers: donating the `Lifted` works.
    f = lift.lift(lambda x, a=0.5, b=0.5: x * a * b)
    g, out = jax.jit(lambda f, x: (f, f(x)), donate_argnums=0)(f, jnp.ones(2))
    assert jnp.allclose(out, 0.25) and g(1.0) == 0.25
    # Weak typing: a bf16 model stays bf16, eagerly and under `jit`.
    scale = lift.lift(lambda x, s=0.5: x * s)
    x = jnp.ones(3, jnp.bfloat16)
    assert scale(x).dtype == jnp.bfloat16
    assert jax.jit(lambda s, x: s(x))(lift.lift(lambda x, s=0.5: x * s), x).dtype == (
        jnp.bfloat16
    )
    # First converted inside a trace, under `vmap`, with `jit` disabled: arrays.
    made: list[Any] = []

    def inside(x: Any) -> Any:
        fn = lift.lift(lambda y, lr=0.25: y * lr)
        made.append(fn)
        return fn(x)

    assert jax.jit(inside)(2.0) == 0.5
    assert jnp.allclose(jax.vmap(inside)(jnp.ones(2)), 0.25)
    with jax.disable_jit():
        assert inside(2.0) == 0.5
    # Where `jit` would treat the scalars otherwise than `device_put` does: a
    # transfer guard (forbids implicit transfers), NaN and infinity checks.
    with jax.transfer_guard("disallow"):
        (leaf,) = jax.tree_util.tree_leaves(lift.lift(lambda y, lr=0.25: y * lr))
    assert leaf.weak_type and float(leaf) == 0.25
    for check in (jax.debug_nans, jax.debug_infs):
        with check(True):
            nan = lift.lift(lambda x, v=float("nan"), w=float("inf"): x + v + w)
            assert all(x.weak_type for x in jax.tree_util.tree_leaves(nan))
    for fn in made:
        (leaf,) = jax.tree_util.tree_leaves(fn)
        assert isinstance(leaf, jax.Array) and not isinstance(leaf, jax.core.Tracer)
        assert leaf.weak_type and leaf.dtype == jnp.float32
    with jax.enable_x64(True):
        (leaf,) = jax.tree_util.tree_leaves(lift.lift(lambda x, lr=0.1: x * lr))
        assert leaf.dtype == jnp.float64 and leaf.weak_type


@several_devices
def test_conversion_under_a_mesh_gives_device_puts_leaves() -> None:
    from jax.sharding import AxisType

    mesh = jax.make_mesh((len(jax.devices()),), ("x",), axis_types=(AxisType.Explicit,))
    with jax.set_mesh(mesh):
        a, b = _lifted_and_alone([0.2, 0.3])
    assert [_leaf_facts(x) for x in a] == [_leaf_facts(x) for x in b]
    assert not any(x.committed for x in a)


@pytest.mark.parametrize("called", [False, True])
@pytest.mark.parametrize("make_other", ["Lifted", "subclass", "copy"])
def test_a_lifted_made_from_another_has_its_own_float_buffers(
    called: bool, make_other: str
) -> None:
    import copy

    class Sub(lift.Lifted):
        pass

    original = lift.lift(lambda x, a=0.5, b=0.25: a * x + b)
    if called:
        assert original(1.0) == 0.75  # its floats are converted now
    other = {
        "Lifted": lift.Lifted,
        "subclass": Sub,
        "copy": copy.copy,
    }[make_other](original)
    assert other is not original
    _, out = jax.jit(lambda f: (f, f(1.0)), donate_argnums=0)(other)
    assert out == 0.75 and all(x.is_deleted() for x in jax.tree_util.tree_leaves(other))
    assert original(1.0) == 0.75
    ours = {x.unsafe_buffer_pointer() for x in jax.tree_util.tree_leaves(original)}
    assert len(ours) == 2
