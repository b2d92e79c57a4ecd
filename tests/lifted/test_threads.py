"""Concurrency: eight threads lifting, calling, flattening and jitting at once.

Each test starts its threads on a barrier so that they really overlap, runs a
fixed number of iterations per thread, checks every result against the value
computed without `lift`, and re-raises the first error any thread met. The
library's shared state (code cache, scalar cache, the recording
of `Lifted` objects for `lift.checked`, `lift.jit`'s program table) is hit from
all threads, with garbage collections in between to fire weak-reference
callbacks while other threads read the caches.
"""

from __future__ import annotations

import gc
import sys
import threading
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import TraceCounter

import lift

THREADS = 8
# Per thread: enough for the eight to interleave many times over (CPython
# switches threads every 5 ms, and `test_switch_interval_stress` every 1 µs)
# while each test stays a few seconds under JAX's checker on 2 cores.
ITERATIONS = 20
TIMEOUT = 300.0


def run_threads(work: Callable[[int], None], threads: int = THREADS) -> None:
    """Run `work(i)` in `threads` threads started together; re-raise any error."""
    barrier = threading.Barrier(threads)
    errors: list[BaseException] = []
    lock = threading.Lock()

    def target(i: int) -> None:
        try:
            barrier.wait(timeout=TIMEOUT)
            work(i)
        except BaseException as e:  # re-raised below, in the test's thread
            with lock:
                errors.append(e)

    pool = [
        threading.Thread(target=target, args=(i,), daemon=True) for i in range(threads)
    ]
    for t in pool:
        t.start()
    for t in pool:
        t.join(TIMEOUT)
    assert not any(t.is_alive() for t in pool), "a thread is still running (deadlock?)"
    if errors:
        raise errors[0]


def _make(w: Any, lr: float, k: int) -> Callable[[Any], Any]:
    def step(x):
        return x * w - lr * k

    return step


def _call(g: Any, x: Any) -> Any:
    return g(x)


def test_lift_call_flatten_and_jit_from_eight_threads():
    counter = TraceCounter()
    shared = counter.jit(_call)
    x = jnp.arange(3.0)
    shared(
        lift.lift(_make(jnp.ones(3), 0.5, 1)), x
    )  # compiled once, before the threads
    shared(lift.lift(_make(jnp.ones(3), 0.5, 2)), x)
    traces = counter.traces
    assert traces == 2

    def work(i: int) -> None:
        for j in range(ITERATIONS):
            w = np.full(3, i + j, np.float32)
            lr = 0.01 * (i + 1) + j  # a new Python float each time
            k = 1 + (i + j) % 2
            f = _make(w, lr, k)
            expected = np.asarray(x) * w - np.float32(lr) * k
            g = lift.lift(f)
            np.testing.assert_allclose(
                g(np.asarray(x)), np.asarray(x) * w - lr * k, rtol=1e-6
            )
            leaves, treedef = jax.tree_util.tree_flatten(g)
            again = jax.tree_util.tree_unflatten(treedef, leaves)
            np.testing.assert_allclose(shared(again, x), expected, rtol=1e-6)
            assert lift.diff(g, lift.lift(f)) is None
            if j % 10 == 0:
                gc.collect()

    run_threads(work)
    assert counter.traces == traces  # every thread reused the two programs


def test_new_code_and_new_values_from_eight_threads():
    # Fresh code objects (exec) and fresh floats churn the code, scalar and
    # skeleton caches while other threads read them.
    def work(i: int) -> None:
        for j in range(ITERATIONS):
            namespace: dict[str, Any] = {}
            source = f"def make(w):\n    def f(x, c={i * 1000 + j}):\n        return x * w + c\n    return f\n"
            exec(compile(source, f"<thread {i} code {j}>", "exec"), namespace)
            w = float(i) + j / 7
            g = lift.lift(namespace["make"](w))
            # A Python float capture computes as a float32 array.
            assert g(2.0) == np.float32(2.0) * np.float32(w) + np.float32(i * 1000 + j)
            leaf = jax.tree_util.tree_leaves(g)[0]
            assert np.float32(leaf) == np.float32(w)
            if j % 10 == 0:
                gc.collect()

    run_threads(work)


