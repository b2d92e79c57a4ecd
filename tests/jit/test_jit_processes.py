"""A sweep run as separate processes shares JAX's persistent compilation cache.

Each process is one point of a learning-rate sweep, as on a cluster: it builds
`make_step(lr)` and calls it once, with the persistent cache in a directory that
all the processes share and its thresholds lowered so that small programs are
cached. JAX reports cache hits and misses as `jax.monitoring` events, counted in
each process around the step's first call only. Each process runs the point
with `lift.jit` and with `jax.jit` (their programs differ: `jax.jit`'s holds
`lr`), so one sweep of three processes serves both tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import child_path

import lift

ROOT = Path(lift.__file__).resolve().parent.parent

SWEEP_POINT = """
import json, sys

import jax
import numpy as np

lr, cache_dir = float(sys.argv[1]), sys.argv[2]
jax.config.update("jax_compilation_cache_dir", cache_dir)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)

import lift


def make_step(jit, lr):
    @jit
    def step(w, g):
        return w - lr * g

    return step


# NumPy inputs: nothing is compiled before the step.
w = np.ones(4, np.float32)
g = np.full(4, 2.0, np.float32)
events = []
jax.monitoring.register_event_listener(lambda event, **kwargs: events.append(event))
results = {}
for mode, jit in (("lift", lift.jit), ("jax", jax.jit)):
    events.clear()
    out = make_step(jit, lr)(w, g)
    results[mode] = {
        "hits": events.count("/jax/compilation_cache/cache_hits"),
        "misses": events.count("/jax/compilation_cache/cache_misses"),
        "out": float(out[0]),
    }
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Any]]:
    """Each mode's (misses, hits) in each of three processes, in order."""
    cache_dir = tmp_path_factory.mktemp("sweep") / "cache"
    # Without lift's fast-path check (`LIFT_VERIFY`), as a user runs it.
    env = {k: v for k, v in os.environ.items() if k != "LIFT_VERIFY"}
    env |= {"PYTHONPATH": child_path(), "JAX_PLATFORMS": "cpu"}
    counts: dict[str, list[Any]] = {"lift": [], "jax": []}
    for lr in (0.1, 0.2, 0.3):
        proc = subprocess.run(
            [sys.executable, "-c", SWEEP_POINT, str(lr), str(cache_dir)],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        results = json.loads(proc.stdout.strip().splitlines()[-1])
        for mode, result in results.items():
            assert result["out"] == pytest.approx(1.0 - 2.0 * lr)
            counts[mode].append((result["misses"], result["hits"]))
    return counts


def test_lift_jit_sweep_misses_only_in_the_first_process(
    sweep: dict[str, list[Any]],
) -> None:
    assert sweep["lift"] == [(1, 0), (0, 1), (0, 1)]


def test_plain_jit_sweep_misses_in_every_process(sweep: dict[str, list[Any]]) -> None:
    assert sweep["jax"] == [(1, 0), (1, 0), (1, 0)]
