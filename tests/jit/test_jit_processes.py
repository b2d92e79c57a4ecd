"""A sweep run as separate processes shares JAX's persistent compilation cache.

Each process is one point of a learning-rate sweep, as on a cluster: it builds
`make_step(lr)` and calls it once, with the persistent cache in a directory that
all the processes share and its thresholds lowered so that small programs are
cached. JAX reports cache hits and misses as `jax.monitoring` events, counted in
each process around the step's first call only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import lift

ROOT = Path(lift.__file__).resolve().parent.parent

SWEEP_POINT = """
import json, sys

import jax
import numpy as np

mode, lr, cache_dir = sys.argv[1], float(sys.argv[2]), sys.argv[3]
jax.config.update("jax_compilation_cache_dir", cache_dir)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)

import lift

jit = lift.jit if mode == "lift" else jax.jit


def make_step(lr):
    @jit
    def step(w, g):
        return w - lr * g

    return step


# NumPy inputs: nothing is compiled before the step.
w = np.ones(4, np.float32)
g = np.full(4, 2.0, np.float32)
events = []
jax.monitoring.register_event_listener(lambda event, **kwargs: events.append(event))
out = make_step(lr)(w, g)
print(json.dumps({
    "hits": events.count("/jax/compilation_cache/cache_hits"),
    "misses": events.count("/jax/compilation_cache/cache_misses"),
    "out": float(out[0]),
}))
"""


def run_sweep(mode: str, cache_dir: Path) -> list[dict[str, float]]:
    # Without lift's fast-path checks (`LIFT_VERIFY`), as a user runs it: their
    # second float conversion compiles a program of its own, one more miss.
    env = {k: v for k, v in os.environ.items() if k != "LIFT_VERIFY"}
    env |= {"PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
    results: list[dict[str, float]] = []
    for lr in (0.1, 0.2, 0.3):
        proc = subprocess.run(
            [sys.executable, "-c", SWEEP_POINT, mode, str(lr), str(cache_dir)],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        assert result["out"] == pytest.approx(1.0 - 2.0 * lr)
        results.append(result)
    return results


def test_lift_jit_sweep_misses_only_in_the_first_process(tmp_path: Path) -> None:
    results = run_sweep("lift", tmp_path / "cache")
    assert [(r["misses"], r["hits"]) for r in results] == [(1, 0), (0, 1), (0, 1)]


def test_plain_jit_sweep_misses_in_every_process(tmp_path: Path) -> None:
    results = run_sweep("jax", tmp_path / "cache")
    assert [(r["misses"], r["hits"]) for r in results] == [(1, 0), (1, 0), (1, 0)]
