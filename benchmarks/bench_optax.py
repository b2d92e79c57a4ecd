"""optax hyperparameter sweeps: lift against what users would pick instead.

Side by side, in one run: plain optax (the optimizer a static argument of
`jax.jit`: a trace and a compile per rate), equinox's `closure_to_pytree`,
`optax.inject_hyperparams`, `lift.lift`, `lift.jit`, and lift under
`jax.vmap`. Measured: a sweep of 8 learning rates (traces, XLA compiles, wall
time with compiles); a steady-state step; dispatch of a trivial jitted function
taking the optimizer against the same function taking its flat leaves
(`keep_unused=True`, so both really pass them). The candidates of a table take
turns, sample by sample, so that a busy machine slows them alike.

Run `python benchmarks/bench_optax.py` (`--quick` for a fast look, `--smoke`
to check that it runs); `main()` returns the tables.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from equinox.internal import closure_to_pytree

import lift

# After the tables, on the benchmarks page: how the results come about.
NOTES = """
The ways:

- **plain optax**: the optimizer a static argument of `jax.jit`;
- **closure_to_pytree**: `equinox.internal.closure_to_pytree(opt)` through
  `equinox.filter_jit`;
- **inject_hyperparams**: one `optax.inject_hyperparams(optax.adam)`, the rate
  set in its state;
- **lift.lift**: `lift.lift(optax.adam(lr))` an ordinary argument of `jax.jit`
  (array rates: the rate a JAX array rather than a Python float);
- **lift.jit**: a step closing over `optax.adam(lr)`, made anew per rate,
  under `lift.jit`;
- **lift + vmap**: all rates at once, `jax.vmap` over lifted optimizers, a
  Python loop of steps (one dispatch a step) or a `lax.scan` (one dispatch).

The vmapped sweep saves dispatches (one per step for all rates, or none with
`lax.scan`), and once compiled a member's step costs less than in the loop
(the longer sweep measures it). But XLA:CPU takes longer to compile the
batched program than the single step (its LLVM passes run per kernel, and the
batched kernels are larger), so on a CPU a short vmapped sweep gains little;
on an accelerator, where the batch runs in parallel, it gains most (the
TPU tables of the Accelerators page, `docs/accelerators.md`).
In the steady-step table each way takes turns, sample by sample, with a plain
optax run of its own, so that a slow neighbour does not colour the caches the
others run in. Its "vs plain" is the ratio of its median to the median of
that paired plain run, not to the plain row shown (plain's pairing with
`lift.lift`).
"""

# After the tables on the developers' page.
INTERNAL_NOTES = """
How lift's cost scales is measured along each of its paths: the first lift of a
structure, the lifts of fresh objects of it (a sweep's), and the first
`tree_flatten` of floats never seen before, each converted to an array once.
Next to them, a bare Python loop over the same kind of fresh objects gives the
floor the machine sets: 10 000 fresh closure levels (about 4 MB of objects) no
longer fit in its caches, so every pass over them costs more per level than
over 100. The linearity goals allow a path's cost per unit to double from 100
to 10 000, or to grow as much as the bare loop's does, and no more.
"""

Rows = list[dict[str, Any]]

# The tables for the developers' page (how lift's own costs scale, its goals);
# the others are on the benchmarks page users read.
INTERNAL = {
    "Sweep: where the time goes",
    "tree_flatten",
    "Cost of lifting fresh optimizers",
    "New Python floats: the first `tree_flatten` converts them",
    "Lifting a closure that captures",
    "Scaling with closure depth",
    "Scaling with the number of captured floats",
    "Goals",
}


@contextlib.contextmanager
def paused() -> Any:
    """The garbage collector paused while timing, as `timeit` does."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


# Medians in seconds (and trace counts) by (table, row), for the goals table.
RAW: dict[tuple[str, ...], float] = {}

# -- timing ------------------------------------------------------------------------


def _samples(
    candidates: dict[str, Callable[[], Any]], repeats: int, number: int
) -> dict[str, list[float]]:
    """Seconds per call of each candidate: up to `repeats` samples of up to
    `number` calls each, the candidates taking turns sample by sample.

    Samples are short (about 100 µs, and each ends by waiting for the result) so
    that load from other processes, which comes and goes in longer phases, falls
    on every candidate alike; a slow candidate stops after about 2 s of samples.
    """
    counts: dict[str, int] = {}
    for name, fn in candidates.items():
        jax.block_until_ready(fn())
        start = time.perf_counter()
        jax.block_until_ready(fn())
        once = time.perf_counter() - start
        counts[name] = max(1, min(number, int(1e-4 / max(once, 1e-8))))
    times: dict[str, list[float]] = {name: [] for name in candidates}
    spent = dict.fromkeys(candidates, 0.0)
    for i in range(repeats):
        for name, fn in candidates.items():
            if i >= 31 and spent[name] > 2.0:
                continue
            n = counts[name]
            start = time.perf_counter()
            for _ in range(n):
                out = fn()
            jax.block_until_ready(out)  # pyright: ignore[reportPossiblyUnboundVariable]
            elapsed = time.perf_counter() - start
            spent[name] += elapsed
            times[name].append(elapsed / n)
    return times


def _fmt(seconds: float) -> str:
    if seconds < 1e-3:
        return (
            f"{seconds * 1e6:.2f} µs" if seconds < 1e-5 else f"{seconds * 1e6:.1f} µs"
        )
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def _stats(samples: list[float]) -> dict[str, str]:
    return {
        "median": _fmt(statistics.median(samples)),
        "min-max": f"{_fmt(min(samples))} to {_fmt(max(samples))}",
    }


# -- the problem: a small MLP regression --------------------------------------------------


def _data() -> tuple[jax.Array, jax.Array]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 8)).astype(np.float32)
    y = np.tanh(x @ rng.normal(size=(8,)).astype(np.float32)).astype(np.float32)
    return jnp.asarray(x), jnp.asarray(y)


