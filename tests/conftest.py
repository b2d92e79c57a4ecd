"""Test environment: eight CPU devices and JAX's own tracer-leak checking.

`scripts/test.sh` sets the same variables; setting them here too keeps a bare
`pytest` run honest. Both must happen before JAX is imported. JAX's checker is
only a default: `scripts/test.sh --leaks lift` runs the suite under lift's own
plugin instead (`pytest --lift-leaks` with `JAX_CHECK_TRACER_LEAKS=0`, which is
kept here), whose fast mode needs JAX's checker off.

`LIFT_VERIFY=1 pytest ...` (or `pytest --lift-verify ...`) runs the suite with
every fast path of lift checked against the full walk (`lift.verifying`), as CI
does.
"""

import gc
import os

import pytest

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_CHECK_TRACER_LEAKS", "1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--lift-verify",
        action="store_true",
        help="check every fast path of lift against the full walk (LIFT_VERIFY=1)",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--lift-verify"):
        os.environ["LIFT_VERIFY"] = "1"  # for subprocesses
        from lift._capture import verify as _verify

        _verify.STATE.on = True


# Under JAX's leak checker every trace exit runs `gc.collect()` and
# `gc.get_referrers(trace)`, each a pass over every object the collector
# tracks: most of them the modules imported before the first test (JAX, NumPy,
# optax, equinox, flax, ...), which no test makes or drops. Frozen
# (`gc.freeze`), they are left out of those passes (a full collection after
# the suite's imports: about 200 ms on 2 busy cores, frozen a few µs; the
# collections of tests/capture/test_soundness.py: 3.7 s, frozen 1.7 s). Not
# for the tests that ask the collector who holds an object
# (`gc.get_referrers`, which does not see frozen objects): lift's leak tests and
# its JAX compatibility tests, and every test under lift's plugin (which names
# JAX's caches holding a tracer that way). Tracers and the traces they refer to
# are made by the tests, never frozen: what JAX's checker finds is unchanged.
_WHOLE_HEAP = ("leaks", "compat")
_freezing = False


def pytest_collection_finish(session: pytest.Session) -> None:
    global _freezing
    _freezing = os.environ.get(
        "JAX_CHECK_TRACER_LEAKS"
    ) == "1" and not session.config.getoption("--lift-leaks", default=False)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if not _freezing:
        return
    whole_heap = item.path.parent.name in _WHOLE_HEAP
    if whole_heap and gc.get_freeze_count():
        gc.unfreeze()
    elif not whole_heap and not gc.get_freeze_count():
        gc.collect()  # what earlier tests left is not frozen for good
        gc.freeze()


@pytest.fixture
def x64_off():
    """float32 JAX for the test, whatever the test before it left."""
    import jax

    jax.config.update("jax_enable_x64", False)
    yield
    jax.config.update("jax_enable_x64", False)
