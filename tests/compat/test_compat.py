"""Pins what `lift/_compat/` assumes about JAX's internals.

Each test stores a tracer from inside a transform, checks it is live while the
transform runs and escaped once it has exited, and checks the name of the
transform it reports. A JAX upgrade that breaks an assumption fails here first.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import inspect
import os
import sys
import threading
import types
import weakref
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import io_callback

from lift import _compat
from lift._compat import escaped, trace_exits
from lift._compat.escaped import leaked_at_check
from lift._holders.held import held as held_parts
from lift._holders.reach import reach
from lift._leaks.frames import FrameLook

pytestmark = pytest.mark.lift_allow_leaks


@pytest.fixture(autouse=True)
def _jax_leak_checks_off() -> Iterator[None]:
    # These tests leak on purpose; JAX's own checker would raise first.
    with jax.check_tracer_leaks(False):
        yield


class Probe:
    """Records a tracer and whether it was live when seen from inside."""

    def __init__(self) -> None:
        self.tracers: list[Any] = []
        self.live_inside: list[bool] = []

    def __call__(self, x: Any) -> Any:
        self.tracers.append(x)
        self.live_inside.append(_compat.live_traces().is_live(x))
        return x

    def check(self, n: int, transform: str) -> None:
        assert len(self.tracers) == n
        assert all(map(_compat.is_tracer, self.tracers))
        assert self.live_inside == [True] * n
        after = _compat.live_traces()
        assert [after.is_live(t) for t in self.tracers] == [False] * n
        assert _compat.transform_name(self.tracers[0]) == transform


def _scan(probe: Probe) -> Callable[[Any], Any]:
    def body(c: Any, y: Any) -> tuple[Any, Any]:
        return probe(c) + y, y

    def run(x: Any) -> Any:
        return jax.lax.scan(body, x, jnp.arange(3.0))[0]

    return run


def _cond(probe: Probe) -> Callable[[Any], Any]:
    def branch(y: Any) -> Any:
        return probe(y)

    return lambda x: jax.lax.cond(x > 0, branch, branch, x)


def _while(probe: Probe) -> Callable[[Any], Any]:
    def body(y: Any) -> Any:
        return probe(y) + 1

    return lambda x: jax.lax.while_loop(lambda y: y < 3, body, x)


CASES: list[tuple[str, Callable[[Probe], Callable[[Any], Any]], str]] = [
    ("jit", lambda p: jax.jit(lambda x: p(x) * 2), "jit(<lambda>)"),
    ("vmap", lambda p: lambda x: jax.vmap(p)(jnp.stack([x, x])), "vmap"),
    ("grad", lambda p: jax.grad(lambda x: p(x) * 2), "grad"),
    ("jvp", lambda p: lambda x: jax.jvp(p, (x,), (x,))[0], "jvp"),
    ("scan", _scan, "scan(body)"),
    ("cond", _cond, "cond(branch)"),
    ("while_loop", _while, "while_loop(body)"),
    (
        "eval_shape",
        lambda p: lambda x: jax.eval_shape(lambda y: p(y), x),
        "jit(<lambda>)",
    ),
    (
        "checkpoint",
        lambda p: jax.grad(jax.checkpoint(lambda x: p(x) * 2)),
        "checkpoint(<lambda>)",
    ),
    ("jit(grad)", lambda p: jax.jit(jax.grad(lambda x: p(x) * 2)), "grad"),
    ("grad(jit)", lambda p: jax.grad(jax.jit(lambda x: p(x) * 2)), "jit(<lambda>)"),
    ("vmap(grad)", lambda p: lambda x: jax.vmap(jax.grad(p))(jnp.stack([x])), "grad"),
    ("jit(scan)", lambda p: jax.jit(_scan(p)), "scan(body)"),
    (
        "vmap(jit)",
        lambda p: lambda x: jax.vmap(jax.jit(lambda y: p(y)))(jnp.stack([x])),
        "jit(<lambda>)",
    ),
]


@pytest.mark.parametrize(
    ("name", "make", "transform"), CASES, ids=[c[0] for c in CASES]
)
def test_liveness_pinned(
    name: str, make: Callable[[Probe], Callable[[Any], Any]], transform: str
) -> None:
    del name
    probe = Probe()
    make(probe)(jnp.float32(1.0))
    probe.check(1, transform)


def test_outer_tracer_live_inside_nested_transform() -> None:
    seen: list[tuple[bool, bool]] = []

    def outer(x: Any) -> Any:
        def body(c: Any, y: Any) -> tuple[Any, Any]:
            live = _compat.live_traces()
            seen.append((live.is_live(x), live.is_live(c)))
            return c + y, y

        return jax.lax.scan(body, x, jnp.arange(2.0))[0]

    jax.jit(jax.grad(outer))(jnp.float32(1.0))
    assert seen == [(True, True)]


def test_custom_vjp_under_jit() -> None:
    fwd_probe, bwd_probe = Probe(), Probe()

    @jax.custom_vjp
    def f(x: Any) -> Any:
        return x * 2

    def fwd(x: Any) -> tuple[Any, Any]:
        return fwd_probe(x) * 2, x

    def bwd(res: Any, ct: Any) -> tuple[Any]:
        return (bwd_probe(ct) * 2,)

    f.defvjp(fwd, bwd)
    jax.jit(jax.grad(f))(jnp.float32(1.0))
    fwd_probe.check(1, "jit(f)")
    bwd_probe.check(1, "jit(f)")


def test_integer_bool_and_key_tracers() -> None:
    probe = Probe()

    @jax.jit
    def f(i: Any, b: Any, k: Any) -> Any:
        probe(i)
        probe(b)
        probe(k)
        return i

    f(jnp.int32(1), jnp.bool_(True), jax.random.key(0))
    probe.check(3, "jit(f)")
    assert [_compat.tracer_aval(t) for t in probe.tracers] == [
        "int32[]",
        "bool[]",
        "key<fry>[]",
    ]


def test_concrete_values_are_not_tracers() -> None:
    assert not _compat.is_tracer(jnp.ones(3))
    assert not _compat.is_tracer(1.0)
    assert len(_compat.live_traces()) == 1  # only the eager trace


@pytest.mark.parametrize("filtering", ["off", "quiet_remove_frames"])
def test_jax_leaked_tracers_from_report(filtering: str) -> None:
    stash: list[Any] = []

    def f(x: Any) -> Any:
        stash.append(x)
        return x

    before = jax.config.jax_traceback_filtering
    jax.config.update("jax_traceback_filtering", filtering)
    try:
        with jax.checking_leaks(), pytest.raises(Exception, match="Leaked") as info:
            jax.jit(f)(1.0)
    finally:
        jax.config.update("jax_traceback_filtering", before)
    found = _compat.jax_leaked_tracers(info.value)
    # Filtered tracebacks drop JAX's frames, and the tracers with them.
    expected = [True] if filtering == "off" else []
    assert [t is stash[0] for t in found or ()] == expected
    assert found is not None


def test_jax_leaked_tracers_ignores_other_errors() -> None:
    assert _compat.jax_leaked_tracers(ValueError("Leaked trace")) is None
    assert _compat.jax_leaked_tracers(IndexError("list index")) is None
    assert _compat.jax_leaked_tracers(Exception("other")) is None


def test_recognises_jax_closure_convert_results() -> None:
    converted, _ = jax.closure_convert(lambda y: y * 2, 1.0)
    assert _compat.is_jax_closure_convert(converted)
    assert not _compat.is_jax_closure_convert(lambda y: y)
    assert not _compat.is_jax_closure_convert(jnp.sum)


def _code_params(fn: Callable[..., Any], *args: Any) -> dict[str, list[Any]]:
    """`primitive[param]` -> what `rule_parts` finds, over every sub-jaxpr."""
    found: dict[str, list[Any]] = {}
    stack = [jax.make_jaxpr(fn)(*args).jaxpr]
    while stack:
        for eqn in stack.pop().eqns:
            for name, value in eqn.params.items():
                for v in value if isinstance(value, tuple) else (value,):
                    if hasattr(v, "eqns"):
                        stack.append(v)
                    elif hasattr(v, "jaxpr"):
                        stack.append(v.jaxpr)
                    elif _compat.runs_code(v):
                        key = f"{eqn.primitive.name}[{name}]"
                        found.setdefault(key, []).extend(_compat.rule_parts(v))
    return found


def test_rule_parts_reach_custom_jvp_and_vjp_rules() -> None:
    @jax.custom_jvp
    def f(x: Any) -> Any:
        return jnp.sin(x)

    def f_jvp(primals: Any, tangents: Any) -> Any:
        return f(primals[0]), tangents[0]

    f.defjvp(f_jvp)

    @jax.custom_vjp
    def g(x: Any) -> Any:
        return x

    def fwd(x: Any) -> Any:
        return x, None

    def bwd(res: Any, ct: Any) -> Any:
        return (ct,)

    g.defvjp(fwd, bwd)
    expected = {
        "custom_jvp_call[jvp_jaxpr_fun]": [("code", f_jvp)],
        "custom_vjp_call[fwd_jaxpr_thunk]": [("code", fwd)],
        "custom_vjp_call[bwd]": [("code", bwd)],
        "custom_vjp_call[out_trees]": [],
    }
    x, xs = jnp.float32(1.0), jnp.ones(3)
    assert _code_params(lambda x: f(g(x)), x) == expected
    # Batched, differentiated and dead-code-eliminated rules sit behind more of
    # JAX's wrappers (batching.py, lift_jvp, the dce thunks).
    assert _code_params(jax.vmap(lambda x: f(g(x))), xs) == expected
    parts = _code_params(lambda x: jax.linearize(lambda y: f(g(y)), x)[1](x), x)
    assert parts["custom_lin[bwd]"] == [("code", bwd)]
    assert {p for ps in parts.values() for p in ps} <= {
        ("code", f_jvp),
        ("code", fwd),
        ("code", bwd),
    }
    softplus = _code_params(jax.grad(jax.nn.softplus), x)
    [(kind, rule)] = softplus["custom_jvp_call[jvp_jaxpr_fun]"]
    assert kind == "code" and rule.__name__ == "_logaddexp_jvp"


def test_rule_parts_reach_static_arguments_and_callbacks() -> None:
    @functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
    def f(scale: float, x: Any) -> Any:
        return scale * x

    def fwd(scale: float, x: Any) -> Any:
        return f(scale, x), None

    def bwd(scale: float, res: Any, ct: Any) -> Any:
        return (scale * ct,)

    f.defvjp(fwd, bwd)
    parts = _code_params(lambda x: f(3.0, x), jnp.float32(1.0))
    assert parts["custom_vjp_call[bwd]"] == [("static", 3.0), ("code", bwd)]
    assert parts["custom_vjp_call[fwd_jaxpr_thunk]"] == [("static", 3.0), ("code", fwd)]

    def callback(v: Any) -> Any:
        return v

    def debug(v: Any, k: str) -> None:
        del v, k

    spec = jax.ShapeDtypeStruct((), jnp.float32)

    def g(x: Any) -> Any:
        jax.debug.callback(debug, x, "seven")
        return jax.pure_callback(callback, spec, x) + io_callback(callback, spec, x)

    parts = _code_params(g, jnp.float32(1.0))
    assert parts["pure_callback[callback]"] == [("code", callback)]
    assert parts["io_callback[callback]"] == [("code", callback)]
    assert parts["debug_callback[callback]"] == [
        ("static", {1: "seven"}),
        ("code", debug),
    ]
    assert not _compat.runs_code(jnp.float32) and not _compat.runs_code((1, 2))


def test_eager_only_when_no_transform_runs() -> None:
    seen: list[bool] = []

    def probe(x: Any) -> Any:
        seen.append(_compat.eager())
        return x

    assert _compat.eager()
    for name, make, _ in CASES:
        seen.clear()
        make(probe)(jnp.float32(1.0))
        assert seen and not any(seen), name
        assert _compat.eager(), name
    with jax.disable_jit():
        assert _compat.eager()


def test_custom_nodes_are_jax_registered_types() -> None:
    # lift reads JAX's registry of pytree node types to tell a NamedTuple JAX
    # flattens itself from one registered as a node of its own.
    class Point(NamedTuple):
        x: float

    class Node(NamedTuple):
        x: float

    jax.tree_util.register_pytree_node(
        Node, lambda n: ((n.x,), None), lambda _, xs: Node(*xs)
    )
    assert Node in _compat.CUSTOM_NODES
    assert Point not in _compat.CUSTOM_NODES
    assert dict in _compat.CUSTOM_NODES


def test_bare_jaxpr_holds_no_constant_and_evaluates_with_them() -> None:
    scale = jnp.arange(3.0) + 1.0
    closed = jax.make_jaxpr(lambda x: x * scale)(jnp.ones(3))
    assert _compat.holds_consts(closed)
    assert not _compat.holds_consts(object())
    (const,) = closed.consts
    bare = _compat.bare_jaxpr(closed)
    # Nothing the program holds is the constant (jax >= 0.11 attaches constants
    # to the `Jaxpr` itself; jax <= 0.10 keeps them beside it): its own data,
    # not the functions and modules its debug information reaches.
    seen: set[int] = set()
    stack: list[Any] = [bare]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or not type(obj).__module__.startswith(("jax", "builtins")):
            continue
        seen.add(id(obj))
        assert obj is not const
        if not isinstance(obj, types.FunctionType | types.ModuleType | type):
            stack.extend(gc.get_referents(obj))
    out = jax.core.eval_jaxpr(bare, [const], jnp.full(3, 2.0))  # pyright: ignore[reportUnknownMemberType]
    assert jnp.array_equal(out[0], jnp.array([2.0, 4.0, 6.0]))


def test_inferred_argnames_are_what_jax_jit_donates() -> None:
    def f(x: Any, n: Any, y: Any, *, k: int = 3) -> Any:
        return x * n + y * k

    signature = inspect.signature(f)
    assert _compat.inferred_argnames(signature, (0, 2)) == ("x", "y")
    # Negative numbers: named from jax 0.11 on, counted over every parameter.
    expected = ("y",) if _compat.JAX_VERSION >= (0, 11) else ()
    assert _compat.inferred_argnames(signature, (-2,)) == expected
    x, n, y = jnp.ones(2), jnp.ones(2), jnp.ones(2)
    jax.jit(f, donate_argnums=-2)(x, y=y, n=n)
    assert y.is_deleted() == bool(expected)


def test_eager_grad_over_a_jitted_closure_leaves_tracers_in_jax_caches() -> None:
    # optimistix jits (filter_jit, closure_convert) a closure over `a`, a grad
    # tracer: JAX's own caches keep grad's and jit's tracers past grad, one set
    # per call (jax 0.8.0: pjit._infer_params_cached; 0.10.2: separate_consts,
    # donation_vector; 0.12.0.1: trace_to_jaxpr, _dce_jaxpr, and equinox's
    # filter_eval_shape cache). The leak checks name those caches rather than
    # report the tracers as the test's escapes (lift._leaks.caches.split_cached).
    optx = pytest.importorskip("optimistix")
    from lift._leaks.caches import split_cached

    def cube_root(a: Any) -> Any:
        def fn(y: Any, args: Any) -> Any:
            return y**3 - a

        solver = optx.Newton(rtol=1e-6, atol=1e-6)
        return optx.root_find(fn, solver, jnp.array(1.0), throw=False).value

    jax.grad(cube_root)(2.0)  # compiled once: the next calls hit the caches
    with _compat.watching_trace_exits(every=True) as exits:
        jax.grad(cube_root)(2.0)
    kept = _compat.escaped_tracers(exits)
    assert "grad" in {_compat.transform_name(t) for t in kept}
    cached, rest = split_cached(kept)
    assert cached is not None and rest == []
    assert all(name.startswith(("jax._src.", "equinox.")) for name in cached.names)
    assert any(name.startswith("jax._src.") for name in cached.names)
    # A tracer that a variable also holds is reached by lift's scan first; the
    # caches alone are asked only about what no variable holds.
    assert "not stored by the code under test" in str(cached)


@pytest.fixture
def heap_walks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many objects each heap walk (`gc.get_referrers`) of the check was
    given, in order."""
    walks: list[int] = []
    heap_walk = gc.get_referrers

    def counted(*objects: Any) -> list[Any]:
        walks.append(len(objects))
        return heap_walk(*objects)

    monkeypatch.setattr(escaped.gc, "get_referrers", counted)
    return walks


