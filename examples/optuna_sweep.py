"""A learning-rate search with Optuna, in one process or as worker processes.

Optuna's `study.optimize` calls `objective(trial)` once per trial. The
objective builds `optax.adam(lr)` from `trial.suggest_float` and trains a small
MLP with a jitted step closing over the optimizer:

- with `jax.jit` the rate is a constant of the compiled program: every trial
  compiles;
- with `lift.jit` it is an argument of the program: the study compiles once;
- with `lift.lift` the optimizer is a pytree argument of one jitted step: the
  same.

As processes, workers share one study (a JournalStorage file) and JAX's
persistent compilation cache (a directory): with lift, the first trial's
compile is the sweep's only cache miss; with `jax.jit`, every trial misses.

Run `python examples/optuna_sweep.py` (`--trials 8`, `--jit lift.jit`), or
`--workers 2` for worker processes (`--storage`, `--cache-dir` to keep them).
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

import optuna

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sweep_trial import COUNTS, WAYS, train, use_cache

ROOT = Path(__file__).resolve().parent.parent


def objective(way: str, steps: int = 20) -> Any:
    """Optuna's objective: train with a suggested rate, return the last loss.

    What the training steps compiled (not `opt.init`'s eager ops) is kept
    with the trial: `trial.user_attrs`."""

    def run(trial: optuna.Trial) -> float:
        lr = trial.suggest_float("lr", 1e-3, 1e-1, log=True)
        loss, counts = train(way, lr, steps)
        for key, value in counts.items():
            trial.set_user_attr(key, value)
        return loss

    return run


# -- worker processes ---------------------------------------------------------


def storage(path: str) -> optuna.storages.BaseStorage:
    """A study's storage that processes share: a journal file (one machine)."""
    backend = optuna.storages.journal.JournalFileBackend(path)
    return optuna.storages.JournalStorage(backend)


def worker(way: str, path: str, cache_dir: str, trials: int, seed: int) -> None:
    """One worker process: its `trials` trials of the study."""
    use_cache(cache_dir)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(
        study_name=way,
        storage=storage(path),
        sampler=optuna.samplers.RandomSampler(seed=seed),
    )
    study.optimize(objective(way), n_trials=trials)


def sweep(
    way: str, trials: int, workers: int, path: str, cache_dir: str
) -> dict[str, Any]:
    """`trials` trials run by `workers` processes sharing one study and cache.

    The first worker starts alone; the others once a trial is complete, as
    a sweep does whose first trial warms the cache. Returns the trials' sums
    of compiles, cache hits and misses, and the wall time."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name=way, storage=storage(path))
    # As users run it: without lift's fast-path check or JAX's leak checker.
    drop = ("LIFT_VERIFY", "JAX_CHECK_TRACER_LEAKS")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env |= {"PYTHONPATH": os.pathsep.join(paths)}
    start = time.perf_counter()
    procs = []
    for i in range(workers):
        share = trials // workers + (i < trials % workers)
        command = [sys.executable, __file__, "--child", way, path, cache_dir]
        command += [str(share), str(i)]
        procs.append(subprocess.Popen(command, env=env, stderr=subprocess.PIPE))
        while i == 0 and workers > 1 and not _complete(study):
            if procs[0].poll() is not None:
                break
            time.sleep(0.05)
    for proc in procs:
        _, err = proc.communicate()
        if proc.returncode:
            raise RuntimeError(f"a worker failed:\n{err.decode()[-3000:]}")
    wall = time.perf_counter() - start
    done = _complete(study)
    return {
        "way": way,
        "workers": workers,
        "trials": len(done),
        **{k: sum(t.user_attrs[k] for t in done) for k in COUNTS},
        "wall_s": wall,
        "best": study.best_value,
        "values": {t.params["lr"]: t.value for t in done},
    }


def _complete(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--workers", type=int, default=0, help="0: in this process")
    parser.add_argument("--jit", choices=WAYS, action="append", help="default: all")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        way, path, cache_dir, trials, seed = args.child
        worker(way, path, cache_dir, int(trials), int(seed))
        return
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for way in args.jit or WAYS:
        if args.workers:
            with tempfile.TemporaryDirectory() as tmp:
                path, cache = os.path.join(tmp, "study.log"), os.path.join(tmp, "jax")
                row = sweep(way, args.trials, args.workers, path, cache)
            row.pop("values")
            print(json.dumps(row))
            continue
        sampler = optuna.samplers.RandomSampler(seed=0)
        study = optuna.create_study(sampler=sampler)
        study.optimize(objective(way), n_trials=args.trials)
        compiles = sum(t.user_attrs["compiles"] for t in study.trials)
        print(f"{way}: {compiles} compiles for {args.trials} trials")


if __name__ == "__main__":
    main()
