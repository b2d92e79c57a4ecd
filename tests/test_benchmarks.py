"""The benchmarks run: `benchmarks/run.py --smoke` runs every module at tiny
sizes and fails when one raises, so a benchmark that rots fails here rather
than on the benchmarks page; the tables and charts that `run.py --tables`
writes from the results files are up to date."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from helpers import child_path

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "benchmarks" / "run.py"


def _module(name: str) -> ModuleType:
    """A file of benchmarks/ as a module, without that folder on `sys.path`."""
    spec = importlib.util.spec_from_file_location(
        f"_benchmarks_{name}", ROOT / "benchmarks" / f"{name}.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


pages = _module("pages")
run_py = _module("run")


def _run(
    *args: str, timeout: float = 900, merged: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run `benchmarks/run.py`; `merged`: stderr in stdout, as a terminal shows."""
    env = {**os.environ, "PYTHONPATH": child_path()}
    # The benchmarks time lift as users run it: JAX's leak checker (which CI
    # sets for the suite) would only slow them, and checks nothing here.
    env.pop("JAX_CHECK_TRACER_LEAKS", None)
    return subprocess.run(
        [sys.executable, str(RUN), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merged else subprocess.PIPE,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=env,
        check=False,
    )


def test_every_benchmark_runs_in_the_smoke_run(tmp_path: Path):
    out, internals = tmp_path / "README.md", tmp_path / "internals.md"
    done = _run(
        "--smoke", "--out", str(out), "--internals", str(internals), merged=True
    )
    assert done.returncode == 0, done.stdout[-5000:]
    assert not out.exists() and not internals.exists()
    # Tiny sizes: the first and last lines a terminal shows say the numbers
    # are not results, the modules' progress included; after the progress,
    # only the tables, not the pages' prose.
    lines = done.stdout.splitlines()
    assert lines[0] == lines[-1] == run_py.SMOKE
    assert "not results" in lines[0]
    ran = next(i for i, line in enumerate(lines) if line.startswith("all "))
    assert any(line.startswith("running bench_") for line in lines[1:ran])
    assert all(line.startswith(("#", "|")) for line in lines[ran + 1 : -1])
    modules = sorted(p.stem for p in (ROOT / "benchmarks").glob("bench_*.py"))
    for name in modules:
        assert f"`benchmarks/{name}.py`" in done.stdout, name
    # The decision tables users read first, with what they compare.
    assert "| plain optax |" in done.stdout
    assert "| inject_hyperparams |" in done.stdout
    assert "| lift.jit |" in done.stdout
    assert "Persistent cache: two processes" in done.stdout
    # The persistent-cache table measures inject_hyperparams too.
    cache = done.stdout[done.stdout.index("Persistent cache: two processes") :]
    assert "| inject_hyperparams | 1 |" in cache


def test_the_generated_tables_are_those_the_results_files_give():
    # `python benchmarks/run.py --tables` rewrites them; prose outside the
    # regions states no measured number.
    stale = [str(p.relative_to(ROOT)) for p in pages.stale()]
    assert stale == [], f"run `python benchmarks/run.py --tables`: {stale}"
    readme = (ROOT / "README.md").read_text()
    assert "<!-- generated: headline cpu tpu-v5e -->" in readme
    alternatives = (ROOT / "docs" / "alternatives.md").read_text()
    for region in ("decision cpu", "decision tpu-v5e", "spread tpu-v5e"):
        assert f"<!-- generated: {region} -->" in alternatives


def test_a_changed_result_changes_the_regions_that_show_it():
    found = pages.results()
    page = "<!-- generated: headline cpu tpu-v5e -->\n<!-- /generated -->\n"
    before = pages.regenerate(page, found)
    assert "| `inject_hyperparams` |" in before.splitlines()[1]
    lifted = next(r for r in found["tpu-v5e"]["sweep"] if r["way"] == "lift.lift")
    lifted["wall_s"] = 123.0
    after = pages.regenerate(page, found)
    assert after != before and "123.00 s, 1 compile" in after
    with pytest.raises(ValueError, match="unknown generated region 'nosuch'"):
        pages.regenerate("<!-- generated: nosuch -->\n<!-- /generated -->", found)


def test_every_run_has_its_chart_on_the_pages(tmp_path: Path):
    docs = "".join(p.read_text() for p in (ROOT / "docs").glob("*.md"))
    for stem, result in pages.results().items():
        if stem in ("cpu", "tpu-v5e"):
            assert (ROOT / "docs" / "assets" / f"bench-{stem}.png").exists()
            assert f"](assets/bench-{stem}.png)" in docs
            # Every decision number the chart shows, by way.
            pages.chart(result, tmp_path / f"{stem}.png")
            assert (tmp_path / f"{stem}.png").read_bytes()[:4] == b"\x89PNG"
        # The persistent-cache row measures inject_hyperparams (since 2026-12-07).
        if result["date"] >= "2026-12-07":
            assert "inject_hyperparams" in result["cache"]["second"]


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


@pytest.mark.parametrize("script", ["profile_population", "population_bounds"])
def test_the_population_studies_run_at_tiny_sizes(script: str, tmp_path: Path):
    """The accelerator pages' population studies keep working: each runs at
    the smoke size and writes its page."""
    done = subprocess.run(
        [sys.executable, f"{script}.py", "--size", "smoke", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT / "benchmarks",
        env={**os.environ, "PYTHONPATH": child_path()},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (page,) = tmp_path.glob("population-*.md")
    assert "| way |" in page.read_text()
