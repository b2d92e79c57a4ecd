"""The design card's form, `from lift import lift` then `@lift`, and the module
itself called as a decorator (`import lift` then `@lift`): refused, saying both
forms that work."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import types
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from helpers import child_path

import lift as lift_module
from lift import lift

ROOT = Path(__file__).resolve().parents[2]


def test_from_lift_import_lift_decorates():
    traces: list[object] = []

    def make(scale: float):
        @lift
        def model(x):
            return scale * jnp.tanh(x)

        return model

    @jax.jit
    def apply(model, x):
        traces.append(None)
        return model(x)

    assert lift_module.is_lifted(make(2.0))
    assert apply(make(2.0), 0.5) == pytest.approx(2.0 * float(jnp.tanh(0.5)))
    assert apply(make(3.0), 0.5) == pytest.approx(3.0 * float(jnp.tanh(0.5)))
    assert len(traces) == 1, "a new scale is a new input, not a new program"


def test_the_module_called_as_a_decorator_names_both_forms():
    with pytest.raises(lift_module.LiftError) as info:

        @lift_module  # the mistake: `import lift` then `@lift`
        def model(x):
            return x

    text = str(info.value)
    assert isinstance(info.value, TypeError)  # what Python raised before
    line = test_the_module_called_as_a_decorator_names_both_forms.__code__
    assert text.startswith(
        "the module lift was called on "
        "test_the_module_called_as_a_decorator_names_both_forms.<locals>.model "
        f"({__file__}:"
    )
    assert line.co_filename == __file__
    assert (
        "Fix: write `@lift.lift`, or import the function, `from lift import lift`"
        in text
    )
    assert info.value.anchor == "lift-module-called"
    with pytest.raises(lift_module.LiftError, match=r"^the module lift was called: "):
        lift_module()


def test_the_module_stays_a_module_with_lazy_names_and_pickles_by_reference():
    assert isinstance(lift_module, types.ModuleType)
    assert sys.modules["lift"] is lift_module
    assert pickle.loads(pickle.dumps(lift_module.lift)) is lift
    assert pickle.loads(pickle.dumps(lift_module.jit)) is lift_module.jit
    err = pickle.loads(pickle.dumps(lift_module.LiftError("x", anchor="options")))
    assert err.anchor == "options"
    # Importing it imports no JAX until a name is read.
    check = (
        "import sys, lift\n"
        "assert 'jax' not in sys.modules\n"
        "try:\n    lift(print)\nexcept lift.LiftError as e:\n    print(e.anchor)\n"
        "assert 'jax' not in sys.modules\n"
        "from lift import lift as decorator\n"
        "assert decorator is lift.lift and 'jax' in sys.modules\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", check],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": child_path()},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "lift-module-called\n"