def test_lift_jit_from_eight_threads():
    def work(i: int) -> None:
        # Each new function costs a jax.jit wrapper call; JAX's leak checking
        # (on in the suite) bypasses its fast paths, so keep this short.
        for j in range(ITERATIONS // 4):
            w = jnp.full(3, float(i * 100 + j))

            @lift.jit
            def f(x, w=w):
                return x + w

            np.testing.assert_array_equal(f(jnp.ones(3)), 1.0 + i * 100 + j)

    run_threads(work)


def test_checked_jit_from_eight_threads():
    # Each call traces (a new function each time) and lifts closures over its
    # own tracers; a scan in one thread must not judge another thread's live
    # tracers as leaked.
    def work(i: int) -> None:
        for j in range(ITERATIONS // 3):

            def body(x, i=i, j=j):
                out = x
                for k in range(5):
                    g = lift.lift(_make(x * k, 0.5, i + j))
                    out = out + g(x)
                return out

            out = lift.checked(jax.jit)(body)(jnp.float32(2))
            expected = 2 + sum(2 * (2 * k) - 0.5 * (i + j) for k in range(5))
            np.testing.assert_allclose(out, expected, rtol=1e-6)

    run_threads(work)


def test_checked_vmap_and_grad_from_eight_threads():
    def work(i: int) -> None:
        for j in range(ITERATIONS // 5):
            w = jnp.float32(i + j + 1)

            def loss(x):
                g = lift.lift(_make(x, 0.0, 0))
                return g(w)

            vmapped = lift.checked(jax.vmap)(loss)(jnp.arange(3.0))
            np.testing.assert_allclose(vmapped, np.arange(3.0) * float(w))
            assert lift.checked(jax.grad)(loss)(jnp.float32(3)) == w

    run_threads(work)


def test_leak_scan_from_eight_threads_still_finds_real_leaks():
    # While seven threads trace cleanly, the eighth leaks on purpose: only the
    # eighth gets a LeakError. (Three rounds: each leak report scans the heap,
    # about 2 s with eight threads under JAX's checker late in the suite.)
    def work(i: int) -> None:
        kept: list[Any] = []
        for _j in range(3):

            def body(x):
                g = lift.lift(_make(x, 0.0, 0))
                if i == 0:
                    kept.append(g)  # escapes the trace
                return g(x)

            if i == 0:
                with pytest.raises(lift.LeakError, match=r"_make\.<locals>\.step"):
                    lift.checked(jax.jit)(body)(jnp.float32(1))
                kept.clear()
            else:
                assert lift.checked(jax.jit)(body)(jnp.float32(1)) == 1.0

    run_threads(work)


def test_switch_interval_stress():
    # Switch threads as often as CPython allows, to expose unlocked
    # read-modify-write sequences in the caches.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:

        def work(i: int) -> None:
            for j in range(ITERATIONS):
                g = lift.lift(_make(np.float32(j), float(i) + j * 0.125, i % 3))
                leaves, treedef = jax.tree_util.tree_flatten(g)
                assert jax.tree_util.tree_unflatten(treedef, leaves)(1.0) == j - (
                    float(i) + j * 0.125
                ) * (i % 3)

        run_threads(work)
    finally:
        sys.setswitchinterval(interval)


def test_checking_leaks_and_closure_convert_from_eight_threads():
    class Opaque:  # not a pytree: only closure_convert can see its tracer
        def __init__(self, v: Any) -> None:
            self.v = v

    def work(i: int) -> None:
        for j in range(ITERATIONS // 5):
            with lift.checking_leaks():

                def body(x, i=i, j=j):
                    box = Opaque(x * (i + j))

                    def f(y):
                        return y * box.v

                    g = lift.closure_convert(f, jnp.float32(1))
                    return g(x)

                out = jax.jit(body)(jnp.float32(3))
            assert out == 9.0 * (i + j)

    run_threads(work)


def test_lift_lists_no_young_object_while_another_thread_builds_a_tuple(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # CPython tracks a tuple it builds from an iterator (`tuple(gen)`,
    # `f(*gen)`, as JAX's cache key does) before it is whole, and grows it in
    # place: a list of the young objects (`gc.get_objects`) made meanwhile
    # holds it, and the building thread fails (SystemError: bad argument to
    # internal function). The thread here is parked mid-tuple while lift's
    # checks run: a traced call that made a callback, the escape check, a
    # collection noted for the plugin. They find the same leaks through the
    # referrers of their own objects, and list no young object.
    from lift._compat import escaped

    parked, resume = threading.Event(), threading.Event()

    def items() -> Any:
        yield 1
        parked.set()
        assert resume.wait(TIMEOUT)
        yield 2

    built: list[tuple[int, ...]] = []
    builder = threading.Thread(target=lambda: built.append(tuple(items())), daemon=True)
    builder.start()
    assert parked.wait(TIMEOUT)
    listed: set[str] = set()  # the functions that listed them
    real = gc.get_objects

    def listing(*args: Any, **kwargs: Any) -> list[Any]:
        listed.add(sys._getframe(1).f_code.co_name)
        return real(*args, **kwargs)

    monkeypatch.setattr(gc, "get_objects", listing)
    kept: list[Any] = []
    try:

        def body(x: Any) -> Any:
            g = lift.closure_convert(lambda y: y * x, jnp.float32(1))
            jax.debug.callback(lambda v: None, x)
            return g(x)

        with escaped.noting_promotions(), lift.checking_leaks():
            assert jax.jit(body)(jnp.float32(3)) == 9.0
            gc.collect(1)  # noted for the plugin's look
        leaking = lift.checking_leaks()(jax.grad(lambda x: kept.append(x) or x))
        with escaped.noting_promotions(), pytest.raises(lift.LeakError, match="kept"):
            leaking(jnp.float32(1))
    finally:
        resume.set()
        builder.join(TIMEOUT)
        kept.clear()
    assert listed == set()
    assert built == [(1, 2)]


def test_checked_scan_ignores_a_lifted_built_by_another_thread():
    # Deterministic interleaving: B's checked call is open while A, inside its
    # own trace, lifts a closure over A's (live) tracer. B's scan must not
    # report A's tracer.
    b_open = threading.Event()
    a_lifted = threading.Event()
    b_done = threading.Event()
    outcome: dict[str, Any] = {}

    def thread_a() -> None:
        def body(x):
            assert b_open.wait(TIMEOUT)
            g = lift.lift(_make(x, 0.0, 0))
            a_lifted.set()
            assert b_done.wait(TIMEOUT)
            return g(x)

        try:
            outcome["a"] = float(lift.checked(jax.jit)(body)(jnp.float32(2)))
        except BaseException as e:
            outcome["a"] = e

    def thread_b() -> None:
        def body(x):
            b_open.set()
            assert a_lifted.wait(TIMEOUT)
            return x + 1

        try:
            outcome["b"] = float(lift.checked(jax.jit)(body)(jnp.float32(2)))
        except BaseException as e:
            outcome["b"] = e
        finally:
            b_done.set()

    threads = [threading.Thread(target=t, daemon=True) for t in (thread_a, thread_b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert not any(t.is_alive() for t in threads)
    assert outcome == {"a": 4.0, "b": 3.0}


def test_lift_jit_calls_racing_rebindings_see_some_binding_and_then_the_last() -> None:
    # Four threads rebind a captured float (and a keyword-only default in
    # place) while four call: every result is what one of the bindings gives,
    # and once the rebinding stops every call gives the last one.
    lr = 0.0

    @lift.jit
    def step(w, *, scale=1.0):
        return w * lr * scale

    values = [float(i) for i in range(1, 9)]
    allowed = {v * s for v in [0.0, *values] for s in (1.0, 2.0)}
    lock = threading.Lock()
    seen: list[float] = []

    def work(i: int) -> None:
        nonlocal lr
        if i < 4:
            for k in range(ITERATIONS):
                lr = values[(i + k) % len(values)]
                step.__wrapped__.__kwdefaults__["scale"] = 1.0 + (k % 2)  # pyright: ignore[reportOptionalSubscript]
        else:
            got = [float(step(jnp.ones(()))) for _ in range(ITERATIONS)]
            with lock:
                seen.extend(got)

    sys.setswitchinterval(1e-6)
    try:
        run_threads(work)
    finally:
        sys.setswitchinterval(0.005)
    assert seen and all(any(abs(v - a) < 1e-5 for a in allowed) for v in seen)
    for final in (3.0, 5.0):
        lr = final
        step.__wrapped__.__kwdefaults__["scale"] = 2.0  # pyright: ignore[reportOptionalSubscript]
        assert [float(step(jnp.ones(()))) for _ in range(3)] == [2 * final] * 3


def test_a_state_written_late_by_a_slower_thread_is_not_served_stale() -> None:
    # The interleaving of two threads racing a rebinding, made deterministic: a
    # thread that lifted the old binding stores its state after another stored
    # the new one. Each state holds its own snapshot and program entry, so the
    # next call sees the old state is not current and lifts again.
    lr = 1.0

    @lift.jit
    def step(w):
        return w * lr

    for _ in range(3):
        assert float(step(1.0)) == 1.0
    late = step._fast  # pyright: ignore[reportPrivateUsage]
    lr = 2.0
    assert float(step(1.0)) == 2.0
    step._fast = late  # pyright: ignore[reportPrivateUsage]
    assert [float(step(1.0)) for _ in range(3)] == [2.0] * 3


# -- the copies a rebuilt function holds, checked per call ----------------------


def _append(log: list[Any]) -> None:  # not read by lift: the call shows it
    log.append(1)


def _logging(
    gate: Callable[[bool], None],
) -> tuple[Callable[[Any, bool], Any], dict[str, Any]]:
    # The list in a dict holding a float: lift rebuilds both, the function
    # holds them as copies (`lift._copies.copies`).
    state: dict[str, Any] = {"lr": 0.5, "log": [0.5]}

    def step(x: Any, mutate: bool) -> Any:
        if mutate:
            _append(state["log"])
        gate(mutate)
        return x * state["lr"]

    return step, state


def test_a_reading_call_is_not_refused_for_another_threads_mutation() -> None:
    # The reading call runs the shared build first and waits inside it while
    # the mutating call runs: the mutating call is refused, in its own thread.
    reading, mutated, read_done = (threading.Event() for _ in range(3))

    def gate(mutate: bool) -> None:
        if mutate:
            mutated.set()
            assert read_done.wait(TIMEOUT)
        elif not reading.is_set():
            reading.set()
            assert mutated.wait(TIMEOUT)

    step, state = _logging(gate)
    lifted = lift.lift(step)
    results: dict[str, Any] = {}

    def call(mutate: bool) -> None:
        try:
            results["mutating" if mutate else "reading"] = lifted(2.0, mutate)
        except lift.LiftError as e:
            results["mutating" if mutate else "reading"] = e
        finally:
            if not mutate:
                read_done.set()

    reader = threading.Thread(target=call, args=(False,), daemon=True)
    reader.start()
    assert reading.wait(TIMEOUT)
    mutator = threading.Thread(target=call, args=(True,), daemon=True)
    mutator.start()
    reader.join(TIMEOUT)
    mutator.join(TIMEOUT)
    assert results["reading"] == 1.0
    assert isinstance(results["mutating"], lift.LiftError)
    assert "mutated the captured variable 'state'" in str(results["mutating"])
    assert state["log"] == [0.5]
    assert lifted(2.0, False) == 1.0


def test_every_mutating_call_from_four_threads_is_refused_and_no_reading_one() -> None:
    step, state = _logging(lambda _: None)
    lifted = lift.lift(step)
    lock = threading.Lock()
    outcomes: list[tuple[bool, Any]] = []

    def work(i: int) -> None:
        for k in range(ITERATIONS):
            mutate = (i + k) % 3 == 0
            try:
                out: Any = lifted(2.0, mutate)
            except lift.LiftError as e:
                out = str(e)
            with lock:
                outcomes.append((mutate, out))

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often, inside the calls
    try:
        run_threads(work, threads=4)
    finally:
        sys.setswitchinterval(interval)
    assert len(outcomes) == 4 * ITERATIONS
    for mutate, out in outcomes:
        if mutate:  # refused as the call that mutated, not silently lost
            assert isinstance(out, str), "a mutation reached a copy silently"
            assert "mutated the captured variable 'state'" in out, out
        else:  # never refused for another call's change
            assert out == 1.0, out
    assert state["log"] == [0.5]
