"""What every peer suite shares: run a library's own tests in several modes and
compare each mode's outcomes with the plain run's.

A suite (`run.py`: optax, `blackjax_run.py`, `equinox_run.py`,
`optimistix_run.py`) is a `Suite`: where its tests come from, which files it
runs (all, `--quick`, `--file`), the modes it runs them in and the file of
expected differences. `main(suite)` is its command line. Each mode is one pytest
process in the suite's source tree, with `tests/peers` on `PYTHONPATH` and the
`peers_report` plugin writing every test's outcome to a JSON report. The run
fails when:

- a test's outcome in a mode differs from plain and the expectations file does
  not list it (test id or file, modes, reason), or an entry there no longer
  matches a difference in a file that ran;
- in a leak-checking mode, a test fails with a leak report that the
  expectations file does not list (a leak report on a library's own suite is a
  false report until shown otherwise);
- the mode was not live: a patching mode patched nothing or a constructor's
  result came back unlifted (the suite's `check_live`), or a leak-checking mode
  did not fail the canary, a test that keeps a tracer past its `jax.jit`.

See docs/guides/peer-suites.md.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import contextlib
import dataclasses
import importlib.util
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
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from importlib import metadata
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

HERE = pathlib.Path(__file__).resolve().parent
SOURCES = HERE / "sources"
# Plain runs' outcomes, recorded with the environment they ran in (`--record`,
# `--recorded`).
RECORDED = HERE / "recorded"

Report = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Mode:
    """One way of running a suite: its environment and extra pytest arguments."""

    help: str
    env: Mapping[str, str] = dataclasses.field(default_factory=dict[str, str])
    args: tuple[str, ...] = ()
    # Leak checking is on: the canary runs, and must fail with a leak report.
    checks_leaks: bool = False


PLAIN = Mode("nothing changed: the reference outcomes")
# lift's plugin; JAX's own checker off (it turns JAX's caches off).
LEAKS = Mode(
    "pytest --lift-leaks (fast mode)", args=("--lift-leaks",), checks_leaks=True
)
JAX_LEAKS = Mode(
    "JAX_CHECK_TRACER_LEAKS=1 (JAX's own checker)",
    env={"JAX_CHECK_TRACER_LEAKS": "1"},
    checks_leaks=True,
)
EXHAUSTIVE = Mode(
    "pytest --lift-leaks --lift-leaks-mode=exhaustive",
    args=("--lift-leaks", "--lift-leaks-mode=exhaustive"),
    checks_leaks=True,
)
LEAK_MODES = {"leaks": LEAKS, "jax-leaks": JAX_LEAKS, "exhaustive": EXHAUSTIVE}

# Kept past the `jax.jit` it was traced in: every leak-checking mode must fail
# this test, or it checked nothing.
CANARY = "lift_peers_canary.py"
CANARY_TEST = f"{CANARY}::test_a_tracer_kept_past_its_jit"
_CANARY_SOURCE = '''\
"""A real leak: a tracer kept in a list after its jax.jit has returned."""

import jax
import jax.numpy as jnp

KEPT = []


def test_a_tracer_kept_past_its_jit():
    @jax.jit
    def f(x):
        KEPT.append(x * 2)
        return x

    f(jnp.ones(3))
'''


@dataclasses.dataclass
class Tree:
    """A suite's tests, ready to run: pytest runs in `root` on `shipped` files."""

    root: pathlib.Path
    shipped: list[str]
    version: str


