"""Memory: nothing outlives its use, and every internal cache has a bound.

After 1 000 lifts inside traced functions (jit, vmap, grad, scan, `lift.jit`,
`lift.checked`), no `Lifted`, no tracer and no rebuilt function is still alive
once the transform has returned and the garbage collector has run. Every
module-level container of the library is found by inspection (so a cache added
later is covered too) and must stop growing under a workload that keeps making
new code objects, new static values, new Python floats, new partial subclasses
and new file names.
"""

from __future__ import annotations

import collections
import functools
import gc
import importlib
import itertools
import pkgutil
import sys
import weakref
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lift

LIFTS = 1_000


class Tracked:
    """Weak references to everything a lift made, to count what survives."""

    def __init__(self) -> None:
        self.refs: list[tuple[str, weakref.ref[Any]]] = []

    def add(self, what: str, obj: Any) -> None:
        self.refs.append((what, weakref.ref(obj)))

    def lifted(self, g: Any) -> None:
        self.add("Lifted", g)
        built = g._built  # the rebuilt function, once called
        if built is not None:
            self.add("rebuilt function", built.fn)
        for leaf in jax.tree_util.tree_leaves(g):
            if isinstance(leaf, jax.core.Tracer):
                self.add("tracer", leaf)

    def alive(self) -> dict[str, int]:
        gc.collect()
        counts: dict[str, int] = collections.Counter()
        for what, ref in self.refs:
            if ref() is not None:
                counts[what] += 1
        return dict(counts)

    def kinds(self) -> set[str]:
        return {what for what, _ in self.refs}


def _count(cls: type) -> int:
    gc.collect()
    # `type()`, not `isinstance`: the latter reads `__class__`, which objects
    # left by other tests (broken proxies) may refuse.
    return sum(1 for o in gc.get_objects() if issubclass(type(o), cls))


def _make(w: Any, k: int) -> Callable[[Any], Any]:
    def f(y):
        return y * w + k

    return f


def _lift_many(x: Any, tracked: Tracked, n: int) -> Any:
    out = x
    for i in range(n):
        g = lift.lift(_make(x * (i % 7 + 1), i % 5))
        out = out + g(x)
        tracked.lifted(g)
    return out


def test_1000_lifts_inside_jit_leave_nothing_alive():
    tracked = Tracked()
    lifted_before, tracers_before = _count(lift.Lifted), _count(jax.core.Tracer)

    def body(x):
        return _lift_many(x, tracked, LIFTS)

    out = jax.jit(body)(jnp.float32(1))
    expected = 1 + sum((i % 7 + 1) + (i % 5) for i in range(LIFTS))
    assert out == expected
    assert len(tracked.refs) >= 3 * LIFTS
    assert tracked.kinds() == {"Lifted", "rebuilt function", "tracer"}
    del body
    assert tracked.alive() == {}
    assert _count(lift.Lifted) <= lifted_before
    assert _count(jax.core.Tracer) <= tracers_before


@pytest.mark.parametrize(
    "transform", ["vmap", "grad", "scan", "lift.jit", "lift.checked"]
)
def test_lifts_inside_other_transforms_leave_nothing_alive(transform: str):
    tracked = Tracked()
    # Eager grad runs every op through JAX's leak checker: keep it short.
    n = 20 if transform == "grad" else 200
    lifted_before = _count(lift.Lifted)

    def body(x):
        return _lift_many(x, tracked, n)

    if transform == "vmap":
        jax.vmap(body)(jnp.ones(2))
    elif transform == "grad":
        jax.grad(lambda x: body(x).sum())(jnp.float32(1))
    elif transform == "scan":
        jax.lax.scan(lambda c, _: (body(c), None), jnp.float32(1), length=2)
    elif transform == "lift.jit":
        lift.jit(body)(jnp.float32(1))
    else:
        lift.checked(jax.jit)(body)(jnp.float32(1))
    assert len(tracked.refs) >= 3 * n
    assert tracked.alive() == {}
    assert _count(lift.Lifted) <= lifted_before


def test_lift_jit_does_not_keep_a_dropped_closure_alive():
    big = np.ones(1_000, np.float32)
    refs = []
    for i in range(20):
        w = big + i

        def f(x, w=w):
            return x + w.sum()

        refs.append(weakref.ref(f))
        lift.jit(f)(1.0)
        del f, w
    gc.collect()
    alive = sum(r() is not None for r in refs)
    assert alive == 0, f"{alive} of 20 closures (and their captured arrays) kept alive"


def test_lifted_objects_die_with_their_last_reference():
    tracked = Tracked()
    for i in range(LIFTS):
        g = lift.lift(_make(np.float32(i), i % 3))
        g(1.0)
        leaves, treedef = jax.tree_util.tree_flatten(g)
        h = jax.tree_util.tree_unflatten(treedef, leaves)
        h(2.0)
        tracked.lifted(g)
        tracked.lifted(h)
    del g, h, leaves, treedef
    assert tracked.alive() == {}


# -- caches ------------------------------------------------------------------------


def _modules() -> list[Any]:
    for info in pkgutil.iter_modules(lift.__path__):
        importlib.import_module(f"lift.{info.name}")
    return [
        m for name, m in sorted(sys.modules.items()) if name.split(".")[0] == "lift"
    ]


