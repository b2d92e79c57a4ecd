"""Peer suites four ways: what leak checking costs real test suites.

    python benchmarks/optax_suite.py                   # the fixed subsets, 2 rounds
    python benchmarks/optax_suite.py --suites equinox --rounds 3
    python benchmarks/optax_suite.py --all --suites optax --rounds 1  # alias_test.py
    python benchmarks/optax_suite.py --no-write        # print, leave README alone

Runs, through the peer-suite harness (`tests/peers/harness.py`), a fixed subset
of three libraries' own tests (`SUBSET`, `BENCH` below): optax's `alias_test.py`
(shipped in its wheel), equinox's and optimistix's (from their release tags),
each under pytest in four modes:

- `plain`: no leak checking;
- `JAX_CHECK_TRACER_LEAKS=1`: JAX's own checker (it turns JAX's caches off);
- `--lift-leaks`: lift's plugin in its default, fast mode;
- `--lift-leaks-mode=exhaustive`: the plugin with JAX's checker inside
  `lift.checking_leaks()` around every phase.

The modes take turns round by round, in reversed order every other round
(ABCD DCBA ...), suite after suite, so that a machine whose load drifts slows
them alike. Each run's wall time, CPU time (user + system of the pytest
process) and leak reports (tests failed by `LeakError` or JAX's `Leaked trace`;
the harness's canary, a real leak every checking mode must report, aside) are
kept; the table gives medians and ratios to `plain`. The results go to
`benchmarks/peer_suites.json` (the table of `benchmarks/README.md`, rewritten
in place here) and optax's runs, as before, to `benchmarks/optax_suite.json`,
from which `benchmarks/bench_leaks.py` renders its table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import shutil
import statistics
import sys
import tempfile
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
PEERS = HERE.parent / "tests" / "peers"
RESULTS = HERE / "optax_suite.json"
PEER_RESULTS = HERE / "peer_suites.json"
README = HERE / "README.md"

# Fixed subsets, a minute or so plain each on 2 cores. alias_test.py: every
# optimizer, two kinds of test (132 of its 623 tests, optax 0.2.8; `--all` runs
# the whole file). equinox: `eqx.error_if`, `filter_jit`, `filter_grad` and
# custom derivatives. optimistix: root finds and fixed points (`filter_jit`,
# equinox's `while_loop`, `error_if`'s throw). `--all`: the suites' `--quick`.
SUBSET = "test_preserve_dtype or test_gradient_accumulation"
BENCH = {
    "equinox": ["tests/test_errors.py", "tests/test_jit.py", "tests/test_ad.py"],
    "optimistix": [
        "tests/test_fixed_point.py::test_fixed_point",
        "tests/test_root_find.py::test_root_find",
        "tests/test_minimise.py::test_optax_recompilation",
    ],
}

# The table's names of the harness's modes.
MODES: dict[str, str] = {
    "plain": "plain",
    "JAX_CHECK_TRACER_LEAKS=1": "jax-leaks",
    "--lift-leaks (fast)": "leaks",
    "--lift-leaks-mode=exhaustive": "exhaustive",
}
SUITES = ("optax", "equinox", "optimistix")


def _harness() -> Any:
    sys.path.insert(0, str(PEERS))
    import harness  # pyright: ignore[reportMissingImports]

    return harness


def _suite(name: str) -> Any:
    _harness()
    module = __import__("run" if name == "optax" else f"{name}_run")
    return module


def _plan(
    name: str, select: str | None, everything: bool
) -> tuple[list[str], list[str]]:
    """The files and pytest arguments a suite's benchmark runs."""
    if name == "optax":
        return ["_src/alias_test.py"], ([] if everything else ["-k", select or SUBSET])
    return (list(_suite(name).QUICK) if everything else BENCH[name]), []


def run_mode(
    name: str, mode: str, root: pathlib.Path, files: list[str], extra: list[str]
) -> dict[str, Any]:
    harness = _harness()
    suite = _suite(name).SUITE
    report = harness.run_mode(suite, MODES[mode], root, files, extra, quiet=True)
    tests = {
        n: t for n, t in report["tests"].items() if harness.file_of(n) != harness.CANARY
    }
    ran = [t for t in tests.values() if t["outcome"] not in ("skipped", "xfailed")]
    leaks = harness.leak_reports(report)
    canary = report["tests"].get(harness.CANARY_TEST, {})
    if suite.modes[MODES[mode]].checks_leaks and not canary.get("leak"):
        sys.exit(f"{name}, {mode}: the canary leak was not reported")
    return {
        "suite": name,
        "mode": mode,
        "wall": report["wall_seconds"],
        "cpu": report["cpu_seconds"],
        "tests": len(ran),
        "failed": sum(t["outcome"] in ("failed", "error") for t in ran),
        "findings": len(leaks),
        "found in": leaks[:10],
        "load": os.getloadavg()[0],
    }