@dataclasses.dataclass
class Suite:
    name: str  # the distribution whose tests these are
    expected: str  # file name in tests/peers
    modes: dict[str, Mode]  # "plain" first
    default_modes: tuple[str, ...]
    # Unpack or copy the tests into the directory given; command-line args.
    prepare: Callable[[pathlib.Path, argparse.Namespace], Tree]
    # The files to run for the command line (after --file, which wins).
    select: Callable[[Tree, argparse.Namespace], list[str]]
    quick_help: str
    pytest_args: tuple[str, ...] = ()
    # Tests (node ids or their prefixes) never run: they time the machine, and
    # pass or fail with its load, in any mode.
    deselect: tuple[str, ...] = ()
    # Tests `--quick` leaves out too: a quick run's heaviest, whose code the
    # tests it keeps run as well.
    quick_deselect: tuple[str, ...] = ()
    # Extra command-line options of this suite.
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None
    # Problems showing a patching mode was not live: (mode, report, files, args).
    check_live: Callable[[str, Report, list[str], argparse.Namespace], list[str]] = (
        lambda mode, report, files, args: []
    )
    # What "patched" counts, for the summary ("functions", "factories").
    patched_what: str = "functions"


# --- fetching -------------------------------------------------------------------


def installed(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        sys.exit(f"{dist} is not installed: install jax-lift[peers]")


def pip_sdist(dist: str, dest: pathlib.Path, given: str | None) -> pathlib.Path:
    """The sdist of the installed `dist`, unpacked in `dest` without its
    package (the tests import the installed one); `given` instead of PyPI's."""
    version = installed(dist)
    if given is None:
        subprocess.run(
            [
                *(sys.executable, "-m", "pip", "download", "--quiet"),
                *("--no-binary", ":all:", "--no-deps", f"{dist}=={version}"),
                *("-d", str(dest)),
            ],
            check=True,
        )
        [archive] = dest.glob(f"{dist}-{version}.tar.gz")
    else:
        archive = pathlib.Path(given)
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    root = dest / f"{dist}-{version}"
    if not root.is_dir():
        sys.exit(f"{archive} is not the sdist of the installed {dist} {version}")
    shutil.rmtree(root / dist)
    return root


def github_tests(
    dist: str, repo: str, dest: pathlib.Path, given: str | None
) -> pathlib.Path:
    """The `tests/` of the installed `dist`'s release tag (`v<version>`), in
    `dest/<dist>-<version>`; the package itself is the installed one.

    Neither PyPI's sdist nor the wheel holds the tests. In order: `given` (a
    directory holding `tests/`, a git repository, whose tag is read, or a tar
    archive of the tag); the pinned archive in tests/peers/sources when its
    version is the installed one; GitHub's archive of the tag.
    """
    version = installed(dist)
    root = dest / f"{dist}-{version}"
    pinned = SOURCES / f"{dist}-{version}-tests.tar.gz"
    if given is not None and pathlib.Path(given, "tests").is_dir():
        shutil.copytree(pathlib.Path(given, "tests"), root / "tests")
        return root
    if given is not None and (pathlib.Path(given) / "HEAD").exists():
        archive = dest / "tag.tar"
        subprocess.run(
            [
                *("git", f"--git-dir={given}", "archive", f"--output={archive}"),
                *(f"--prefix={dist}-{version}/", f"v{version}", "tests", "LICENSE"),
            ],
            check=True,
        )
    elif given is not None:
        archive = pathlib.Path(given)
    elif pinned.exists():
        archive = pinned
    else:
        url = f"https://github.com/{repo}/archive/refs/tags/v{version}.tar.gz"
        print(f"== fetching {url}", flush=True)
        archive = dest / "tag.tar.gz"
        with urllib.request.urlopen(url, timeout=120) as response:
            archive.write_bytes(response.read())
    with tarfile.open(archive) as tar:
        top = {name.split("/", 1)[0] for name in tar.getnames()}
        tar.extractall(dest, filter="data")
    [unpacked] = top
    if dest / unpacked != root:
        (dest / unpacked).rename(root)
    if not (root / "tests").is_dir():
        sys.exit(f"{archive} holds no tests/ of {dist} {version}")
    shutil.rmtree(root / dist, ignore_errors=True)
    return root


def sdist_tests(
    dist: str, tests: str, dest: pathlib.Path, given: str | None
) -> pathlib.Path:
    """The installed `dist`'s tests (its sdist's folder `tests`), in
    `dest/<dist>-<version>`; the package itself is the installed one.

    In order: `given` (the sdist); the pinned archive in tests/peers/sources
    when its version is the installed one (those files of the sdist, unchanged);
    the sdist from the package index.
    """
    version = installed(dist)
    pinned = SOURCES / f"{dist}-{version}-tests.tar.gz"
    if given is None and pinned.exists():
        with tarfile.open(pinned) as tar:
            tar.extractall(dest, filter="data")
        root = dest / f"{dist}-{version}"
    else:
        root = pip_sdist(dist, dest, given)
    if not (root / tests).is_dir():
        sys.exit(f"the tests of {dist} {version} hold no {tests}/")
    return root


# --- running --------------------------------------------------------------------


def run_mode(
    suite: Suite,
    mode: str,
    root: pathlib.Path,
    files: Sequence[str],
    extra: Sequence[str],
    *,
    quiet: bool = False,
) -> Report:
    """One pytest process; its report, with `wall_seconds` and `cpu_seconds`."""
    spec = suite.modes[mode]
    report = root / f"report-{mode}.json"
    report.unlink(missing_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(HERE), env.get("PYTHONPATH")])
    )
    env.setdefault("JAX_PLATFORMS", "cpu")
    # JAX's leak checker turns its caches off (2.8 times slower, FINDINGS); the
    # comparison is about outcomes. The jax-leaks mode turns it on.
    env.setdefault("JAX_CHECK_TRACER_LEAKS", "0")
    env |= spec.env
    canary = []
    if spec.checks_leaks:
        (root / CANARY).write_text(_CANARY_SOURCE)
        canary = [CANARY]
    command = [
        *(sys.executable, "-m", "pytest", "-q", "-rN", "--no-header"),
        *("-p", "no:cacheprovider", "-p", "peers_report"),
        f"--peers-report={report}",
        *suite.pytest_args,
        *(f"--deselect={test}" for test in suite.deselect),
        *spec.args,
        *extra,
        *canary,
        *files,
    ]
    # One write: modes run side by side (`--jobs`) print whole lines.
    print(
        f"== {suite.name}, {mode}: pytest on {len(files)} files\n", end="", flush=True
    )
    start = time.perf_counter()
    # Its own CPU time (`wait4`), right while other modes run beside it.
    with tempfile.TemporaryFile("w+") if quiet else contextlib.nullcontext() as out:
        proc = subprocess.Popen(
            command,
            cwd=root,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT if quiet else None,
            text=True,
        )
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        output = ""
        if out is not None:
            out.seek(0)
            output = out.read()
    elapsed = time.perf_counter() - start
    # 0: all passed, 1: some failed (plain runs have failures of their own).
    if proc.returncode not in (0, 1) or not report.exists():
        sys.exit(
            f"pytest did not complete in mode {mode} (exit {proc.returncode})\n"
            + output[-3000:]
        )
    result: Report = json.loads(report.read_text())
    if quiet:
        result["stdout"] = output
    result["wall_seconds"] = elapsed
    result["cpu_seconds"] = usage.ru_utime + usage.ru_stime
    return result


