"""The demo (`scripts/demo.sh`, `examples/sweep.py`) runs and reports honestly."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from helpers import child_path

ROOT = Path(__file__).resolve().parents[2]


def _run_demo(*args: str, without: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    """`examples/sweep.py` with `args`, in a process whose environment lacks the
    variables `without`."""
    env = {k: v for k, v in os.environ.items() if k not in without}
    env["PYTHONPATH"] = child_path()
    return subprocess.run(
        [sys.executable, str(ROOT / "examples" / "sweep.py"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )


def test_demo_runs_and_reports_one_compile_per_lifted_way(tmp_path: Path) -> None:
    out = tmp_path / "plots" / "sweep.png"
    # As a user runs it: under leak checking JAX bypasses its caches, and eager
    # ops compile again on every call; nor with lift's fast-path check.
    result = _run_demo(
        *("--rates", "2", "--steps", "5", "--out", str(out)),
        without=("JAX_CHECK_TRACER_LEAKS", "LIFT_VERIFY"),
    )
    assert result.returncode == 0, result.stderr
    rows = {
        m.group(1).strip(): (
            int(m.group(2)),
            int(m.group(3)),
            float(m.group(4)),
            float(m.group(5)),
        )
        for m in re.finditer(
            r"^(plain optax|lift \+ vmap|lift)\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.e+-]+)\s*$",
            result.stdout,
            flags=re.MULTILINE,
        )
    }
    assert set(rows) == {"plain optax", "lift", "lift + vmap"}, result.stdout
    # (traces, compiles): one per rate for plain optax, one for each lifted way.
    assert rows["plain optax"][:2] == (2, 2)
    assert rows["lift"][:2] == (1, 1)
    assert rows["lift + vmap"][:2] == (1, 1)
    # Same losses as plain optax, up to float32 hyperparameters.
    assert rows["lift"][3] < 1e-3
    assert rows["lift + vmap"][3] < 1e-3
    assert out.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert out.stat().st_size > 10_000
    assert "sweeping" in result.stderr  # the progress bar


def test_demo_offers_the_processes_sweep_when_its_example_exists() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "sweep.py"), "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": child_path()},
        timeout=300,
        check=True,
    )
    has_example = (ROOT / "examples" / "processes.py").exists()
    assert ("--processes" in result.stdout) == has_example
    assert "--rates" in result.stdout
    assert "--steps" in result.stdout
    assert "--out" in result.stdout


def test_demo_in_float64_shows_the_lifted_curves_are_plain_optaxs(
    tmp_path: Path,
) -> None:
    # Δloss in float32 is the hyperparameters' float32 rounding: with --x64 the
    # lifted curves are plain optax's, bit for bit.
    result = _run_demo(
        *("--rates", "2", "--steps", "20", "--x64"),
        *("--out", str(tmp_path / "sweep.png")),
        without=("JAX_CHECK_TRACER_LEAKS",),
    )
    assert result.returncode == 0, result.stderr
    assert "float64 (--x64)" in result.stdout
    delta = {
        m.group(1): float(m.group(2))
        for m in re.finditer(
            r"^(plain optax|lift \+ vmap|lift)\s+\d+\s+\d+\s+[\d.]+\s+([\d.e+-]+)\s*$",
            result.stdout,
            flags=re.MULTILINE,
        )
    }
    assert delta["lift"] == 0.0, result.stdout
    assert delta["lift + vmap"] < 1e-9, result.stdout
    assert "in float64 (--x64) lift's curves are plain optax's" in result.stdout
