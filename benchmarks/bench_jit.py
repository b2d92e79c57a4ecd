"""Cost of a `lift.jit` call.

- A cached call of a `lift.jit` closure against the equivalent `jax.jit` function
  that takes the captures as explicit arguments (as arrays, and as Python floats,
  which `jax.jit` converts on every call): a small step closing over `lr`, and an
  optimizer step closing over an optax chain and its learning rate.
- `make_step(lr)(...)` with the closure made anew on every call: `lift.jit` hits
  its in-memory cache (lifting the new closure is the cost), `jax.jit` traces and
  compiles again each time.

Timings are medians over many short samples, the candidates of a row taking
turns sample by sample so that a busy machine slows them alike.

Run `python benchmarks/bench_jit.py`; `main()` returns the rows.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

import lift

# Medians in seconds by (benchmark, candidate), for `compare.py`.
RAW: dict[tuple[str, str], float] = {}


def _medians(
    candidates: dict[str, Callable[[], Any]], repeats: int, number: int
) -> dict[str, float]:
    for fn in candidates.values():
        jax.block_until_ready(fn())
    times: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(repeats):
        for name, fn in candidates.items():
            start = time.perf_counter()
            for _ in range(number):
                fn()
            times[name].append((time.perf_counter() - start) / number)
    return {name: statistics.median(t) for name, t in times.items()}


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} µs" if seconds < 1e-3 else f"{seconds * 1e3:.1f} ms"


def bench_small(repeats: int = 301, number: int = 50) -> list[dict[str, Any]]:
    def make_step(lr: Any) -> Any:
        @lift.jit
        def step(w: Any, g: Any) -> Any:
            return w - lr * g

        return step

    @jax.jit
    def explicit(w: Any, g: Any, lr: Any) -> Any:
        return w - lr * g

    w, g = jnp.ones(8), jnp.ones(8)
    lr_array = jnp.asarray(0.1, jnp.float32)
    step = make_step(0.1)

    def wrapper(w: Any, g: Any) -> Any:  # the floor of any Python-level wrapper
        return explicit(w, g, lr_array)

    t = _medians(
        {
            "lift": lambda: step(w, g),
            "array": lambda: explicit(w, g, lr_array),
            "float": lambda: explicit(w, g, 0.1),
            "wrapper": lambda: wrapper(w, g),
        },
        repeats,
        number,
    )
    RAW.update({("small", name): v for name, v in t.items()})
    return [
        {
            "benchmark": "closure over `lr`, cached call: lift.jit",
            "median": _us(t["lift"]),
            "ratio": f"{t['lift'] / t['array']:.2f}x",
            "note": "ratio to jax.jit with `lr` an explicit array argument",
        },
        {
            "benchmark": "same, jax.jit(step)(w, g, lr) with lr an array",
            "median": _us(t["array"]),
            "ratio": "1.00x",
            "note": "baseline",
        },
        {
            "benchmark": "same, a Python function calling jax.jit(step)(w, g, lr)",
            "median": _us(t["wrapper"]),
            "ratio": f"{t['wrapper'] / t['array']:.2f}x",
            "note": "the floor for any wrapper written in Python",
        },
        {
            "benchmark": "same, jax.jit(step)(w, g, 0.1) with lr a Python float",
            "median": _us(t["float"]),
            "ratio": f"{t['float'] / t['array']:.2f}x",
            "note": "jax.jit converts the float on every call",
        },
    ]


def _params() -> dict[str, jax.Array]:
    return {"w1": jnp.ones((16, 32)), "b1": jnp.zeros(32), "w2": jnp.ones((32, 4))}


def bench_optax(repeats: int = 151, number: int = 30) -> list[dict[str, Any]]:
    def make_optimizer(lr: float) -> optax.GradientTransformation:
        return optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(lr))

    def make_step(lr: float) -> Any:
        opt = make_optimizer(lr)

        @lift.jit
        def step(params: Any, state: Any, grads: Any) -> Any:
            updates, state = opt.update(grads, state, params)
            return optax.apply_updates(params, updates), state

        return step

    @jax.jit
    def explicit(opt: Any, params: Any, state: Any, grads: Any) -> Any:
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    params = _params()
    grads = jax.tree.map(jnp.ones_like, params)
    opt = lift.lift(make_optimizer(1e-3))
    state = opt.init(params)
    jax.tree.leaves(opt)  # its Python floats become arrays once, on first flatten
    step = make_step(1e-3)
    t = _medians(
        {
            "lift": lambda: step(params, state, grads),
            "explicit": lambda: explicit(opt, params, state, grads),
        },
        repeats,
        number,
    )
    # Apart: the garbage these make would be collected during the others' turns.
    t |= _medians(
        {
            "recreated": lambda: make_step(1e-3)(params, state, grads),
            "build": lambda: make_optimizer(1e-3),
        },
        max(1, repeats // 3),
        max(1, number // 10),
    )
    RAW.update({("optax", name): v for name, v in t.items()})
    return [
        {
            "benchmark": "optax chain(clip, adamw) step, cached call: lift.jit",
            "median": _us(t["lift"]),
            "ratio": f"{t['lift'] / t['explicit']:.2f}x",
            "note": "ratio to jax.jit with the optimizer an explicit argument",
        },
        {
            "benchmark": "same, jax.jit(step)(opt, params, state, grads)",
            "median": _us(t["explicit"]),
            "ratio": "1.00x",
            "note": "baseline (optimizer lifted once, passed as a pytree)",
        },
        {
            "benchmark": "same, make_step(lr)(...) made anew on every call",
            "median": _us(t["recreated"]),
            "ratio": f"{t['recreated'] / t['explicit']:.2f}x",
            "note": "builds the optax chain and lifts it each call; no retrace",
        },
        {
            "benchmark": "of which building the optax chain alone",
            "median": _us(t["build"]),
            "ratio": "",
            "note": "optax's own cost, not lift's",
        },
    ]


def bench_recreated(repeats: int = 101, number: int = 20) -> list[dict[str, Any]]:
    def make_lift(lr: Any) -> Any:
        @lift.jit
        def step(w: Any, g: Any) -> Any:
            return w - lr * g

        return step

    def make_jax(lr: Any) -> Any:
        @jax.jit
        def step(w: Any, g: Any) -> Any:
            return w - lr * g

        return step

    w, g = jnp.ones(8), jnp.ones(8)
    cached = make_lift(0.1)
    make_lift(0.1)(w, g)  # the one trace
    t = _medians(
        {"lift": lambda: make_lift(0.1)(w, g), "cached": lambda: cached(w, g)},
        repeats,
        number,
    )
    RAW.update({("recreated", name): v for name, v in t.items()})
    # Each call compiles: a few suffice.
    t_jax = _medians({"jax": lambda: make_jax(0.1)(w, g)}, 5, 2)["jax"]
    return [
        {
            "benchmark": "make_step(lr)(w, g), closure made anew: lift.jit",
            "median": _us(t["lift"]),
            "ratio": f"{t['lift'] / t['cached']:.1f}x",
            "note": f"ratio to its cached call; one trace in all; {t_jax / t['lift']:.0f}x "
            "faster than jax.jit",
        },
        {
            "benchmark": "same with jax.jit",
            "median": _us(t_jax),
            "ratio": "",
            "note": "traces and compiles again on every call",
        },
    ]


def main(quick: bool = False, smoke: bool = False) -> list[dict[str, Any]]:
    if smoke:
        return [*bench_small(3, 5), *bench_optax(3, 3), *bench_recreated(3, 2)]
    if quick:
        return [*bench_small(61, 20), *bench_optax(31, 10), *bench_recreated(21, 5)]
    return [*bench_small(), *bench_optax(), *bench_recreated()]


def _table(rows: list[dict[str, Any]]) -> str:
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "|".join("---" for _ in keys) + "|"]
    lines += ["| " + " | ".join(str(r[k]) for k in keys) + " |" for r in rows]
    return "\n".join(lines)


if __name__ == "__main__":
    print(_table(main(quick="--quick" in sys.argv, smoke="--smoke" in sys.argv)))
