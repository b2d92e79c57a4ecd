"""What lifting costs a sweep, side by side with what it is held to.

- A closure over a large static table (a list or dict of ints, beside a float)
  lifted, against JAX's own `tree_flatten` of the table: goal, at most 3x.
- A fresh `lift.lift(optax.adam(lr))` against equinox's `closure_to_pytree` of
  the same optimizer: goal, no slower.
- The steady step of a sweep's later rates: a jitted step called with each
  rate's own `Lifted`, against plain optax's step (its optimizer a static
  argument): goal, at most 1.03x. Equal skeletons are one object, so JAX's
  check of the cached treedef is an identity. Beside them, plain optax built
  in the step from the same 5 arrays, passed by hand: what any dynamic rate
  pays for its inputs.

Timings are medians; the candidates of a row take turns sample by sample, and
the ratios are medians of the paired samples, so load from other processes
falls on both alike. The load average is printed beside the numbers.

Run `python benchmarks/bench_lift_cost.py`; `main()` returns the tables.
"""

from __future__ import annotations

import gc
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from equinox.internal import closure_to_pytree
from pages import markdown

import lift

Rows = list[dict[str, Any]]

# Every table here is about lift's own paths: the developers' page.
INTERNAL = {"Lifting", "A fresh", "Steady step"}


def _load() -> str:
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


def _fmt(seconds: float) -> str:
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} µs"


def _paired(
    candidates: dict[str, Callable[[], Any]], repeats: int, number: int
) -> dict[str, list[float]]:
    """Seconds per call of each candidate, `number` calls a sample, the
    candidates taking turns sample by sample; the collector paused."""
    for fn in candidates.values():
        jax.block_until_ready(fn())
    times: dict[str, list[float]] = {name: [] for name in candidates}
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeats):
            for name, fn in candidates.items():
                start = time.perf_counter()
                for _ in range(number):
                    out = fn()
                jax.block_until_ready(out)  # pyright: ignore[reportPossiblyUnboundVariable]
                times[name].append((time.perf_counter() - start) / number)
    finally:
        if enabled:
            gc.enable()
    return times


def _ratio(times: dict[str, list[float]], name: str, base: str) -> float:
    return statistics.median(
        a / b for a, b in zip(times[name], times[base], strict=True)
    )


# -- a large static table --------------------------------------------------------


def _closure_over(table: Any) -> Callable[[Any], Any]:
    lr = 0.1

    def f(x: Any) -> Any:
        return x * lr + len(table)

    return f


def _none(_: Any) -> None:
    return None


def bench_table(n: int, repeats: int) -> Rows:
    tables = {
        f"list of {n:,} ints": list(range(n)),
        f"dict of {n:,} ints": {i: i for i in range(n)},
    }
    rows: Rows = []
    for name, table in tables.items():
        times = _paired(
            {
                # Each returns `None`: nothing for `block_until_ready` to walk.
                "lift.lift": lambda t=table: _none(lift.lift(_closure_over(t))),
                "tree_flatten": lambda t=table: _none(jax.tree_util.tree_flatten(t)),
            },
            repeats,
            1,
        )
        ratio = _ratio(times, "lift.lift", "tree_flatten")
        rows.append(
            {
                "a closure over": name,
                "lift.lift": _fmt(statistics.median(times["lift.lift"])),
                "tree_flatten of the table": _fmt(
                    statistics.median(times["tree_flatten"])
                ),
                "ratio (goal ≤ 3)": f"{ratio:.2f}",
                "load": _load(),
            }
        )
    return rows


# -- a fresh optimizer -----------------------------------------------------------


def bench_fresh(repeats: int, number: int) -> Rows:
    """Lifting fresh `optax.adam(lr)` objects, made beforehand (not timed)."""
    ways: dict[str, Callable[[Any], Any]] = {
        "lift.lift": lift.lift,
        "closure_to_pytree": closure_to_pytree,
    }
    for _ in range(20):
        for fn in ways.values():
            fn(optax.adam(1e-3))
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(repeats):
        for name, fn in ways.items():
            objs = [optax.adam(1e-3) for _ in range(number)]
            gc.disable()
            try:
                start = time.perf_counter()
                for obj in objs:
                    fn(obj)
                times[name].append((time.perf_counter() - start) / number)
            finally:
                gc.enable()
    ratio = _ratio(times, "lift.lift", "closure_to_pytree")
    return [
        {
            "a fresh optax.adam(lr)": name,
            "median": _fmt(statistics.median(t)),
            "vs closure_to_pytree (goal ≤ 1)": f"{ratio:.2f}"
            if name == "lift.lift"
            else "1.00",
            "load": _load(),
        }
        for name, t in times.items()
    ]


