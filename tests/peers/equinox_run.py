"""Run equinox's own tests plain and under the leak checkers; compare outcomes.

    python tests/peers/equinox_run.py                 # every test file, plain and leaks
    python tests/peers/equinox_run.py --quick         # QUICK (about 3 minutes)
    python tests/peers/equinox_run.py --modes plain,leaks,jax-leaks,exhaustive
    python tests/peers/equinox_run.py --source ~/src/equinox -- -x

equinox's tests are in its git tag only (its sdist and wheel leave them out):
the runner unpacks the copy pinned in tests/peers/sources for the installed
version, or downloads the tag from GitHub, or takes `--source`, and runs its
`tests/` against the installed equinox with the configuration its
`pyproject.toml` declares (jaxtyping's pytest plugin checking equinox with
beartype, warnings as errors). equinox itself is not patched: a test that
fails only under a leak checker is a leak report on equinox's code, false
unless `equinox_expected.toml` shows the escape. See tests/peers/harness.py and
docs/guides/peer-suites.md.
"""

from __future__ import annotations

import sys

from harness import main, tagged_suite

# equinox 0.13.8's [tool.pytest.ini_options].
INI = """\
[pytest]
addopts = --jaxtyping-packages=equinox,beartype.beartype(conf=beartype.BeartypeConf(strategy=beartype.BeartypeStrategy.On))
filterwarnings =
    error
    ignore:Setting `jax_pmap_shmap_merge` is deprecated:DeprecationWarning
"""
# `eqx.error_if` and its `branched_error_if` (test_errors.py), `filter_jit`
# (test_jit.py), `filter_grad` and `filter_custom_jvp`/`vjp` (test_ad.py), the
# checkpointed and bounded `while_loop`s (test_while_loop.py).
QUICK = (
    "tests/test_errors.py",
    "tests/test_jit.py",
    "tests/test_ad.py",
    *(
        f"tests/test_while_loop.py::{name}"
        for name in (
            "test_forward",
            "test_notangent_forward",
            "test_backward_bounded",
            "test_nondifferentiable_body1",
            "test_zero_buffer",
            "test_body_fun_grads",
            "test_symbolic_zero",
        )
    ),
)
# `test_vmap_cotangent` (a checkpointed loop under `vmap` of its cotangent) is
# left to the full run: 9 s of the 23 s a quick run took a mode.
# They assert how long a loop takes (`timeit`: under 0.1 s, under 0.5 s, linear
# scaling within 25%): on a loaded machine they fail plain too, at random.
DESELECT = (
    "tests/test_while_loop.py::test_speed_while",
    "tests/test_while_loop.py::test_speed_buffer_while",
    "tests/test_while_loop.py::test_speed_grad_checkpointed_while",
)

SUITE = tagged_suite(
    "equinox",
    "patrick-kidger/equinox",
    ini=INI,
    quick=QUICK,
    deselect=DESELECT,
)


if __name__ == "__main__":
    sys.exit(main(SUITE, __doc__))