def _params() -> dict[str, jax.Array]:
    rng = np.random.default_rng(1)
    return {
        "w1": jnp.asarray(rng.normal(size=(8, 32)).astype(np.float32) / 3),
        "b1": jnp.zeros(32),
        "w2": jnp.asarray(rng.normal(size=(32,)).astype(np.float32) / 6),
    }


def _loss(p: Any, x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"] - y) ** 2)


def _make_step(counter: list[int]) -> Callable[..., Any]:
    """A fresh train-step function (so each use traces anew), counting traces."""

    def step(opt: Any, params: Any, state: Any, x: Any, y: Any) -> Any:
        counter[0] += 1
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state, loss

    return step


RATES = tuple(float(r) for r in np.geomspace(1e-3, 1e-1, 8))


# -- 1. the sweep --------------------------------------------------------------------------


def _train_each(
    rates: tuple[Any, ...],
    steps: int,
    data: Any,
    jit: Callable[[Callable[..., Any]], Callable[..., Any]],
    make_opt: Callable[[Any], Any],
) -> int:
    """Train one optimizer per rate in a Python loop; returns the step traces."""
    counter = [0]
    step = jit(_make_step(counter))
    for lr in rates:
        opt = make_opt(lr)
        p = _params()
        s = opt.init(p)
        for _ in range(steps):
            p, s, loss = step(opt, p, s, *data)
        jax.block_until_ready(loss)  # pyright: ignore[reportPossiblyUnboundVariable]
    return counter[0]


def _sweep_static(rates: tuple[float, ...], steps: int, data: Any) -> int:
    return _train_each(
        rates, steps, data, lambda f: jax.jit(f, static_argnums=0), optax.adam
    )


def _sweep_closure_to_pytree(rates: tuple[float, ...], steps: int, data: Any) -> int:
    return _train_each(
        rates,
        steps,
        data,
        eqx.filter_jit,
        lambda lr: closure_to_pytree(optax.adam(lr)),
    )


def _sweep_inject(rates: tuple[float, ...], steps: int, data: Any) -> int:
    counter = [0]
    step = jax.jit(_make_step(counter), static_argnums=0)
    opt = optax.inject_hyperparams(optax.adam)(learning_rate=rates[0])
    for lr in rates:
        p = _params()
        s = opt.init(p)
        # Strongly typed, as `init` makes it: a weakly typed rate would retrace.
        s.hyperparams["learning_rate"] = jnp.asarray(lr, dtype=jnp.float32)
        for _ in range(steps):
            p, s, loss = step(opt, p, s, *data)
        jax.block_until_ready(loss)  # pyright: ignore[reportPossiblyUnboundVariable]
    return counter[0]


def _sweep_lift(rates: tuple[Any, ...], steps: int, data: Any) -> int:
    return _train_each(
        rates, steps, data, jax.jit, lambda lr: lift.lift(optax.adam(lr))
    )


def _sweep_lift_array(rates: tuple[float, ...], steps: int, data: Any) -> int:
    return _sweep_lift(tuple(jnp.asarray(r) for r in rates), steps, data)


# lift.jit's step calls a module-level function: a global is not a capture,
# so the trace counter it bumps does not change what the closure captures (a
# captured list that changed would be a new static value, and a retrace).
_JIT_TRACES = [0]


def _jit_inner(opt: Any, params: Any, state: Any, x: Any, y: Any) -> Any:
    _JIT_TRACES[0] += 1
    loss, grads = jax.value_and_grad(_loss)(params, x, y)
    updates, state = opt.update(grads, state, params)
    return optax.apply_updates(params, updates), state, loss


_JIT_SOURCE = """
def make_step(opt):
    @lift.jit
    def step_{n}(p, s, x, y):
        return _jit_inner(opt, p, s, x, y)

    return step_{n}
"""
_SWEEP_IDS = itertools.count()


def _sweep_lift_jit(rates: tuple[float, ...], steps: int, data: Any) -> int:
    """A closure over the optimizer made anew per rate, under `lift.jit`: the
    program is keyed on the code, so every rate after the first reuses it. Each
    sweep compiles the step's code anew (a new name), to start as cold as a new
    process would."""
    scope: dict[str, Any] = {"lift": lift, "_jit_inner": _jit_inner}
    source = _JIT_SOURCE.format(n=next(_SWEEP_IDS))
    exec(compile(source, "<lift.jit sweep>", "exec"), scope)
    make_step = scope["make_step"]
    _JIT_TRACES[0] = 0
    for lr in rates:
        opt = optax.adam(lr)
        step = make_step(opt)
        p = _params()
        s = opt.init(p)
        for _ in range(steps):
            p, s, loss = step(p, s, *data)
        jax.block_until_ready(loss)  # pyright: ignore[reportPossiblyUnboundVariable]
    return _JIT_TRACES[0]


def _sweep_lift_vmap(rates: tuple[float, ...], steps: int, data: Any) -> int:
    counter = [0]
    step = _make_step(counter)

    @jax.jit
    def sweep(lrs: jax.Array, params: Any, x: jax.Array, y: jax.Array) -> jax.Array:
        def train(lr: jax.Array) -> jax.Array:
            opt = lift.lift(optax.adam(lr))

            def body(carry: Any, _: None) -> tuple[Any, jax.Array]:
                p, s, loss = step(opt, *carry, x, y)
                return (p, s), loss

            return jax.lax.scan(body, (params, opt.init(params)), None, length=steps)[1]

        return jax.vmap(train)(lrs)

    jax.block_until_ready(sweep(jax.device_put(np.float32(rates)), _params(), *data))
    return counter[0]


def _sweep_lift_vmap_loop(rates: tuple[float, ...], steps: int, data: Any) -> int:
    counter = [0]
    step = jax.jit(jax.vmap(_make_step(counter), in_axes=(0, 0, 0, None, None)))
    # The batch of optimizers and their states, made in one compiled call each
    # (eagerly, every primitive of `init` would dispatch and compile on its own).
    opts = jax.jit(jax.vmap(lambda lr: lift.lift(optax.adam(lr))))(
        jax.device_put(np.float32(rates))
    )
    p = jax.tree.map(lambda a: jnp.broadcast_to(a, (len(rates), *a.shape)), _params())
    s = jax.jit(jax.vmap(lambda opt, p: opt.init(p)))(opts, p)
    for _ in range(steps):
        p, s, loss = step(opts, p, s, *data)
    jax.block_until_ready(loss)  # pyright: ignore[reportPossiblyUnboundVariable]
    return counter[0]


PLAIN = "plain optax"
EXPLICIT = "by hand: arrays as arguments"
LIFT = "lift.lift"

SWEEPS: dict[str, Callable[[tuple[float, ...], int, Any], int]] = {
    PLAIN: _sweep_static,
    "closure_to_pytree": _sweep_closure_to_pytree,
    "inject_hyperparams": _sweep_inject,
    LIFT: _sweep_lift,
    "lift.lift, array rates": _sweep_lift_array,
    "lift.jit": _sweep_lift_jit,
    "lift + vmap, a loop": _sweep_lift_vmap_loop,
    "lift + vmap + scan": _sweep_lift_vmap,
}


def bench_long_sweep(repeats: int, steps: int, n_rates: int) -> Rows:
    """The lifted ways over more steps: what a member's step costs once compiled."""
    data = _data()
    names = [n for n in SWEEPS if n.startswith("lift")]
    rates = RATES[:n_rates]
    times: dict[str, list[float]] = {name: [] for name in names}
    rest: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(repeats):
        for name in names:
            _COMPILE.clear()
            start = time.perf_counter()
            SWEEPS[name](rates, steps, data)
            elapsed = time.perf_counter() - start
            times[name].append(elapsed)
            rest[name].append(
                elapsed - sum(v for k, v in _COMPILE.items() if "count" not in k)
            )
    base = statistics.median(times[LIFT])
    RAW.update(
        {("long sweep", name): statistics.median(t) for name, t in times.items()}
    )
    RAW["long sweep", "steps"] = steps
    return [
        {
            "way": name,
            "wall": _fmt(statistics.median(t)),
            "vs lift.lift": f"{statistics.median(t) / base:.2f}",
            "a step, no compiles": _fmt(
                statistics.median(rest[name]) / (len(rates) * steps)
            ),
        }
        for name, t in times.items()
    ]


# Seconds XLA spent compiling, and JAX tracing and lowering, since last cleared.
_COMPILE: dict[str, float] = {}


def _on_duration(event: str, duration: float, **kwargs: Any) -> None:
    for kind in ("backend_compile", "jaxpr_trace", "jaxpr_to_mlir_module"):
        if event.endswith(f"/{kind}_duration"):
            _COMPILE[kind] = _COMPILE.get(kind, 0.0) + duration
            _COMPILE[f"{kind} count"] = _COMPILE.get(f"{kind} count", 0) + 1


jax.monitoring.register_event_duration_secs_listener(_on_duration)


def bench_sweep(repeats: int, steps: int, n_rates: int) -> tuple[Rows, Rows]:
    """The sweep's table, and where its time went (for the developers' page)."""
    data = _data()
    rates = RATES[:n_rates]
    jax.block_until_ready((_params(), optax.adam(0.1).init(_params())))
    times: dict[str, list[float]] = {name: [] for name in SWEEPS}
    compiles: dict[str, list[float]] = {name: [] for name in SWEEPS}
    jax_side: dict[str, list[float]] = {name: [] for name in SWEEPS}
    counts: dict[str, int] = {}
    traces: dict[str, int] = {}
    for _ in range(repeats):
        for name, sweep in SWEEPS.items():
            _COMPILE.clear()
            start = time.perf_counter()
            traces[name] = sweep(rates, steps, data)
            times[name].append(time.perf_counter() - start)
            compiles[name].append(_COMPILE.get("backend_compile", 0.0))
            jax_side[name].append(
                _COMPILE.get("jaxpr_trace", 0.0)
                + _COMPILE.get("jaxpr_to_mlir_module", 0.0)
            )
            counts[name] = int(_COMPILE.get("backend_compile count", 0))
    base = statistics.median(times[PLAIN])
    for name, t in times.items():
        RAW["sweep", name] = statistics.median(t)
        RAW["sweep traces", name] = traces[name]
        RAW["sweep compile", name] = statistics.median(compiles[name])
    table = [
        {
            "way": name,
            "traces": traces[name],
            "compiles": counts[name],
            "wall": _fmt(statistics.median(t)),
            "vs plain": f"{statistics.median(t) / base:.2f}",
        }
        for name, t in times.items()
    ]
    where = [
        {
            "way": name,
            "XLA compiling": _fmt(statistics.median(compiles[name])),
            "tracing, lowering": _fmt(statistics.median(jax_side[name])),
            "wall, min-max": _stats(t)["min-max"],
        }
        for name, t in times.items()
    ]
    return table, where


# -- 2. steady step, dispatch, tree_flatten, lift cost ----------------------------------------


def _chain(lr: Any) -> optax.GradientTransformation:
    return optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(lr))