@pytest.mark.parametrize("noted", [False, True])
@pytest.mark.parametrize("old", [False, True])
@pytest.mark.parametrize("keep", ["the trace", "a tracer"])
def test_a_trace_kept_without_its_tracers_costs_no_collection(
    keep: str, old: bool, noted: bool, heap_walks: list[int]
) -> None:
    # JAX keeps some traces past their exit with no tracer of them alive (jax
    # 0.10.2: a staged `custom_jvp` call's memoized jvp thunk closes over its
    # trace, and the cached jaxpr holds it; so under every equinox and
    # optimistix solve): telling that costs no garbage collection, a few
    # hundred milliseconds on a large heap. A kept tracer is found after a
    # collection of the young generations, then a full one (it is still
    # referred to after the first). Each look reads the young objects, and
    # the old ones noted (`noting_promotions`); the heap (`gc.get_referrers`)
    # only for an old trace made old unnoted.
    kept: list[Any] = []

    def f(x: Any) -> Any:
        kept.append(x._trace if keep == "the trace" else x)
        if old:
            gc.collect()  # the trace, and what it made so far, move to gen 2
        return x * 2

    collections: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    gc.disable()  # only the collections `f` and the check run
    try:
        with escaped.noting_promotions() if noted else contextlib.nullcontext():
            with _compat.watching_trace_exits(every=True) as exits:
                jax.jit(f)(1.0)
            gc.callbacks.append(count)
            try:
                found = _compat.escaped_tracers(exits)
            finally:
                gc.callbacks.remove(count)
    finally:
        gc.enable()
    if keep == "the trace":
        assert found == [] and collections == []
    else:
        assert found == kept and collections == [1, 2]
    generational = escaped._GENERATIONAL  # pyright: ignore[reportPrivateUsage]
    if noted and generational:
        assert heap_walks == []
    elif keep == "the trace":
        assert len(heap_walks) == old
    else:
        assert len(heap_walks) == 2 + old
    kept.clear()


