"""Run optimistix's own tests plain and under the leak checkers; compare outcomes.

    python tests/peers/optimistix_run.py              # every test file, plain and leaks
    python tests/peers/optimistix_run.py --quick      # QUICK (about 3 minutes)
    python tests/peers/optimistix_run.py --modes plain,leaks,jax-leaks,exhaustive
    python tests/peers/optimistix_run.py --source ~/src/optimistix -- -x

optimistix's tests are in its git tag only: the runner unpacks the copy pinned
in tests/peers/sources for the installed version, or downloads the tag from
GitHub, or takes `--source`, and runs its `tests/` against the installed
optimistix with the configuration its `pyproject.toml` declares (jaxtyping's
pytest plugin checking optimistix with beartype, warnings as errors; without
pytest-benchmark's `--benchmark-skip`: no test uses it). optimistix is not
patched: a test that fails only under a leak checker is a leak report on
optimistix's (or equinox's, lineax's) code, false unless
`optimistix_expected.toml` shows the escape. See tests/peers/harness.py and
docs/guides/peer-suites.md.
"""

from __future__ import annotations

import sys

from harness import main, tagged_suite

# optimistix 0.1.0's [tool.pytest.ini_options], less `--benchmark-skip`.
INI = """\
[pytest]
addopts = --jaxtyping-packages=optimistix,beartype.beartype(conf=beartype.BeartypeConf(strategy=beartype.BeartypeStrategy.On))
filterwarnings =
    error
    ignore:Setting `jax_pmap_shmap_merge:DeprecationWarning
"""
# Root finds, minimisers and fixed points, each solver run under
# `eqx.filter_jit`, looping in equinox's `while_loop` and throwing through
# `eqx.error_if`; `filter_grad` through BFGS, and optax's minimisers (their
# recompilation counted). The `*_jvp` tests and `test_minimise` (460 of the
# suite's 811 tests) are left to the full run.
QUICK = (
    "tests/test_fixed_point.py::test_fixed_point",
    "tests/test_fixed_point.py::test_bisection",
    "tests/test_root_find.py::test_root_find",
    "tests/test_root_find.py::test_bisection_flip",
    "tests/test_root_find.py::test_newton_bounded",
    "tests/test_root_find.py::test_root_via_min",
    "tests/test_root_find.py::test_bad_root_via_min",
    "tests/test_minimise.py::test_golden_search",
    "tests/test_minimise.py::test_nonlinear_cg_methods",
    "tests/test_minimise.py::test_bfgs_float32",
    "tests/test_minimise.py::test_optax_recompilation",
)

SUITE = tagged_suite(
    "optimistix",
    "patrick-kidger/optimistix",
    ini=INI,
    quick=QUICK,
)


if __name__ == "__main__":
    sys.exit(main(SUITE, __doc__))