def bench_steady_step(repeats: int, number: int) -> Rows:
    data = _data()
    p = _params()
    plain = _chain(1e-3)
    lifted = lift.lift(_chain(jnp.asarray(1e-3)))
    ctp = closure_to_pytree(_chain(jnp.asarray(1e-3)))
    inject = optax.chain(
        optax.clip_by_global_norm(1.0),
        optax.inject_hyperparams(optax.adamw)(learning_rate=1e-3),
    )
    step_static = jax.jit(_make_step([0]), static_argnums=0)
    step_lift = jax.jit(_make_step([0]))
    step_ctp = eqx.filter_jit(_make_step([0]))
    inner = _make_step([0])

    @jax.jit
    def step_explicit(hp: Any, params: Any, state: Any, x: Any, y: Any) -> Any:
        # The anchor: what any dynamic hyperparameters cost, without lift.
        max_norm, lr, b1, b2, eps, weight_decay = hp
        opt = optax.chain(
            optax.clip_by_global_norm(max_norm),
            optax.adamw(lr, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay),
        )
        return inner(opt, params, state, x, y)

    jit_opt = _chain(jnp.asarray(1e-3))

    @lift.jit
    def step_lift_jit(params: Any, state: Any, x: Any, y: Any) -> Any:
        return _jit_inner(jit_opt, params, state, x, y)

    hp = tuple(jnp.asarray(v) for v in (1.0, 1e-3, 0.9, 0.999, 1e-8, 1e-4))
    states = {
        PLAIN: plain.init(p),
        "closure_to_pytree": ctp.init(p),
        "inject_hyperparams": inject.init(p),
        LIFT: lifted.init(p),
        "lift.jit": jit_opt.init(p),
        EXPLICIT: plain.init(p),
    }
    x, y = data
    candidates = {
        PLAIN: lambda: step_static(plain, p, states[PLAIN], x, y),
        LIFT: lambda: step_lift(lifted, p, states[LIFT], x, y),
        "lift.jit": lambda: step_lift_jit(p, states["lift.jit"], x, y),
        EXPLICIT: lambda: step_explicit(hp, p, states[EXPLICIT], x, y),
        "closure_to_pytree": lambda: step_ctp(
            ctp, p, states["closure_to_pytree"], x, y
        ),
        "inject_hyperparams": lambda: step_static(
            inject, p, states["inject_hyperparams"], x, y
        ),
    }
    # Each way takes turns with plain optax alone: a slow neighbour (filter_jit's
    # Python) would otherwise colour the caches the others run in.
    base_name: str = PLAIN
    rows: Rows = []
    ratios: dict[str, float] = {}
    for name, fn in candidates.items():
        if name == base_name:
            continue
        times = _samples({base_name: candidates[base_name], name: fn}, repeats, number)
        ratios[name] = statistics.median(times[name]) / statistics.median(
            times[base_name]
        )
        if name == LIFT:
            rows.insert(
                0, {"way": base_name, **_stats(times[base_name]), "vs plain": "1.00"}
            )
        rows.append(
            {"way": name, **_stats(times[name]), "vs plain": f"{ratios[name]:.2f}"}
        )
    RAW.update({("step ratio", name): r for name, r in ratios.items()})
    return rows