@pytest.mark.parametrize("noted", [False, True])
@pytest.mark.parametrize(
    "kept_as",
    [
        "young trace",
        "old trace, young tracer",
        "old trace, old tracer",
        "trace alone",
        "old tracer, a collection in another thread",
    ],
)
def test_jax_check_finds_a_kept_tracer_whatever_its_traces_generation(
    kept_as: str, noted: bool, heap_walks: list[int]
) -> None:
    # A young trace's referrers are read among the young objects alone; a
    # collection inside the trace makes it old. An old trace's are read in the
    # heap (`gc.get_referrers`), unless the collections that made it and its
    # tracers old were noted (`noting_promotions`), each in the thread that
    # checks it: then the young objects and the noted tracers stand for the
    # heap. A trace kept with no tracer of it is no leak. A tracer found is
    # looked for again once the frames' `f_locals` snapshots are dropped
    # (CPython 3.11, 3.12), then after a full collection.
    kept: list[Any] = []
    refs: list[Any] = []

    def f(x: Any) -> Any:
        refs.append(weakref.ref(x._trace))
        if kept_as.startswith(("old trace, old", "old tracer")):
            kept.append(x)
        if kept_as != "young trace":
            gc.collect()  # the trace, and what it made so far, move to gen 2
        if kept_as.endswith("another thread"):
            thread = threading.Thread(target=gc.collect, args=(1,))
            thread.start()
            thread.join()
        if kept_as in ("young trace", "old trace, young tracer"):
            kept.append(x * 2)
        if kept_as == "trace alone":
            kept.append(x._trace)
        return x + 1

    gc.disable()  # only the collections `f` and the check run: no promotion
    try:
        with escaped.noting_promotions() if noted else contextlib.nullcontext():
            jax.jit(f)(1.0)
            found = {id(t) for t in leaked_at_check(refs[0])}
    finally:
        gc.enable()
    if kept_as == "trace alone":
        assert found == set()
    else:
        assert {id(t) for t in kept} <= found
    generational = escaped._GENERATIONAL  # pyright: ignore[reportPrivateUsage]
    if noted and generational and not kept_as.endswith("another thread"):
        assert heap_walks == []
    else:  # before the collections, after the snapshots' drop, after all
        dropped = _compat.SNAPSHOT_LOCALS
        reads = {"young trace": 1, "trace alone": 1}
        assert len(heap_walks) == reads.get(kept_as, 2 + dropped)
    kept.clear()


