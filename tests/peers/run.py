"""Run optax's shipped tests plain, lifted and lifted-and-jitted; compare outcomes.

    python tests/peers/run.py            # the optimizer files, three modes
    python tests/peers/run.py --quick    # the same but the four heaviest files
    python tests/peers/run.py --all      # all test files in the optax wheel
    python tests/peers/run.py --modes plain,lifted -- -x   # extra pytest args

Exits non-zero when a test's outcome in a lifted mode differs from the plain run
and `expected.toml` does not list it with a reason, when an entry there no
longer matches a difference, or when the patch was not live: a file that builds
optimizers lifted none of them, or a constructor's result came back unlifted.
See docs/guides/peer-suites.md.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
MODES = ("plain", "lifted", "jitted")

# The files that build optimizers or schedules (paths inside the optax package,
# optax 0.2.8): the files whose lifted run built at least one, in a test or when
# the module was imported. A `--all` run fails when a file outside this list
# builds one, so the list follows optax.
OPTIMIZER_FILES = (
    "_src/alias_test.py",
    "_src/base_test.py",
    "_src/combine_test.py",
    "_src/factorized_test.py",
    "_src/float64_test.py",
    "_src/linesearch_test.py",
    "_src/lookahead_test.py",
    "_src/sharding_test.py",
    "_src/transform_test.py",
    "contrib/_common_test.py",
    "contrib/_complex_valued_test.py",
    "contrib/_galore_test.py",
    "contrib/_mechanic_test.py",
    "contrib/_muon_test.py",
    "contrib/_privacy_test.py",
    "contrib/_reduce_on_plateau_test.py",
    "contrib/_sam_test.py",
    "contrib/_schedule_free_test.py",
    "experimental/_aggregating_test.py",
    "schedules/_inject_test.py",
    "schedules/_join_test.py",
    "schedules/_schedule_test.py",
    "transforms/_accumulation_test.py",
    "transforms/_adding_test.py",
    "transforms/_clipping_test.py",
    "transforms/_combining_test.py",
    "transforms/_conditionality_test.py",
    "transforms/_constraining_test.py",
    "transforms/_freezing_test.py",
    "transforms/_layouts_test.py",
    "transforms/_masking_test.py",
    "transforms/_monitoring_test.py",
    "tree_utils/_state_utils_test.py",
)
# The four that take four fifths of the time: every alias and every contrib
# optimizer through optax's common suites, line searches, muon. `--quick` leaves
# them out.
HEAVY_FILES = (
    "_src/alias_test.py",
    "_src/linesearch_test.py",
    "contrib/_common_test.py",
    "contrib/_muon_test.py",
)


def _optax_dir() -> pathlib.Path:
    spec = importlib.util.find_spec("optax")
    if spec is None or spec.origin is None:
        sys.exit("optax is not installed: install jax-lift[peers]")
    return pathlib.Path(spec.origin).parent


def _copy_tests(dest: pathlib.Path) -> list[str]:
    """Copy optax's `*_test.py` files into `dest`; return their relative paths."""
    src = _optax_dir()
    files = sorted(str(p.relative_to(src)) for p in src.rglob("*_test.py"))
    for rel in files:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, dest / rel)
    # A config of its own, so that no ini file above `dest` applies.
    (dest / "pytest.ini").write_text("[pytest]\npython_files = *_test.py\n")
    return files


