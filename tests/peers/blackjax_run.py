"""Run blackjax's own tests plain, lifted and lifted-and-jitted; compare outcomes.

    python tests/peers/blackjax_run.py            # every test file but its benchmarks
    python tests/peers/blackjax_run.py --quick    # three files (QUICK_FILES)
    python tests/peers/blackjax_run.py --sdist blackjax-1.7.1.tar.gz -- -x
    python tests/peers/blackjax_run.py --quick --modes plain,lifted,jitted,leaks

blackjax ships its tests in its sdist only: the runner downloads the sdist of
the installed blackjax (`pip download --no-binary :all: --no-deps`) unless
`--sdist` gives one, and runs its `tests/` against the installed blackjax:
plain, with every top-level factory's result lifted (`lifted`), and lifted with
each kernel's `init` and `step` called through `jax.jit` (`jitted`).
Exits non-zero when a test's outcome in another mode differs from the plain
run and `blackjax_expected.toml` does not list it with a reason, when an entry
there no longer matches a difference, or when the patch was not live: no
factory patched, no kernel lifted in a file that builds them, or a factory's
result that came back unlifted. See tests/peers/harness.py and
docs/guides/peer-suites.md.
"""

from __future__ import annotations

import argparse
import collections
import pathlib
import sys

from harness import (
    LEAK_MODES,
    PLAIN,
    Mode,
    Report,
    Suite,
    Tree,
    file_of,
    installed,
    main,
    pip_sdist,
)

MODES = {
    "plain": PLAIN,
    "lifted": Mode(
        "every top-level factory's kernel lifted",
        args=("-p", "blackjax_plugin", "--peers-mode=lifted"),
    ),
    "jitted": Mode(
        "lifted, the kernel's init and step called through jax.jit",
        args=("-p", "blackjax_plugin", "--peers-mode=jitted"),
    ),
    **LEAK_MODES,
}
# A few files that build kernels through `blackjax.<name>` in every test,
# blackjax's own compilation counts among them.
QUICK_FILES = (
    "tests/mcmc/test_barker.py",
    "tests/test_api_protocols.py",
    "tests/test_compilation.py",
)


def _prepare(dest: pathlib.Path, args: argparse.Namespace) -> Tree:
    root = pip_sdist("blackjax", dest, args.sdist)
    return Tree(root, ["tests"], installed("blackjax"))


def _select(tree: Tree, args: argparse.Namespace) -> list[str]:
    return list(QUICK_FILES) if args.quick else ["tests"]


def _check_live(
    mode: str, report: Report, files: list[str], args: argparse.Namespace
) -> list[str]:
    if mode not in ("lifted", "jitted"):
        return []
    problems: list[str] = []
    if report["patched"] == 0:
        problems.append(f"{mode}: no blackjax factory was patched")
    per_file: collections.Counter[str] = collections.Counter()
    for nodeid, test in report["tests"].items():
        per_file[file_of(nodeid)] += test.get("lifted", 0)
        if test.get("lifted", 0) < test.get("built", 0):
            problems.append(
                f"{mode}: {nodeid}: {test['built']} kernels built,"
                f" only {test['lifted']} came back lifted"
            )
    for rel in files:
        if rel in QUICK_FILES and per_file[rel] == 0:
            problems.append(f"{mode}: {rel} builds kernels but lifted none")
    return problems


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sdist", metavar="PATH", help="blackjax's sdist to use")


SUITE = Suite(
    name="blackjax",
    expected="blackjax_expected.toml",
    modes=MODES,
    default_modes=("plain", "lifted"),
    prepare=_prepare,
    select=_select,
    quick_help=" ".join(QUICK_FILES),
    add_arguments=_add_arguments,
    check_live=_check_live,
    patched_what="factories",
    # blackjax's benchmarks time its samplers on large regressions through
    # pytest-benchmark's fixture, which the peers extra does not install;
    # without it their file fails to collect and stops the whole run.
    pytest_args=("--ignore=tests/test_benchmarks.py",),
)


if __name__ == "__main__":
    sys.exit(main(SUITE, __doc__))
