"""Sweep engines' trials as processes: Optuna workers and Ray Tune.

A learning-rate sweep (`examples/sweep_trial.py`: an MLP trained by a jitted
adam step closing over its rate) run the way sweep engines run it, side by
side in one run for `jax.jit`, `lift.jit` and `lift.lift`: Optuna worker
processes sharing one study (a JournalStorage file) and JAX's persistent
compilation cache, the second worker started once the first has finished a
trial; and, with the `ray` extra installed, Ray Tune's trials as Ray worker
processes on a local runtime, the driver warming the cache first. Counted over
all processes: trials, cache misses (compiles written to the cache) and hits,
and the sweep's wall time, process starts included.

Run `python benchmarks/bench_sweep_engines.py --out benchmarks/results`
(`--trials 8 --workers 2`); it writes `sweep-engines-PLATFORM.md` and `.json`.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import importlib.util
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
WAYS = ("jax.jit", "lift.jit", "lift.lift")

Rows = list[dict[str, Any]]


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def optuna_rows(trials: int, workers: int, ways: tuple[str, ...] = WAYS) -> Rows:
    sys.path.insert(0, str(EXAMPLES))
    import optuna_sweep

    rows = []
    for way in ways:
        with tempfile.TemporaryDirectory() as tmp:
            row = optuna_sweep.sweep(
                way, trials, workers, os.path.join(tmp, "study.log"), tmp + "/jax"
            )
        rows.append({
            "engine": f"Optuna, {workers} workers", "way": way,
            "trials": row["trials"], "processes": workers,
            "misses": row["misses"], "hits": row["hits"],
            "wall_s": row["wall_s"], "best": row["best"],
        })  # fmt: skip
    return rows


def ray_rows(trials: int, workers: int) -> Rows:
    if importlib.util.find_spec("ray") is None:
        return []
    env = {k: v for k, v in os.environ.items() if k != "LIFT_VERIFY"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "ray_tune_sweep.py"), "--trials", str(trials), "--concurrent", str(workers)],
        capture_output=True, text=True, env=env, timeout=1800, check=True,
    )  # fmt: skip
    rows = []
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            rows.append({
                "engine": f"Ray Tune, {workers} at a time", "way": row["way"],
                "trials": row["trials"], "processes": row["processes"] + 1,
                "misses": row["driver misses"] + row["trial misses"],
                "hits": row["trial hits"], "wall_s": row["wall_s"],
                "best": row["best"],
            })  # fmt: skip
    return rows


def measure(trials: int, workers: int) -> dict[str, Any]:
    load = [os.getloadavg()[0]]
    rows = optuna_rows(trials, workers)
    load.append(os.getloadavg()[0])
    rows += ray_rows(trials, workers)
    load.append(os.getloadavg()[0])
    import jax

    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "versions": {
            name: _version(name)
            for name in ("jax", "jaxlib", "optax", "optuna", "ray", "jax-lift")
        },
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
        f"{jax.devices()[0].platform}",
        "load": load,
        "trials": trials,
        "workers": workers,
        "rows": rows,
    }


def table(r: dict[str, Any]) -> Rows:
    return [
        {
            "engine": row["engine"],
            "way": row["way"],
            "trials": row["trials"],
            "processes": row["processes"],
            "cache misses": row["misses"],
            "cache hits": row["hits"],
            "wall": f"{row['wall_s']:.1f} s",
            "best loss": f"{row['best']:.4g}",
        }
        for row in r["rows"]
    ]


def report(r: dict[str, Any]) -> str:
    versions = ", ".join(f"{k} {v}" for k, v in r["versions"].items() if v)
    load = ", ".join(f"{x:.1f}" for x in r["load"])
    head = (
        f"Measured {r['date']} on {r['machine']} (1-minute load average before, "
        f"between and after: {load}); Python {r['python']}, {versions}. Misses "
        "and hits are summed over every process of a sweep (the Ray driver's "
        "warming compile included); walls include starting the processes."
    )
    rows = table(r)
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(str(row[k]) for k in keys) + " |" for row in rows]
    return head + "\n\n" + "\n".join(lines) + "\n"


def main(quick: bool = False, smoke: bool = False) -> dict[str, Rows]:
    """For `benchmarks/run.py`: Optuna's workers alone (Ray's start takes
    longer than the rest of a smoke run)."""
    trials = 2 if smoke else 8
    ways = WAYS[:2] if smoke else WAYS  # a smoke run: the slowest part, halved
    r = {"rows": optuna_rows(trials, 2, ways)}
    return {f"Optuna: {trials} trials, 2 worker processes, one cache": table(r)}


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, help="directory for NAME.md and NAME.json")
    args = parser.parse_args()
    results = measure(args.trials, args.workers)
    text = report(results)
    print(text)
    if args.out:
        import jax

        name = f"sweep-engines-{jax.devices()[0].platform}"
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"{name}.md").write_text(text)
        (args.out / f"{name}.json").write_text(json.dumps(results, indent=1) + "\n")
        print(f"wrote {args.out / name}.md and .json", file=sys.stderr)


if __name__ == "__main__":
    cli()
