"""Run flax's own nnx tests plain and under the leak checkers; compare outcomes.

    python tests/peers/flax_run.py                 # every nnx test file, plain and leaks
    python tests/peers/flax_run.py --quick         # QUICK (about 2 minutes of CPU)
    python tests/peers/flax_run.py --modes plain,leaks,jax-leaks,exhaustive
    python tests/peers/flax_run.py --sdist flax-0.12.8.tar.gz -- -x

flax ships its tests in its sdist: the runner unpacks the copy of
`tests/nnx` pinned in tests/peers/sources for the installed version, or
downloads the installed version's sdist, or takes `--sdist`, and runs
`tests/nnx` against the installed flax with the configuration its
`pyproject.toml` declares (warnings as errors, less a list it ignores). flax is
not patched: a test that fails only under a leak checker is a leak report on
flax's code, false unless `flax_expected.toml` shows the escape. See
tests/peers/harness.py and docs/guides/peer-suites.md.
"""

from __future__ import annotations

import sys

from harness import main, sdist_suite

# flax 0.12.8's [tool.pytest.ini_options].
_IGNORED = (
    "ignore:No GPU/TPU found, falling back to CPU.*:UserWarning",
    "ignore:`flax.traverse_util.Traversal` will be deprecated.*:DeprecationWarning",
    "ignore:Flax Checkpointing will soon be deprecated in favor of Orbax.*:DeprecationWarning",
    "ignore:.*The inputs_kv arg will be deprecated soon. Use inputs_k and inputs_v instead.*:DeprecationWarning",
    "ignore:.*the function signature of MultiHeadDotProductAttention's `__call__` method has changed.*:DeprecationWarning",
    "ignore:.*ml_dtypes.float8_e4m3b11 is deprecated.*:DeprecationWarning",
    "ignore:The --rsyncdir command line argument and rsyncdirs config variable are deprecated.:DeprecationWarning",
    "ignore:.*jax.random.KeyArray is deprecated.*:DeprecationWarning",
    "ignore:.*jax.core.Shape is deprecated.*:DeprecationWarning",
    "ignore:.*pkg_resources is deprecated as an API.*:DeprecationWarning",
    "ignore:.*Deprecated call to.*pkg_resources.declare_namespace.*:DeprecationWarning",
    "ignore:.*jax.xla_computation is deprecated.*:DeprecationWarning",
    "ignore:.*Couldn't find sharding info under RestoreArgs.*:UserWarning",
    "ignore:.*invalid value encountered in cast.*:RuntimeWarning",
    "ignore:.*divide by zero encountered in.*:RuntimeWarning",
    "ignore:.*numpy.core is deprecated.*:DeprecationWarning",
    "ignore:.*shape requires ndarray or scalar arguments.*:DeprecationWarning",
    "ignore:.*Sharding info not provided when restoring.*:UserWarning",
    "ignore:.*pkg_resources is deprecated as an API.*:UserWarning",
    "ignore:.*[Data|Static]' is deprecated, please replace.*:DeprecationWarning",
    "ignore:.*Implicit conversion of an array to a dtype is deprecated; rather than dtype=arr use dtype=arr.dtype.*:DeprecationWarning",
    "ignore:.*Setting `jax_pmap_shmap_merge` is deprecated in JAX.*:DeprecationWarning",
)
INI = (
    "[pytest]\ndoctest_optionflags = NUMBER ELLIPSIS\nfilterwarnings =\n    error\n"
    + "".join(f"    {line}\n" for line in _IGNORED)
)
# nnx.Optimizer and its state through `nnx.jit` (optimizer_test.py), the
# graph's split, merge and update with shared references (graph_utils_test.py),
# Rngs and their streams under transforms, Variables; and `nnx.custom_vjp`,
# whose `test_diff_state` JAX's checker fails (a tracer held by a JAX frame).
QUICK = (
    "tests/nnx/optimizer_test.py",
    "tests/nnx/graph_utils_test.py",
    "tests/nnx/rngs_test.py",
    "tests/nnx/variable_test.py",
    "tests/nnx/transforms_test.py::TestCustomVJP",
)

SUITE = sdist_suite(
    "flax",
    tests="tests/nnx",
    ini=INI,
    quick=QUICK,
)


if __name__ == "__main__":
    sys.exit(main(SUITE, __doc__))