def _run_mode(
    mode: str, workdir: pathlib.Path, files: list[str], extra: list[str]
) -> tuple[dict[str, Any], float]:
    report = workdir / f"report-{mode}.json"
    report.unlink(missing_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(HERE), env.get("PYTHONPATH")])
    )
    env.setdefault("JAX_PLATFORMS", "cpu")
    # JAX's leak checker turns its caches off (2.8 times slower, FINDINGS); the
    # comparison is about outcomes. Pass it explicitly to check leaks too.
    env.setdefault("JAX_CHECK_TRACER_LEAKS", "0")
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-rN",
        "--no-header",
        "-p",
        "no:cacheprovider",
        "--import-mode=importlib",
        "-p",
        "optax_plugin",
        f"--peers-mode={mode}",
        f"--peers-report={report}",
        *extra,
        *files,
    ]
    print(f"== {mode}: pytest on {len(files)} files", flush=True)
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=workdir, env=env, check=False)
    elapsed = time.perf_counter() - start
    # 0: all passed, 1: some failed (plain optax has failures of its own).
    if proc.returncode not in (0, 1) or not report.exists():
        sys.exit(f"pytest did not complete in mode {mode} (exit {proc.returncode})")
    return json.loads(report.read_text()), elapsed


def _versions() -> dict[str, str]:
    from importlib import metadata

    versions = {"python": sys.version}
    for dist in ("optax", "jax", "jaxlib", "flax", "scikit-learn", "pytest"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = "absent"
    return versions


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _load_expected() -> list[dict[str, Any]]:
    with open(HERE / "expected.toml", "rb") as f:
        entries = tomllib.load(f).get("difference", [])
    for entry in entries:
        missing = {"test", "modes", "reason"} - set(entry)
        if missing or not entry["reason"].strip():
            sys.exit(f"expected.toml: entry {entry} needs test, modes and a reason")
    return entries


def _expected_for(entries: list[dict[str, Any]], nodeid: str, mode: str) -> Any:
    for entry in entries:
        if mode in entry["modes"] and (
            nodeid == entry["test"] or nodeid.startswith(entry["test"] + "::")
        ):
            return entry
    return None


def _summarise(mode: str, report: dict[str, Any]) -> str:
    tests = report["tests"].values()
    outcomes = collections.Counter(t["outcome"] for t in tests)
    parts = [f"{n} {o}" for o, n in sorted(outcomes.items())]
    line = f"{mode:7s} {report['wall_seconds']:7.1f} s  " + ", ".join(parts)
    if mode != "plain":
        counts = [*tests, *report.get("modules", {}).values()]
        built = sum(t.get("built", 0) for t in counts)
        lifted = sum(t.get("lifted", 0) for t in counts)
        using = sum(1 for t in tests if t.get("lifted", 0))
        line += (
            f"; {report['patched']} functions patched, {lifted} lifted objects"
            f" built (of {built}), in {using} tests"
        )
    return line


def _check_live(
    mode: str, report: dict[str, Any], files: list[str], everything: bool
) -> list[str]:
    """Problems showing that the patch was not live in `mode`."""
    problems = []
    if report["patched"] == 0:
        problems.append(f"{mode}: no optax function was patched")
    per_file: dict[str, int] = collections.Counter()
    for nodeid, module in report.get("modules", {}).items():
        per_file[_file_of(nodeid)] += module["lifted"]
    for nodeid, test in report["tests"].items():
        per_file[_file_of(nodeid)] += test.get("lifted", 0)
        if test.get("lifted", 0) < test.get("built", 0):
            problems.append(
                f"{mode}: {nodeid}: {test['built']} optimizers built,"
                f" only {test['lifted']} came back lifted"
            )
    for rel in files:
        if rel in OPTIMIZER_FILES and per_file[rel] == 0:
            problems.append(f"{mode}: {rel} builds optimizers but lifted none")
        if everything and rel not in OPTIMIZER_FILES and per_file[rel] > 0:
            problems.append(
                f"{mode}: {rel} builds optimizers: add it to OPTIMIZER_FILES"
                " in tests/peers/run.py"
            )
    return problems


def compare(
    reports: dict[str, dict[str, Any]],
    files: list[str],
    everything: bool,
    expected: list[dict[str, Any]],
) -> tuple[list[str], list[str]]:
    """Problems (unexplained differences, a dead patch) and explained differences."""
    problems: list[str] = []
    explained: list[str] = []
    used: set[int] = set()
    plain = reports["plain"]["tests"]
    lifted_modes = [mode for mode in reports if mode != "plain"]
    for mode in lifted_modes:
        problems += _check_live(mode, reports[mode], files, everything)
        other = reports[mode]["tests"]
        for nodeid in sorted(set(plain) | set(other)):
            want = plain.get(nodeid, {}).get("outcome", "absent")
            got = other.get(nodeid, {}).get("outcome", "absent")
            if want == got:
                continue
            detail = f"{mode}: {nodeid}: {want} plain, {got} {mode}"
            if message := other.get(nodeid, {}).get("message"):
                detail += f"\n      {message}"
            entry = _expected_for(expected, nodeid, mode)
            if entry is None:
                problems.append(detail)
            else:
                used.add(id(entry))
                explained.append(f"{detail}\n      expected: {entry['reason'].strip()}")
    # An entry that explains nothing is stale (unless its file was not run).
    for entry in expected:
        ran = _file_of(entry["test"]) in files
        if ran and id(entry) not in used and set(entry["modes"]) & set(lifted_modes):
            problems.append(
                f"expected.toml: {entry['test']} no longer differs: remove it"
            )
    return problems, explained


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--all", action="store_true", help="all optax test files")
    parser.add_argument(
        "--quick", action="store_true", help="the optimizer files but the heaviest"
    )
    parser.add_argument(
        "--file",
        action="append",
        default=[],
        metavar="PATH",
        help="run this test file (path inside optax, repeatable) instead",
    )
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--keep", metavar="DIR", help="work in DIR and keep it")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="with --keep: reuse DIR's plain report if it ran the same files with"
        " the same optax, JAX, flax and Python (plain does not depend on lift)",
    )
    parser.add_argument("pytest_args", nargs="*", help="after --: passed to pytest")
    args = parser.parse_args(argv)
    modes = args.modes.split(",")
    if modes[0] != "plain" or not set(modes) <= set(MODES):
        parser.error(f"--modes: plain first, then any of {MODES[1:]}")
    if args.reuse and not args.keep:
        parser.error("--reuse needs --keep DIR")

    workdir = pathlib.Path(args.keep or tempfile.mkdtemp(prefix="optax-peers-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        shipped = _copy_tests(workdir)
        if args.file:
            unknown = sorted(set(args.file) - set(shipped))
            if unknown:
                parser.error(f"--file: optax ships no {unknown}")
            files = args.file
        elif args.all:
            files = shipped
        else:
            chosen = set(OPTIMIZER_FILES) - set(HEAVY_FILES if args.quick else ())
            files = [f for f in shipped if f in chosen]
        stale = sorted(set(OPTIMIZER_FILES) - set(shipped))
        if stale:
            print(f"not in this optax any more: {stale}")
        expected = _load_expected()
        reports = {}
        lines = []
        key = {"files": files, "pytest_args": args.pytest_args, "versions": _versions()}
        for mode in modes:
            path = workdir / f"report-{mode}.json"
            old = json.loads(path.read_text()) if path.exists() else {}
            if args.reuse and mode == "plain" and old.get("key") == key:
                print(f"== {mode}: reusing {path}")
                reports[mode] = old
            else:
                reports[mode], elapsed = _run_mode(
                    mode, workdir, files, args.pytest_args
                )
                reports[mode] |= {"key": key, "wall_seconds": elapsed}
                path.write_text(json.dumps(reports[mode], indent=0, sort_keys=True))
            lines.append(_summarise(mode, reports[mode]))
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)

    problems, explained = compare(reports, files, args.all, expected)
    print("\n== summary (wall time, outcomes)")
    print("\n".join(lines))
    if explained:
        print(f"\n== {len(explained)} expected differences")
        print("\n".join(explained))
    if problems:
        print(f"\n== {len(problems)} unexplained differences or problems")
        print("\n".join(problems))
        return 1
    print("\nno unexplained differences")
    return 0


if __name__ == "__main__":
    sys.exit(main())
