"""The benchmarks run: `benchmarks/run.py --smoke` runs every module at tiny
sizes and fails when one raises, so a benchmark that rots fails here rather
than on the benchmarks page."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "benchmarks" / "run.py"


def _run(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # The benchmarks time lift as users run it: JAX's leak checker (which CI
    # sets for the suite) would only slow them, and checks nothing here.
    env.pop("JAX_CHECK_TRACER_LEAKS", None)
    return subprocess.run(
        [sys.executable, str(RUN), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=env,
        check=False,
    )


def test_every_benchmark_runs_in_the_smoke_run(tmp_path: Path):
    out, internals = tmp_path / "README.md", tmp_path / "internals.md"
    done = _run("--smoke", "--write", "--out", str(out), "--internals", str(internals))
    assert done.returncode == 0, done.stderr[-5000:]
    modules = sorted(p.stem for p in (ROOT / "benchmarks").glob("bench_*.py"))
    page = out.read_text()
    for name in modules:
        assert f"`benchmarks/{name}.py`" in page + internals.read_text(), name
    # The decision tables users read first, with what they compare.
    assert "| plain optax |" in page
    assert "| inject_hyperparams |" in page
    assert "| lift.jit |" in page
    assert "Persistent cache: two processes" in page


def test_a_failing_module_fails_the_run(tmp_path: Path):
    broken = tmp_path / "bench_broken.py"
    broken.write_text(
        '"""A benchmark that raises."""\n\n\n'
        "def main(smoke=False):\n"
        '    raise RuntimeError("broken on purpose")\n'
    )
    out = tmp_path / "README.md"
    done = _run(
        "--smoke",
        "--write",
        "--only",
        str(broken),
        "--out",
        str(out),
        "--internals",
        str(tmp_path / "internals.md"),
        timeout=300,
    )
    assert done.returncode == 1
    assert "RuntimeError: broken on purpose" in done.stderr
    assert "FAILED: " in done.stderr and "bench_broken" in done.stderr
    assert not out.exists()


def test_a_module_by_path_writes_its_tables(tmp_path: Path):
    fine = tmp_path / "bench_fine.py"
    fine.write_text(
        '"""A benchmark that works."""\n\n'
        'INTERNAL = {"Internal"}\n\n\n'
        "def main(quick=False, smoke=False):\n"
        '    return {"Public": [{"way": "a", "smoke": smoke}],\n'
        '            "Internal table": [{"way": "b"}]}\n'
    )
    out, internals = tmp_path / "README.md", tmp_path / "internals.md"
    done = _run(
        "--smoke",
        "--write",
        "--only",
        str(fine),
        "--out",
        str(out),
        "--internals",
        str(internals),
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    page, inner = out.read_text(), internals.read_text()
    assert "### Public\n\n| way | smoke |\n|---|---|\n| a | True |" in page
    assert "Internal table" not in page
    assert "### Internal table\n\n| way |\n|---|\n| b |" in inner