def bench_dispatch(repeats: int, number: int) -> Rows:
    lifted = lift.lift(_chain(jnp.asarray(1e-3)))
    ctp = closure_to_pytree(_chain(jnp.asarray(1e-3)))
    leaves = jax.tree.leaves(lifted)
    x = jnp.ones(())

    def trivial(opt: Any, x: Any) -> Any:
        return x

    f_tree = jax.jit(trivial, keep_unused=True)
    f_ctp = eqx.filter_jit(trivial)
    candidates = {
        "flat leaf list": lambda: f_tree(leaves, x),
        LIFT: lambda: f_tree(lifted, x),
        "closure_to_pytree": lambda: f_ctp(ctp, x),
    }
    times = _samples(candidates, repeats, number)
    base = statistics.median(times["flat leaf list"])
    RAW.update({("dispatch", name): statistics.median(t) for name, t in times.items()})
    return [
        {
            "way": name,
            **_stats(t),
            "vs flat": f"{statistics.median(t) / base:.2f}",
            "leaves": len(jax.tree.leaves(ctp if "closure" in name else lifted)),
        }
        for name, t in times.items()
    ]


class _Prepared:
    """A pytree node whose flatten returns a pair made beforehand."""

    def __init__(self, flat: tuple[list[Any], Any]) -> None:
        self.pair = (tuple(flat[0]), flat[1].node_data()[1])