def _sized(value: Any) -> Callable[[], int] | None:
    """How to measure a module-level container or cache, if it is one."""
    if isinstance(
        value,
        dict
        | list
        | set
        | collections.deque
        | weakref.WeakValueDictionary
        | weakref.WeakKeyDictionary
        | weakref.WeakSet,
    ):
        return lambda: len(value)
    if not isinstance(value, type) and callable(getattr(value, "cache_info", None)):
        return lambda: value.cache_info().currsize
    return None


def _containers() -> dict[str, Callable[[], int]]:
    found: dict[str, Callable[[], int]] = {}
    for module in _modules():
        for name, value in vars(module).items():
            if name.startswith("__"):
                continue
            size = _sized(value)
            if size is not None:
                found[f"{module.__name__}.{name}"] = size
    return found


def _workload(round_: int, codes: int, values: int) -> None:
    """New code objects with new file names and new partial subclasses (`codes`
    of each), new Python floats and new dict keys (`values` of each); lifted,
    flattened with paths, called, scanned for leaks."""
    for i in range(codes):
        k = round_ * codes + i
        namespace: dict[str, Any] = {}
        source = f"def make(w):\n    def f(x, k={k}):\n        return x * w + k\n    return f\n"
        exec(compile(source, f"<generated {k}>", "exec"), namespace)
        g = lift.lift(namespace["make"](np.float32(k)))
        jax.tree_util.tree_flatten_with_path(g)
        g(1.0)
        lift.find_leaks(g)
        sub = type(f"Partial{k}", (functools.partial,), {})
        lift.lift(sub(lambda a, x: a * x, np.float32(k)))(1.0)
    for i in range(values):
        k = round_ * values + i
        g = lift.lift(_make(float(k) + 0.5, 0))
        jax.tree_util.tree_flatten_with_path(g)
        keyed = lift.lift(lambda x, d={f"key{k}": np.float32(1)}: x * d[next(iter(d))])
        jax.tree_util.tree_flatten_with_path(keyed)


def test_every_module_level_cache_is_bounded():
    containers = _containers()
    assert "lift._rule.hidden._PLAIN_TREEDEFS" in containers  # the inspection works
    codes, values, rounds = 100, 1_000, 6
    sizes: list[dict[str, int]] = []
    for round_ in range(rounds):
        # Without JAX's leak checker, which turns JAX's caches off: each of the
        # 1 200 eager calls would compile its ops afresh (a minute, for what
        # this test measures: lift's caches).
        with jax.check_tracer_leaks(False):
            _workload(round_, codes, values)
        gc.collect()
        sizes.append({name: size() for name, size in containers.items()})
    # Past 6 000 values and 600 code objects, a bounded cache has stopped
    # growing or emptied itself at least once; an unbounded one grew in every
    # round.
    growing = {
        name: [s[name] for s in sizes]
        for name in containers
        if all(
            b - a >= codes // 2 for a, b in itertools.pairwise(s[name] for s in sizes)
        )
    }
    assert growing == {}, f"caches that grow without bound: {growing}"


def test_code_info_does_not_keep_generated_code_alive():
    refs = []
    for k in range(3_000):
        namespace: dict[str, Any] = {}
        exec(
            compile(f"def f(x):\n    return x + {k}\n", f"<code {k}>", "exec"),
            namespace,
        )
        fn = namespace["f"]
        refs.append(weakref.ref(fn.__code__))
        lift.lift(fn)(1.0)
        del fn, namespace
    gc.collect()
    alive = sum(r() is not None for r in refs)
    # A small ring of recent code objects may be kept; not all of them.
    assert alive <= 1_100, f"{alive} of 3 000 generated code objects kept alive"


def test_partial_subclasses_are_not_kept_alive():
    refs = []
    for k in range(300):
        sub = type(f"Partial{k}", (functools.partial,), {})
        refs.append(weakref.ref(sub))
        lift.lift(sub(lambda a, x: a * x, float(k)))(2.0)
        del sub
    gc.collect()
    alive = sum(r() is not None for r in refs)
    assert alive <= 10, f"{alive} of 300 partial subclasses kept alive"


def test_closure_convert_inside_jit_keeps_no_tracer_alive():
    # SPEC: closure_convert keeps no tracer alive in any cache.
    tracked = Tracked()

    class Opaque:  # not a pytree: only closure_convert can see its tracer
        def __init__(self, v: Any) -> None:
            self.v = v

    def body(x):
        out = x
        for i in range(100):
            box = Opaque(x * (i + 1))

            def f(y, box=box):
                return y * box.v

            g = lift.closure_convert(f, jnp.float32(1))
            tracked.add("tracer", box.v)
            tracked.lifted(g)
            out = out + g(x)
        return out

    out = jax.jit(body)(jnp.float32(2))
    assert out == 2 + sum(4 * (i + 1) for i in range(100))
    assert "tracer" in tracked.kinds()
    assert tracked.alive() == {}


def test_originals_and_their_captured_arrays_die_with_the_lifted():
    # The skeleton caches keep code and static values, never the function or
    # its dynamic captures.
    refs = []
    for i in range(LIFTS):
        w = np.full(256, i, np.float32)
        f = _make(w, i % 3)
        g = lift.lift(f)
        g(np.float32(1))
        jax.tree_util.tree_flatten_with_path(g)
        refs.extend([weakref.ref(w), weakref.ref(f)])
        del w, f, g
    gc.collect()
    alive = sum(r() is not None for r in refs)
    assert alive == 0, f"{alive} of {len(refs)} originals or captured arrays alive"
