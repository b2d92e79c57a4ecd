"""Test environment: eight CPU devices and JAX's own tracer-leak checking.

`scripts/test.sh` sets the same variables; setting them here too keeps a bare
`pytest` run honest. Both must happen before JAX is imported. JAX's checker is
only a default: `pytest --lift-leaks` runs the suite under lift's own plugin
instead, with JAX's checker off (its fast mode needs it off), as
`scripts/test.sh --leaks lift` does. An explicit `JAX_CHECK_TRACER_LEAKS` is
kept: `JAX_CHECK_TRACER_LEAKS=1 pytest --lift-leaks` runs under both.

`LIFT_VERIFY=1 pytest ...` (or `pytest --lift-verify ...`) runs the suite with
every fast path of lift checked against the full walk (`lift.verifying`), as CI
does.
"""

import gc
import os
import sys
from collections.abc import Iterator

import pytest

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
_CHECKER_CHOSEN = "JAX_CHECK_TRACER_LEAKS" in os.environ
os.environ.setdefault("JAX_CHECK_TRACER_LEAKS", "1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--lift-verify",
        action="store_true",
        help="check every fast path of lift against the full walk (LIFT_VERIFY=1)",
    )


def pytest_configure(config: pytest.Config) -> None:
    if not _CHECKER_CHOSEN and config.getoption("--lift-leaks", default=False):
        # lift's plugin alone, as `scripts/test.sh --leaks lift` runs it (and
        # so the processes the tests start).
        import jax

        os.environ["JAX_CHECK_TRACER_LEAKS"] = "0"
        jax.config.update("jax_check_tracer_leaks", False)
    if config.getoption("--lift-verify"):
        os.environ["LIFT_VERIFY"] = "1"  # for subprocesses
        from lift._jit import verify as _verify

        _verify.STATE.on = True


# Each test module starts on a heap without what the modules before it left:
# JAX's caches emptied (`jax.clear_caches`: traced and compiled programs,
# which no two test modules share) and the garbage collected. The heap is
# then what the imports made, about 130 000 objects, instead of the
# 960 000 that the 2 000 tests of tests/capture and tests/integration leave
# behind. Whatever walks the heap pays for its size: JAX's checker collects
# garbage and asks for the referrers of each exiting trace, and its report of
# a leak walks referrers again (a leak test of tests/leaks took 2 to 10 s on
# the grown heap); lift's plugin collects garbage after a phase that leaves
# some. The three slowest leak files of the suite took 273 s after
# tests/capture and tests/integration, and 94 s with this.
#
# Under JAX's checker the heap is also frozen (`gc.freeze`) between modules:
# what the imports made, which no test makes or drops, is left out of every
# collection (those of tests/lifted/test_soundness.py: 3.7 s, frozen 1.7 s).
# Not for the tests that ask the collector who holds an object
# (`gc.get_referrers`, which does not see frozen objects): lift's leak tests and
# its JAX compatibility tests, and every test under lift's plugin (which names
# JAX's caches holding a tracer that way). Tracers and the traces they refer to
# are made by the tests, never frozen: what JAX's checker finds is unchanged.
_WHOLE_HEAP = ("leaks", "compat")
_freezing = False
_module: object = None


def pytest_collection_finish(session: pytest.Session) -> None:
    global _freezing
    _freezing = os.environ.get(
        "JAX_CHECK_TRACER_LEAKS"
    ) == "1" and not session.config.getoption("--lift-leaks", default=False)


# On Python 3.11 an exception raised inside JAX's pytree flattening (a
# registered node whose flatten raises, an `is_leaf` that raises) leaves the
# interpreter's recursion depth counted up by the frames it unwinds: 3 levels a
# raise with jaxlib 0.8.0 and 0.10.2, none on Python 3.13 with jaxlib 0.12.
# The suite raises there on purpose hundreds of times (bad pytrees, hostile
# objects), and some later test, depending on the order, ran out of depth:
# `lift.lift(np)` raised `RecursionError` 30 frames deep, and pytest's report
# of it overflowed too. Each module gets back the depth the ones before it
# lost, as a higher limit.
_free_at_start: int | None = None


def _restore_depth() -> None:
    # Imported here: `helpers` imports JAX, which must follow this file's set-up.
    from helpers import free_depth

    global _free_at_start
    free = free_depth()
    if _free_at_start is None:
        _free_at_start = free
    elif free < _free_at_start:
        sys.setrecursionlimit(sys.getrecursionlimit() + _free_at_start - free)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # tryfirst: before the module's fixtures are set up.
    global _module
    if item.path == _module:
        return
    _module = item.path
    import jax

    gc.unfreeze()
    jax.clear_caches()
    gc.collect()
    if sys.version_info < (3, 12):
        _restore_depth()
    if _freezing and item.path.parent.name not in _WHOLE_HEAP:
        gc.freeze()


@pytest.fixture(scope="session", autouse=True)
def _shared_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """tests/leaks runs small test files by pytest in subprocesses
    (`shared_runs`): started with the session, they run beside the tests
    before the ones that read them."""
    runs = sys.modules.get("shared_runs")
    if runs is not None:
        runs.start_all(tmp_path_factory)
    yield
    if runs is not None:
        runs.stop_all()


@pytest.fixture
def x64_off():
    """float32 JAX for the test, whatever the test before it left."""
    import jax

    jax.config.update("jax_enable_x64", False)
    yield
    jax.config.update("jax_enable_x64", False)