# --- comparing ------------------------------------------------------------------


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def load_expected(suite: Suite) -> list[dict[str, Any]]:
    with open(HERE / suite.expected, "rb") as f:
        entries = tomllib.load(f).get("difference", [])
    for entry in entries:
        missing = {"test", "modes", "reason"} - set(entry)
        if missing or not entry["reason"].strip():
            sys.exit(f"{suite.expected}: {entry} needs test, modes and a reason")
        if unknown := set(entry["modes"]) - set(suite.modes):
            sys.exit(f"{suite.expected}: {entry['test']}: no mode {sorted(unknown)}")
    return entries


def expected_for(entries: list[dict[str, Any]], nodeid: str, mode: str) -> Any:
    for entry in entries:
        if mode in entry["modes"] and (
            nodeid == entry["test"]
            or nodeid.startswith((entry["test"] + "::", entry["test"] + "["))
        ):
            return entry
    return None


def leak_reports(report: Report) -> list[str]:
    """The tests (canary aside) that failed with a leak report."""
    return sorted(
        nodeid
        for nodeid, test in report["tests"].items()
        if test.get("leak") and file_of(nodeid) != CANARY
    )


def compare(
    suite: Suite,
    reports: dict[str, Report],
    files: list[str],
    expected: list[dict[str, Any]],
    args: argparse.Namespace,
) -> tuple[list[str], list[str]]:
    """Problems (unexplained differences and leak reports, a dead mode) and
    explained differences."""
    problems: list[str] = []
    explained: list[str] = []
    used: set[int] = set()
    plain = reports["plain"]["tests"]
    others = [mode for mode in reports if mode != "plain"]
    for mode in others:
        report = reports[mode]
        problems += suite.check_live(mode, report, files, args)
        tests = report["tests"]
        if suite.modes[mode].checks_leaks:
            canary = tests.get(CANARY_TEST, {})
            if not canary.get("leak"):
                problems.append(
                    f"{mode}: the canary, a tracer kept past its jax.jit, was not"
                    f" reported ({canary.get('outcome', 'absent')}): no leak was checked"
                )
        for nodeid in sorted(set(plain) | set(tests)):
            if file_of(nodeid) == CANARY:
                continue
            want = plain.get(nodeid, {}).get("outcome", "absent")
            got = tests.get(nodeid, {}).get("outcome", "absent")
            # A leak report is a finding even in a test that fails plain too.
            leak = bool(tests.get(nodeid, {}).get("leak")) and not plain.get(
                nodeid, {}
            ).get("leak")
            if want == got and not leak:
                continue
            detail = f"{mode}: {nodeid}: {want} plain, {got} {mode}"
            if leak:
                detail += " (a leak report)"
            if message := tests.get(nodeid, {}).get("message"):
                detail += f"\n      {message}"
            entry = expected_for(expected, nodeid, mode)
            if entry is None:
                problems.append(detail)
            else:
                used.add(id(entry))
                explained.append(f"{detail}\n      expected: {entry['reason'].strip()}")
    # An entry that explains nothing is stale (unless its file was not run).
    for entry in expected:
        ran = any(
            file_of(entry["test"]) == f or file_of(entry["test"]).startswith(f + "/")
            for f in files
        )
        if ran and id(entry) not in used and set(entry["modes"]) & set(others):
            problems.append(
                f"{suite.expected}: {entry['test']} no longer differs: remove it"
            )
    return problems, explained