# -- the steady step of a sweep ---------------------------------------------------


def _problem() -> tuple[dict[str, jax.Array], jax.Array, jax.Array]:
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(256, 8)).astype(np.float32))
    y = jnp.asarray(rng.normal(size=(256,)).astype(np.float32))
    params = {
        "w1": jnp.asarray(rng.normal(size=(8, 32)).astype(np.float32) / 3),
        "b1": jnp.zeros(32),
        "w2": jnp.asarray(rng.normal(size=(32,)).astype(np.float32) / 6),
    }
    return params, x, y


def _loss(p: Any, x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"] - y) ** 2)


def _step(opt: Any, params: Any, state: Any, x: Any, y: Any) -> Any:
    grads = jax.grad(_loss)(params, x, y)
    updates, state = opt.update(grads, state, params)
    return optax.apply_updates(params, updates), state


def _by_hand(h: Any, params: Any, state: Any, x: Any, y: Any) -> Any:
    """`_step` with adam built from its hyperparameters, passed as arrays."""
    b1, b2, eps, eps_root, step_size = h
    opt = optax.chain(
        optax.scale_by_adam(b1, b2, eps, eps_root), optax.scale(step_size)
    )
    return _step(opt, params, state, x, y)


def bench_steady_step(repeats: int, number: int, n_rates: int = 4) -> Rows:
    params, x, y = _problem()
    rates = [float(r) for r in np.geomspace(1e-3, 1e-1, n_rates)]
    plain = optax.adam(rates[0])
    lifted = [lift.lift(optax.adam(r)) for r in rates]
    states = [opt.init(params) for opt in lifted]
    hands = [tuple(jax.tree.leaves(opt)) for opt in lifted]  # the same 5 arrays
    plain_state = plain.init(params)
    step_plain = jax.jit(_step, static_argnums=0)
    step_lift = jax.jit(_step)
    step_hand = jax.jit(_by_hand)
    later = iter(range(10**9))

    def another_rate() -> Any:
        k = 1 + next(later) % (n_rates - 1)  # each later rate, its own `Lifted`
        return step_lift(lifted[k], params, states[k], x, y)

    def by_hand() -> Any:
        k = 1 + next(later) % (n_rates - 1)
        return step_hand(hands[k], params, states[k], x, y)

    times = _paired(
        {
            "plain optax": lambda: step_plain(plain, params, plain_state, x, y),
            # What any dynamic rate pays: the hyperparameters as inputs.
            "plain optax, its 5 hyperparameters passed by hand": by_hand,
            "lift.lift, later rates, each its own Lifted": another_rate,
            "lift.lift, the Lifted it compiled with": lambda: step_lift(
                lifted[0], params, states[0], x, y
            ),
        },
        repeats,
        number,
    )
    base = "plain optax"
    return [
        {
            "jitted step called with": name,
            "median": _fmt(statistics.median(t)),
            "vs plain, paired (goal ≤ 1.03)": f"{_ratio(times, name, base):.3f}",
            "load": _load(),
        }
        for name, t in times.items()
    ]


def main(quick: bool = False, smoke: bool = False) -> dict[str, Rows]:
    """Run the benchmarks; return their tables, by title."""
    if smoke:
        sizes = (1_000, 3), (3, 5), (3, 3)
    elif quick:
        sizes = (100_000, 7), (31, 50), (61, 20)
    else:
        sizes = (100_000, 21), (101, 100), (301, 50)
    (n, t_repeats), (f_repeats, f_number), (s_repeats, s_number) = sizes
    return {
        "Lifting a closure over a large static table": bench_table(n, t_repeats),
        "A fresh lift of an optimizer": bench_fresh(f_repeats, f_number),
        "Steady step of a sweep's later rates": bench_steady_step(s_repeats, s_number),
    }


if __name__ == "__main__":
    for title, rows in main(
        quick="--quick" in sys.argv, smoke="--smoke" in sys.argv
    ).items():
        print(f"### {title}\n\n{markdown(rows)}\n")
