"""Sweeps of a larger model, the way an accelerator runs them.

On whatever `jax.devices()` offers (its first device), side by side in one
process: plain optax (the optimizer a static argument of a jitted step),
`optax.inject_hyperparams`, `lift.lift`, `lift.jit`, and lift under
`jax.vmap`, training an MLP with adamw. Measured: a learning-rate sweep (wall
time with compiles, compile counts, final losses); a longer sweep of many
rates, one rate after another against all of them at once under `jax.vmap`; a
warmup-cosine schedule sweep over its peak; the steady-state step; and the
persistent compilation cache across two processes (the first sweeps some
rates, the second, started afresh on the same cache, new rates).

Run `python benchmarks/bench_accelerator.py --size full --out DIR` on an
accelerator (`--size cpu` for a few minutes of a CPU, `--size smoke` to check
that it runs); it writes `DIR/NAME.md` and `DIR/NAME.json`. It needs only
jax, optax and lift. The persistent-cache processes need the device free, so
run it as its own process rather than after other work on a TPU.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from pages import report, tables

import lift

Rows = list[dict[str, Any]]

# depth x width MLP, batch; sweep rates x steps; the long sweep's rates x
# steps and width; schedule peaks x steps; steady-state samples x steps a
# sample; the persistent-cache processes' rates x steps.
SIZES: dict[str, dict[str, Any]] = {
    "full": {
        "depth": 4,
        "width": 1024,
        "batch": 512,
        "sweep": (8, 200),
        "long": (32, 1_000, 512),
        "schedule": (5, 200),
        "steady": (31, 20),
        "cache": (8, 200),
    },
    "cpu": {
        "depth": 4,
        "width": 128,
        "batch": 128,
        "sweep": (8, 100),
        "long": (16, 300, 64),
        "schedule": (5, 100),
        "steady": (31, 10),
        "cache": (4, 50),
    },
    "smoke": {
        "depth": 2,
        "width": 16,
        "batch": 16,
        "sweep": (2, 3),
        "long": (2, 3, 8),
        "schedule": (2, 3),
        "steady": (3, 2),
        "cache": (1, 2),
    },
}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- compiles, counted with jax.monitoring -----------------------------------

_EVENTS: dict[str, float] = {}
_COMPILE = "/jax/core/compile/backend_compile_duration"
_HIT = "/jax/compilation_cache/cache_hits"
_MISS = "/jax/compilation_cache/cache_misses"


def _on_event(event: str, **kwargs: Any) -> None:
    if event in (_HIT, _MISS):
        _EVENTS[event] = _EVENTS.get(event, 0) + 1


def _on_duration(event: str, duration: float, **kwargs: Any) -> None:
    if event == _COMPILE:
        _EVENTS["compiles"] = _EVENTS.get("compiles", 0) + 1
        _EVENTS["compiling"] = _EVENTS.get("compiling", 0.0) + duration


jax.monitoring.register_event_listener(_on_event)
jax.monitoring.register_event_duration_secs_listener(_on_duration)


class Counted:
    """Wall time, XLA compiles (a persistent-cache hit is one too) and cache
    hits and misses over a `with` block."""

    def __enter__(self) -> Counted:
        _EVENTS.clear()
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.start
        self.compiles = int(_EVENTS.get("compiles", 0))
        self.compiling = _EVENTS.get("compiling", 0.0)
        self.hits = int(_EVENTS.get(_HIT, 0))
        self.misses = int(_EVENTS.get(_MISS, 0))


# -- the model ---------------------------------------------------------------

# Step traces. A module-level counter: a global is not one of a closure's
# captures, so `lift.jit` does not see it change.
TRACES = [0]


def loss_fn(params: Any, x: jax.Array, y: jax.Array) -> jax.Array:
    *hidden, (w, b) = params
    h = x
    for wi, bi in hidden:
        h = jax.nn.relu(h @ wi + bi)
    return jnp.mean((h @ w + b - y) ** 2)


def train_step(opt: Any, params: Any, state: Any, x: Any, y: Any) -> Any:
    TRACES[0] += 1
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    updates, state = opt.update(grads, state, params)
    return optax.apply_updates(params, updates), state, loss


def fresh_train_step() -> Callable[..., Any]:
    """A new function object, so that each way's `jax.jit` starts with empty
    caches (JAX keys its caches on the function)."""

    def step(opt: Any, params: Any, state: Any, x: Any, y: Any) -> Any:
        return train_step(opt, params, state, x, y)

    return step


def make_lift_jit_step(opt: Any) -> Callable[..., Any]:
    """A step closing over the optimizer, under `lift.jit`: one program for
    every optimizer of the same structure."""

    @lift.jit
    def step(params: Any, state: Any, x: Any, y: Any) -> Any:
        return train_step(opt, params, state, x, y)

    return step


class Problem:
    """Data and initial parameters (made with NumPy, placed on the device: no
    compile), and the rates of a sweep."""

    def __init__(self, depth: int, width: int, batch: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        dims = [width] * (depth + 1) + [8]
        self.params = [
            (
                jnp.asarray(
                    rng.normal(size=(a, b)).astype(np.float32) * np.sqrt(2 / a)
                ),
                jnp.zeros(b, jnp.float32),
            )
            for a, b in itertools.pairwise(dims)
        ]
        teacher = rng.normal(size=(width, 8)).astype(np.float32) / np.sqrt(width)
        x = rng.normal(size=(batch, width)).astype(np.float32)
        self.x = jnp.asarray(x)
        self.y = jnp.asarray(np.tanh(x @ teacher))

        # adamw's state does not depend on the rate: made once, outside the
        # timed sweeps (eagerly, its zeros compile), shared by every way.
        self.state = optax.adamw(1e-3).init(self.params)
        self.inject = optax.inject_hyperparams(optax.adamw)(learning_rate=1e-3)
        self.inject_state = self.inject.init(self.params)
        jax.block_until_ready(
            (self.params, self.state, self.inject_state, self.x, self.y)
        )


def rates(n: int, offset: float = 0.0) -> list[float]:
    """`n` learning rates from 1e-4 to 1e-2; `offset` shifts them (new values
    for a second process)."""
    return [float(r) * (1 + offset) for r in np.geomspace(1e-4, 1e-2, n)]


# -- the sweeps --------------------------------------------------------------


def _train(
    step: Callable[..., Any],
    args: tuple[Any, ...],
    problem: Problem,
    state: Any,
    steps: int,
) -> tuple[Any, float]:
    p, s = problem.params, state
    for _ in range(steps):
        p, s, loss = step(*args, p, s, problem.x, problem.y)
    return (p, s), float(loss)  # pyright: ignore[reportPossiblyUnboundVariable]


def sweep_plain(problem: Problem, lrs: list[float], steps: int) -> dict[str, Any]:

    step = jax.jit(fresh_train_step(), static_argnums=0)
    losses = []
    for lr in lrs:
        opt = optax.adamw(lr)
        last, loss = _train(step, (opt,), problem, problem.state, steps)
        losses.append(loss)
    return {
        "losses": losses,
        "steady": lambda: lambda: step(opt, *last, problem.x, problem.y),
    }


def sweep_inject(problem: Problem, lrs: list[float], steps: int) -> dict[str, Any]:
    step = jax.jit(fresh_train_step(), static_argnums=0)
    opt, base = problem.inject, problem.inject_state
    losses = []
    for lr in lrs:
        # Strongly typed, as `init` makes it: a weakly typed rate would retrace.
        hyper = {**base.hyperparams, "learning_rate": jnp.asarray(lr, jnp.float32)}
        state = base._replace(hyperparams=hyper)
        last, loss = _train(step, (opt,), problem, state, steps)
        losses.append(loss)
    return {
        "losses": losses,
        "steady": lambda: lambda: step(opt, *last, problem.x, problem.y),
    }


def sweep_lift(problem: Problem, lrs: list[float], steps: int) -> dict[str, Any]:

    step = jax.jit(fresh_train_step())
    losses = []
    for lr in lrs:
        opt = lift.lift(optax.adamw(lr))
        last, loss = _train(step, (opt,), problem, problem.state, steps)
        losses.append(loss)
    return {
        "losses": losses,
        "steady": lambda: lambda: step(opt, *last, problem.x, problem.y),
    }


def sweep_lift_jit(problem: Problem, lrs: list[float], steps: int) -> dict[str, Any]:

    losses = []
    for lr in lrs:
        step = make_lift_jit_step(optax.adamw(lr))
        last, loss = _train(step, (), problem, problem.state, steps)
        losses.append(loss)
    return {
        "losses": losses,
        "steady": lambda: lambda: step(*last, problem.x, problem.y),
    }


def vmapped_sweep(problem: Problem, steps: int) -> Callable[[jax.Array], jax.Array]:
    """Every rate at once: `jax.vmap` over lifted optimizers, each trained by
    a `lax.scan` of steps, in one compiled program; returns the final losses."""

    @jax.jit
    def sweep(lrs: jax.Array, params: Any, state: Any, x: Any, y: Any) -> jax.Array:
        def one(lr: jax.Array) -> jax.Array:
            opt = lift.lift(optax.adamw(lr))

            def body(carry: Any, _: None) -> tuple[Any, jax.Array]:
                p, s, loss = train_step(opt, *carry, x, y)
                return (p, s), loss

            return jax.lax.scan(body, (params, state), None, length=steps)[1][-1]

        return jax.vmap(one)(lrs)

    return lambda lrs: sweep(lrs, problem.params, problem.state, problem.x, problem.y)


def sweep_vmap(problem: Problem, lrs: list[float], steps: int) -> dict[str, Any]:

    # np.asarray: indexing the device array would compile.
    losses = np.asarray(vmapped_sweep(problem, steps)(jnp.asarray(lrs, jnp.float32)))

    def steady() -> Callable[[], Any]:
        # One step of every rate at once (made after the sweep's timing).
        step = jax.jit(jax.vmap(fresh_train_step(), in_axes=(0, 0, 0, None, None)))
        opts = jax.jit(jax.vmap(lambda lr: lift.lift(optax.adamw(lr))))(
            jnp.asarray(lrs, jnp.float32)
        )
        batch = jax.tree.map(
            lambda a: jnp.stack([a] * len(lrs)), (problem.params, problem.state)
        )
        return lambda: step(opts, *batch, problem.x, problem.y)

    return {"losses": [float(v) for v in losses], "steady": steady}


WAYS: dict[str, Callable[[Problem, list[float], int], dict[str, Any]]] = {
    "plain optax": sweep_plain,
    "inject_hyperparams": sweep_inject,
    "lift.lift": sweep_lift,
    "lift.jit": sweep_lift_jit,
    "lift + vmap": sweep_vmap,
}


def bench_sweep(problem: Problem, n: int, steps: int) -> tuple[Rows, dict[str, Any]]:
    lrs = rates(n)
    results: Rows = []
    steady: dict[str, Any] = {}
    for name, way in WAYS.items():
        log(f"  sweep: {name}")
        TRACES[0] = 0
        with Counted() as c:
            out = way(problem, lrs, steps)
        steady[name] = out["steady"]()
        results.append(
            {
                "way": name,
                "traces": TRACES[0],
                "compiles": c.compiles,
                "compiling_s": c.compiling,
                "wall_s": c.wall,
                "final_losses": out["losses"],
            }
        )
    return results, steady


def bench_long(problem: Problem, n: int, steps: int) -> Rows:
    lrs = rates(n)
    results: Rows = []
    log(f"  long sweep: lift.lift, {n} rates one after another")
    TRACES[0] = 0
    with Counted() as c:
        out = sweep_lift(problem, lrs, steps)
    results.append(
        {
            "way": "lift.lift, one rate after another",
            "traces": TRACES[0],
            "compiles": c.compiles,
            "wall_s": c.wall,
            "final_losses": out["losses"],
        }
    )
    log(f"  long sweep: lift + vmap, {n} rates at once")
    TRACES[0] = 0
    with Counted() as c:
        losses = np.asarray(
            vmapped_sweep(problem, steps)(jnp.asarray(lrs, jnp.float32))
        ).tolist()
    results.append(
        {
            "way": "lift + vmap, all rates at once",
            "traces": TRACES[0],
            "compiles": c.compiles,
            "wall_s": c.wall,
            "final_losses": losses,
        }
    )
    return results


def bench_schedule(problem: Problem, n: int, steps: int) -> Rows:

    peaks = rates(n)

    def schedule(peak: float) -> Any:
        return optax.warmup_cosine_decay_schedule(
            0.0, peak, warmup_steps=max(1, steps // 10), decay_steps=steps
        )

    # Each way's optimizers and initial states made before the timing (inject's
    # `init` evaluates the schedule eagerly, which compiles): what is timed is
    # the training, its compiles included.
    ways = {
        "inject_hyperparams(adam)(learning_rate=schedule)": (
            [
                optax.inject_hyperparams(optax.adam)(learning_rate=schedule(p))
                for p in peaks
            ],
            jax.jit(fresh_train_step(), static_argnums=0),
        ),
        "lift.lift(adam(schedule))": (
            [lift.lift(optax.adam(schedule(p))) for p in peaks],
            jax.jit(fresh_train_step()),
        ),
    }
    results: Rows = []
    for name, (opts, step) in ways.items():
        log(f"  schedule sweep: {name}")
        states = [opt.init(problem.params) for opt in opts]
        jax.block_until_ready(states)
        TRACES[0] = 0
        losses = []
        with Counted() as c:
            for opt, state in zip(opts, states, strict=True):
                _, loss = _train(step, (opt,), problem, state, steps)
                losses.append(loss)
        results.append(
            {
                "way": name,
                "traces": TRACES[0],
                "compiles": c.compiles,
                "wall_s": c.wall,
                "final_losses": losses,
            }
        )
    return results


def bench_steady(
    steady: dict[str, Callable[[], Any]], samples: int, steps: int
) -> Rows:
    """Median time a step after warmup: the ways take turns, sample by sample,
    each sample `steps` steps then a wait for the result."""
    for fn in steady.values():
        jax.block_until_ready(fn())
    times: dict[str, list[float]] = {name: [] for name in steady}
    for _ in range(samples):
        for name, fn in steady.items():
            start = time.perf_counter()
            for _ in range(steps):
                out = fn()
            jax.block_until_ready(out)  # pyright: ignore[reportPossiblyUnboundVariable]
            times[name].append((time.perf_counter() - start) / steps)
    return [
        {"way": name, "step_s": statistics.median(t), "min_s": min(t)}
        for name, t in times.items()
    ]


# -- the persistent compilation cache, across two processes ------------------

CACHE_WAYS = ("plain optax", "inject_hyperparams", "lift.lift", "lift.jit")


def cache_child(cache_dir: str, size: str, offset: float) -> dict[str, Any]:
    """One process on the persistent cache: each way sweeps the rates."""
    jax.config.update("jax_compilation_cache_dir", cache_dir)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    sizes = SIZES[size]
    n, steps = sizes["cache"]
    start = time.perf_counter()
    problem = Problem(sizes["depth"], sizes["width"], sizes["batch"])
    setup = time.perf_counter() - start
    out: dict[str, Any] = {"setup_s": setup}
    for name in CACHE_WAYS:
        with Counted() as c:
            WAYS[name](problem, rates(n, offset), steps)
        out[name] = {
            "wall_s": c.wall,
            "compiles": c.compiles,
            "hits": c.hits,
            "misses": c.misses,
        }
    return out


def bench_cache(size: str) -> dict[str, Any]:
    """Two fresh processes on one new cache directory: rates A, then rates B."""
    with tempfile.TemporaryDirectory(prefix="lift-bench-cache-") as cache_dir:
        runs = {}
        for label, offset in (("first", 0.0), ("second", 0.37)):
            log(f"  persistent cache: {label} process")
            start = time.perf_counter()
            done = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--child-cache",
                    cache_dir,
                    "--size",
                    size,
                    "--offset",
                    str(offset),
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            elapsed = time.perf_counter() - start
            if done.returncode:
                raise RuntimeError(
                    f"the {label} persistent-cache process failed:\n{done.stderr}"
                )
            runs[label] = {
                "process_s": elapsed,
                **json.loads(done.stdout.strip().splitlines()[-1]),
            }
    return runs


# -- the report --------------------------------------------------------------


def measure(size: str) -> dict[str, Any]:
    sizes = SIZES[size]
    log(f"bench_accelerator --size {size}")
    load_start = _load()
    # The persistent-cache processes first: on a TPU, a process that has
    # opened the chip keeps it, and they need it.
    cache = bench_cache(size)

    device = jax.devices()[0]
    log(f"  on {device.device_kind} ({jax.device_count()} device(s))")
    problem = Problem(sizes["depth"], sizes["width"], sizes["batch"])
    sweep, steady = bench_sweep(problem, *sizes["sweep"])
    n, steps, width = sizes["long"]
    long = bench_long(Problem(sizes["depth"], width, sizes["batch"]), n, steps)
    schedule = bench_schedule(problem, *sizes["schedule"])
    log("  steady step")
    steady_rows = bench_steady(steady, *sizes["steady"])
    return {
        "device_kind": device.device_kind,
        "platform": device.platform,
        "device_count": jax.device_count(),
        "cpu_count": os.cpu_count(),
        "jax": jax.__version__,
        "jaxlib": importlib.metadata.version("jaxlib"),
        "optax": optax.__version__,
        "lift": lift.__version__,
        "python": platform.python_version(),
        "date": f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC",
        "size": size,
        "sizes": sizes,
        "sweep": sweep,
        "long": long,
        "schedule": schedule,
        "steady": steady_rows,
        "cache": cache,
        "load": [load_start, _load()],
    }


def _load() -> list[float] | None:
    """The load averages (1, 5 and 15 minutes), where the system has them."""
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None


def main(quick: bool = False, smoke: bool = False) -> dict[str, Rows]:
    """For `benchmarks/run.py`: the `cpu` size (`smoke` when asked)."""
    return tables(measure("smoke" if smoke else "cpu"))


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="cpu")
    parser.add_argument("--out", type=Path, help="directory for NAME.md and NAME.json")
    parser.add_argument(
        "--name", help="file name without suffix (default: the device kind)"
    )
    parser.add_argument("--child-cache", help=argparse.SUPPRESS)
    parser.add_argument("--offset", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_cache:
        print(json.dumps(cache_child(args.child_cache, args.size, args.offset)))
        return
    start = time.perf_counter()
    results = measure(args.size)
    results["total_s"] = time.perf_counter() - start
    text = report(results)
    print(text)
    if args.out:
        name = args.name or "-".join(results["device_kind"].lower().split())
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"{name}.md").write_text(text)
        (args.out / f"{name}.json").write_text(json.dumps(results, indent=1) + "\n")
        log(f"wrote {args.out / name}.md and .json")
    log(f"done in {results['total_s']:.0f} s")


if __name__ == "__main__":
    cli()