def _key_change(old: Any, new: dict[str, Any]) -> str:
    """What differs between a kept or recorded key and this run's, briefly."""
    if not isinstance(old, dict):
        return " (none recorded)"
    changed = [k for k in new if old.get(k) != new[k]]  # pyright: ignore[reportUnknownMemberType]
    if "environment" in changed:
        # A report kept before its key held the environment has none.
        was, now = set(old.get("environment", ())), set(new["environment"])  # pyright: ignore[reportUnknownArgumentType]
        diff = sorted(now - was)[:5] + [f"not {d}" for d in sorted(was - now)[:5]]
        return f" ({', '.join(changed)}: {', '.join(diff)})"
    return f" ({', '.join(changed)})"


def summarise(suite: Suite, mode: str, report: Report) -> str:
    tests = [t for n, t in report["tests"].items() if file_of(n) != CANARY]
    outcomes = collections.Counter(t["outcome"] for t in tests)
    parts = [f"{n} {o}" for o, n in sorted(outcomes.items())]
    line = (
        f"{mode:10s} {report['wall_seconds']:7.1f} s wall"
        f" {report['cpu_seconds']:7.1f} s CPU  " + ", ".join(parts)
    )
    if report.get("recorded"):
        line = f"{mode:10s} (recorded: {report['recorded']})  " + ", ".join(parts)
    if report.get("patched"):
        counts = [*tests, *report.get("modules", {}).values()]
        built = sum(t.get("built", 0) for t in counts)
        lifted = sum(t.get("lifted", 0) for t in counts)
        using = sum(1 for t in tests if t.get("lifted", 0))
        line += (
            f"; {report['patched']} {suite.patched_what} patched, {lifted} lifted"
            f" objects built (of {built}), in {using} tests"
        )
    if suite.modes[mode].checks_leaks:
        line += f"; {len(leak_reports(report))} leak reports"
    return line


