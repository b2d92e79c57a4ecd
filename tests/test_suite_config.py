"""The suite's own configuration (`tests/conftest.py`): `pytest --lift-leaks`
runs under lift's plugin alone, as `scripts/test.sh --leaks lift` does and the
Accelerators page tells users to run it; JAX's checker stays the default
otherwise, and an explicit `JAX_CHECK_TRACER_LEAKS` is kept."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import child_path

ROOT = Path(__file__).resolve().parent.parent

# Configures a session (collecting one small file), then prints what JAX's
# checker and the variable the tests' own processes inherit say.
# JAX is imported after the conftest, as in any pytest run.
_PROBE = """
import os, sys
import pytest
code = pytest.main([sys.argv[1], "--collect-only", "-q", "-p", "no:cacheprovider",
                    *sys.argv[2:]])
import jax
print("checker", bool(jax.config.jax_check_tracer_leaks),
      os.environ["JAX_CHECK_TRACER_LEAKS"], "exit", int(code))
"""


def _checker(*args: str, chosen: str | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "JAX_CHECK_TRACER_LEAKS"}
    if chosen is not None:
        env["JAX_CHECK_TRACER_LEAKS"] = chosen
    env["PYTHONPATH"] = child_path()
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, str(ROOT / "tests" / "base"), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
        check=False,
    )
    line = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert line.startswith("checker"), done.stdout[-2000:] + done.stderr[-2000:]
    return line


@pytest.mark.parametrize(
    ("args", "chosen", "expected"),
    [
        ((), None, "checker True 1 exit 0"),
        (("--lift-leaks",), None, "checker False 0 exit 0"),
        (("--lift-leaks",), "1", "checker True 1 exit 0"),
        (("--lift-leaks",), "0", "checker False 0 exit 0"),
    ],
    ids=["default", "plugin alone", "both, chosen", "plugin, chosen"],
)
def test_lift_leaks_alone_turns_jax_checker_off(
    args: tuple[str, ...], chosen: str | None, expected: str
):
    assert _checker(*args, chosen=chosen) == expected
