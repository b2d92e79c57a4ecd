"""Populations: many learning rates trained at once, or one after another.

One process, one device (the first of `jax.devices()`): an MLP trained with
adamw, every step of a rate's run in one `lax.scan`. Each way compiles one
program (timed apart from its runs) and trains every rate of the sweep:

- one rate's program, called once per rate (the program is the same for every
  rate: the optimizer is lifted);
- that program's work vmapped over all rates (`jax.vmap` outside the scan),
  and the same written with the rates axis inside the scan (a scan whose step
  is vmapped);
- the rates in chunks (`jax.lax.map(..., batch_size=k)`: k rates vmapped, the
  chunks one after another in the program), and one at a time (`lax.map`);
- the vmapped program with the stacked state passed in and donated;
- the vmapped program written by hand without lift (the rate a traced argument
  of `optax.adamw`), so that what is lift's and what is XLA's is plain.

Each row gives the time a rate-step (a run's wall over rates x steps), and what
XLA's cost analysis of one step's program says it does: FLOP and bytes a
rate-step, and so the FLOP/s and the bandwidth achieved if every step's bytes
crossed the device's memory. Where the device's peaks are known, the floor is
the larger of FLOP over peak FLOP/s and the vmapped step's bytes over peak
bandwidth.

Run `python benchmarks/bench_population.py --size full --out benchmarks/results`
on an accelerator (`--size cpu` on a CPU, `--size smoke` to check that it runs);
it writes `population-DEVICE.md` and `.json`.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import itertools
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from pages import markdown

import lift

Rows = list[dict[str, Any]]

SIZES: dict[str, dict[str, Any]] = {
    # The program: width 512 x 4 layers, batch 256, 1 000 steps, 32 rates.
    "full": {"depth": 4, "width": 512, "batch": 256, "steps": 1000, "rates": 32,
             "chunks": (4, 8, 16), "repeats": 3},
    "cpu": {"depth": 4, "width": 128, "batch": 128, "steps": 100, "rates": 8,
            "chunks": (2, 4), "repeats": 2},
    "smoke": {"depth": 2, "width": 16, "batch": 8, "steps": 3, "rates": 4,
              "chunks": (2,), "repeats": 1},
}  # fmt: skip

# Peak dense FLOP/s (bf16, the MXU's) and memory bandwidth, by device kind.
PEAKS: dict[str, tuple[float, float]] = {
    "TPU v5 lite": (197e12, 819e9),
    "TPU v5e": (197e12, 819e9),
}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Problem:
    """Data and first parameters, made with NumPy (no compile)."""

    def __init__(self, depth: int, width: int, batch: int) -> None:
        rng = np.random.default_rng(0)
        dims = [width] * (depth + 1) + [1]
        self.params = [
            (
                jnp.asarray(rng.normal(size=(a, b)).astype(np.float32) / np.sqrt(a)),
                jnp.zeros(b, jnp.float32),
            )
            for a, b in itertools.pairwise(dims)
        ]
        x = rng.normal(size=(batch, width)).astype(np.float32)
        self.x = jnp.asarray(x)
        self.y = jnp.asarray(np.tanh(x[:, :1] - x[:, 1:2]))


def loss_fn(params: Any, x: jax.Array, y: jax.Array) -> jax.Array:
    *hidden, (w, b) = params
    h = x
    for wi, bi in hidden:
        h = jnp.tanh(h @ wi + bi)
    return jnp.mean((h @ w + b - y) ** 2)


def step(opt: Any, carry: Any, x: Any, y: Any) -> tuple[Any, jax.Array]:
    params, state = carry
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    updates, state = opt.update(grads, state, params)
    return (optax.apply_updates(params, updates), state), loss


def train(opt: Any, params: Any, x: Any, y: Any, steps: int) -> jax.Array:
    """`steps` steps in one `lax.scan`; the last loss."""
    carry = (params, opt.init(params))
    _, losses = jax.lax.scan(lambda c, _: step(opt, c, x, y), carry, None, steps)
    return losses[-1]


def adamw(lr: Any) -> Any:
    return lift.lift(optax.adamw(lr))


# adamw's other hyperparameters, kept static when only the rate is swept.
NOT_SWEPT = ("b1", "b2", "eps", "eps_root", "weight_decay")


def ways(p: Problem, steps: int, chunks: tuple[int, ...]) -> dict[str, Any]:
    """Each way: (the jitted function, its arguments given the rates, and how
    many calls a sweep makes: 'each' rate, or 'once')."""
    x, y, params = p.x, p.y, p.params

    def one(opt: Any, params: Any, x: Any, y: Any) -> jax.Array:
        return train(opt, params, x, y, steps)

    def one_by_hand(lr: Any, params: Any, x: Any, y: Any) -> jax.Array:
        return train(optax.adamw(lr), params, x, y, steps)

    def vmapped(lrs: Any, params: Any, x: Any, y: Any) -> jax.Array:
        return jax.vmap(lambda lr: train(adamw(lr), params, x, y, steps))(lrs)

    def inside(lrs: Any, params: Any, x: Any, y: Any) -> jax.Array:
        opts = jax.vmap(adamw)(lrs)
        stacked = jax.tree.map(
            lambda a: jnp.broadcast_to(a, (len(lrs), *a.shape)), params
        )
        states = jax.vmap(lambda o, q: o.init(q))(opts, stacked)

        def body(carry: Any, _: None) -> Any:
            return jax.vmap(lambda o, c: step(o, c, x, y))(opts, carry)

        _, losses = jax.lax.scan(body, (stacked, states), None, steps)
        return losses[-1]

    def chunked(k: int) -> Callable[..., jax.Array]:
        def fn(lrs: Any, params: Any, x: Any, y: Any) -> jax.Array:
            return jax.lax.map(
                lambda lr: train(adamw(lr), params, x, y, steps), lrs, batch_size=k
            )

        return fn

    def donated(opts: Any, stacked: Any, states: Any, x: Any, y: Any) -> Any:
        def run(o: Any, q: Any, s: Any) -> Any:
            carry, losses = jax.lax.scan(
                lambda c, _: step(o, c, x, y), (q, s), None, steps
            )
            return carry, losses[-1]

        return jax.vmap(run)(opts, stacked, states)

    def by_hand(lrs: Any, params: Any, x: Any, y: Any) -> jax.Array:
        return jax.vmap(lambda lr: train(optax.adamw(lr), params, x, y, steps))(lrs)

    def stacked_args(lrs: Any) -> tuple[Any, ...]:
        opts = lift.stack([adamw(float(lr)) for lr in lrs])
        stacked = jax.tree.map(lambda a: jnp.stack([a] * len(lrs)), params)
        states = jax.vmap(lambda o, q: o.init(q))(opts, stacked)
        return opts, stacked, states, x, y

    table: dict[str, Any] = {
        "one rate's program, once per rate": (
            jax.jit(one),
            lambda lr: (adamw(float(lr)), params, x, y),
            "each",
        ),
        "the same, only the rate dynamic (static=)": (
            jax.jit(one),
            lambda lr: (
                lift.lift(optax.adamw(float(lr)), static=NOT_SWEPT),
                params,
                x,
                y,
            ),
            "each",
        ),
        "the same by hand (optax.adamw(traced lr))": (
            jax.jit(one_by_hand),
            lambda lr: (lr, params, x, y),
            "each",
        ),
        "vmap outside the scan": (
            jax.jit(vmapped),
            lambda lrs: (lrs, params, x, y),
            "once",
        ),
        "rates axis inside the scan": (
            jax.jit(inside),
            lambda lrs: (lrs, params, x, y),
            "once",
        ),
    }
    for k in chunks:
        table[f"chunks of {k} rates (lax.map batch_size)"] = (
            jax.jit(chunked(k)),
            lambda lrs: (lrs, params, x, y),
            "once",
        )
    table["one rate at a time in one program (lax.map)"] = (
        jax.jit(chunked(1)),
        lambda lrs: (lrs, params, x, y),
        "once",
    )
    table["vmap, stacked state donated (lift.stack)"] = (
        jax.jit(donated, donate_argnums=(1, 2)),
        stacked_args,
        "once",
    )
    table["vmap by hand, no lift (optax.adamw(traced lr))"] = (
        jax.jit(by_hand),
        lambda lrs: (lrs, params, x, y),
        "once",
    )
    return table  # fmt: skip


def _cost(compiled: Any) -> tuple[float, float]:
    """FLOP and bytes accessed, as XLA's cost analysis counts them."""
    cost = compiled.cost_analysis()
    if isinstance(cost, list | tuple):  # older JAX: one dict per program
        cost = cost[0] if cost else {}
    cost = cost or {}
    return float(cost.get("flops", 0.0)), float(cost.get("bytes accessed", 0.0))