def environment() -> list[str]:
    """The installed distributions a plain run can import, as `name==version`:
    those the `peers` extra requires, directly or through their own
    requirements, and pytest's plugins, lift's excepted (plain does not import
    lift). The docs' and the linters' tools that the same virtualenv holds are
    not among them: a new Markdown does not change how optax's tests end."""
    installed: dict[str, metadata.Distribution] = {
        canonicalize_name(dist.metadata["Name"]): dist
        for dist in metadata.distributions()
    }
    seen: set[tuple[str, frozenset[str]]] = set()
    # pytest loads every installed plugin (hypothesis's, from lift's `test`
    # extra, too).
    plugins = [
        (name, frozenset[str]())
        for name, dist in installed.items()
        if any(entry.group == "pytest11" for entry in dist.entry_points)
    ]
    todo = [("jax-lift", frozenset({"peers"})), *plugins]
    while todo:
        name, extras = todo.pop()
        dist = installed.get(name)
        if dist is None or (name, extras) in seen:
            continue
        seen.add((name, extras))
        for line in dist.requires or ():
            req = Requirement(line)
            if req.marker is None or any(
                req.marker.evaluate({"extra": extra}) for extra in {"", *extras}
            ):
                todo.append((canonicalize_name(req.name), frozenset(req.extras)))
    return sorted(
        {
            f"{installed[name].metadata['Name']}=={installed[name].version}"
            for name, _ in seen
            if name != "jax-lift"
        }
    )


def plain_key(files: list[str], pytest_args: list[str]) -> dict[str, Any]:
    """What a plain run's outcomes depend on: its files and pytest arguments,
    the Python and the distributions it can import (`environment`). A plain report of
    the same key stands for a plain run, kept (`--reuse`) or recorded
    (`--recorded`)."""
    return {
        "files": files,
        "pytest_args": pytest_args,
        "python": sys.version,
        "environment": environment(),
    }


# --- the command line -----------------------------------------------------------


def parser_for(suite: Suite, doc: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=doc.split("\n", 1)[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="modes:\n"
        + "\n".join(f"  {name:11s} {mode.help}" for name, mode in suite.modes.items()),
    )
    parser.add_argument("--quick", action="store_true", help=suite.quick_help)
    parser.add_argument(
        "--file",
        action="append",
        default=[],
        metavar="PATH",
        help="run this test file (repeatable) instead",
    )
    parser.add_argument(
        "--modes",
        default=",".join(suite.default_modes),
        help=f"comma-separated, plain first (default {','.join(suite.default_modes)})",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="run up to N modes at once, each mode's output shown when it ends"
        " (default 1: each mode's times are then its own, as the cost tables"
        " need)",
    )
    parser.add_argument("--keep", metavar="DIR", help="work in DIR and keep it")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="with --keep: reuse DIR's plain report if it ran the same files and"
        " pytest arguments, by the same Python with the same versions of what"
        " it can import (plain does not depend on lift); else run plain, and"
        " say why",
    )
    parser.add_argument(
        "--recorded",
        action="store_true",
        help="take plain's outcomes from tests/peers/recorded/ when they were"
        " recorded for the same files and pytest arguments, by the same Python"
        " with the same versions of what it can import (plain does not depend on"
        " lift); else run plain, and say so",
    )
    parser.add_argument(
        "--record",
        action="store_true",
        help="run plain and write its outcomes to tests/peers/recorded/ for --recorded",
    )
    if suite.add_arguments is not None:
        suite.add_arguments(parser)
    parser.add_argument("pytest_args", nargs="*", help="after --: passed to pytest")
    return parser