@pytest.mark.skipif(
    not _compat.SNAPSHOT_LOCALS,
    reason="from Python 3.13 (PEP 667) f_locals caches no snapshot",
)
def test_a_tracer_held_by_a_snapshot_alone_costs_no_full_collection() -> None:
    # At JAX's check, a frame on the stack whose `f_locals` snapshot alone
    # keeps a tracer (its variable was deleted since) holds nothing, as
    # under lift's run of JAX's checker. Dropping the snapshot tells it:
    # the full collection, hundreds of milliseconds on a large heap, is not
    # needed.
    kept: list[Any] = []
    refs: list[Any] = []

    def f(x: Any) -> Any:
        refs.append(weakref.ref(x._trace))
        kept.append(x)
        return x * 2

    collections: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    def look() -> list[Any]:
        tracer = kept.pop()
        assert "tracer" in sys._getframe().f_locals  # the snapshot keeps it
        del tracer
        return leaked_at_check(refs[0])

    jax.jit(f)(1.0)
    gc.disable()
    gc.callbacks.append(count)
    try:
        found = look()
    finally:
        gc.callbacks.remove(count)
        gc.enable()
    assert found == [] and collections == [0]


def test_a_thread_beside_a_noted_collection_sends_both_looks_to_the_heap(
    heap_walks: list[int],
) -> None:
    # With another thread running Python code, a collection lists no young
    # object (that thread may be building a tuple, which a list of them would
    # break: `lift._base.gc.young_objects`): what it makes old goes unnoted.
    # The check at the trace's exit and the look at the block's end both read
    # the heap (`gc.get_referrers`), and find the same tracer.
    kept: list[Any] = []
    refs: list[Any] = []
    waiting = threading.Event()
    beside = threading.Thread(target=waiting.wait)

    def f(x: Any) -> Any:
        refs.append(weakref.ref(x._trace))
        kept.append(x)
        beside.start()
        gc.collect()  # the trace and `x` go old, with a thread beside
        return x * 2

    gc.disable()  # only the collections `f` and the checks run
    try:
        with escaped.noting_promotions():
            with _compat.watching_trace_exits(every=True) as exits:
                jax.jit(f)(1.0)
            waiting.set()
            beside.join()
            at_check = leaked_at_check(refs[0])
            checked = len(heap_walks)
            at_end = _compat.escaped_tracers(exits)
    finally:
        gc.enable()
    assert at_check == kept and at_end == kept
    assert checked == 2 + _compat.SNAPSHOT_LOCALS
    assert len(heap_walks) - checked == 3
    kept.clear()