def step_costs(
    p: Problem, n: int, chunks: tuple[int, ...]
) -> dict[int, tuple[float, float]]:
    """FLOP and bytes of one step's program for k rates at once, by k."""
    out = {}
    for k in sorted({1, n, *chunks}):
        lrs = jnp.linspace(1e-4, 1e-2, k)

        def one_step(lrs: Any, params: Any, x: Any, y: Any) -> Any:
            def go(lr: Any) -> Any:
                opt = adamw(lr)
                return step(opt, (params, opt.init(params)), x, y)

            return jax.vmap(go)(lrs)

        # The state is an argument: what one step of the scan reads and writes.
        opts = jax.vmap(adamw)(lrs)
        stacked = jax.tree.map(lambda a: jnp.stack([a] * k), p.params)
        states = jax.vmap(lambda o, q: o.init(q))(opts, stacked)
        compiled = (
            jax.jit(jax.vmap(lambda o, c: step(o, c, p.x, p.y)))
            .lower(opts, (stacked, states))
            .compile()
        )
        flops, nbytes = _cost(compiled)
        out[k] = (flops / k, nbytes / k)
        del one_step
    return out  # fmt: skip


def measure(size: str) -> dict[str, Any]:
    s = SIZES[size]
    n, steps = s["rates"], s["steps"]
    p = Problem(s["depth"], s["width"], s["batch"])
    lrs = jnp.asarray(np.geomspace(1e-4, 1e-2, n), jnp.float32)
    device = jax.devices()[0]
    rows = []
    for name, (fn, args_of, calls) in ways(p, steps, s["chunks"]).items():
        log(f"{name} ...")
        first = args_of(lrs[0]) if calls == "each" else args_of(lrs)
        start = time.perf_counter()
        compiled = fn.lower(*first).compile()
        compile_s = time.perf_counter() - start
        program_flops, program_bytes = _cost(compiled)
        walls = []
        for _ in range(s["repeats"]):
            # Arguments made before the clock starts (donation consumes them).
            args = [args_of(lr) for lr in lrs] if calls == "each" else [args_of(lrs)]
            jax.block_until_ready(args)
            start = time.perf_counter()
            outs = [compiled(*a) for a in args]
            jax.block_until_ready(outs)
            walls.append(time.perf_counter() - start)
        losses = np.concatenate(
            [np.ravel(np.asarray(o[-1] if isinstance(o, tuple) else o)) for o in outs]
        )
        rows.append({
            "way": name, "compile_s": compile_s, "wall_s": min(walls),
            "walls_s": walls, "program_flops": program_flops,
            "program_bytes": program_bytes, "losses": losses.tolist(),
        })  # fmt: skip
    costs = step_costs(p, n, s["chunks"])
    state_bytes = 3 * sum(a.size * a.dtype.itemsize for a in jax.tree.leaves(p.params))
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "jax": jax.__version__,
        "jaxlib": importlib.metadata.version("jaxlib"),
        "optax": importlib.metadata.version("optax"),
        "lift": lift.__version__,
        "python": platform.python_version(),
        "platform": device.platform,
        "device_kind": device.device_kind,
        "host": platform.machine(),
        "cpus": os.cpu_count(),
        "load": os.getloadavg()[0],
        "size": size,
        "sizes": {k: list(v) if isinstance(v, tuple) else v for k, v in s.items()},
        "state_bytes_a_rate": state_bytes,
        "step_costs": {str(k): list(v) for k, v in costs.items()},
        "rows": rows,
    }


