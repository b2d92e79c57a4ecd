"""optax's own `alias_test.py` four ways: what leak checking costs a real suite.

    python benchmarks/optax_suite.py                   # the fixed subset, 2 rounds
    python benchmarks/optax_suite.py --all --rounds 1  # the whole file
    python benchmarks/optax_suite.py --no-write        # print, leave README alone

Runs the test file shipped in the optax wheel (`optax/_src/alias_test.py`),
copied to a temporary directory with a `pytest.ini` of its own, under pytest in
four modes:

- `plain`: no leak checking;
- `JAX_CHECK_TRACER_LEAKS=1`: JAX's own checker (it turns JAX's caches off);
- `--lift-leaks`: lift's plugin in its default, fast mode;
- `--lift-leaks-mode=exhaustive`: the plugin with JAX's checker inside
  `lift.checking_leaks()` around every phase.

The modes take turns round by round, in reversed order every other round
(ABCD DCBA ...), so that a machine whose load drifts slows them alike. Each
run's wall time, CPU time (user + system of the pytest process) and findings
(tests failed by a leak report: `LeakError`, or JAX's `Leaked trace`) are kept;
the table gives medians and ratios to `plain`. The results go to
`benchmarks/optax_suite.json`, from which `benchmarks/bench_leaks.py` renders
the table of `benchmarks/README.md` (rewritten in place here too).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import pathlib
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
RESULTS = HERE / "optax_suite.json"
README = HERE / "README.md"

# A fixed subset of the 623 tests (optax 0.2.8): every optimizer, three kinds
# of test (264 tests).
SUBSET = "test_optimization or test_preserve_dtype or test_gradient_accumulation"

MODES: dict[str, tuple[dict[str, str], list[str]]] = {
    "plain": ({"JAX_CHECK_TRACER_LEAKS": "0"}, []),
    "JAX_CHECK_TRACER_LEAKS=1": ({"JAX_CHECK_TRACER_LEAKS": "1"}, []),
    "--lift-leaks (fast)": ({"JAX_CHECK_TRACER_LEAKS": "0"}, ["--lift-leaks"]),
    "--lift-leaks-mode=exhaustive": (
        {"JAX_CHECK_TRACER_LEAKS": "0"},
        ["--lift-leaks", "--lift-leaks-mode=exhaustive"],
    ),
}

_LEAK = re.compile(r"LeakError|Leaked trace|escaped the transform")


def _alias_test() -> pathlib.Path:
    spec = importlib.util.find_spec("optax")
    if spec is None or spec.origin is None:
        sys.exit("optax is not installed: install jax-lift[peers]")
    return pathlib.Path(spec.origin).parent / "_src" / "alias_test.py"


def _findings(report: pathlib.Path) -> tuple[int, int, int, list[str]]:
    """Tests run, failed, failed by a leak report (and those tests' names)."""
    root = ET.parse(report).getroot()
    run = failed = 0
    leaks: list[str] = []
    for case in root.iter("testcase"):
        if case.find("skipped") is not None:
            continue
        run += 1
        problems = [*case.findall("failure"), *case.findall("error")]
        if problems:
            failed += 1
            text = " ".join((p.get("message") or "") + (p.text or "") for p in problems)
            if _LEAK.search(text):
                leaks.append(f"{case.get('classname')}.{case.get('name')}")
    return run, failed, len(leaks), leaks


def run_mode(mode: str, workdir: pathlib.Path, select: str | None) -> dict[str, Any]:
    env_extra, args = MODES[mode]
    env = dict(os.environ, JAX_PLATFORMS="cpu", **env_extra)
    report = workdir / "report.xml"
    report.unlink(missing_ok=True)
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        f"--junitxml={report}",
        *args,
        "alias_test.py",
    ]
    if select:
        command += ["-k", select]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(
        command, cwd=workdir, env=env, check=False, capture_output=True, text=True
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode not in (0, 1) or not report.exists():
        sys.exit(f"pytest failed to run in mode {mode}:\n{proc.stdout[-3000:]}")
    run, failed, leaks, names = _findings(report)
    return {
        "mode": mode,
        "wall": wall,
        "cpu": cpu,
        "tests": run,
        "failed": failed,
        "findings": leaks,
        "found in": names[:10],
        "load": os.getloadavg()[0],
    }


def summarize(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The README table's rows from stored results."""
    runs: list[dict[str, Any]] = results["runs"]
    base_wall = statistics.median(r["wall"] for r in runs if r["mode"] == "plain")
    base_cpu = statistics.median(r["cpu"] for r in runs if r["mode"] == "plain")
    rows: list[dict[str, Any]] = []
    for mode in MODES:
        mine = [r for r in runs if r["mode"] == mode]
        if not mine:
            continue
        wall = statistics.median(r["wall"] for r in mine)
        cpu = statistics.median(r["cpu"] for r in mine)
        rows.append(
            {
                "mode": f"`{mode}`",
                "wall (median)": f"{wall:.0f} s",
                "wall / plain": f"{wall / base_wall:.2f}x",
                "CPU (median)": f"{cpu:.0f} s",
                "CPU / plain": f"{cpu / base_cpu:.2f}x",
                "tests run": mine[0]["tests"],
                "failed": max(r["failed"] for r in mine),
                "leak findings": max(r["findings"] for r in mine),
                "samples": len(mine),
            }
        )
    return rows


def caption(results: dict[str, Any]) -> str:
    select = results["select"]
    what = f'`-k "{select}"`' if select else "the whole file"
    loads = ", ".join(f"{r['load']:.1f}" for r in results["runs"])
    rounds = results["rounds"]
    rounds = f"{rounds} rounds" if isinstance(rounds, int) else rounds
    return (
        f"optax {results['optax']}'s `alias_test.py`, {what} "
        f"({rounds}, modes interleaved; run {results['date']}; "
        f"1-minute load average after each run: {loads})"
    )


def markdown(rows: list[dict[str, Any]]) -> str:
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "|".join("---" for _ in keys) + "|"]
    lines += ["| " + " | ".join(str(r[k]) for k in keys) + " |" for r in rows]
    return "\n".join(lines)


_SECTION = "## Cost of leak checking (`benchmarks/bench_leaks.py`)"
_TITLE = "### optax's alias_test.py four ways (`benchmarks/optax_suite.py`)"


def write_readme(results: dict[str, Any], page: pathlib.Path = README) -> None:
    """Put the table in the leak section of `page`, replacing an older one."""
    text = page.read_text()
    start = text.find(_SECTION)
    if start < 0:
        raise SystemExit(f"{page} has no leak section ({_SECTION!r})")
    end = text.find("\n## ", start + len(_SECTION))
    end = len(text) if end < 0 else end + 1
    section = text[start:end]
    old = section.find(_TITLE)
    if old >= 0:
        stop = section.find("\n#", old + len(_TITLE))
        section = section[:old] + (section[stop + 1 :] if stop >= 0 else "")
    block = f"{_TITLE}\n\n{caption(results)}\n\n{markdown(summarize(results))}\n\n"
    section = section.rstrip("\n") + "\n\n" + block
    page.write_text(text[:start] + section + text[end:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--all", action="store_true", help="the whole file")
    parser.add_argument("-k", dest="select", default=SUBSET, help="pytest -k")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated")
    parser.add_argument("--no-write", action="store_true", help="leave README alone")
    parser.add_argument("--out", help=f"results file (default {RESULTS.name})")
    parser.add_argument(
        "--from-results", action="store_true", help="only rewrite README from --out"
    )

    options = parser.parse_args()
    if options.from_results:
        write_readme(json.loads(pathlib.Path(options.out or RESULTS).read_text()))
        return
    select = None if options.all else options.select
    modes = [m for m in MODES if m in options.modes.split(",")]
    import optax

    results: dict[str, Any] = {
        "optax": optax.__version__,
        "select": select,
        "rounds": options.rounds,
        "date": f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC",
        "runs": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        workdir = pathlib.Path(tmp)
        shutil.copyfile(_alias_test(), workdir / "alias_test.py")
        (workdir / "pytest.ini").write_text("[pytest]\npython_files = *_test.py\n")
        for round_ in range(options.rounds):
            order = modes if round_ % 2 == 0 else modes[::-1]
            for mode in order:
                row = run_mode(mode, workdir, select)
                results["runs"].append(row)
                print(
                    f"{mode:30s} {row['wall']:7.1f} s wall {row['cpu']:7.1f} s CPU "
                    f"{row['tests']} tests, {row['failed']} failed, "
                    f"{row['findings']} leak findings {row['found in']}",
                    flush=True,
                )
    print(caption(results))
    print(markdown(summarize(results)))
    out = pathlib.Path(options.out) if options.out else RESULTS
    out.write_text(json.dumps(results, indent=1) + "\n")
    if not options.no_write:
        write_readme(results)


if __name__ == "__main__":
    main()
