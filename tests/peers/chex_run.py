"""Run chex's own tests plain and under the leak checkers; compare outcomes.

    python tests/peers/chex_run.py                 # every test file, plain and leaks
    python tests/peers/chex_run.py --quick         # QUICK (about 2 minutes of CPU)
    python tests/peers/chex_run.py --modes plain,leaks,jax-leaks,exhaustive
    python tests/peers/chex_run.py --file _src/dataclass_test.py -- -x

chex ships its tests in its wheel (`chex/**/*_test.py`): the runner copies
them out of the installed chex and runs them against it. chex is not patched:
a test that fails only under a leak checker is a leak report on chex's code,
false unless `chex_expected.toml` shows the escape. See tests/peers/harness.py
and docs/guides/peer-suites.md.
"""

from __future__ import annotations

import sys

from harness import main, wheel_suite

# Every file but `fake_set_n_cpu_devices_test.py`, which sets XLA's device
# count and must run alone: chex's asserts, eager and inside `jax.jit`
# (`chexify`'s checks staged out through callbacks, `assert_max_traces`), its
# `variants` (with and without `jit`, `pmap` faked), `fake_jit`/`fake_pmap`,
# dataclasses as pytrees.
QUICK = (
    "_src/asserts_test.py",
    "_src/asserts_chexify_test.py",
    "_src/asserts_internal_test.py",
    "_src/dataclass_test.py",
    "_src/dimensions_test.py",
    "_src/fake_test.py",
    "_src/restrict_backends_test.py",
    "_src/variants_test.py",
    "_src/warnings_test.py",
    "chex_test.py",
)
# `test_hard` and `test_hard_with_stop_gradient` (a prefix of both): six
# numerical-gradient checks of a ten-step inner loop, op by op, which take
# more CPU than the rest of QUICK. The six easy ones stay.
QUICK_DESELECT = ("_src/asserts_test.py::NumericalGradsAssertTest::test_hard",)

SUITE = wheel_suite("chex", "chex", quick=QUICK, quick_deselect=QUICK_DESELECT)


if __name__ == "__main__":
    sys.exit(main(SUITE, __doc__))
