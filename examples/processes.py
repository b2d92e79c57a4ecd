"""A learning-rate sweep run as separate processes, as on a cluster.

Each point of the sweep is its own Python process: it builds `make_step(lr)` (an
optax Adam step closing over its optimizer) and trains a small MLP for a few
steps. All processes share one JAX persistent compilation cache directory.

- With `jax.jit`, `lr` is a constant in the compiled program, so every process
  compiles a different program and misses the cache.
- With `lift.jit`, `lr` is a parameter of the program: every process lowers the
  same program, and all but the first load it from the cache.

Run `python examples/processes.py` (`--points 4`, `--steps 20`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def sweep_point(mode: str, lr: float, cache_dir: str, steps: int) -> dict[str, Any]:
    """One process of the sweep: train with `lr`, count cache hits and misses."""
    import jax

    jax.config.update("jax_compilation_cache_dir", cache_dir)
    # Cache every program, however small or quick to compile.
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)

    import jax.numpy as jnp
    import numpy as np
    import optax

    import lift

    jit = lift.jit if mode == "lift.jit" else jax.jit

    def make_step(lr: float) -> Any:
        opt = optax.adam(lr)

        def loss(params: Any, x: Any, y: Any) -> Any:
            h = jnp.tanh(x @ params["w1"] + params["b1"])
            return jnp.mean((h @ params["w2"] - y) ** 2)

        @jit
        def step(params: Any, state: Any, x: Any, y: Any) -> Any:
            value, grads = jax.value_and_grad(loss)(params, x, y)
            updates, state = opt.update(grads, state, params)
            return optax.apply_updates(params, updates), state, value

        return step, opt

    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 8)).astype(np.float32)
    y = np.sin(x.sum(axis=1, keepdims=True)).astype(np.float32)
    params = {
        "w1": rng.normal(size=(8, 32)).astype(np.float32) / 3,
        "b1": np.zeros(32, np.float32),
        "w2": rng.normal(size=(32, 1)).astype(np.float32) / 6,
    }
    step, opt = make_step(lr)
    state = opt.init(params)

    events: list[str] = []
    jax.monitoring.register_event_listener(lambda event, **_: events.append(event))
    start = time.perf_counter()
    params, state, value = step(params, state, x, y)
    jax.block_until_ready(value)
    first = time.perf_counter() - start
    counted = list(events)  # the first call only
    for _ in range(steps - 1):
        params, state, value = step(params, state, x, y)
    return {
        "misses": counted.count("/jax/compilation_cache/cache_misses"),
        "hits": counted.count("/jax/compilation_cache/cache_hits"),
        "first_call_ms": first * 1e3,
        "loss": float(value),
    }


def run(points: int = 4, steps: int = 20) -> list[dict[str, Any]]:
    """The sweep with `jax.jit`, then with `lift.jit`, each with a cold cache."""
    rates = [10.0 ** (-3 + 2 * i / max(points - 1, 1)) for i in range(points)]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    rows: list[dict[str, Any]] = []
    for mode in ("jax.jit", "lift.jit"):
        with tempfile.TemporaryDirectory() as cache_dir:
            for i, lr in enumerate(rates):
                command = [
                    sys.executable,
                    __file__,
                    "--child",
                    mode,
                    repr(lr),
                    cache_dir,
                    str(steps),
                ]
                out = subprocess.run(
                    command, capture_output=True, text=True, env=env, check=True
                )
                result = json.loads(out.stdout.strip().splitlines()[-1])
                rows.append({"jit": mode, "process": i + 1, "lr": lr, **result})
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| jit | process | lr | cache misses | cache hits | first call | loss |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['jit']} | {r['process']} | {r['lr']:.0e} | {r['misses']} | {r['hits']} "
            f"| {r['first_call_ms']:.0f} ms | {r['loss']:.4f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=4, help="processes per sweep")
    parser.add_argument(
        "--steps", type=int, default=20, help="training steps per process"
    )
    parser.add_argument(
        "--child",
        nargs=4,
        metavar=("JIT", "LR", "CACHE_DIR", "STEPS"),
        help=argparse.SUPPRESS,
    )
    args = parser.parse_args()
    if args.child:
        mode, lr, cache_dir, steps = args.child
        print(json.dumps(sweep_point(mode, float(lr), cache_dir, int(steps))))
        return
    rows = run(args.points, args.steps)
    print(table(rows))
    for mode in ("jax.jit", "lift.jit"):
        misses = sum(r["misses"] for r in rows if r["jit"] == mode)
        print(f"{mode}: {misses} compilation(s) for {args.points} processes")


if __name__ == "__main__":
    main()
