"""optax hyperparameter sweeps: lift against what users would pick instead.

Side by side, in one run:

- **plain optax**: the optimizer a static argument of `jax.jit` (each new
  `optax.adam(lr)` is a new static value: a trace and a compile per rate);
- **closure_to_pytree**: `equinox.internal.closure_to_pytree(opt)` through
  `equinox.filter_jit`, the workaround equinox ships;
- **inject_hyperparams**: `optax.inject_hyperparams(optax.adam)`, one shared
  transformation, the rate in the optimizer state;
- **lift**: `lift.lift(opt)` as an ordinary argument of `jax.jit`, and a batch of
  them under `jax.vmap`.

Measured: a sweep of 8 rates x 100 Adam steps (traces, wall time with compiles);
a steady-state step; dispatch of a trivial jitted function taking the optimizer
against the same function taking its flat leaves (`keep_unused=True`, so both
really pass them); `tree_flatten`; the cost of `lift` itself on fresh optimizers;
and how lift's cost scales with closure depth and the number of captures.

Timings take the candidates of a table in turns, sample by sample, so that a busy
machine slows them alike; each row gives the median and the min-max of the
samples.

Run `python benchmarks/bench_optax.py` (`--quick` for a fast look); `main()`
returns the tables.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import statistics
import sys
import time
import unittest.mock
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from equinox.internal import closure_to_pytree

import lift
from lift._gc import paused  # the collector paused while timing, as `timeit` does

# After the tables, on the benchmarks page: how the results come about.
NOTES = """
The vmapped sweep saves dispatches (one per step for all rates, or none with
`lax.scan`), and once compiled a member's step costs about half what it does in
the loop (the longer sweep measures it). But XLA:CPU takes about twice as long
to compile the batched program as the single step (the "compiling" column: its
LLVM passes run per kernel, and the batched kernels are larger). Saving about
20 µs on each of 800 member-steps does not make up for 150 ms more of
compiling; the longer sweep's 8 000 member-steps about break even. On this
2-core CPU the loop's dispatches already overlap its execution, so batching
saves little else.

