"""Run optax's shipped tests plain, lifted and lifted-and-jitted; compare outcomes.

    python tests/peers/run.py            # the optimizer files, three modes
    python tests/peers/run.py --quick    # the same but the four heaviest files
    python tests/peers/run.py --all      # all test files in the optax wheel
    python tests/peers/run.py --modes plain,lifted -- -x   # extra pytest args
    python tests/peers/run.py --file _src/alias_test.py --modes plain,leaks

Exits non-zero when a test's outcome in another mode differs from the plain run
and `expected.toml` does not list it with a reason, when an entry there no
longer matches a difference, or when the patch was not live: a file that builds
optimizers lifted none of them, or a constructor's result came back unlifted.
The leak-checking modes (`leaks`, `jax-leaks`, `exhaustive`) run optax
unpatched under a leak checker. See tests/peers/harness.py and
docs/guides/peer-suites.md.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import pathlib
import shutil
import sys

from harness import LEAK_MODES, PLAIN, Mode, Report, Suite, Tree, file_of, main

MODES = {
    "plain": PLAIN,
    "lifted": Mode(
        "every optimizer and schedule lifted",
        args=("-p", "optax_plugin", "--peers-mode=lifted"),
    ),
    "jitted": Mode(
        "lifted, init and update called through jax.jit",
        args=("-p", "optax_plugin", "--peers-mode=jitted"),
    ),
    **LEAK_MODES,
}

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


def _prepare(dest: pathlib.Path, args: argparse.Namespace) -> Tree:
    """Copy optax's `*_test.py` files into `dest`."""
    import optax

    src = _optax_dir()
    files = sorted(str(p.relative_to(src)) for p in src.rglob("*_test.py"))
    for rel in files:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, dest / rel)
    # A config of its own, so that no ini file above `dest` applies.
    (dest / "pytest.ini").write_text("[pytest]\npython_files = *_test.py\n")
    stale = sorted(set(OPTIMIZER_FILES) - set(files))
    if stale:
        print(f"not in this optax any more: {stale}")
    return Tree(dest, files, optax.__version__)


def _select(tree: Tree, args: argparse.Namespace) -> list[str]:
    if args.all:
        return tree.shipped
    chosen = set(OPTIMIZER_FILES) - set(HEAVY_FILES if args.quick else ())
    return [f for f in tree.shipped if f in chosen]


def _check_live(
    mode: str, report: Report, files: list[str], args: argparse.Namespace
) -> list[str]:
    """Problems showing that the patch was not live in `mode`."""
    if mode not in ("lifted", "jitted"):
        return []
    problems = []
    if report["patched"] == 0:
        problems.append(f"{mode}: no optax function was patched")
    per_file: dict[str, int] = collections.Counter()
    for nodeid, module in report.get("modules", {}).items():
        per_file[file_of(nodeid)] += module["lifted"]
    for nodeid, test in report["tests"].items():
        per_file[file_of(nodeid)] += test.get("lifted", 0)
        if test.get("lifted", 0) < test.get("built", 0):
            problems.append(
                f"{mode}: {nodeid}: {test['built']} optimizers built,"
                f" only {test['lifted']} came back lifted"
            )
    for rel in files:
        if rel in OPTIMIZER_FILES and per_file[rel] == 0:
            problems.append(f"{mode}: {rel} builds optimizers but lifted none")
        if args.all and rel not in OPTIMIZER_FILES and per_file[rel] > 0:
            problems.append(
                f"{mode}: {rel} builds optimizers: add it to OPTIMIZER_FILES"
                " in tests/peers/run.py"
            )
    return problems


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--all", action="store_true", help="all optax test files")


SUITE = Suite(
    name="optax",
    expected="expected.toml",
    modes=MODES,
    default_modes=("plain", "lifted", "jitted"),
    prepare=_prepare,
    select=_select,
    quick_help=(
        "the optimizer files but the four heaviest, and MultiSteps' two mixed "
        "precision tests"
    ),
    # 35 s of a quick run's 117 (CPU, plain): MultiSteps in bfloat16 over many
    # steps. Its other tests (every k steps, a schedule of k, the state's
    # dtypes) still run it lifted.
    quick_deselect=(
        "transforms/_accumulation_test.py::AccumulationTest::test_multi_steps_mixed_precision",
    ),
    # optax's test files share names across its subpackages.
    pytest_args=("--import-mode=importlib",),
    add_arguments=_add_arguments,
    check_live=_check_live,
)


if __name__ == "__main__":
    sys.exit(main(SUITE, __doc__))
