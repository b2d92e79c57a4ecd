"""The figures of the performance goals for this checkout and another version of lift.

    python benchmarks/compare.py --baseline DIR [--rounds 3]

`DIR` holds another version's `lift/` package (for example `git archive v0.1.0
lift | tar -x -C DIR`). Each round runs the same measurements in a fresh process
for the baseline and for this checkout, one after the other, so that a busy
machine slows both alike; the tables give the median of the rounds:

- lifting a fresh `chain(clip_by_global_norm(1.0), adamw(1e-3))` against
  equinox's `closure_to_pytree`; lifting a fresh closure of 10 000 floats;
- the first `tree_flatten` of a freshly lifted chain whose 8 Python floats are
  new (converted to arrays then), per float;
- `tree_flatten` of the lifted optimizer, and dispatch of a trivial `jax.jit`
  function taking it, against a flat list of its leaves;
- the steady step against plain optax;
- a `lift.jit` closure's cached call against `jax.jit` with its capture an
  explicit array argument, and the closure made anew on every call against
  its cached call;
- `lift.checked(jax.jit)(f)` against `jax.jit(f)`, cached calls.

`--json FILE` also writes every round's figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

_PROBE = """
import json, statistics, sys, time
sys.path.insert(0, {benchmarks!r})
import jax, jax.numpy as jnp
import bench_optax as b
import bench_jit as bj
import lift
b.bench_lift_cost(5, 200)
b.bench_flatten(2001, 100)
b.bench_dispatch(2001, 10)
b.bench_new_floats(5, 50)
b.bench_wide_walk(10_000, 5)
b.bench_steady_step(301, 1)
bj.bench_small(301, 50)
bj.bench_recreated(101, 20)
f = jax.jit(lambda x: x * 2.0)
g = lift.checked(jax.jit)(lambda x: x * 2.0)
x = jnp.ones(8)
checked = b._samples({{"jit": lambda: f(x), "checked": lambda: g(x)}}, 1001, 20)
raw, rj = b.RAW, bj.RAW
print(json.dumps({{
    "full walk": raw["lift cost", "lift.lift"],
    "closure_to_pytree": raw["lift cost", "closure_to_pytree"],
    "wide walk": raw["wide walk", "lift"],
    "wide closure_to_pytree": raw["wide walk", "closure_to_pytree"],
    "new float": raw["new floats", "per float"],
    "tree_flatten": raw["flatten", "lift"],
    "tree_flatten min": raw["flatten min", "lift"],
    "flat list flatten": raw["flatten", "flat leaf list"],
    "dispatch": raw["dispatch", "lift.lift"],
    "flat list dispatch": raw["dispatch", "flat leaf list"],
    "step ratio": raw["step ratio", "lift.lift"],
    "step ratio explicit": raw["step ratio", "by hand: arrays as arguments"],
    "jit cached": rj["small", "lift"],
    "jit explicit": rj["small", "array"],
    "jit wrapper": rj["small", "wrapper"],
    "jit anew": rj["recreated", "lift"],
    "jit anew cached": rj["recreated", "cached"],
    "checked": statistics.median(checked["checked"]),
    "checked jit": statistics.median(checked["jit"]),
}}))
"""


def _measure(lift_dir: Path) -> dict[str, float]:
    # `lift_dir` first; what PYTHONPATH already names after it (a machine
    # whose JAX is found through it).
    path = [
        str(lift_dir),
        *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep)),
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE.format(benchmarks=str(HERE))],
        env=env,
        check=False,
        capture_output=True,
        text=True,
    )
    if out.returncode:
        raise SystemExit(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.2f} µs" if seconds < 1e-5 else f"{seconds * 1e6:.1f} µs"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


_RATIOS = [
    ("closure_to_pytree", "full walk"),
    ("wide closure_to_pytree", "wide walk"),
    ("jit cached", "jit explicit"),
    ("jit wrapper", "jit explicit"),
    ("jit anew", "jit anew cached"),
    ("checked", "checked jit"),
    ("dispatch", "flat list dispatch"),
]

# (figure, goal, how it is computed from the medians, whether met)
_GOALS: list[tuple[str, str, Any, Any]] = [
    (
        "first lift (full walk) of a fresh chain(clip, adamw), vs closure_to_pytree",
        "≥ 3x faster",
        lambda f: f"{_us(f['full walk'])}, {f['closure_to_pytree/full walk']:.2f}x",
        lambda f: f["closure_to_pytree/full walk"] >= 3,
    ),
    (
        "full walk of 10 000 captured floats, vs closure_to_pytree",
        "faster",
        lambda f: (
            f"{_ms(f['wide walk'])} vs {_ms(f['wide closure_to_pytree'])}, "
            f"{f['wide closure_to_pytree/wide walk']:.2f}x"
        ),
        lambda f: f["wide closure_to_pytree/wide walk"] > 1,
    ),
    (
        "first tree_flatten of new Python floats (8-float chain), per float",
        "≤ 5 µs",
        lambda f: _us(f["new float"]),
        lambda f: f["new float"] <= 5e-6,
    ),
    (
        "lift.jit cached call, vs jax.jit with the capture an explicit array",
        "≤ 1.05x",
        lambda f: (
            f"{_us(f['jit cached'])}, {f['jit cached/jit explicit']:.2f}x (a "
            f"Python function forwarding: {f['jit wrapper/jit explicit']:.2f}x)"
        ),
        lambda f: f["jit cached/jit explicit"] <= 1.05,
    ),
    (
        "lift.jit, closure made anew each call, vs its cached call",
        "≤ 1.5x",
        lambda f: f"{_us(f['jit anew'])}, {f['jit anew/jit anew cached']:.2f}x",
        lambda f: f["jit anew/jit anew cached"] <= 1.5,
    ),
    (
        "lift.checked(jax.jit) cached call, vs jax.jit",
        "≤ 1.15x",
        lambda f: f"{_us(f['checked'])}, {f['checked/checked jit']:.2f}x",
        lambda f: f["checked/checked jit"] <= 1.15,
    ),
    (
        "dispatch with the lifted chain, vs its flat leaf list",
        "≤ 1.05x",
        lambda f: f"{f['dispatch/flat list dispatch']:.2f}x",
        lambda f: f["dispatch/flat list dispatch"] <= 1.05,
    ),
    (
        "tree_flatten of the lifted chain (flat leaf list alongside)",
        "≤ 1.0 µs",
        lambda f: (
            f"{_us(f['tree_flatten'])} (fastest sample "
            f"{_us(f['tree_flatten min'])}; flat list {_us(f['flat list flatten'])})"
        ),
        lambda f: f["tree_flatten"] <= 1e-6,
    ),
    (
        "steady step, vs plain optax",
        "≤ 1.03x",
        lambda f: (
            f"{f['step ratio']:.2f}x (the hyperparameters as explicit array "
            f"arguments: {f['step ratio explicit']:.2f}x)"
        ),
        lambda f: f["step ratio"] <= 1.03,
    ),
]


def table(runs: dict[str, list[dict[str, float]]]) -> str:
    """The goals table: one column per version (medians of its rounds)."""
    names = list(runs)
    # Ratios are taken within each round (one process, its candidates timed in
    # turns), then the median over rounds: load that comes and goes between
    # processes cancels out.
    medians = {
        name: {k: statistics.median(f[k] for f in rounds) for k in rounds[0]}
        | {
            f"{a}/{b}": statistics.median(f[a] / f[b] for f in rounds)
            for a, b in _RATIOS
        }
        for name, rounds in runs.items()
    }
    lines = [
        "| figure | goal | " + " | ".join(names) + " | met |",
        "|---|---|" + "---|" * len(names) + "---|",
    ]
    last = medians[names[-1]]
    for figure, goal, show, met in _GOALS:
        cells = " | ".join(show(medians[n]) for n in names)
        lines.append(
            f"| {figure} | {goal} | {cells} | {'yes' if met(last) else '**no**'} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"baseline": [], "this checkout": []}
    load: list[float] = []
    for _ in range(args.rounds):
        load.append(os.getloadavg()[0])
        runs["baseline"].append(_measure(args.baseline))
        runs["this checkout"].append(_measure(ROOT))
    load.append(os.getloadavg()[0])
    print(table(runs))
    print(
        f"\n(medians of {args.rounds} rounds; load average "
        f"{min(load):.1f} to {max(load):.1f})"
    )
    if args.json is not None:
        args.json.write_text(json.dumps({"load": load, **runs}, indent=1))


if __name__ == "__main__":
    main()