jax.tree_util.register_pytree_node(
    _Prepared, lambda x: x.pair, lambda aux, children: None
)


def bench_flatten(repeats: int, number: int) -> Rows:
    p = _params()
    lifted = lift.lift(_chain(jnp.asarray(1e-3)))
    ctp = closure_to_pytree(_chain(jnp.asarray(1e-3)))
    inject = optax.inject_hyperparams(optax.adamw)(learning_rate=1e-3)
    inject_state = inject.init(p)
    leaves = jax.tree.leaves(lifted)
    # The floor for a pytree node registered in Python: the same NamedTuple of
    # two nodes whose flatten returns a prepared (children, aux) pair.
    floor = type(lifted)(*(_Prepared(jax.tree_util.tree_flatten(f)) for f in lifted))
    candidates = {
        "flat leaf list": lambda: jax.tree_util.tree_flatten(leaves),
        "lift": lambda: jax.tree_util.tree_flatten(lifted),
        "floor: two minimal Python-registered nodes in the NamedTuple": lambda: (
            jax.tree_util.tree_flatten(floor)
        ),
        "closure_to_pytree": lambda: jax.tree_util.tree_flatten(ctp),
        "inject_hyperparams state": lambda: jax.tree_util.tree_flatten(inject_state),
    }
    times = _samples(candidates, repeats, number)
    RAW.update({("flatten", name): statistics.median(t) for name, t in times.items()})
    RAW.update({("flatten min", name): min(t) for name, t in times.items()})
    return [{"tree_flatten of": name, **_stats(t)} for name, t in times.items()]


