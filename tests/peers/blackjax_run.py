"""Run blackjax's own tests plain and with every top-level factory lifted; compare.

    python tests/peers/blackjax_run.py            # every test file
    python tests/peers/blackjax_run.py --quick    # three files (QUICK_FILES)
    python tests/peers/blackjax_run.py --sdist blackjax-1.7.1.tar.gz -- -x

blackjax ships its tests in its sdist only: the runner downloads the sdist of
the installed blackjax (`pip download --no-binary :all: --no-deps`) unless
`--sdist` gives one, and runs its `tests/` against the installed blackjax.
Exits non-zero when a test's outcome in the lifted mode differs from the plain
run and `blackjax_expected.toml` does not list it with a reason, when an entry
there no longer matches a difference, or when the patch was not live: no
factory patched, no kernel lifted in a file that builds them, or a factory's
result that came back unlifted. See docs/guides/peer-suites.md.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from importlib import metadata
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run import _expected_for, _file_of  # noqa: E402  (optax's runner)

MODES = ("plain", "lifted")
# A few files that build kernels through `blackjax.<name>` in every test,
# blackjax's own compilation counts among them.
QUICK_FILES = (
    "tests/mcmc/test_barker.py",
    "tests/test_api_protocols.py",
    "tests/test_compilation.py",
)


def _sdist(dest: pathlib.Path, given: str | None) -> pathlib.Path:
    """blackjax's source tree, unpacked in `dest`, without its package (the
    tests import the installed one)."""
    version = metadata.version("blackjax")
    if given is None:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-binary",
                ":all:",
                "--no-deps",
                f"blackjax=={version}",
                "-d",
                str(dest),
            ],
            check=True,
        )
        [archive] = dest.glob(f"blackjax-{version}.tar.gz")
    else:
        archive = pathlib.Path(given)
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    root = dest / f"blackjax-{version}"
    if not root.is_dir():
        sys.exit(f"{archive} is not the sdist of the installed blackjax {version}")
    shutil.rmtree(root / "blackjax")
    return root


def _run_mode(
    mode: str, root: pathlib.Path, files: list[str], extra: list[str]
) -> dict[str, Any]:
    report = root / f"report-{mode}.json"
    report.unlink(missing_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(HERE), env.get("PYTHONPATH")])
    )
    env.setdefault("JAX_PLATFORMS", "cpu")
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
        "-p",
        "blackjax_plugin",
        f"--peers-mode={mode}",
        f"--peers-report={report}",
        *extra,
        *files,
    ]
    print(f"== {mode}: pytest on {len(files)} files", flush=True)
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=root, env=env, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 1) or not report.exists():
        sys.exit(f"pytest did not complete in mode {mode} (exit {proc.returncode})")
    return json.loads(report.read_text()) | {"wall_seconds": elapsed}


def _load_expected() -> list[dict[str, Any]]:
    with open(HERE / "blackjax_expected.toml", "rb") as f:
        entries = tomllib.load(f).get("difference", [])
    for entry in entries:
        missing = {"test", "modes", "reason"} - set(entry)
        if missing or not entry["reason"].strip():
            sys.exit(f"blackjax_expected.toml: {entry} needs test, modes and a reason")
    return entries


def compare(
    reports: dict[str, dict[str, Any]], files: list[str], expected: list[dict[str, Any]]
) -> tuple[list[str], list[str]]:
    """Problems (unexplained differences, a dead patch) and explained differences."""
    problems: list[str] = []
    explained: list[str] = []
    used: set[int] = set()
    plain = reports["plain"]["tests"]
    lifted = reports["lifted"]
    if lifted["patched"] == 0:
        problems.append("lifted: no blackjax factory was patched")
    per_file: collections.Counter[str] = collections.Counter()
    for nodeid, test in lifted["tests"].items():
        per_file[_file_of(nodeid)] += test.get("lifted", 0)
        if test.get("lifted", 0) < test.get("built", 0):
            problems.append(
                f"lifted: {nodeid}: {test['built']} kernels built,"
                f" only {test['lifted']} came back lifted"
            )
    for rel in files:
        if rel in QUICK_FILES and per_file[rel] == 0:
            problems.append(f"lifted: {rel} builds kernels but lifted none")
    for nodeid in sorted(set(plain) | set(lifted["tests"])):
        want = plain.get(nodeid, {}).get("outcome", "absent")
        got = lifted["tests"].get(nodeid, {}).get("outcome", "absent")
        if want == got:
            continue
        detail = f"lifted: {nodeid}: {want} plain, {got} lifted"
        if message := lifted["tests"].get(nodeid, {}).get("message"):
            detail += f"\n      {message}"
        entry = _expected_for(expected, nodeid, "lifted")
        if entry is None:
            problems.append(detail)
        else:
            used.add(id(entry))
            explained.append(f"{detail}\n      expected: {entry['reason'].strip()}")
    for entry in expected:
        ran = any(_file_of(entry["test"]).startswith(f) for f in files)
        if ran and id(entry) not in used:
            problems.append(
                f"blackjax_expected.toml: {entry['test']} no longer differs: remove it"
            )
    return problems, explained


def _summarise(mode: str, report: dict[str, Any]) -> str:
    tests = report["tests"].values()
    outcomes = collections.Counter(t["outcome"] for t in tests)
    line = f"{mode:7s} {report['wall_seconds']:7.1f} s  " + ", ".join(
        f"{n} {o}" for o, n in sorted(outcomes.items())
    )
    if mode != "plain":
        built = sum(t.get("built", 0) for t in tests)
        lifted = sum(t.get("lifted", 0) for t in tests)
        using = sum(1 for t in tests if t.get("lifted", 0))
        line += (
            f"; {report['patched']} factories patched, {lifted} lifted results"
            f" (of {built}), in {using} tests"
        )
    return line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help=" ".join(QUICK_FILES))
    parser.add_argument("--sdist", metavar="PATH", help="blackjax's sdist to use")
    parser.add_argument(
        "--file",
        action="append",
        default=[],
        metavar="PATH",
        help="run this test file (tests/...; repeatable) instead",
    )
    parser.add_argument("--keep", metavar="DIR", help="work in DIR and keep it")
    parser.add_argument("pytest_args", nargs="*", help="after --: passed to pytest")
    args = parser.parse_args(argv)
    try:
        metadata.version("blackjax")
    except metadata.PackageNotFoundError:
        sys.exit("blackjax is not installed: install jax-lift[peers]")

    workdir = pathlib.Path(args.keep or tempfile.mkdtemp(prefix="blackjax-peers-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        root = _sdist(workdir, args.sdist)
        files = args.file or (list(QUICK_FILES) if args.quick else ["tests"])
        expected = _load_expected()
        reports = {
            mode: _run_mode(mode, root, files, args.pytest_args) for mode in MODES
        }
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)

    problems, explained = compare(reports, files, expected)
    print("\n== summary (wall time, outcomes)")
    print("\n".join(_summarise(mode, reports[mode]) for mode in MODES))
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
