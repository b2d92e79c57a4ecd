"""What bounds a population's rate-step: its program taken apart, and reshaped.

`bench_population.py` trains 32 rates with adamw; its fastest ways keep the
state on chip and run near 20 µs a rate-step, 2.5 times the FLOP floor. This
module asks why, on one device, with the same model and data. Each row trains
with plain optax (no lift: what is measured is XLA's), once as one rate's
program called once per rate, once as chunks of 4 rates (`lax.map` with
`batch_size=4`, one program):

- adamw, as the population trains it;
- sgd: the products of the forward and backward pass, with the lightest update;
- adamw's update alone, on gradients made without products (they change every
  step, and every element of the result is used, so XLA can drop nothing);
- adamw with the gradients behind `lax.optimization_barrier`, so that XLA
  cannot fuse the update into the products that make the gradients;
- adamw through `optax.flatten`, its update on one vector;
- adamw with the scan unrolled twice.

Run `python benchmarks/population_bounds.py --size full --out benchmarks/results`
on an accelerator (`--size smoke` checks that it runs on a CPU); it writes
`population-bounds-DEVICE.md` and `.json`.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from typing import Any

import bench_population as bp
import jax
import jax.numpy as jnp
import numpy as np
import optax
from pages import markdown


def programs(p: bp.Problem, steps: int) -> dict[str, Callable[[Any], Any]]:
    """Each row's one-rate function: a rate in, a scalar out."""
    x, y, params = p.x, p.y, p.params

    def train(opt: Any, barrier: bool = False, unroll: int = 1) -> Any:
        def step(carry: Any, _: None) -> Any:
            q, state = carry
            loss, grads = jax.value_and_grad(bp.loss_fn)(q, x, y)
            if barrier:
                grads = jax.lax.optimization_barrier(grads)
            updates, state = opt.update(grads, state, q)
            return (optax.apply_updates(q, updates), state), loss

        carry = (params, opt.init(params))
        _, losses = jax.lax.scan(step, carry, None, steps, unroll=unroll)
        return losses[-1]

    def update_only(lr: Any) -> Any:
        opt = optax.adamw(lr)
        g0 = jax.tree.map(lambda a: a * 1e-3 + 1e-4, params)

        def step(carry: Any, t: Any) -> Any:
            q, state = carry
            updates, state = opt.update(jax.tree.map(lambda a: a * t, g0), state, q)
            return (optax.apply_updates(q, updates), state), None

        ts = jnp.linspace(1.0, 2.0, steps)
        out, _ = jax.lax.scan(step, (params, opt.init(params)), ts)
        return sum(jnp.sum(a) for a in jax.tree.leaves(out))

    return {
        "adamw, as the population trains": lambda lr: train(optax.adamw(lr)),
        "sgd: the products, the lightest update": lambda lr: train(optax.sgd(lr)),
        "adamw's update alone (no products)": update_only,
        "adamw, gradients behind optimization_barrier": lambda lr: train(
            optax.adamw(lr), barrier=True
        ),
        "adamw through optax.flatten": lambda lr: train(optax.flatten(optax.adamw(lr))),
        "adamw, scan unrolled by 2": lambda lr: train(optax.adamw(lr), unroll=2),
    }


def _best(fn: Any, args: list[Any], repeats: int) -> float:
    walls = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready([fn(a) for a in args])
        walls.append(time.perf_counter() - start)
    return min(walls)


def measure(size: str) -> dict[str, Any]:
    s = bp.SIZES[size]
    n, steps = s["rates"], s["steps"]
    p = bp.Problem(s["depth"], s["width"], s["batch"])
    lrs = jnp.asarray(np.geomspace(1e-4, 1e-2, n), jnp.float32)
    k = 4 if n >= 4 else n
    rows = []
    for name, one in programs(p, steps).items():
        bp.log(f"{name} ...")
        single = jax.jit(one).lower(lrs[0]).compile()
        chunked = (
            jax.jit(lambda r, one=one: jax.lax.map(one, r, batch_size=k))
            .lower(lrs)
            .compile()
        )
        rows.append({
            "way": name,
            "one_s": _best(single, list(lrs), s["repeats"]) / (n * steps),
            "chunks_s": _best(chunked, [lrs], s["repeats"]) / (n * steps),
        })  # fmt: skip
    device = jax.devices()[0]
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "jax": jax.__version__,
        "device_kind": device.device_kind,
        "size": size,
        "sizes": {key: list(v) if isinstance(v, tuple) else v for key, v in s.items()},
        "chunk": k,
        # XLA's cost analysis of one step's program (a scan's is its body's once).
        "step_flops": bp.step_costs(p, 1, ())[1][0],
        "rows": rows,
    }


def report(r: dict[str, Any]) -> str:
    peaks = bp.PEAKS.get(r["device_kind"])
    floor = r["step_flops"] / peaks[0] if peaks else float("nan")
    s = r["sizes"]
    rows = [
        {
            "way": row["way"],
            "one rate's program": bp._fmt(row["one_s"]),
            f"chunks of {r['chunk']}": bp._fmt(row["chunks_s"]),
        }
        for row in r["rows"]
    ]
    if peaks:
        for row, entry in zip(r["rows"], rows, strict=True):
            entry["chunks vs FLOP floor"] = f"{row['chunks_s'] / floor:.1f}"
    return "\n".join([
        f"Measured on {r['device_kind']}, {r['date']}: JAX {r['jax']}, `--size "
        f"{r['size']}` ({s['rates']} rates x {s['steps']:,} steps, MLP {s['depth']} "
        f"x {s['width']}, batch {s['batch']}), plain optax. Each cell: a rate-step, "
        f"the best of {s['repeats']} sweeps."
        + (f" adamw's FLOP floor: {bp._fmt(floor)} a rate-step." if peaks else ""),
        "",
        markdown(rows),
        "",
    ])  # fmt: skip


if __name__ == "__main__":
    bp.cli(__doc__, "population-bounds", measure, report, size="smoke")