def bench_lift_cost(repeats: int, number: int) -> Rows:
    """Converting fresh optimizer objects (made beforehand, not timed; the
    collector paused while timing, as `timeit` does)."""

    def fresh(n: int) -> list[Any]:
        return [_chain(jnp.asarray(1e-3)) for _ in range(n)]

    ways: dict[str, Callable[[Any], Any]] = {
        "lift.lift": lift.lift,
        "closure_to_pytree": closure_to_pytree,
    }
    times: dict[str, list[float]] = {name: [] for name in ways}
    for obj in fresh(20):
        lift.lift(obj)
    for _ in range(repeats):
        for name, fn in ways.items():
            objs = fresh(number)
            with paused():
                start = time.perf_counter()
                for obj in objs:
                    fn(obj)
                times[name].append((time.perf_counter() - start) / number)
    base = statistics.median(times["lift.lift"])
    RAW.update({("lift cost", name): statistics.median(t) for name, t in times.items()})
    return [
        {
            "a fresh chain(clip, adamw)": name,
            **_stats(t),
            "vs lift": f"{statistics.median(t) / base:.2f}",
        }
        for name, t in times.items()
    ]


def bench_new_floats(repeats: int, number: int) -> Rows:
    """The first `tree_flatten` of freshly lifted `chain(clip, adamw(lr))` with a
    Python float `lr`: its update function holds 8 Python floats, converted to
    arrays then (the lifting itself is not timed)."""
    values = itertools.count(1)

    def fresh(n: int) -> list[Any]:
        return [lift.lift(_chain(1e-3 * next(values))) for _ in range(n)]

    for opt in fresh(300):  # past the point where conversion is compiled
        jax.tree_util.tree_flatten(opt)
    first: list[float] = []
    later: list[float] = []
    for _ in range(repeats):
        opts = fresh(number)
        with paused():
            start = time.perf_counter()
            for opt in opts:
                jax.tree_util.tree_flatten(opt)
            first.append((time.perf_counter() - start) / number)
            start = time.perf_counter()
            for opt in opts:
                jax.tree_util.tree_flatten(opt)
            later.append((time.perf_counter() - start) / number)
    floats = 8
    RAW["new floats", "first"] = statistics.median(first)
    RAW["new floats", "later"] = statistics.median(later)
    RAW["new floats", "per float"] = (
        statistics.median(first) - statistics.median(later)
    ) / floats
    return [
        {
            "tree_flatten of a fresh lifted chain(clip, adamw(lr)), 8 floats": name,
            **_stats(t),
            "per float": _fmt(
                (statistics.median(t) - statistics.median(later)) / floats
            )
            if name.startswith("first")
            else "",
        }
        for name, t in (("first (converts the floats)", first), ("later", later))
    ]


def bench_wide_walk(n: int, repeats: int) -> Rows:
    """`lift` of a fresh closure capturing `n` floats, against
    `closure_to_pytree` of another."""
    lift.lift(_wide(n))
    walk: list[float] = []
    ctp: list[float] = []
    for _ in range(repeats):
        a, b = _wide(n), _wide(n)
        with paused():
            start = time.perf_counter()
            lift.lift(a)
            walk.append(time.perf_counter() - start)
        with paused():
            start = time.perf_counter()
            closure_to_pytree(b)
            ctp.append(time.perf_counter() - start)
    RAW["wide walk", "lift"] = statistics.median(walk)
    RAW["wide walk", "closure_to_pytree"] = statistics.median(ctp)
    return [
        {f"capturing {n:,} floats": "lift.lift", **_stats(walk)},
        {f"capturing {n:,} floats": "closure_to_pytree", **_stats(ctp)},
    ]


# -- 3. scaling ---------------------------------------------------------------------------


def _nested(depth: int, base: float = 0.0) -> Callable[[Any], Any]:
    """`depth` closures, each capturing the previous one and a float."""

    def level(prev: Any, w: float) -> Callable[[Any], Any]:
        def f(x: Any) -> Any:
            return x + w if prev is None else prev(x) + w

        return f

    fn: Any = None
    for i in range(depth):
        fn = level(fn, base + i)
    return fn


_WIDE: dict[int, Callable[..., Any]] = {}


def _wide(n: int, base: float = 0.0) -> Callable[[Any], Any]:
    """A fresh closure with `n` captured variables, each a float (one code
    object per `n`, as in a sweep: new closures of the same code)."""
    make = _WIDE.get(n)
    if make is None:
        names = [f"c{i}" for i in range(n)]
        src = (
            f"def make({', '.join(names)}):\n"
            f"    def f(x):\n"
            # A tuple, not `c0 + c1 + ...`: a 10 000-deep expression overflows
            # the compiler.
            f"        return x + sum(({', '.join(names)},))\n"
            f"    return f\n"
        )
        scope: dict[str, Any] = {}
        exec(compile(src, f"<wide {n}>", "exec"), scope)
        make = _WIDE[n] = scope["make"]
    return make(*(base + i for i in range(n)))