def _fmt(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.2f} µs"


def _rate(x: float, unit: str) -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M")):
        if x >= scale:
            return f"{x / scale:.1f} {prefix}{unit}"
    return f"{x:.0f} {unit}"


def _rate_k(way: str, n: int) -> int:
    """How many rates one step of the way's program trains at once."""
    if way.startswith(("one rate", "the same")):
        return 1
    if way.startswith("chunks of "):
        return int(way.split()[2])
    return n


def tables(r: dict[str, Any]) -> dict[str, Rows]:
    s = r["sizes"]
    n, steps = s["rates"], s["steps"]
    costs = {int(k): v for k, v in r["step_costs"].items()}
    peaks = PEAKS.get(r["device_kind"])
    base = r["rows"][0]["wall_s"]
    out: Rows = []
    for row in r["rows"]:
        per = row["wall_s"] / (n * steps)
        flops, nbytes = costs.get(_rate_k(row["way"], n), costs[1])
        entry = {
            "way": row["way"],
            "compile": _fmt(row["compile_s"]),
            "sweep": _fmt(row["wall_s"]),
            "a rate-step": _fmt(per),
            "vs one rate's program": f"{row['wall_s'] / base:.2f}",
            "FLOP/s": _rate(flops / per, "FLOP/s"),
            "XLA's bytes accessed/s": _rate(nbytes / per, "B/s"),
        }
        if peaks:
            entry["vs FLOP floor"] = f"{per / (flops / peaks[0]):.1f}"
        out.append(entry)
    model = f"MLP {s['depth']} x {s['width']}, batch {s['batch']}, adamw"
    return {f"Population: {n} rates x {steps:,} steps in one lax.scan, {model}": out}


