"""Run numpyro's own tests plain and under the leak checkers; compare outcomes.

    python tests/peers/numpyro_run.py                # every test file, plain and leaks
    python tests/peers/numpyro_run.py --quick        # QUICK (about 2 minutes of CPU)
    python tests/peers/numpyro_run.py --modes plain,leaks,jax-leaks,exhaustive
    python tests/peers/numpyro_run.py --sdist numpyro-0.22.0.tar.gz -- -x

numpyro ships part of its tests in its sdist (`test/`, without `test/infer`
and `test/contrib`): the runner unpacks the copy pinned in tests/peers/sources
for the installed version, or downloads the installed version's sdist, or
takes `--sdist`, and runs its `test/` against the installed numpyro with the
configuration its `pyproject.toml` declares (warnings as errors). numpyro is
not patched: a test that fails only under a leak checker is a leak report on
numpyro's code, false unless `numpyro_expected.toml` shows the escape. See
tests/peers/harness.py and docs/guides/peer-suites.md.
"""

from __future__ import annotations

import sys

from harness import main, sdist_suite

# numpyro 0.22.0's [tool.pytest.ini_options], less `-v --color=yes`.
INI = """\
[pytest]
doctest_optionflags = ELLIPSIS NORMALIZE_WHITESPACE IGNORE_EXCEPTION_DETAIL
filterwarnings =
    error
    ignore:.*Attempting to hash a tracer:FutureWarning
    ignore:numpy.ufunc size changed,:RuntimeWarning
    ignore:Using a non-tuple sequence:FutureWarning
    ignore:jax.tree_structure is deprecated:FutureWarning
    ignore:numpy.linalg support is experimental:UserWarning
    ignore:scipy.linalg support is experimental:UserWarning
    once:No GPU:UserWarning
    once::DeprecationWarning
"""
# Its effect handlers (a module-level stack of handlers that every model call
# pushes and pops: what a leak scan walks at each test), SVI with numpyro's
# and optax's optimizers, MCMC's compiled samplers reused across runs, and
# `fori_collect` and friends.
QUICK = (
    "test/test_handlers.py",
    "test/test_optimizers.py",
    "test/test_compile.py",
    "test/test_util.py",
)

SUITE = sdist_suite(
    "numpyro",
    tests="test",
    ini=INI,
    quick=QUICK,
    # The examples are not in the sdist, and the datasets are downloaded.
    pytest_args=(
        "--ignore=test/test_examples.py",
        "--ignore=test/test_example_utils.py",
    ),
)


if __name__ == "__main__":
    sys.exit(main(SUITE, __doc__))
