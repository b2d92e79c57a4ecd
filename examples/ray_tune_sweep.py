"""A learning-rate search with Ray Tune: trials as processes sharing JAX's cache.

The example starts a local Ray runtime (`ray.init()`); on a cluster the same
code runs with `ray.init(address="auto")`. Each trial runs in a Ray worker
process, builds `optax.adam(lr)` and trains with a jitted step closing over it
(`examples/sweep_trial.py`). Every process reads and writes
one JAX persistent compilation cache directory (on a cluster: a directory on
shared storage). The driver warms the cache with one compile before the
trials start:

- with `jax.jit` every trial's program holds its own rate: every trial misses;
- with `lift.jit` or `lift.lift` every trial loads the driver's program.

Run `python examples/ray_tune_sweep.py` (`--trials 8`, `--concurrent 2`); it
needs the `ray` extra (`pip install "jax-lift[ray]"`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import ray
from ray import tune

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WAYS = ("jax.jit", "lift.jit", "lift.lift")


def trainable(config: dict[str, Any]) -> None:
    """One trial, in a Ray worker process: train, report loss and compiles."""
    sys.path[:0] = [str(HERE), str(ROOT)]
    import sweep_trial as trial

    trial.use_cache(config["cache_dir"])
    loss, counts = trial.train(config["way"], config["lr"])
    tune.report({"loss": loss, **counts, "pid": os.getpid()})


def run(way: str, trials: int, concurrent: int, cache_dir: str) -> dict[str, Any]:
    """A Tune sweep of `trials` rates, `concurrent` at a time; sums over trials."""
    sys.path[:0] = [str(HERE), str(ROOT)]
    import sweep_trial as trial

    start = time.perf_counter()
    trial.use_cache(cache_dir)
    _, warm = trial.train(way, 1e-2)  # the driver's compile, cached
    tuner = tune.Tuner(
        trainable,
        param_space={
            "lr": tune.loguniform(1e-3, 1e-1),
            "way": way,
            "cache_dir": cache_dir,
        },
        tune_config=tune.TuneConfig(
            num_samples=trials,
            max_concurrent_trials=concurrent,
            metric="loss",
            mode="min",
        ),
        run_config=tune.RunConfig(
            storage_path=os.path.join(cache_dir, "ray", way), verbose=0
        ),
    )
    results = tuner.fit()
    wall = time.perf_counter() - start
    frame = results.get_dataframe()
    return {
        "way": way,
        "trials": len(frame),
        "processes": int(frame["pid"].nunique()),
        "driver misses": warm["misses"],
        "trial misses": int(frame["misses"].sum()),
        "trial hits": int(frame["hits"].sum()),
        "wall_s": wall,
        "best": float(frame["loss"].min()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--concurrent", type=int, default=2)
    parser.add_argument("--jit", choices=WAYS, action="append", help="default: all")
    args = parser.parse_args()
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    ray.init(
        num_cpus=args.concurrent,
        include_dashboard=False,
        runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(paths)}},
    )
    # One cache for every way (their programs differ): JAX reads its
    # directory once, when it first compiles.
    try:
        with tempfile.TemporaryDirectory() as cache_dir:
            for way in args.jit or WAYS:
                print(json.dumps(run(way, args.trials, args.concurrent, cache_dir)))
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
