"""The hot paths of this checkout against another version of lift, side by side.

    python benchmarks/compare.py --baseline DIR [--rounds 3]

`DIR` holds another version's `lift/` package (for example `git archive v0.1.0
lift | tar -x -C DIR`). Each round runs the same measurements in a fresh process
for the baseline and for this checkout, one after the other, so that a busy
machine slows both alike; the table gives the median of the rounds:

- lifting a fresh `chain(clip_by_global_norm(1.0), adamw(1e-3))`, replayed (a
  structure seen before) and by the full walk, against equinox's
  `closure_to_pytree`;
- `tree_flatten` of the lifted optimizer, against a flat list of its leaves;
- dispatch of a trivial `jax.jit` function taking it, against the flat list.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

_PROBE = """
import json, sys
sys.path.insert(0, {benchmarks!r})
import bench_optax as b
import lift
b.bench_lift_cost(5, 200)
b.bench_flatten(2001, 100)
b.bench_dispatch(2001, 10)
raw = b.RAW
print(json.dumps({{
    "replayed": raw["lift cost", "lift (a structure seen before: replayed)"],
    "full walk": raw["lift cost", "lift, full walk (before the replay is compiled)"],
    "closure_to_pytree": raw["lift cost", "closure_to_pytree"],
    "tree_flatten": raw["flatten", "lift"],
    "flat list flatten": raw["flatten", "flat leaf list"],
    "dispatch": raw["dispatch", "lift (jax.jit)"],
    "flat list dispatch": raw["dispatch", "flat leaf list (jax.jit)"],
}}))
"""


def _measure(lift_dir: Path) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(lift_dir)}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE.format(benchmarks=str(HERE))],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _row(name: str, figures: dict[str, float]) -> str:
    def us(key: str) -> str:
        return f"{figures[key] * 1e6:.1f} µs"

    return (
        f"| {name} | {us('replayed')} | "
        f"{figures['closure_to_pytree'] / figures['replayed']:.1f}x | {us('full walk')} | "
        f"{figures['closure_to_pytree'] / figures['full walk']:.2f}x | "
        f"{figures['tree_flatten'] * 1e6:.2f} µs | "
        f"{figures['dispatch'] / figures['flat list dispatch']:.2f}x |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"baseline": [], "this checkout": []}
    for _ in range(args.rounds):
        runs["baseline"].append(_measure(args.baseline))
        runs["this checkout"].append(_measure(ROOT))
    print(
        "| lift | replayed lift | vs closure_to_pytree | full walk | vs "
        "closure_to_pytree | tree_flatten | dispatch vs flat leaves |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, figures in runs.items():
        median = {k: statistics.median(f[k] for f in figures) for k in figures[0]}
        print(_row(name, median))
    print(f"\n(medians of {args.rounds} rounds; load average {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