How lift's cost scales is measured along each of its paths: the first lift of a
structure, the full walks of fresh objects of it (until they have cost what
compiling its replay would), the compile, and the replays after it; and the
first `tree_flatten` of floats never seen before, each converted to an array
once. Next to them, a bare Python loop over the same kind of fresh objects
gives the floor the machine sets: 10 000 fresh closure levels (about 4 MB of
objects), and a replay's bytecode for them (about 3 MB), no longer fit in its
caches, so every pass over them costs more per level than over 100. The
linearity goals allow a path's cost per unit to double from 100 to 10 000, or
to grow as much as the bare loop's does, and no more.
"""

Rows = list[dict[str, Any]]

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


SWEEPS: dict[str, Callable[[tuple[float, ...], int, Any], int]] = {
    "plain optax (static argument)": _sweep_static,
    "closure_to_pytree + filter_jit": _sweep_closure_to_pytree,
    "inject_hyperparams": _sweep_inject,
    "lift, float rates": _sweep_lift,
    "lift, array rates": _sweep_lift_array,
    "lift + vmap, Python loop (one dispatch a step)": _sweep_lift_vmap_loop,
    "lift + vmap + scan (one dispatch)": _sweep_lift_vmap,
}


def bench_long_sweep(repeats: int, steps: int) -> Rows:
    """The lifted ways over more steps: what a member's step costs once compiled."""
    data = _data()
    names = [n for n in SWEEPS if n.startswith("lift")]
    times: dict[str, list[float]] = {name: [] for name in names}
    rest: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(repeats):
        for name in names:
            _COMPILE.clear()
            start = time.perf_counter()
            SWEEPS[name](RATES, steps, data)
            elapsed = time.perf_counter() - start
            times[name].append(elapsed)
            rest[name].append(
                elapsed - sum(v for k, v in _COMPILE.items() if "count" not in k)
            )
    base = statistics.median(times["lift, float rates"])
    RAW.update(
        {("long sweep", name): statistics.median(t) for name, t in times.items()}
    )
    RAW["long sweep", "steps"] = steps
    return [
        {
            "way": name,
            **_stats(t),
            "vs lift": f"{statistics.median(t) / base:.2f}",
            "per rate and step, besides compiling": _fmt(
                statistics.median(rest[name]) / (len(RATES) * steps)
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


def bench_sweep(repeats: int, steps: int = 100) -> Rows:
    data = _data()
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
            traces[name] = sweep(RATES, steps, data)
            times[name].append(time.perf_counter() - start)
            compiles[name].append(_COMPILE.get("backend_compile", 0.0))
            jax_side[name].append(
                _COMPILE.get("jaxpr_trace", 0.0)
                + _COMPILE.get("jaxpr_to_mlir_module", 0.0)
            )
            counts[name] = int(_COMPILE.get("backend_compile count", 0))
    base = statistics.median(times["plain optax (static argument)"])
    for name, t in times.items():
        RAW["sweep", name] = statistics.median(t)
        RAW["sweep traces", name] = traces[name]
        RAW["sweep compile", name] = statistics.median(compiles[name])
    return [
        {
            "way": name,
            "step traces": traces[name],
            "XLA compiles": counts[name],
            "compiling": _fmt(statistics.median(compiles[name])),
            "tracing and lowering": _fmt(statistics.median(jax_side[name])),
            **_stats(t),
            "vs plain": f"{statistics.median(t) / base:.2f}",
        }
        for name, t in times.items()
    ]


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

    hp = tuple(jnp.asarray(v) for v in (1.0, 1e-3, 0.9, 0.999, 1e-8, 1e-4))
    states = {
        "plain optax (static argument)": plain.init(p),
        "closure_to_pytree + filter_jit": ctp.init(p),
        "inject_hyperparams": inject.init(p),
        "lift": lifted.init(p),
        "hyperparameters as explicit array arguments": plain.init(p),
    }
    x, y = data
    candidates = {
        "plain optax (static argument)": lambda: step_static(
            plain, p, states["plain optax (static argument)"], x, y
        ),
        "lift": lambda: step_lift(lifted, p, states["lift"], x, y),
        "hyperparameters as explicit array arguments": lambda: step_explicit(
            hp, p, states["hyperparameters as explicit array arguments"], x, y
        ),
        "closure_to_pytree + filter_jit": lambda: step_ctp(
            ctp, p, states["closure_to_pytree + filter_jit"], x, y
        ),
        "inject_hyperparams": lambda: step_static(
            inject, p, states["inject_hyperparams"], x, y
        ),
    }
    # Each way takes turns with plain optax alone: a slow neighbour (filter_jit's
    # Python) would otherwise colour the caches the others run in.
    base_name = "plain optax (static argument)"
    rows: Rows = []
    ratios: dict[str, float] = {}
    for name, fn in candidates.items():
        if name == base_name:
            continue
        times = _samples({base_name: candidates[base_name], name: fn}, repeats, number)
        ratios[name] = statistics.median(times[name]) / statistics.median(
            times[base_name]
        )
        if name == "lift":
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
        "flat leaf list (jax.jit)": lambda: f_tree(leaves, x),
        "lift (jax.jit)": lambda: f_tree(lifted, x),
        "closure_to_pytree (filter_jit)": lambda: f_ctp(ctp, x),
    }
    times = _samples(candidates, repeats, number)
    base = statistics.median(times["flat leaf list (jax.jit)"])
    RAW.update({("dispatch", name): statistics.median(t) for name, t in times.items()})
    return [
        {
            "way": name,
            **_stats(t),
            "vs flat leaves": f"{statistics.median(t) / base:.2f}",
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


def _no_replay() -> contextlib.AbstractContextManager[Any]:
    """Switch off the replay of known structures: every `lift` takes the full
    walk, as the first lifts of a structure do."""
    return unittest.mock.patch.object(lift._capture, "replay", return_value=None)  # pyright: ignore[reportPrivateUsage]


def bench_lift_cost(repeats: int, number: int) -> Rows:
    """Converting fresh optimizer objects (made beforehand, not timed; the
    collector paused while timing, as `timeit` does)."""

    def fresh(n: int) -> list[Any]:
        return [_chain(jnp.asarray(1e-3)) for _ in range(n)]

    ways: dict[str, Callable[[Any], Any]] = {
        "lift (a structure seen before: replayed)": lift.lift,
        "lift, full walk (before the replay is compiled)": lift.lift,
        "closure_to_pytree": closure_to_pytree,
    }
    times: dict[str, list[float]] = {name: [] for name in ways}
    for obj in fresh(100):  # until the structure's replay is compiled
        lift.lift(obj)
    for _ in range(repeats):
        for name, fn in ways.items():
            objs = fresh(number)
            walk = _no_replay() if "full walk" in name else contextlib.nullcontext()
            with walk, paused():
                start = time.perf_counter()
                for obj in objs:
                    fn(obj)
                times[name].append((time.perf_counter() - start) / number)
    base = statistics.median(times["lift (a structure seen before: replayed)"])
    RAW.update({("lift cost", name): statistics.median(t) for name, t in times.items()})
    return [
        {
            "conversion of a fresh chain(clip, adamw)": name,
            **_stats(t),
            "vs lift": f"{statistics.median(t) / base:.1f}",
        }
        for name, t in times.items()
    ]


def bench_new_floats(repeats: int, number: int) -> Rows:
    """The first `tree_flatten` of freshly lifted `chain(clip, adamw(lr))` with a
    Python float `lr`: its update function holds 8 Python floats, converted to
    arrays then (the lifting itself, replayed, is not timed)."""
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


def bench_float_designs(repeats: int, number: int) -> Rows:
    """Ways to turn 8 new Python floats into leaves, per float, with what each
    costs once (a compile) and whether it keeps the soundness rules: one leaf
    type, an array for `eqx.filter_jit`, weakly typed, one buffer each, the
    float width of `jax_enable_x64`."""
    from jax._src.lax.lax import _convert_element_type  # pyright: ignore

    rng = np.random.default_rng(0)
    floats = 8

    def fresh() -> list[float]:
        return [float(v) for v in rng.random(floats)]

    identity = jax.jit(lambda *xs: xs)
    split = jax.jit(
        lambda a: tuple(
            _convert_element_type(a[i], weak_type=True) for i in range(a.shape[0])
        )
    )
    compiles: dict[str, float] = {}
    for name, fn in (
        ("identity", lambda: identity(*fresh())),
        ("split", lambda: split(np.asarray(fresh(), np.float32))),
    ):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        compiles[name] = time.perf_counter() - start
    as_args = jax.jit(lambda *xs: xs[0], keep_unused=True)
    arrays = jax.device_put(fresh())
    candidates: dict[str, Callable[[], Any]] = {
        "jax.device_put of the list (0.1.0 and 0.2.0)": lambda: jax.device_put(fresh()),
        "jnp.asarray, one call a float": lambda: [jnp.asarray(v) for v in fresh()],
        "compiled identity, the floats as arguments (this version)": lambda: identity(
            *fresh()
        ),
        "np.array, then one compiled split into weakly typed scalars": lambda: split(
            np.asarray(fresh(), np.float32)
        ),
        "NumPy float32 0-d arrays": lambda: [
            np.asarray(v, np.float32) for v in fresh()
        ],
        "kept as Python floats: a jitted call taking them": lambda: as_args(*fresh()),
        "(the same call taking arrays)": lambda: as_args(*arrays),
        "(making the 8 floats)": fresh,
    }
    times = _samples(candidates, repeats, number)
    base = statistics.median(times["(making the 8 floats)"])
    per = {name: (statistics.median(t) - base) / floats for name, t in times.items()}
    RAW.update({("float designs", name): v for name, v in per.items()})
    kept = per["kept as Python floats: a jitted call taking them"]
    notes = {
        "jax.device_put of the list (0.1.0 and 0.2.0)": (
            "sound; JAX converts each float in Python"
        ),
        "jnp.asarray, one call a float": "sound; the same conversion, one call each",
        "compiled identity, the floats as arguments (this version)": (
            f"sound (tested: same leaves as device_put); compiles once per count, "
            f"{_fmt(compiles['identity'])} here, so a count is compiled only after "
            "1 024 of its floats went through device_put"
        ),
        "np.array, then one compiled split into weakly typed scalars": (
            f"sound, cheapest per float, but XLA compiles a kernel per output: "
            f"{_fmt(compiles['split'])} for 8 here, over a second for 64"
        ),
        "NumPy float32 0-d arrays": (
            "**unsound**: not weakly typed (a bf16 model becomes float32), float32 "
            "whatever `jax_enable_x64` says"
        ),
        "kept as Python floats: a jitted call taking them": (
            f"**unsound**: `eqx.filter_jit` and `flax.nnx.jit` take floats as static "
            f"(a compile per value); and `jax.jit` converts them on every call, "
            f"{_fmt(kept - per['(the same call taking arrays)'])} a float a call"
        ),
        "(the same call taking arrays)": "what the call costs without conversion",
        "(making the 8 floats)": "subtracted from the others",
    }
    return [
        {
            "design": name,
            "per float": _fmt(per[name]) if name != "(making the 8 floats)" else "",
            "median for 8": _fmt(statistics.median(t)),
            "soundness, once-only cost": notes[name],
        }
        for name, t in times.items()
    ]


def bench_wide_walk(n: int, repeats: int) -> Rows:
    """The full walk (replay switched off) of a fresh closure capturing `n`
    floats, against `closure_to_pytree` of another."""
    lift.lift(_wide(n))
    walk: list[float] = []
    ctp: list[float] = []
    for _ in range(repeats):
        a, b = _wide(n), _wide(n)
        with _no_replay(), paused():
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
        {f"fresh closure capturing {n:,} floats": "lift, full walk", **_stats(walk)},
        {f"fresh closure capturing {n:,} floats": "closure_to_pytree", **_stats(ctp)},
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


def _replayed(x: lift.Lifted[..., Any]) -> bool:
    """Whether `x`'s shape has its compiled replay (an internal detail, read here
    only to sort the samples of a sweep's lifts into walks and replays)."""
    return callable(x._skeleton.cache.get("replay"))  # pyright: ignore[reportPrivateUsage]


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
    machine's caches; the first `lift` of a structure; then fresh objects of it
    lifted one after another, as a sweep does, sorted into full walks (before the
    replay is compiled), the one lift that compiles it, and replays; the first
    `tree_flatten` of an object whose floats were never seen (each is converted
    to an array once); a later `tree_flatten`; and `closure_to_pytree`."""
    rows: Rows = []
    values = itertools.count(1)
    for n in sizes:
        gc.collect()
        bare_t: list[float] = []
        with paused():
            start = time.perf_counter()
            x = lift.lift(make(n, 0.0))
            first = time.perf_counter() - start
        walks: list[float] = []
        replays: list[float] = []
        compiled = 0.0
        # At least 25: CPython 3.11 specialises a function's bytecode from its 9th call.
        while len(replays) < max(repeats, 3_000 // n, 25):
            obj, probe = make(n, 0.0), make(n, 0.0)
            before = _replayed(x)
            with paused():
                # The bare loop over another fresh object, made alongside: both
                # meet the allocator, and the caches, in the same state.
                start = time.perf_counter()
                bare(probe)
                bare_t.append(time.perf_counter() - start)
                start = time.perf_counter()
                y = lift.lift(obj)
                elapsed = time.perf_counter() - start
            x = y  # frees the previous graph, outside the timing
            if before:
                replays.append(elapsed)
            elif _replayed(x):
                compiled = elapsed
            else:
                walks.append(elapsed)
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
        walk, rep = statistics.median(walks), statistics.median(replays)
        conv = statistics.median(first_flat_t)
        loop = statistics.median(bare_t)
        RAW[what, "bare loop", str(n)] = loop / n
        RAW[what, "walk", str(n)] = walk / n
        RAW[what, "replay", str(n)] = rep / n
        RAW[what, "convert", str(n)] = conv / n
        rows.append(
            {
                what: f"{n:,}",
                "bare Python loop": f"{_fmt(loop)} ({_fmt(loop / n)} per unit)",
                "first lift of the structure": _fmt(first),
                "walks": f"{len(walks)} x {_fmt(walk)} ({_fmt(walk / n)} per unit)",
                "compiling the replay": _fmt(compiled),
                "replays": f"{_fmt(rep)} ({_fmt(rep / n)} per unit)",
                "first tree_flatten, new floats": (
                    f"{_fmt(conv)} ({_fmt(conv / n)} per unit)"
                ),
                "later tree_flatten": _stats(flat_t)["median"],
                "closure_to_pytree": ctp,
            }
        )
    return rows


def bench_depth(repeats: int, sizes: tuple[int, ...]) -> Rows:
    limit = sys.getrecursionlimit()
    try:
        return _scale(_nested, _chase, sizes, repeats, "closure depth")
    finally:
        sys.setrecursionlimit(limit)


def bench_captures(repeats: int, sizes: tuple[int, ...]) -> Rows:
    return _scale(_wide, _cells, sizes, repeats, "captured variables")


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

    plain = RAW["sweep", "plain optax (static argument)"]
    for name in ("lift, float rates", "lift, array rates"):
        ratio = RAW["sweep", name] / plain
        traces = int(RAW["sweep traces", name])
        add(
            f"sweep, {name}",
            "≤ 0.25 of plain optax, 1 step trace",
            f"{ratio:.2f}, {traces} trace{'s' if traces != 1 else ''}",
            ratio <= 0.25 and traces == 1,
        )
    vmap_name, vmap = min(
        ((k[1], v) for k, v in RAW.items() if k[0] == "sweep" and "vmap" in k[1]),
        key=lambda item: item[1],
    )
    lifted = RAW["sweep", "lift, float rates"]
    long = min(v for k, v in RAW.items() if k[0] == "long sweep" and "vmap" in k[1])
    long_ratio = long / RAW["long sweep", "lift, float rates"]
    add(
        "sweep, lift + vmap",
        "faster than lift",
        f"{vmap / lifted:.2f} of lift (XLA compiles its program in "
        f"{_fmt(RAW['sweep compile', vmap_name])}, lift's step in "
        f"{_fmt(RAW['sweep compile', 'lift, float rates'])}); "
        f"{long_ratio:.2f} of lift over {int(RAW['long sweep', 'steps']):,} steps",
        vmap < lifted,
    )
    ratio = RAW["step ratio", "lift"]
    add("steady step", "≤ 1.15 of plain optax", f"{ratio:.2f}", ratio <= 1.15)
    ratio = (
        RAW["dispatch", "lift (jax.jit)"] / RAW["dispatch", "flat leaf list (jax.jit)"]
    )
    add("dispatch", "≤ 1.5 of the flat leaf list", f"{ratio:.2f}", ratio <= 1.5)
    flat = RAW["flatten", "lift"]
    add(
        "tree_flatten",
        "≤ 2 µs",
        f"{_fmt(flat)} (fastest sample {_fmt(RAW['flatten min', 'lift'])})",
        flat <= 2e-6,
    )
    ctp = RAW["lift cost", "closure_to_pytree"]
    ratio = ctp / RAW["lift cost", "lift (a structure seen before: replayed)"]
    walk = ctp / RAW["lift cost", "lift, full walk (before the replay is compiled)"]
    add(
        "lift cost",
        "≥ 5x faster than closure_to_pytree",
        f"{ratio:.1f}x once replayed; {walk:.1f}x for a full walk",
        ratio >= 5,
    )
    for what in ("closure depth", "captured variables"):
        sizes = sorted({int(key[2]) for key in RAW if key[0] == what})
        small, large = str(sizes[1]), str(sizes[-1])
        growth = {
            path: RAW[what, path, large] / RAW[what, path, small]
            for path in ("bare loop", "walk", "replay", "convert")
        }
        # Walks and replays touch the same objects as the bare loop does, and
        # cannot grow less than it; converting floats does not walk the graph.
        floor = max(2.0, growth["bare loop"])
        add(
            f"linear in {what}",
            f"cost per unit at {sizes[-1]:,} ≤ 2x that at {sizes[1]:,}, or no more "
            "than a bare Python loop's over the same objects grows",
            ", ".join(f"{path} {r:.2f}x" for path, r in growth.items()),
            max(growth["walk"], growth["replay"]) <= floor and growth["convert"] <= 2,
        )
    return rows


# -- all of it ----------------------------------------------------------------------------


def main(quick: bool = False) -> dict[str, Rows]:
    """Run the benchmarks; print and return their tables, by title."""
    r = 2 if quick else 5
    sizes = (10, 100, 1_000) if quick else (10, 100, 1_000, 10_000)
    obj = "`lift(chain(clip_by_global_norm(1.0), adamw(jnp.asarray(1e-3))))`"
    tables = {
        f"Sweep: {len(RATES)} rates x {20 if quick else 100} Adam steps, compiles "
        "included": bench_sweep(1 if quick else 3, 20 if quick else 100),
        f"Longer sweep: {len(RATES)} rates x {200 if quick else 1000} Adam steps, lifted ways "
        "only": bench_long_sweep(1 if quick else 3, 200 if quick else 1_000),
        "Steady-state step (chain(clip_by_global_norm, adamw), small MLP)": bench_steady_step(
            301 if quick else 3_001, 1
        ),
        f"Dispatch of a trivial jitted function taking {obj}": bench_dispatch(
            301 if quick else 3_001, 10
        ),
        f"`jax.tree_util.tree_flatten` of {obj}": bench_flatten(
            301 if quick else 3_001, 100
        ),
        "Cost of lifting fresh optimizers": bench_lift_cost(r, 50 if quick else 200),
        "New Python floats: the first `tree_flatten` converts them": bench_new_floats(
            r, 50
        ),
        "Ways to turn 8 new Python floats into leaves": bench_float_designs(
            101 if quick else 301, 20
        ),
        "Full walk of a closure capturing 10 000 floats": bench_wide_walk(
            10_000, 3 if quick else 7
        ),
        "Scaling with closure depth (each level captures the previous closure and a float)": (
            bench_depth(r, sizes)
        ),
        "Scaling with the number of captured variables (floats)": bench_captures(
            r, sizes
        ),
    }
    # The goals after the tables they are read from: a user reads the sweep first.
    tables = {**tables, "Goals": goals()}
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
    main(quick="--quick" in sys.argv)