def main(suite: Suite, doc: str, argv: list[str] | None = None) -> int:
    parser = parser_for(suite, doc)
    args = parser.parse_args(argv)
    modes = args.modes.split(",")
    if modes[0] != "plain" or not set(modes) <= set(suite.modes):
        parser.error(f"--modes: plain first, then any of {list(suite.modes)[1:]}")
    if args.reuse and not args.keep:
        parser.error("--reuse needs --keep DIR")
    installed(suite.name)

    workdir = pathlib.Path(args.keep or tempfile.mkdtemp(prefix=f"{suite.name}-peers-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        tree = suite.prepare(workdir, args)
        if args.file:
            unknown = sorted(
                f for f in args.file if not (tree.root / file_of(f)).exists()
            )
            if unknown:
                parser.error(f"--file: {suite.name} {tree.version} ships no {unknown}")
            files = list(args.file)
        else:
            files = suite.select(tree, args)
        expected = load_expected(suite)
        reports: dict[str, Report] = {}
        lines = []
        pytest_args = [
            *args.pytest_args,
            *(f"--deselect={t}" for t in suite.quick_deselect if args.quick),
        ]
        key = plain_key(files, pytest_args)
        record = RECORDED / f"{suite.name}{'-quick' if args.quick else ''}.json"
        todo: list[str] = []
        for mode in modes:
            path = workdir / f"report-{mode}.json"
            old = json.loads(path.read_text()) if path.exists() else {}
            if args.reuse and mode == "plain" and old.get("key") == key:
                print(f"== {mode}: reusing {path}")
                reports[mode] = old
            elif args.reuse and mode == "plain" and not args.recorded:
                why = (
                    f"{path.name} ran in another environment or for other files"
                    f"{_key_change(old.get('key'), key)}"
                    if old
                    else f"no {path.name} kept"
                )
                print(f"== {mode}: {why}: running plain")
                todo.append(mode)
            elif args.recorded and mode == "plain" and not args.record:
                kept = json.loads(record.read_text()) if record.exists() else {}
                if kept.get("key") == key:
                    print(
                        f"== {mode}: the outcomes recorded in {record.relative_to(HERE.parent.parent)}"
                    )
                    reports[mode] = kept
                else:
                    print(
                        f"== {mode}: {record.name} was recorded in another"
                        " environment or for other files: running plain"
                        f"{_key_change(kept.get('key'), key)}"
                    )
                    todo.append(mode)
            else:
                todo.append(mode)

        def run(mode: str) -> Report:
            return run_mode(
                suite, mode, tree.root, files, pytest_args, quiet=args.jobs > 1
            )

        # Modes are independent pytest processes: with --jobs, side by side.
        with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
            for mode, report in zip(todo, pool.map(run, todo), strict=True):
                if args.jobs > 1:
                    print(f"== {suite.name}, {mode}: pytest's output", flush=True)
                    print(report.pop("stdout", ""), flush=True)
                report["key"] = key
                path = workdir / f"report-{mode}.json"
                path.write_text(json.dumps(report, indent=0, sort_keys=True))
                reports[mode] = report
                if args.record and mode == "plain":
                    kept = {k: v for k, v in report.items() if k != "stdout"}
                    kept["recorded"] = time.strftime("%Y-%m-%d", time.gmtime())
                    record.parent.mkdir(exist_ok=True)
                    record.write_text(
                        json.dumps({**kept, "key": key}, indent=0, sort_keys=True)
                        + "\n"
                    )
                    print(f"== {mode}: recorded in {record}")
        lines = [summarise(suite, mode, reports[mode]) for mode in modes]
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)

    problems, explained = compare(suite, reports, files, expected, args)
    print(f"\n== {suite.name} {tree.version}: summary (times, outcomes)")
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


# --- suites of a release tag's tests, under the leak checkers -------------------


def tagged_suite(
    name: str,
    repo: str,
    *,
    ini: str,
    quick: Sequence[str],
    deselect: tuple[str, ...] = (),
) -> Suite:
    """A library whose tests are in its GitHub release tag only, run against the
    installed library plain and under the leak checkers (its own code is not
    patched: every leak report is about its code or lift's checker).

    `ini`: the `[pytest]` section its `pyproject.toml` declares, as an ini file
    (written to the tree's root, so no config above it applies); `quick`: test
    files or ids for `--quick`.
    """

    def prepare(dest: pathlib.Path, args: argparse.Namespace) -> Tree:
        root = github_tests(name, repo, dest, args.source)
        (root / "pytest.ini").write_text(ini)
        shipped = sorted(
            str(p.relative_to(root)) for p in (root / "tests").glob("test_*.py")
        )
        return Tree(root, shipped, installed(name))

    def select(tree: Tree, args: argparse.Namespace) -> list[str]:
        return list(quick) if args.quick else ["tests"]

    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--source",
            metavar="PATH",
            help=f"{name}'s tests: a checkout (holding tests/), a git repository"
            f" (its tag v<version> is read) or a tar archive of the tag",
        )

    return Suite(
        name=name,
        expected=f"{name}_expected.toml",
        modes={"plain": PLAIN, **LEAK_MODES},
        default_modes=("plain", "leaks"),
        prepare=prepare,
        select=select,
        quick_help=" ".join(quick),
        add_arguments=add_arguments,
        deselect=deselect,
    )