def _chase(fn: Any) -> None:
    """A bare Python loop over a `_nested` closure's levels and captured floats."""
    while fn is not None:
        prev, w = fn.__closure__
        w.cell_contents  # noqa: B018
        fn = prev.cell_contents


def _cells(fn: Any) -> None:
    """A bare Python loop over a `_wide` closure's captured floats."""
    for cell in fn.__closure__:
        cell.cell_contents  # noqa: B018


def _scale(
    make: Callable[[int, float], Any],
    bare: Callable[[Any], None],
    sizes: tuple[int, ...],
    repeats: int,
    what: str,
) -> Rows:
    """Per size: a bare Python loop over the same objects, the floor set by the
    machine's caches; `lift` of fresh objects of one structure, one after
    another, as a sweep makes them; the first `tree_flatten` of an object whose
    floats were never seen (each is converted to an array once); a later
    `tree_flatten`; and `closure_to_pytree`."""
    rows: Rows = []
    values = itertools.count(1)
    for n in sizes:
        gc.collect()
        bare_t: list[float] = []
        lifts: list[float] = []
        lift.lift(make(n, 0.0))
        # At least 25: CPython 3.11 specialises a function's bytecode from its 9th call.
        for _ in range(max(repeats, min(3_000 // n, 200), 25)):
            obj, probe = make(n, 0.0), make(n, 0.0)
            with paused():
                # The bare loop over another fresh object, made alongside: both
                # meet the allocator, and the caches, in the same state.
                start = time.perf_counter()
                bare(probe)
                bare_t.append(time.perf_counter() - start)
                start = time.perf_counter()
                y = lift.lift(obj)
                lifts.append(time.perf_counter() - start)
            del y  # frees the graph, outside the timing
        first_flat_t: list[float] = []
        flat_t: list[float] = []
        for _ in range(max(3, min(repeats, 300 // n))):
            x = lift.lift(make(n, 1e6 * next(values)))
            with paused():
                start = time.perf_counter()
                jax.tree_util.tree_flatten(x)
                first_flat_t.append(time.perf_counter() - start)
                start = time.perf_counter()
                jax.tree_util.tree_flatten(x)
                flat_t.append(time.perf_counter() - start)
        try:
            ctp_t: list[float] = []
            for _ in range(max(3, min(repeats, 300 // n))):
                obj = make(n, 0.0)
                with paused():
                    start = time.perf_counter()
                    closure_to_pytree(obj)
                    ctp_t.append(time.perf_counter() - start)
            ctp = _stats(ctp_t)["median"]
        except RecursionError:
            ctp = "RecursionError"
        walk = statistics.median(lifts)
        conv = statistics.median(first_flat_t)
        loop = statistics.median(bare_t)
        RAW[what, "bare loop", str(n)] = loop / n
        RAW[what, "lift", str(n)] = walk / n
        RAW[what, "convert", str(n)] = conv / n
        rows.append(
            {
                what: f"{n:,}",
                "bare loop": f"{_fmt(loop)} ({_fmt(loop / n)} a unit)",
                "lift": f"{_fmt(walk)} ({_fmt(walk / n)} a unit)",
                "first flatten": f"{_fmt(conv)} ({_fmt(conv / n)} a unit)",
                "closure_to_pytree": ctp,
            }
        )
    return rows


def bench_depth(repeats: int, sizes: tuple[int, ...]) -> Rows:
    limit = sys.getrecursionlimit()
    try:
        return _scale(_nested, _chase, sizes, repeats, "depth")
    finally:
        sys.setrecursionlimit(limit)


def bench_captures(repeats: int, sizes: tuple[int, ...]) -> Rows:
    return _scale(_wide, _cells, sizes, repeats, "floats")


# -- the goals -----------------------------------------------------------------------------


def goals() -> Rows:
    """Each goal, its target and what was measured (from `RAW`)."""
    rows: Rows = []

    def add(goal: str, target: str, measured: str, met: bool) -> None:
        rows.append(
            {
                "goal": goal,
                "target": target,
                "measured": measured,
                "met": "yes" if met else "**no**",
            }
        )

    plain = RAW["sweep", PLAIN]
    for name in (LIFT, "lift.lift, array rates", "lift.jit"):
        ratio = RAW["sweep", name] / plain
        traces = int(RAW["sweep traces", name])
        add(
            f"sweep, {name}",
            "≤ 0.25 of plain, 1 trace",
            f"{ratio:.2f}, {traces} trace{'s' if traces != 1 else ''}",
            ratio <= 0.25 and traces == 1,
        )
    ratio = RAW["step ratio", LIFT]
    add("steady step", "≤ 1.15 of plain", f"{ratio:.2f}", ratio <= 1.15)
    ratio = RAW["dispatch", LIFT] / RAW["dispatch", "flat leaf list"]
    add("dispatch", "≤ 1.5 of flat leaves", f"{ratio:.2f}", ratio <= 1.5)
    flat = RAW["flatten", "lift"]
    add(
        "tree_flatten",
        "≤ 2 µs",
        f"{_fmt(flat)} (fastest {_fmt(RAW['flatten min', 'lift'])})",
        flat <= 2e-6,
    )
    ratio = RAW["lift cost", "closure_to_pytree"] / RAW["lift cost", "lift.lift"]
    add(
        "lift of a fresh chain",
        "≥ 5x faster than closure_to_pytree",
        f"{ratio:.2f}x",
        ratio >= 5,
    )
    for what in ("depth", "floats"):
        sizes = sorted({int(key[2]) for key in RAW if key[0] == what})
        small, large = str(sizes[1]), str(sizes[-1])
        growth = {
            path: RAW[what, path, large] / RAW[what, path, small]
            for path in ("bare loop", "lift", "convert")
        }
        # A lift touches the same objects as the bare loop does, and cannot
        # grow less than it; converting floats does not walk the graph.
        floor = max(2.0, growth["bare loop"])
        add(
            f"linear in {what}",
            f"a unit at {sizes[-1]:,} ≤ 2x a unit at {sizes[1]:,}, or the bare "
            "loop's growth",
            ", ".join(f"{path} {r:.2f}x" for path, r in growth.items()),
            growth["lift"] <= floor and growth["convert"] <= 2,
        )
    return rows


# -- all of it ----------------------------------------------------------------------------

# Sizes by mode: the page's, a fast look, and a smoke run that only checks that
# everything runs.
SIZES: dict[str, dict[str, Any]] = {
    "full": {
        "sweep": (3, 100, 8),
        "long": (3, 1_000, 8),
        "samples": 3_001,
        "repeats": 5,
        "number": 200,
        "wide": (10_000, 7),
        "scale": (10, 100, 1_000, 10_000),
    },
    "quick": {
        "sweep": (1, 20, 8),
        "long": (1, 200, 8),
        "samples": 301,
        "repeats": 2,
        "number": 50,
        "wide": (10_000, 3),
        "scale": (10, 100, 1_000),
    },
    "smoke": {
        "sweep": (1, 3, 2),
        "long": (1, 5, 2),
        "samples": 5,
        "repeats": 1,
        "number": 3,
        "wide": (100, 1),
        "scale": (10, 30),
    },
}


def main(quick: bool = False, smoke: bool = False) -> dict[str, Rows]:
    """Run the benchmarks; print and return their tables, by title."""
    size = SIZES["smoke" if smoke else "quick" if quick else "full"]
    repeats, steps, n_rates = size["sweep"]
    sweep, where = bench_sweep(repeats, steps, n_rates)
    l_repeats, l_steps, l_rates = size["long"]
    samples, r, number = size["samples"], size["repeats"], size["number"]
    tables = {
        f"Sweep: {n_rates} rates x {steps} Adam steps, compiles included": sweep,
        f"Longer sweep: {l_rates} rates x {l_steps:,} steps, lifted ways": (
            bench_long_sweep(l_repeats, l_steps, l_rates)
        ),
        "Steady-state step: chain(clip_by_global_norm, adamw), small MLP": (
            bench_steady_step(samples, 1)
        ),
        "Dispatch: a trivial jitted function taking the lifted chain": (
            bench_dispatch(samples, 10)
        ),
        "Sweep: where the time goes": where,
        "tree_flatten": bench_flatten(samples, 100),
        "Cost of lifting fresh optimizers": bench_lift_cost(r, number),
        "New Python floats: the first `tree_flatten` converts them": bench_new_floats(
            r, 50 if not smoke else 3
        ),
        f"Lifting a closure that captures {size['wide'][0]:,} floats": (
            bench_wide_walk(*size["wide"])
        ),
        "Scaling with closure depth": bench_depth(r, size["scale"]),
        "Scaling with the number of captured floats": bench_captures(r, size["scale"]),
    }
    tables["Goals"] = goals()
    for title, rows in tables.items():
        print(f"\n{title}\n")
        print(markdown(rows))
    return tables


def markdown(rows: Rows) -> str:
    keys = list(dict.fromkeys(k for row in rows for k in row))
    lines = ["| " + " | ".join(keys) + " |", "|" + "|".join("---" for _ in keys) + "|"]
    lines += [
        "| " + " | ".join(str(row.get(k, "")) for k in keys) + " |" for row in rows
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main(quick="--quick" in sys.argv, smoke="--smoke" in sys.argv)
