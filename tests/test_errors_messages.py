"""The messages of `lift(obj)` for objects it cannot take, line by line, and the
docs anchor that ends each message of lift's: every one names a section of the
Errors page (`docs/errors.md`)."""

from __future__ import annotations

import re
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

import lift

ROOT = Path(__file__).resolve().parent.parent
ERRORS_PAGE = ROOT / "docs" / "errors.md"
HERE = re.escape(__file__)


def scale(x):
    return 2.0 * x


class Sub(lift.Lifted):
    pass


def test_a_jitted_function_suggests_lift_jit_or_lifting_first():
    with pytest.raises(
        lift.LiftError,
        match=(
            r"^lift\(\) got jax\.jit\(scale\), a compiled function "
            rf"\(scale \({HERE}:\d+\)\): jax\.jit keeps what scale captures as "
            r"constants of its program, out of lift's reach\.\n"
            r"Fix: compile with lift instead, `lift\.jit\(scale\)`, or lift before "
            r"jitting: `lift\(scale\)`, passed to your jitted code as an argument\.\n"
            r"Docs: errors\.md#lift-got-a-jax-jit-function$"
        ),
    ):
        lift.lift(jax.jit(scale))


def test_a_jitted_lambda_and_a_subclass():
    with pytest.raises(
        lift.LiftError,
        match=(
            r"^Sub\(\) got jax\.jit\(f\), a compiled function "
            rf"\(test_a_jitted_lambda_and_a_subclass\.<locals>\.<lambda> \({HERE}:\d+\)\): "
            r"jax\.jit keeps what f captures as constants of its program, out of "
            r"lift's reach\.\n"
            r"Fix: compile with lift instead, `lift\.jit\(f\)`, or lift before "
            r"jitting: `Sub\(f\)`, passed to your jitted code as an argument\.\n"
        ),
    ):
        Sub(jax.jit(lambda x: x))


def test_the_suggested_fixes_work():
    x = jnp.ones(3)
    assert lift.jit(scale)(x).tolist() == [2.0, 2.0, 2.0]
    step = jax.jit(lambda fn, x: fn(x))
    assert step(lift.lift(scale), x).tolist() == [2.0, 2.0, 2.0]


@pytest.mark.parametrize("kind", ["custom_jvp", "custom_vjp"])
def test_a_custom_derivative_suggests_closure_convert(kind: str):
    with pytest.raises(
        lift.LiftError,
        match=(
            rf"^lift\(\) got jax\.{kind}\(scale\) \(scale \({HERE}:\d+\)\), whose "
            r"derivative rules JAX holds where lift cannot make their captures "
            r"leaves\.\nFix: convert it by tracing, `lift\.closure_convert\(scale, "
            r"\*example_args\)`, or pass what it captures as arguments and lift "
            r"the function that calls it\.\n"
            r"Docs: errors\.md#lift-got-a-custom-derivative$"
        ),
    ):
        lift.lift(getattr(jax, kind)(scale))


def test_a_builtin_names_itself_in_the_fix():
    with pytest.raises(
        lift.LiftError,
        match=(
            r"^lift\(\) got the builtin 'len', which has no Python closure to "
            r"lift\.\nFix: call it from a Python function and lift that: "
            r"`lift\(lambda \*a: len\(\*a\)\)`\.\nDocs: errors\.md#lift-got-a-builtin$"
        ),
    ):
        lift.lift(len)


@pytest.mark.parametrize(
    ("obj", "anchor"),
    [
        (int, "lift-got-a-class"),
        (len, "lift-got-a-builtin"),
        (jax.jit(scale), "lift-got-a-jax-jit-function"),
        (jax.custom_jvp(scale), "lift-got-a-custom-derivative"),
        (3, "lift-got-a-value"),
    ],
)
def test_each_refusal_ends_with_its_docs_anchor(obj: object, anchor: str):
    with pytest.raises(lift.LiftError, match=rf"\nDocs: errors\.md#{anchor}$"):
        lift.lift(obj)


def _page_anchors() -> set[str]:
    return set(re.findall(r"\{#([\w-]+)\}", ERRORS_PAGE.read_text()))


def test_every_docs_anchor_in_lift_is_on_the_errors_page():
    used: set[str] = set()
    for module in (ROOT / "lift").glob("*.py"):
        text = module.read_text()
        used |= set(re.findall(r'docs_anchor\("([\w-]+)"\)', text))
        used |= set(re.findall(r'\banchor = "([\w-]+)"', text))
    assert used, "no message of lift names its docs anchor"
    assert sorted(used - _page_anchors()) == [], "anchors missing from docs/errors.md"
