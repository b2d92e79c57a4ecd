"""Run dm-haiku's own tests plain and under the leak checkers; compare outcomes.

    python tests/peers/haiku_run.py                 # every test file, plain and leaks
    python tests/peers/haiku_run.py --quick         # QUICK (about 2 minutes of CPU)
    python tests/peers/haiku_run.py --modes plain,leaks,jax-leaks,exhaustive
    python tests/peers/haiku_run.py --file _src/lift_test.py -- -x

dm-haiku ships its tests in its wheel (`haiku/**/*_test.py`): the runner
copies them out of the installed haiku and runs them against it. haiku is not
patched: a test that fails only under a leak checker is a leak report on
haiku's code, false unless `haiku_expected.toml` shows the escape. See
tests/peers/harness.py and docs/guides/peer-suites.md.
"""

from __future__ import annotations

import sys

from harness import main, wheel_suite

# haiku's own transforms inside `hk.transform` (`hk.vmap`, `hk.scan`,
# `hk.remat`, `hk.cond`, `hk.while_loop`, ... over its module-level frame
# stack: stateful_test.py), `hk.lift` of one transformed function into another,
# `hk.layer_stack` and `hk.multi_transform`.
QUICK = (
    "_src/stateful_test.py",
    "_src/lift_test.py",
    "_src/layer_stack_test.py",
    "_src/multi_transform_test.py",
)
# They import tensorflow, dm-tree or dill, which the `peers` extra does not
# install.
IGNORE = (
    "_src/transform_test.py",
    "_src/integration/jax2tf_test.py",
    "_src/data_structures_test.py",
    "_src/integration/float64_test.py",
    "_src/integration/half_test.py",
    "_src/moving_averages_test.py",
    "_src/recurrent_test.py",
    "_src/reshape_test.py",
)

SUITE = wheel_suite("dm-haiku", "haiku", quick=QUICK, ignore=IGNORE)


if __name__ == "__main__":
    sys.exit(main(SUITE, __doc__))