def summarize(
    results: dict[str, Any], suite: str | None = None
) -> list[dict[str, Any]]:
    """A table's rows from stored results: `optax_suite.json`'s (one suite),
    or `peer_suites.json`'s, every suite's rows or `suite`'s."""
    runs: list[dict[str, Any]] = results["runs"]
    names = [suite] if suite else list(dict.fromkeys(r.get("suite") for r in runs))
    rows: list[dict[str, Any]] = []
    for name in names:
        mine = [r for r in runs if r.get("suite") == name]
        plain = [r for r in mine if r["mode"] == "plain"]
        if not plain:
            continue
        base_wall = statistics.median(r["wall"] for r in plain)
        base_cpu = statistics.median(r["cpu"] for r in plain)
        for mode in MODES:
            these = [r for r in mine if r["mode"] == mode]
            if not these:
                continue
            wall = statistics.median(r["wall"] for r in these)
            cpu = statistics.median(r["cpu"] for r in these)
            row: dict[str, Any] = {"suite": name} if name else {}
            row |= {
                "mode": f"`{mode}`",
                "wall (median)": f"{wall:.0f} s",
                "wall / plain": f"{wall / base_wall:.2f}x",
                "CPU (median)": f"{cpu:.0f} s",
                "CPU / plain": f"{cpu / base_cpu:.2f}x",
                "tests run": these[0]["tests"],
                "failed": max(r["failed"] for r in these),
                "leak reports": max(r["findings"] for r in these),
                "samples": len(these),
            }
            rows.append(row)
    return rows


def caption(results: dict[str, Any]) -> str:
    parts = []
    for name, info in results["suites"].items():
        what = ", ".join(f"`{f}`" for f in info["files"])
        if info["args"]:
            what += f' `{" ".join(info["args"][:1])} "{info["args"][1]}"`'
        parts.append(f"{name} {info['version']}: {what}")
    loads = ", ".join(f"{r['load']:.1f}" for r in results["runs"])
    return (
        "; ".join(parts)
        + f" ({results['rounds']} rounds, modes interleaved; run {results['date']}"
        f" on {os.cpu_count()} cores; 1-minute load average after each run: {loads})"
    )


def markdown(rows: list[dict[str, Any]]) -> str:
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "|".join("---" for _ in keys) + "|"]
    lines += ["| " + " | ".join(str(r[k]) for k in keys) + " |" for r in rows]
    return "\n".join(lines)


_SECTION = "## Cost of leak checking (`benchmarks/bench_leaks.py`)"
_TITLE = "### Peer suites four ways (`benchmarks/optax_suite.py`)"


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


def _optax_results(results: dict[str, Any]) -> dict[str, Any]:
    """optax's runs in `optax_suite.json`'s format (`bench_leaks.py` reads it)."""
    info = results["suites"]["optax"]
    return {
        "optax": info["version"],
        "select": info["args"][1] if info["args"] else None,
        "rounds": results["rounds"],
        "date": results["date"],
        "runs": [r for r in results["runs"] if r["suite"] == "optax"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--all", action="store_true", help="all of alias_test.py, the --quick sets"
    )
    parser.add_argument("-k", dest="select", default=SUBSET, help="optax's pytest -k")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated")
    parser.add_argument("--suites", default=",".join(SUITES), help="comma-separated")
    parser.add_argument("--no-write", action="store_true", help="leave README alone")
    parser.add_argument("--out", help=f"results file (default {PEER_RESULTS.name})")
    parser.add_argument(
        "--from-results", action="store_true", help="only rewrite README from --out"
    )

    options = parser.parse_args()
    out = pathlib.Path(options.out) if options.out else PEER_RESULTS
    if options.from_results:
        write_readme(json.loads(out.read_text()))
        return
    modes = [m for m in MODES if m in options.modes.split(",")]
    names = [s for s in SUITES if s in options.suites.split(",")]
    results: dict[str, Any] = {
        "suites": {},
        "rounds": options.rounds,
        "date": f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC",
        "runs": [],
    }
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="peer-suites-"))
    try:
        trees = {}
        for name in names:
            (tmp / name).mkdir()
            suite = _suite(name).SUITE
            tree = suite.prepare(
                tmp / name, argparse.Namespace(source=None, sdist=None)
            )
            files, args = _plan(name, options.select, options.all)
            trees[name] = (tree.root, files, args)
            results["suites"][name] = {
                "version": tree.version,
                "files": files,
                "args": args,
            }
        for round_ in range(options.rounds):
            order = modes if round_ % 2 == 0 else modes[::-1]
            for name in names:
                root, files, args = trees[name]
                for mode in order:
                    row = run_mode(name, mode, root, files, args)
                    results["runs"].append(row)
                    print(
                        f"{name:10s} {mode:30s} {row['wall']:7.1f} s wall"
                        f" {row['cpu']:7.1f} s CPU {row['tests']} tests,"
                        f" {row['failed']} failed, {row['findings']} leak reports"
                        f" {row['found in']} (load {row['load']:.1f})",
                        flush=True,
                    )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(caption(results))
    print(markdown(summarize(results)))
    out.write_text(json.dumps(results, indent=1) + "\n")
    if "optax" in names and not options.all and not options.out:
        RESULTS.write_text(json.dumps(_optax_results(results), indent=1) + "\n")
    if not options.no_write:
        write_readme(results)


if __name__ == "__main__":
    main()