def test_promotions_are_noted_only_inside_the_block() -> None:
    # Outside every `noting_promotions` block no collection runs lift's code,
    # and nothing noted is kept.
    promotions = escaped._PROMOTIONS  # pyright: ignore[reportPrivateUsage]
    noting = escaped._GENERATIONAL  # pyright: ignore[reportPrivateUsage]
    with escaped.noting_promotions():
        with escaped.noting_promotions():
            gc.collect()
            assert (promotions.note in gc.callbacks) is noting
        assert (promotions.note in gc.callbacks) is noting
    assert promotions.note not in gc.callbacks
    assert not promotions.traces and not promotions.tracers


def test_a_hook_removed_by_the_blocks_code_sends_old_traces_to_the_heap(
    heap_walks: list[int],
) -> None:
    # Collections after the removal go unnoted: the noted tracers no longer
    # stand for the heap.
    if not escaped._GENERATIONAL:  # pyright: ignore[reportPrivateUsage]
        pytest.skip("no generations to note from Python 3.14")
    kept: list[Any] = []
    refs: list[Any] = []

    def f(x: Any) -> Any:
        refs.append(weakref.ref(x._trace))
        gc.collect()  # the trace goes old, noted
        gc.callbacks.remove(escaped._PROMOTIONS.note)  # pyright: ignore[reportPrivateUsage]
        kept.append(x)
        gc.collect()  # `x` goes old, unnoted
        return x * 2

    gc.disable()
    try:
        with escaped.noting_promotions():
            jax.jit(f)(1.0)
            found = leaked_at_check(refs[0])
    finally:
        gc.enable()
    assert found == kept and heap_walks
    kept.clear()


