"""Sweeps where users run them: the trials of a sweep engine.

Optuna's `study.optimize` in one process, and its worker processes sharing one
study and JAX's persistent compilation cache (`examples/optuna_sweep.py`); Ray
Tune's trials as Ray worker processes (`examples/ray_tune_sweep.py`, with the
`ray` extra). With lift the study compiles once; with `jax.jit` every trial
compiles. Compiles are counted with `jax.monitoring`'s events, around the
training steps of each trial.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import jax
import numpy as np
import optuna
import pytest
from helpers import child_path

ROOT = Path(__file__).resolve().parents[2]
TRIALS = 8


def _example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        name, ROOT / "examples" / f"{name}.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


sweep = _example("optuna_sweep")


def _study(way: str) -> optuna.Study:
    # The same rates for every way: Optuna's random sampler, seeded.
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    # As users run it: JAX's leak checking (which the suite turns on) bypasses
    # its caches, so eager ops would compile again in every trial.
    with jax.check_tracer_leaks(False):
        study.optimize(sweep.objective(way, steps=5), n_trials=TRIALS)
    return study


@pytest.fixture(scope="module")
def plain() -> optuna.Study:
    return _study("jax.jit")


@pytest.fixture(autouse=True)
def _quiet() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)


def test_plain_jit_compiles_in_every_trial(plain: optuna.Study) -> None:
    assert [t.user_attrs["compiles"] for t in plain.trials] == [1] * TRIALS


@pytest.mark.parametrize("way", ["lift.jit", "lift.lift"])
def test_optuna_study_compiles_once_and_each_trial_equals_plain_optax(
    way: str, plain: optuna.Study
) -> None:
    study = _study(way)
    compiles = [t.user_attrs["compiles"] for t in study.trials]
    assert compiles == [1] + [0] * (TRIALS - 1)
    for ours, theirs in zip(study.trials, plain.trials, strict=True):
        assert ours.params == theirs.params
        np.testing.assert_allclose(ours.value, theirs.value, rtol=1e-4, atol=1e-6)
    # Eight different rates: a sweep, not one value eight times.
    assert len({t.params["lr"] for t in study.trials}) == TRIALS


@pytest.fixture(scope="module")
def processes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Each way's sweep: 6 trials by 2 worker processes, one study, one cache."""
    rows = {}
    for way in ("jax.jit", "lift.jit"):
        tmp = tmp_path_factory.mktemp(way)
        # Without lift's fast-path check (`LIFT_VERIFY`), as users run it.
        rows[way] = sweep.sweep(way, 6, 2, str(tmp / "study.log"), str(tmp / "cache"))
    return rows


def test_optuna_workers_with_lift_miss_the_shared_cache_once(
    processes: dict[str, dict],
) -> None:
    row = processes["lift.jit"]
    # The second worker loads the first's program once; later trials in a
    # process reuse its own.
    assert (row["trials"], row["misses"], row["hits"]) == (6, 1, 1)


def test_optuna_workers_with_plain_jit_miss_in_every_trial(
    processes: dict[str, dict],
) -> None:
    row = processes["jax.jit"]
    assert (row["trials"], row["misses"], row["hits"]) == (6, 6, 0)
    # The same six rates, each trained to the same loss.
    lifted = processes["lift.jit"]["values"]
    assert sorted(lifted) == sorted(row["values"])
    for lr, value in row["values"].items():
        np.testing.assert_allclose(lifted[lr], value, rtol=1e-4, atol=1e-6)


def test_ray_tune_trials_load_the_drivers_program() -> None:
    pytest.importorskip(
        "ray", reason='Ray Tune is an optional extra: pip install "jax-lift[ray]"'
    )
    env = {k: v for k, v in os.environ.items() if k != "LIFT_VERIFY"}
    env["PYTHONPATH"] = child_path()
    env.pop("JAX_CHECK_TRACER_LEAKS", None)
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "ray_tune_sweep.py"),
            "--trials",
            "2",
            "--concurrent",
            "2",
            "--jit",
            "lift.jit",
            "--jit",
            "jax.jit",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    rows = {
        row["way"]: row
        for row in map(json.loads, re.findall(r"^\{.*\}$", done.stdout, re.MULTILINE))
    }
    lifted, plain = rows["lift.jit"], rows["jax.jit"]
    assert lifted["processes"] >= 2
    assert (lifted["trials"], lifted["trial misses"], lifted["trial hits"]) == (2, 0, 2)
    assert (plain["trials"], plain["trial misses"], plain["trial hits"]) == (2, 2, 0)