def sdist_suite(
    name: str,
    *,
    tests: str,
    ini: str,
    quick: Sequence[str],
    deselect: tuple[str, ...] = (),
    pytest_args: tuple[str, ...] = (),
) -> Suite:
    """A library whose tests are in its sdist (`tests`: their folder), run
    against the installed library plain and under the leak checkers, as
    `tagged_suite`'s are."""

    def prepare(dest: pathlib.Path, args: argparse.Namespace) -> Tree:
        root = sdist_tests(name, tests, dest, args.sdist)
        (root / "pytest.ini").write_text(ini)
        return Tree(root, [tests], installed(name))

    def select(tree: Tree, args: argparse.Namespace) -> list[str]:
        return list(quick) if args.quick else [tests]

    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--sdist", metavar="PATH", help=f"{name}'s sdist to use")

    return Suite(
        name=name,
        expected=f"{name}_expected.toml",
        modes={"plain": PLAIN, **LEAK_MODES},
        default_modes=("plain", "leaks"),
        prepare=prepare,
        select=select,
        quick_help=" ".join(quick),
        add_arguments=add_arguments,
        deselect=deselect,
        pytest_args=pytest_args,
    )


def wheel_suite(
    name: str,
    package: str,
    *,
    quick: Sequence[str],
    deselect: tuple[str, ...] = (),
    quick_deselect: tuple[str, ...] = (),
    ignore: tuple[str, ...] = (),
) -> Suite:
    """A library that ships its tests in its wheel (`<package>/**/*_test.py`,
    as optax does), run against the installed library plain and under the leak
    checkers, as `tagged_suite`'s are. The test files are copied out of the
    installed package, with their paths inside it (`_src/base_test.py`);
    `ignore`: files a whole run leaves out."""

    def prepare(dest: pathlib.Path, args: argparse.Namespace) -> Tree:
        spec = importlib.util.find_spec(package)
        if spec is None or spec.origin is None:
            sys.exit(f"{package} is not installed: install jax-lift[peers]")
        src = pathlib.Path(spec.origin).parent
        shipped = sorted(str(p.relative_to(src)) for p in src.rglob("*_test.py"))
        for rel in shipped:
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src / rel, dest / rel)
        # A config of its own, so that no ini file above `dest` applies.
        (dest / "pytest.ini").write_text("[pytest]\npython_files = *_test.py\n")
        return Tree(dest, shipped, installed(name))

    def select(tree: Tree, args: argparse.Namespace) -> list[str]:
        return list(quick) if args.quick else tree.shipped

    return Suite(
        name=name,
        expected=f"{package}_expected.toml",
        modes={"plain": PLAIN, **LEAK_MODES},
        default_modes=("plain", "leaks"),
        prepare=prepare,
        select=select,
        quick_help=" ".join(quick),
        deselect=deselect,
        quick_deselect=quick_deselect,
        # Test files share names across the package's folders.
        pytest_args=(
            "--import-mode=importlib",
            *(f"--ignore={path}" for path in ignore),
        ),
    )
