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


@pytest.fixture
def x64_off():
    """float32 JAX for the test, whatever the test before it left."""
    import jax

    jax.config.update("jax_enable_x64", False)
    yield
    jax.config.update("jax_enable_x64", False)