def _not_declined(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if this file's fixture had not turned JAX's checker off: JAX's
    verdict is then reached (its checker itself still off)."""
    monkeypatch.setattr(trace_exits, "jax_leak_checks_declined", lambda: False)


@pytest.mark.parametrize("declined", [False, True])
def test_frames_holding_an_exited_trace_are_named_not_those_inside_one(
    declined: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # At JAX's check of the inner jit, `g` (running inside the vmap) holds that
    # jit's tracer in `inner` (escaped) and the vmap's in `outer` (live): the
    # look names only the first, with the frame and the local holding it. Code
    # that turned JAX's checker off for itself (as this file's fixture does
    # for every test: `declined`) gives no verdict.
    if not declined:
        _not_declined(monkeypatch)
    assert trace_exits.jax_leak_checks_declined() is declined
    told: list[tuple[str, list[str], list[str]]] = []

    def tell(signal: _compat.LeakSignal) -> None:
        exited = _compat.ExitedTrace(signal.trace)
        for held in FrameLook().at_exit(exited, signal.frame):  # not kept
            names = [name for name, _ in held.tracers]
            kinds = [_compat.transform_name(t) for _, t in held.tracers]
            told.append((held.code.co_name, names, kinds))

    def g(x: Any) -> Any:
        inner: list[Any] = []
        outer = [x]
        jax.jit(lambda y: inner.append(y) or y)(outer[0])
        return x

    with _compat.watching_trace_exits(every=True, leaked=tell):
        jax.vmap(g)(jnp.arange(2.0))
    assert told == ([] if declined else [("g", ["inner"], ["jit(<lambda>)"])])


@pytest.mark.skipif(
    not _compat.SNAPSHOT_LOCALS,  # pyright: ignore[reportPrivateUsage]
    reason="from Python 3.13 (PEP 667) f_locals caches no snapshot",
)
def test_the_look_keeps_the_names_exec_wrote_into_the_locals(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Before 3.13 `exec` writes into the frame's `f_locals` snapshot, which the
    # next `locals()` returns: emptying it would lose `y`.
    from lift._leaks import frames

    read: list[str] = []
    frame_locals = frames.frame_locals

    def reading(frame: types.FrameType, *args: Any) -> Any:
        read.append(frame.f_code.co_name)
        return frame_locals(frame, *args)

    monkeypatch.setattr(frames, "frame_locals", reading)

    def run() -> Any:
        exec("y = 1")
        FrameLook().at_exit(_compat.ExitedTrace(object()), sys._getframe())
        return locals()["y"]

    assert run() == 1
    assert "run" in read  # the look read this frame's locals


@pytest.mark.skipif(
    not _compat.SNAPSHOT_LOCALS,  # pyright: ignore[reportPrivateUsage]
    reason="from Python 3.13 (PEP 667) f_locals caches no snapshot",
)
def test_every_read_of_a_frames_locals_keeps_the_names_exec_wrote() -> None:
    # JAX's check drops the stack's snapshots (`drop_stale_snapshots`), and the
    # scan, the chain and `checking_leaks` read frames' locals: none may lose
    # a name only the snapshot holds.
    from lift._compat.checker import drop_stale_snapshots
    from lift._compat.traces import frame_locals

    def run() -> Any:
        exec("y = 1")
        drop_stale_snapshots()
        frame_locals(sys._getframe())
        return locals()["y"]

    assert run() == 1

    def plain() -> Any:
        x = 2  # noqa: F841 (read through the frame)
        frame = sys._getframe()
        assert ("x", 2) in frame_locals(frame)
        return frame.f_locals  # a fresh snapshot: the last was emptied

    assert plain()["x"] == 2


# -- JAX's messages and reprs (`lift._compat.messages`) ----------------------------


def test_a_concretization_message_names_the_arguments_a_value_depended_on() -> None:
    # JAX names an argument's leaf by its key path (lift.jit's programs take the
    # `Lifted` as `__lifted__`: `__lifted__.captures['v']`), which lift matches
    # against the ends of the leaves' own key paths.
    def program(__lifted__: dict[str, Any], x: Any) -> Any:
        return x if __lifted__["v"] > 0 else -x

    with pytest.raises(jax.errors.ConcretizationTypeError) as info:
        jax.jit(program)({"u": 1.0, "v": 2.0}, 3.0)
    named = _compat.concretized_arguments(str(info.value))
    assert named == ["__lifted__['v']"]
    assert _compat.concretized_arguments("no argument named") is None


def test_a_shape_from_a_tracer_asks_for_a_concrete_value() -> None:
    with pytest.raises(TypeError) as info:
        jax.jit(lambda n: jnp.zeros((n,)))(3)
    assert _compat.asks_for_a_concrete_value(info.value)
    assert not _compat.asks_for_a_concrete_value(TypeError("unsupported operand"))


@pytest.mark.parametrize(
    ("use", "code"),
    [("format", lambda x: f"{x:.3g}"), ("hash", lambda x: {0.5: 1}.get(x))],
    ids=["format", "hash"],
)
def test_a_tracer_used_as_a_python_value_says_how(use: str, code: Any) -> None:
    with pytest.raises(TypeError) as info:
        jax.jit(code)(0.5)
    assert _compat.tracer_use(info.value) == use
    assert _compat.asks_for_a_concrete_value(info.value)
    assert _compat.tracer_use(TypeError("unhashable type: 'list'")) is None


def test_a_method_of_pythons_numbers_arrays_lack_is_named() -> None:
    # A traced value's message and a concrete array's (Python's own).
    with pytest.raises(AttributeError) as traced:
        jax.jit(lambda x: x.is_integer())(0.5)
    with pytest.raises(AttributeError) as concrete:
        jnp.asarray(0.5).as_integer_ratio()  # pyright: ignore[reportAttributeAccessIssue]
    assert _compat.number_method(traced.value) == "is_integer"
    assert _compat.number_method(concrete.value) == "as_integer_ratio"
    assert _compat.tracer_use(traced.value) == "method"
    assert _compat.asks_for_a_concrete_value(concrete.value)
    with pytest.raises(AttributeError) as other:
        jax.jit(lambda x: x.no_such_method())(0.5)
    assert _compat.tracer_use(other.value) is None


def test_a_compiled_program_called_with_another_structure_says_so() -> None:
    compiled = jax.jit(lambda x: x + 1).lower(jnp.ones(3)).compile()
    with pytest.raises(TypeError) as info:
        compiled(jnp.ones(3), jnp.ones(2))
    assert _compat.is_signature_mismatch(info.value)
    assert not _compat.is_signature_mismatch(TypeError("other"))


def test_a_treedef_repr_names_custom_nodes() -> None:
    partial = jax.tree_util.tree_structure(jax.tree_util.Partial(lambda x: x, 1.0))
    plain = jax.tree_util.tree_structure([1, (2,), {"a": None}])
    assert _compat.has_custom_nodes(partial)
    assert not _compat.has_custom_nodes(plain)
    assert _compat.treedef_text(jax.tree_util.tree_structure([1, (2,)])) == "[*, (*,)]"


def test_jit_names_an_argument_it_cannot_take_and_an_unhashable_static_one() -> None:
    with pytest.raises(TypeError) as info:
        jax.jit(lambda x: x)("a string")
    assert _compat.bad_argument(info.value) == ("str", "x")
    assert _compat.bad_argument(TypeError("other")) is None
    with pytest.raises(ValueError) as unhashable:
        jax.jit(lambda x, n: x, static_argnums=1)(1.0, [1, 2])
    assert _compat.is_unhashable_static(unhashable.value)


def test_a_leak_report_names_the_tracer_on_its_second_line() -> None:
    kept: list[Any] = []

    @jax.jit
    def f(x: Any) -> Any:
        kept.append(x)
        return x

    with pytest.raises(Exception) as info, jax.checking_leaks():
        f(1.0)
    assert "float32[]" in _compat.leaked_tracer_text(info.value)  # the tracer
    assert _compat.leaked_tracer_text(Exception("one line")) == "one line"


@pytest.mark.parametrize("how", ["jax.jit of a Lifted", "lift.jit", "lift.checked"])
def test_an_error_in_the_users_function_shows_no_lift_frame_inside_its_trace(
    how: str,
) -> None:
    import traceback

    import lift

    def make(s: float) -> Callable[[Any], Any]:
        def users(x: Any) -> Any:
            return x * s + [1]

        return users

    call = {
        "jax.jit of a Lifted": lambda: jax.jit(lift.lift(make(2.0)))(1.0),
        "lift.jit": lambda: lift.jit(make(2.0))(1.0),
        "lift.checked": lambda: lift.checked(jax.jit)(make(2.0))(1.0),
    }[how]
    was = jax.config.jax_traceback_filtering  # pyright: ignore[reportAttributeAccessIssue]
    jax.config.update("jax_traceback_filtering", "auto")  # JAX's default
    try:
        with pytest.raises(TypeError, match="operand") as info:
            call()
    finally:
        jax.config.update("jax_traceback_filtering", was)
    frames = traceback.extract_tb(info.value.__traceback__)
    # Under JAX's filtering, the user's function follows the call that
    # transformed it, as JAX's own frames are left out: lift's frames are left
    # out too, `lift.jit`'s entry point included (`lift.checked`'s stays).
    lift_dir = os.path.dirname(lift.__file__)
    entry = {
        "jax.jit of a Lifted": [],
        "lift.jit": [],
        "lift.checked": ["call"],
    }
    assert [f.name for f in frames if f.filename.startswith(lift_dir)] == entry[how]
    assert "users" in [f.name for f in frames]


def test_callbacks_are_counted_and_what_they_reach_seen_not_custom_rules() -> None:
    found: dict[str, bool] = {}
    f32 = jax.ShapeDtypeStruct((), jnp.float32)

    def traced(x: Any) -> Any:
        lists: dict[str, list[Any]] = {
            k: [] for k in ("debug", "pure", "io", "rule", "kept")
        }
        debug, pure, io, rule, kept = (lists[k] for k in lists)
        before = _compat.callbacks_alive()
        jax.debug.callback(lambda v: debug.append(v), x)
        x = x + jax.pure_callback(lambda v: v * len(pure), f32, x)
        x = x + io_callback(lambda v: v * len(io), f32, x)

        @jax.custom_jvp
        def g(y: Any) -> Any:
            return y * len(rule)

        g.defjvp(lambda p, t: (g(p[0]), t[0] * len(rule)))
        x = g(x)
        local = lambda: kept  # a function of the trace, no callback's
        kept_ids = {id(x) for x in reach(_compat.kept_callbacks(), held_parts)}
        found.update({k: id(v) in kept_ids for k, v in lists.items()})
        found["three callbacks more"] = _compat.callbacks_alive() == before + 3
        del local
        return x

    jax.jit(traced)(1.0)
    jax.effects_barrier()
    assert found == {
        "debug": True,
        "pure": True,
        "io": True,
        "rule": False,
        "kept": False,
        "three callbacks more": True,
    }