def report(r: dict[str, Any]) -> str:
    costs = {int(k): v for k, v in r["step_costs"].items()}
    n = r["sizes"]["rates"]
    flops1, bytes1 = costs[1]
    state = r["state_bytes_a_rate"]
    parts = [
        f"Measured on {r['device_kind']} ({r['platform']}), {r['date']}: JAX "
        f"{r['jax']}, optax {r['optax']}, lift {r['lift']}, Python {r['python']}; "
        f"`--size {r['size']}`; host load average {r['load']:.1f}. Each way is one "
        f"compile; its sweep is the best of {r['sizes']['repeats']} runs. XLA's cost "
        f"analysis of one step: {flops1 / 1e9:.2f} GFLOP and {bytes1 / 1e6:.0f} MB "
        f"accessed a rate-step (operands of every fused op, on chip or not). One "
        f"rate's params and adamw state: {state / 1e6:.1f} MB; {n} rates': "
        f"{n * state / 1e6:.0f} MB.",
        "",
    ]
    peaks = PEAKS.get(r["device_kind"])
    if peaks:
        stream = 2 * state / peaks[1]
        parts += [
            f"The device's peaks: {peaks[0] / 1e12:.0f} TFLOP/s, {peaks[1] / 1e9:.0f} "
            f"GB/s. The FLOP floor is {flops1 / peaks[0] * 1e6:.1f} µs a rate-step. "
            "A population whose state cannot stay on chip reads and writes it "
            f"every step: at least {stream * 1e6:.1f} µs a rate-step. XLA's bytes "
            "accessed a second exceed the memory's bandwidth: most never cross it.",
            "",
        ]
    for title, rows in tables(r).items():
        parts += [f"### {title}", "", markdown(rows), ""]
    return "\n".join(parts)


def main(quick: bool = False, smoke: bool = False) -> dict[str, Rows]:
    """For `benchmarks/run.py`: the `cpu` size (`smoke` when asked)."""
    return tables(measure("smoke" if smoke or quick else "cpu"))


def cli(
    doc: str = __doc__,
    stem: str = "population",
    measure: Callable[[str], dict[str, Any]] = measure,
    report: Callable[[dict[str, Any]], str] = report,
    size: str = "cpu",
) -> None:
    """Measure at `--size`, print the page, and write it to `--out` as `stem`."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default=size)
    parser.add_argument("--out", type=Path, help="directory for NAME.md and NAME.json")
    args = parser.parse_args()
    results = measure(args.size)
    text = report(results)
    print(text)
    if args.out:
        write(args.out, stem, results, text)


def write(out: Path, stem: str, results: dict[str, Any], text: str) -> None:
    """`out/STEM-DEVICE.md` (`text`) and `.json` (`results`)."""
    name = stem + "-" + "-".join(results["device_kind"].lower().split())
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.md").write_text(text)
    (out / f"{name}.json").write_text(json.dumps(results, indent=1) + "\n")
    log(f"wrote {out / name}.md and .json")


if __name__ == "__main__":
    cli()
