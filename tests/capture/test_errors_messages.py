"""lift's messages, line by line: `lift(obj)` for objects it cannot take, a
capture used where its value is needed, a lifted factory, an attribute set on a
subclass instance, a `Lifted` as a static argument; and the docs anchor that ends
each message of lift's: every raise site names one, and each names a section of
the Errors page (`docs/errors.md`)."""

from __future__ import annotations

import ast
import dataclasses
import functools
import pickle
import re
import traceback
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
import pytest

import lift

ROOT = Path(__file__).resolve().parents[2]
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
            r"Docs: python -m lift explain lift-got-a-jax-jit-function$"
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
            r"Docs: python -m lift explain lift-got-a-custom-derivative$"
        ),
    ):
        lift.lift(getattr(jax, kind)(scale))


def test_a_builtin_names_itself_in_the_fix():
    with pytest.raises(
        lift.LiftError,
        match=(
            r"^lift\(\) got the builtin 'len', which has no Python closure to "
            r"lift\.\nFix: call it from a Python function and lift that: "
            r"`lift\(lambda \*a: len\(\*a\)\)`\.\nDocs: python -m lift explain lift-got-a-builtin$"
        ),
    ):
        lift.lift(len)


def test_lift_above_staticmethod_says_the_decorators_are_in_the_wrong_order():
    # Regression: `@lift.lift` above `@staticmethod` was called "a builtin".
    with pytest.raises(
        lift.LiftError,
        match=(
            rf"^lift\(\) got a staticmethod \(.*Model\.step \({HERE}:\d+\)\): "
            r"the decorators are in the wrong order\. `@lift\.lift` above "
            r"`@staticmethod` receives the staticmethod object, not the "
            r"function\.\nFix: put `@staticmethod` on top, so that lift receives "
            r"the function:\n\n    @staticmethod\n    @lift\.lift\n"
            r"    def step\(x\): \.\.\.\nDocs: python -m lift explain lift-above-staticmethod$"
        ),
    ):

        class Model:
            @lift.lift
            @staticmethod
            def step(x):
                return 2.0 * x


def test_lift_above_classmethod_says_the_decorators_are_in_the_wrong_order():
    with pytest.raises(
        lift.LiftError,
        match=(
            r"^lift\(\) got a classmethod \(.*Model\.make .*\): the decorators "
            r"are in the wrong order\. `@lift\.lift` above `@classmethod` .*\n"
            r"Fix: put `@classmethod` on top, so that lift receives the "
            r"function:\n\n    @classmethod\n    @lift\.lift\n"
            r"    def make\(cls, x\): \.\.\.\nDocs: python -m lift explain lift-above-staticmethod$"
        ),
    ):

        class Model:
            @lift.lift
            @classmethod
            def make(cls, x):
                return x


@pytest.mark.parametrize(
    ("kind", "below", "args"),
    [
        ("staticmethod", r"@lift\.jit", "x"),
        ("classmethod", r'@lift\.jit\(static_argnames="cls"\)', "cls, x"),
    ],
    ids=["staticmethod", "classmethod"],
)
def test_lift_jit_above_staticmethod_says_so_where_the_class_is_written(
    kind: str, below: str, args: str
):
    # Regression: `@lift.jit` above `@staticmethod` was accepted, and its first
    # call said `@lift.lift` was above it.
    with pytest.raises(
        lift.LiftError,
        match=(
            rf"^lift\.jit\(\) got a {kind} \(.*Model\.step \({HERE}:\d+\)\): "
            rf"the decorators are in the wrong order\. `@lift\.jit` above "
            rf"`@{kind}` .*\nFix: put `@{kind}` on top, so that lift receives the "
            rf"function:\n\n    @{kind}\n    {below}\n"
            rf"    def step\({args}\): \.\.\.\nDocs: python -m lift explain lift-above-staticmethod$"
        ),
    ):

        class Model:
            @lift.jit
            @(staticmethod if kind == "staticmethod" else classmethod)
            def step(*a):
                return 2.0 * a[-1]


def test_the_right_order_of_lift_jit_and_staticmethod_compiles_once():
    traces = []

    class Model:
        @staticmethod
        @lift.jit
        def step(x):
            traces.append(None)
            return 2.0 * x

        @classmethod
        @lift.jit(static_argnames="cls")
        def make(cls, x):
            traces.append(None)
            return 3.0 * x

    assert float(Model.step(1.0)) == 2.0
    assert float(Model().step(2.0)) == 4.0
    assert float(Model.make(1.0)) == 3.0
    assert len(traces) == 2


def test_the_right_order_of_lift_and_staticmethod_works():
    class Model:
        @staticmethod
        @lift.lift
        def step(x):
            return 2.0 * x

        @classmethod
        @lift.lift
        def make(cls, x):
            return 3.0 * x

    assert Model.step(1.0) == 2.0 and Model().step(1.0) == 2.0
    assert Model.make(1.0) == 3.0


@pytest.mark.parametrize(
    ("obj", "anchor"),
    [
        (int, "lift-got-a-class"),
        (len, "lift-got-a-builtin"),
        (jax.jit(scale), "lift-got-a-jax-jit-function"),
        (jax.custom_jvp(scale), "lift-got-a-custom-derivative"),
        (3, "lift-got-a-value"),
        (staticmethod(scale), "lift-above-staticmethod"),
    ],
)
def test_each_refusal_ends_with_its_docs_anchor(obj: object, anchor: str):
    with pytest.raises(
        lift.LiftError, match=rf"\nDocs: python -m lift explain {anchor}$"
    ):
        lift.lift(obj)


class _Sub(lift.Lifted):
    pass


@pytest.mark.parametrize(
    ("cls", "decorator"),
    [
        (_Sub, r"functools\.partial\(_Sub, dynamic='lr'\)"),
        (lift.Lifted, r"lift\.lift\(dynamic='lr'\)"),
    ],
    ids=["subclass", "Lifted"],
)
def test_a_lifted_class_given_options_only_says_it_takes_the_function_first(
    cls: type[lift.Lifted[..., object]], decorator: str
):
    # Regression: `Sub(dynamic="a")(fn)` raised Python's TypeError about
    # `__init__`.
    name = re.escape("lift.Lifted" if cls is lift.Lifted else "_Sub")
    with pytest.raises(
        lift.LiftError,
        match=(
            rf"^{name}\(\) got no function: it takes the function first\.\n"
            rf"Fix: `{name}\(fn, dynamic='lr'\)`; as a decorator with options, "
            rf"`@{decorator}`\.\nDocs: python -m lift explain lifted-without-a-function$"
        ),
    ):
        cls(dynamic="lr")


# -- a capture used where its value is needed ----------------------------------------


@pytest.mark.parametrize("shape", ["int(n)", "(n,)"])
def test_a_float_used_as_a_shape_is_not_called_control_flow(shape: str):
    # `int(n)` fails in JAX's concretization; `(n,)` in its shape check, which
    # says what the value depends on.
    def make(n):
        if shape == "(n,)":
            return lift.lift(lambda: jnp.zeros((n,)))
        return lift.lift(lambda: jnp.zeros(int(n)))

    with pytest.raises(
        lift.LiftError,
        match=(
            rf"^test_a_float_used_as_a_shape_is_not_called_control_flow\.<locals>\."
            rf"make\.<locals>\.<lambda> \({HERE}:\d+\) uses the captured variable "
            r"'n' where a concrete value is needed \(a shape, a size, `float\(\)`, "
            r"`\.item\(\)`, NumPy\), but lift made it a traced value \(~?float32\[\]\), so its "
            r"value is unknown while tracing\.\n"
            r"Fix: keep it static, `lift\(f, static=\('n',\)\)` \(each new value then "
            r"compiles anew\), or compute with it as an array\.\n"
            r"Docs: python -m lift explain control-flow-on-a-capture(\n|$)"
        ),
    ):
        jax.jit(lambda h: h())(make(3.0))
    # The fixes work: static, the shape is known; an int is static by default.
    if shape == "int(n)":
        assert lift.lift(make(3.0), static="n")().shape == (3,)
    assert jax.jit(lambda h: h())(make(3)).shape == (3,)


@functools.partial(jax.tree_util.register_dataclass, data_fields=["lr"], meta_fields=[])
@dataclasses.dataclass
class RegisteredConfig:
    lr: float

    def rate(self):
        return self.lr

    def scaled(self, x):
        if self.lr > 0.5:
            return 2.0 * x
        return x


class ModuleConfig(eqx.Module):
    lr: float

    def scaled(self, x):
        if self.lr > 0.5:
            return 2.0 * x
        return x


def _through_a_helper(lr):
    def rate():
        return lr

    def step(x):
        if rate() > 0.5:
            return 2.0 * x
        return x

    return step, "lr", "step"


def _through_a_lambda(lr):
    big = lambda: lr > 0.5

    def step(x):
        return 2.0 * x if big() else x

    return step, "lr", "step"


def _through_a_default(lr):
    def step(x, rate=lambda: lr):
        if rate() > 0.5:
            return 2.0 * x
        return x

    return step, "lr", "step"


def _through_a_pytree_method_result(lr):
    cfg = RegisteredConfig(lr)

    def step(x):
        if cfg.rate() > 0.5:
            return 2.0 * x
        return x

    return step, "cfg", "step"


def _in_a_pytree_method(lr):
    cfg = RegisteredConfig(lr)

    def step(x):
        return cfg.scaled(x)

    return step, "cfg", "RegisteredConfig.scaled"


def _in_an_equinox_method(lr):
    m = ModuleConfig(lr)

    def step(x):
        return m.scaled(x)

    return step, "m", "ModuleConfig.scaled"


@pytest.mark.parametrize("jit", ["jax.jit", "lift.jit"])
@pytest.mark.parametrize(
    "make",
    [
        _through_a_helper,
        _through_a_lambda,
        _through_a_default,
        _through_a_pytree_method_result,
        _in_a_pytree_method,
        _in_an_equinox_method,
    ],
)
def test_a_branch_reached_through_a_call_names_the_capture(make, jit: str):
    # Regression: a branch on a float capture reached through a helper's
    # return value, a lambda, or a captured pytree's method raised JAX's raw
    # TracerBoolConversionError.
    step, name, where = make(0.7)
    run = (
        (lambda f: lift.jit(f)(1.0))
        if jit == "lift.jit"
        else (lambda f: jax.jit(lambda g, x: g(x))(lift.lift(f), 1.0))
    )
    fix = (
        rf"`lift\.jit\(lift\.lift\(f, static=\('{name}',\)\)\)`"
        if jit == "lift.jit"
        else rf"`lift\(f, static=\('{name}',\)\)`"
    )
    with pytest.raises(
        lift.LiftError,
        match=(
            rf"^(.*\.)?{re.escape(where)} \({HERE}:\d+\) uses the captured "
            rf"variable '{name}' in Python control flow .*\nFix: keep it static, "
            rf"{fix} \(each new value then compiles anew\), or replace the Python "
            r"branch with `jnp\.where` / `jax\.lax\.cond`\.\n"
            r"Docs: python -m lift explain control-flow-on-a-capture(\n|$)"
        ),
    ):
        run(step)
    # The fix the message gives works.
    fixed = lift.lift(step, static=(name,))
    assert jax.jit(lambda g, x: g(x))(fixed, 1.0) == 2.0


def test_a_branch_in_a_lifted_pytree_method_names_its_object():
    with pytest.raises(
        lift.LiftError,
        match=(
            rf"^RegisteredConfig\.scaled \({HERE}:\d+\) uses 'self', the object a "
            r"lifted bound method is bound to, in Python control flow .*\nFix: "
            r"replace the Python branch with `jnp\.where` / `jax\.lax\.cond`, or "
            r"lift a function that captures the object instead and keep it "
            r"static, `lift\(lambda \*a: obj\.method\(\*a\), static=\('obj',\)\)`"
            r"\.\nDocs: python -m lift explain control-flow-on-a-capture(\n|$)"
        ),
    ):
        jax.jit(lambda g, x: g(x))(lift.lift(RegisteredConfig(0.7).scaled), 1.0)
    cfg = RegisteredConfig(0.7)
    fixed = lift.lift(lambda *a: cfg.scaled(*a), static=("cfg",))
    assert jax.jit(lambda g, x: g(x))(fixed, 1.0) == 2.0


def test_a_float_in_an_if_is_control_flow():
    def make(limit):  # an array: always a leaf
        def clip(x):
            return x if limit > 0 else -x

        return lift.lift(clip)

    with pytest.raises(
        lift.LiftError,
        match=(
            r"^test_a_float_in_an_if_is_control_flow\.<locals>\.make\.<locals>\.clip "
            rf"\({HERE}:\d+\) uses the captured variable 'limit' in Python control "
            r"flow \(`if`, `while`, `and`, `bool\(\)`, \.\.\.\), but lift made it a "
            r"traced value \(~?float32\[\]\), so its value is unknown while tracing\.\n"
            r"Fix: keep it static, `lift\(f, static=\('limit',\)\)` \(each new value "
            r"then compiles anew\), or replace the Python branch with `jnp\.where` / "
            r"`jax\.lax\.cond`\.\n"
            r"Docs: python -m lift explain control-flow-on-a-capture(\n|$)"
        ),
    ):
        jax.jit(lambda h, x: h(x))(make(jnp.asarray(1.0)), 2.0)


def _clipped(lr: float) -> Any:
    def step(x):
        return x * min(lr, 1.0)  # a comparison in C: no branch in the bytecode

    return step


def _largest(lrs: list[float]) -> Any:
    def step(x):
        return x * max(lrs)

    return step


@pytest.mark.parametrize(
    "run",
    [
        lambda g: jax.jit(lambda x: g(x))(1.0),
        lambda g: jax.lax.scan(lambda c, _: (g(c), None), 1.0, length=1)[0],
        lambda g: jax.jit(lambda h, x: h(x))(g, 1.0),
    ],
    ids=["closed over by jax.jit", "closed over by lax.scan", "passed to jax.jit"],
)
@pytest.mark.parametrize(
    ("make", "value", "name"), [(_clipped, 0.5, "lr"), (_largest, [0.5, 0.25], "lrs")]
)
def test_a_comparison_in_a_builtin_names_the_capture_wherever_the_lifted_is(
    run: Any, make: Any, value: Any, name: str
):
    # Regression: a `Lifted` made outside the `jit` or scan body that closes
    # over it has concrete array leaves, which `min(lr, 1.0)` compares inside
    # the trace: JAX's raw TracerBoolConversionError, naming no capture.
    g = lift.lift(make(value))
    assert g(1.0) == 0.5  # eagerly, arrays compare concretely
    with pytest.raises(
        lift.LiftError,
        match=(
            rf"^{make.__name__}\.<locals>\.step \({HERE}:\d+\) uses the captured "
            rf"variable '{name}' in Python control flow .*\nFix: keep it static, "
            rf"`lift\(f, static=\('{name}',\)\)`"
        ),
    ):
        run(g)
    assert run(lift.lift(make(value), static=(name,))) == 0.5


def _integer_step(b: float) -> Any:
    def step(x):
        return x * b if b.is_integer() else x + b

    return step


@pytest.mark.parametrize(
    "run",
    [
        lambda g: g(1.0),
        lambda g: jax.jit(lambda h, x: h(x))(g, 1.0),
        lambda g: lift.jit(g)(1.0),
    ],
    ids=["eager", "jax.jit", "lift.jit"],
)
def test_a_float_method_arrays_lack_names_the_capture(run: Any):
    # Regression: `b.is_integer()` on a float capture raised JAX's
    # AttributeError (`DynamicJaxprTracer has no attribute is_integer`).
    with pytest.raises(
        lift.LiftError,
        match=(
            rf"^_integer_step\.<locals>\.step \({HERE}:\d+\) uses the captured "
            r"variable 'b' as a Python number \(`\.is_integer\(\)`, which arrays "
            r"do not have\), but lift made it an array \(~?float32\[\]\)\.\n"
            r"Fix: keep it static, `(lift\.jit\(lift\.lift|lift)\(f, "
            r"static=\('b',\)\)\)?` \(each new value then compiles anew\), or "
            r"compute it with `jnp`.*\nDocs: python -m lift explain control-flow-on-a-capture(\n|$)"
        ),
    ):
        run(lift.lift(_integer_step(2.0)))
    assert float(run(lift.lift(_integer_step(2.0), static=("b",)))) == 2.0


def test_a_float_method_of_an_argument_is_jaxs_error():
    def step(x):
        return x.is_integer()

    with pytest.raises(AttributeError, match="is_integer"):
        jax.jit(lambda h, x: h(x))(lift.lift(step), 1.0)


# Module-level state a step writes its values to and branches on: the bytecode
# sees a global's attribute, not the capture it came from.
_SETTINGS = types.SimpleNamespace()


@pytest.fixture
def settings() -> Iterator[types.SimpleNamespace]:
    # The tracers the steps left there go with the test.
    yield _SETTINGS
    vars(_SETTINGS).clear()


def _through_a_global(lr: float, clip: float) -> Any:
    def step(x):
        _SETTINGS.lr = lr
        if _SETTINGS.lr > 0.5:
            return jnp.minimum(x, clip)
        return x

    return step


def _run(jit: str, step: Any) -> Any:
    if jit == "lift.jit":
        return lift.jit(step)(1.0)
    return jax.jit(lambda g, x: g(x))(lift.lift(step), 1.0)


@pytest.mark.parametrize("jit", ["jax.jit", "lift.jit"])
def test_a_branch_on_a_capture_read_back_from_a_global_names_the_capture(
    jit: str, settings: types.SimpleNamespace
):
    # The capture JAX's message names (`g.captures['lr']`), not every traced
    # capture of the frame (`clip` too).
    step = _through_a_global(0.7, 0.9)
    fix = (
        r"`lift\.jit\(lift\.lift\(f, static=\('lr',\)\)\)`"
        if jit == "lift.jit"
        else r"`lift\(f, static=\('lr',\)\)`"
    )
    with pytest.raises(
        lift.LiftError,
        match=(
            rf"^_through_a_global\.<locals>\.step \({HERE}:\d+\) uses the captured "
            r"variable 'lr' in Python control flow \(`if`, `while`, `and`, "
            r"`bool\(\)`, \.\.\.\), but lift made it a traced value \(~?float32\[\]\), "
            rf"so its value is unknown while tracing\.\nFix: keep it static, {fix} "
            r"\(each new value then compiles anew\), or replace the Python branch "
            r"with `jnp\.where` / `jax\.lax\.cond`\.\n"
            r"Docs: python -m lift explain control-flow-on-a-capture(\n|$)"
        ),
    ):
        _run(jit, step)
    # The fix the message gives works.
    fixed = lift.lift(step, static=("lr",))
    assert jax.jit(lambda g, x: g(x))(fixed, 1.0) == pytest.approx(0.9)


@pytest.mark.parametrize("jit", ["jax.jit", "lift.jit"])
def test_a_branch_on_an_argument_read_back_from_a_global_is_jaxs_error(
    jit: str, settings: types.SimpleNamespace
):
    # JAX's message names the argument `x`: no capture is blamed.
    def make(lr):
        def step(x):
            _SETTINGS.x = x
            if _SETTINGS.x > 0.5:
                return x * lr
            return x

        return step

    with pytest.raises(
        jax.errors.TracerBoolConversionError,
        match=r"depends on the value of the argument x",
    ):
        _run(jit, make(0.7))


# -- a lifted factory ----------------------------------------------------------------


def test_a_lifted_optax_factory_says_call_it_first():
    opt = lift.lift(optax.adam)  # legitimate: a factory is a function
    with pytest.raises(
        AttributeError,
        match=(
            r"^'Lifted' object has no attribute 'init': lift\.lift\(adam\) lifted "
            r"the function adam \(.*alias\.py:\d+\), and adam is a factory: it "
            r"returns a GradientTransformationExtraArgs, which has 'init'\.\n"
            r"Fix: call it first and lift what it returns: "
            r"`lift\.lift\(optax\.adam\(learning_rate\)\)`\.\n"
            r"Docs: python -m lift explain lifted-a-factory$"
        ),
    ) as info:
        opt.init  # noqa: B018
    assert isinstance(info.value, lift.LiftError)
    assert info.value.anchor == "lifted-a-factory"
    assert str(pickle.loads(pickle.dumps(info.value))) == str(info.value)
    # A traceback names a class of lift's, not a private one.
    shown = traceback.format_exception_only(info.value)[0]
    assert shown.startswith("lift.LiftAttributeError: 'Lifted' object has no")
    # Still an AttributeError where Python asks: no attribute, no exception.
    assert not hasattr(opt, "update")
    assert getattr(opt, "init", None) is None
    # The fix works, and the factory stays callable as lifted.
    params = {"w": jnp.ones(2)}
    assert lift.lift(optax.adam(1e-3)).init(params)[0].count == 0
    assert opt(1e-3).init(params)[0].count == 0


def make_model(scale: float):  # no return annotation: said as a possibility
    return optax.sgd(scale)


class Model(lift.Lifted):
    def simulate(self, x: Any) -> Any:
        return self(x)


def test_an_unannotated_factory_and_a_subclass():
    with pytest.raises(
        AttributeError,
        match=(
            r"^'Model' object has no attribute 'update': a Model has the attributes "
            rf"of a function \(make_model \({HERE}:\d+\)\) and its class's methods\.\n"
            r"Fix: if make_model is a factory \(it returns the object that has "
            r"'update'\), call it first and lift what it returns: "
            r"`Model\(make_model\(scale\)\)`\.\n"
            r"Docs: python -m lift explain lifted-a-factory$"
        ),
    ):
        Model(make_model).update  # noqa: B018
    with pytest.raises(AttributeError, match=r"^_private$"):
        Model(make_model)._private  # noqa: B018


def test_a_lifted_partial_of_a_factory_names_the_factory_and_the_call():
    opt = lift.lift(functools.partial(optax.adam, b1=0.9))
    with pytest.raises(
        AttributeError,
        match=(
            r"^'Lifted' object has no attribute 'init': lift\.lift\(f\) lifted "
            r"the function adam \(.*alias\.py:\d+\), and f is a factory: it "
            r"returns a GradientTransformationExtraArgs, which has 'init'\.\n"
            r"Fix: call it first and lift what it returns: "
            r"`lift\.lift\(f\(learning_rate\)\)`\.\n"
        ),
    ):
        opt.init  # noqa: B018


def test_a_lifted_partial_of_a_builtin_without_a_signature_still_says_why():
    lifted = lift.lift(functools.partial(max, 1.0))
    with pytest.raises(
        AttributeError,
        match=(
            r"^'Lifted' object has no attribute 'init': a Lifted has the "
            r"attributes of a function \(functools\.partial\(<built-in function "
            r"max>, 1\.0\)\) and its class's methods\.\nFix: if f is a factory "
            r".*`lift\.lift\(f\(\.\.\.\)\)`\.\n"
        ),
    ):
        lifted.init  # noqa: B018


def test_under_lift_jit_a_name_given_to_dynamic_is_not_told_to_be_static():
    def make(n: float, w: float) -> Any:
        def f(x: Any) -> Any:
            return x * w * float(n)

        return f

    with pytest.raises(
        lift.LiftError,
        match=(
            r"uses the captured variable 'n' where a concrete value is needed .*\n"
            r"Fix: keep it static by leaving 'n' out of `dynamic=` \(each new value "
            r"then compiles anew\), or compute with it as an array\.\n"
        ),
    ):
        lift.jit(make(2.0, 3.0), dynamic=("n",))(1.0)
    assert float(lift.jit(make(2.0, 3.0), dynamic=("w",))(1.0)) == 6.0  # twin


class _Compiled:
    """A callable with a code object of its own, as Cython's functions have."""

    def __init__(self) -> None:
        self.__qualname__ = "compiled_step"
        self.__code__ = _Compiled.__call__.__code__

    def __call__(self, x: Any) -> Any:
        return x


class _Wrapper:
    def __init__(self, name: str) -> None:
        self.__qualname__ = name
        self.__wrapped__: Any = None


def test_a_callable_is_named_by_its_code_and_a_wrapped_cycle_by_its_name():
    line = _Compiled.__call__.__code__.co_firstlineno
    with pytest.raises(
        lift.LiftError,
        match=rf"without parentheses, on compiled_step \({HERE}:{line}\)\.\n",
    ):
        lift.checking_leaks(_Compiled())  # pyright: ignore[reportArgumentType]

    a, b = _Wrapper("one"), _Wrapper("other")
    a.__wrapped__, b.__wrapped__ = b, a  # no code at the end: named, no hang
    with pytest.raises(lift.LiftError, match=r"without parentheses, on one\.\n"):
        lift.checking_leaks(a)  # pyright: ignore[reportArgumentType]


def _takes(x: Any, fs: Any) -> Any:
    return x


def test_a_partial_that_holds_itself_is_refused_with_the_fix():
    held: list[Any] = [0.5]  # a dynamic leaf: the list is rebuilt, with the partial
    p = functools.partial(_takes, fs=held)
    held.append(p)
    with pytest.raises(
        lift.LiftError,
        match=(
            r"^the captured partials or bound methods refer to each other in a "
            r"cycle, which cannot be rebuilt: _takes \(.*test_errors_messages"
            r"\.py:\d+\)\.\nFix: break the cycle through a "
            r"function \(a closure can refer to itself\)\.\nDocs: "
            r"python -m lift explain partial-cycle$"
        ),
    ):
        lift.lift(p)
    assert lift.lift(functools.partial(_takes, fs=[]))(1.0) == 1.0  # twin


def test_a_function_whose_docstring_is_not_a_string_is_lifted():
    def make(lr: float) -> Any:
        def step(x: Any) -> Any:
            return x * lr

        step.__doc__ = {"about": "a dict"}  # pyright: ignore[reportAttributeAccessIssue]
        return step

    counter = 0

    @jax.jit
    def run(f: Any, x: Any) -> Any:
        nonlocal counter
        counter += 1
        return f(x)

    assert [float(run(lift.lift(make(lr)), 1.0)) for lr in (0.5, 0.25)] == [0.5, 0.25]
    assert counter == 1
    assert lift.unlift(lift.lift(make(0.5))).__doc__ == {"about": "a dict"}


class _Note:
    """A docstring object that hashes alike and refuses to be compared."""

    def __hash__(self) -> int:
        return 0

    def __eq__(self, other: object) -> bool:
        raise TypeError("a _Note is not compared")


def test_functions_whose_docstrings_refuse_comparison_are_told_apart_by_identity():
    def make() -> Any:
        def step(x: Any) -> Any:
            return x * 2.0

        step.__doc__ = _Note()  # pyright: ignore[reportAttributeAccessIssue]
        return step

    a, b = lift.lift(make()), lift.lift(make())
    structure = jax.tree_util.tree_structure
    assert structure(a) != structure(b)
    assert structure(a) == structure(lift.lift(lift.unlift(a)))


# -- attributes set on a subclass instance -----------------------------------------


def test_setting_an_attribute_on_a_subclass_instance_is_refused():
    sigma = jnp.asarray(2.0)

    @Model
    def simulate(x):
        return sigma * x

    with pytest.raises(
        AttributeError,
        match=(
            r"^Model object \(test_setting_an_attribute_on_a_subclass_instance_is_"
            r"refused\.<locals>\.simulate\): cannot set the attribute 'sigma'\. A "
            r"Model is a pytree of its function's captures; jax\.jit, vmap, grad and "
            r"tree_map return new instances built from those alone, so an attribute "
            r"set on one instance would be gone from them\.\n"
            r"Fix: make it a class attribute \(`class Model\(lift\.Lifted\): sigma = "
            r"\.\.\.`\), or capture it in the function \(`def make\(sigma\): return "
            r"Model\(lambda x: \.\.\. sigma \.\.\.\)`\) where it is a leaf or static "
            r"like any capture\.\n"
            r"Docs: python -m lift explain lifted-setattr$"
        ),
    ) as info:
        simulate.sigma = sigma  # pyright: ignore[reportAttributeAccessIssue]
    assert isinstance(info.value, lift.LiftError)
    assert "sigma" not in vars(simulate)
    # In `__init__` too, the usual place.

    class WithInit(lift.Lifted):
        def __init__(self, fn: Any, scale: float) -> None:
            super().__init__(fn)
            self.scale = scale

    with pytest.raises(lift.LiftError, match=r"cannot set the attribute 'scale'"):
        WithInit(lambda x: x, 2.0)

    class Early(lift.Lifted):
        def __init__(self, fn: Any) -> None:
            self.scale = 2.0  # before lifting: no function to name yet
            super().__init__(fn)

    with pytest.raises(
        lift.LiftError,
        match=r"^Early object \(not lifted yet\): cannot set the attribute 'scale'\.",
    ):
        Early(scale_twice)


def test_a_subclass_instance_keeps_working_through_every_construction_path():
    # lift's own state is set by `__init__`, unflatten, copy, deepcopy, pickle.
    w = jnp.asarray(3.0)
    m = Model(lambda x: w * x)
    for other in (
        jax.jit(lambda m: m)(m),
        jax.tree.map(lambda v: v + 1, m),
        jax.vmap(lambda v: Model(lambda x: v * x))(jnp.ones(2)),
        Model.closure_convert(lambda x: w * x, 1.0),
        __import__("copy").copy(m),
        __import__("copy").deepcopy(m),
    ):
        assert type(other) is Model
    assert jax.jit(lambda m: m)(m).simulate(2.0) == 6.0
    assert pickle.loads(pickle.dumps(Model(scale_twice))).simulate(2.0) == 4.0
    # A class attribute is the way to share data: it survives transforms.

    class Scaled(lift.Lifted):
        factor = 10.0

        def simulate(self, x: Any) -> Any:
            return self.factor * self(x)

    assert jax.jit(lambda s: s.simulate(1.0))(Scaled(lambda x: w * x)) == 30.0


def scale_twice(x: Any) -> Any:
    return 2 * x


def test_a_subclass_with_its_own_setattr_or_slots_is_left_alone():
    class Mutable(lift.Lifted):
        def __setattr__(self, name: str, value: Any) -> None:
            object.__setattr__(self, name, value)

    m = Mutable(scale_twice)
    m.note = "kept on this instance only"  # pyright: ignore[reportAttributeAccessIssue]
    assert type(jax.jit(lambda m: m)(m)) is Mutable

    class Slotted(lift.Lifted):
        __slots__ = ("extra",)

    s = jax.tree.map(lambda v: v, Slotted(scale_twice))
    assert type(s) is Slotted and s(1.0) == 2.0
    with pytest.raises(lift.LiftError, match=r"cannot set the attribute 'extra'"):
        s.extra = 1  # pyright: ignore[reportAttributeAccessIssue]


# -- a `Lifted` as a static argument -------------------------------------------------


def _make_update(lr: float) -> lift.Lifted[[jax.Array], jax.Array]:
    return lift.lift(lambda g: -lr * g)


_STATIC_MESSAGE = (
    r"a Lifted \(_make_update\.<locals>\.<lambda>\) was given to jax\.jit as a "
    r"static argument \(static_argnums or static_argnames\), or inside one: a "
    r"static argument is compared by identity for a Lifted, so each new one "
    r"compiles a program of its own\.\n"
    r"Fix: pass it as a regular \(traced\) argument: a Lifted is a pytree whose "
    r"code and static captures jax\.jit compiles once, and whose arrays it "
    r"traces\.\n"
    r"Docs: python -m lift explain lifted-static-argument"
)


_TRACES: list[None] = []  # a global: lift.jit rebuilds what a function captures


def _counted(update: Any, g: Any) -> Any:
    _TRACES.append(None)
    return update(g)


def _static_calls(how: str) -> Callable[[Any], Any]:
    """A call of `_counted` (traces counted in `_TRACES`, cleared here) with the
    `Lifted` given as a static argument, `how`."""
    _TRACES.clear()
    g = jnp.ones(3)
    if how == "static_argnames":
        by_name = jax.jit(
            lambda g, update: _counted(update, g), static_argnames="update"
        )
        return lambda update: by_name(g, update=update)
    if how == "in a tuple":
        in_tuple = jax.jit(lambda u, g: _counted(u[0], g), static_argnums=0)
        return lambda update: in_tuple((update, "adam"), g)
    if how == "lift.jit":
        with_lift = lift.jit(_counted, static_argnums=0)
        return lambda update: with_lift(update, g)
    plain = jax.jit(_counted, static_argnums=0)
    return lambda update: plain(update, g)


_HOW = ["static_argnums", "static_argnames", "in a tuple", "lift.jit"]


@pytest.mark.parametrize("how", _HOW)
def test_each_new_lifted_as_a_static_argument_warns_at_its_compile(how: str):
    call = _static_calls(how)
    # Each new Lifted is a new static value: a compile each, each one said.
    for n, lr in enumerate((0.1, 0.2), start=1):
        with pytest.warns(UserWarning, match=_STATIC_MESSAGE) as said:
            call(_make_update(lr))
        assert len(_TRACES) == n
        assert [w.filename for w in said] == [__file__]  # the user's call, not JAX


@pytest.mark.parametrize("how", _HOW)
def test_the_same_lifted_as_a_static_argument_compiles_once(how: str):
    # optax's own tests jit a step with the optimizer static, and pass the same
    # one at every step: one compile, one warning, then cache hits.
    call = _static_calls(how)
    update = _make_update(0.1)
    with pytest.warns(UserWarning, match="static argument"):
        call(update)
    for _ in range(3):
        assert (call(update) == -0.1).all()  # no warning: an error in this suite
    assert len(_TRACES) == 1


def test_a_lifted_as_a_traced_argument_compiles_once():
    apply = jax.jit(lambda update, g: update(g))
    for lr in (0.1, 0.01, 0.001):
        apply(_make_update(lr), jnp.ones(3))
    assert apply._cache_size() == 1


@dataclasses.dataclass(frozen=True)
class _Frozen:
    fn: Any


class _OwnHash:
    """An object whose `__hash__`, written in Python, hashes a Lifted it holds."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def __hash__(self) -> int:
        return hash((type(self), self.fn))

    def __eq__(self, other: object) -> bool:
        return type(other) is _OwnHash and other.fn == self.fn

    def method(self, x: Any) -> Any:
        return self.fn(x)


_HOLDERS: dict[str, Callable[[Any], Any]] = {
    "frozen dataclass": _Frozen,
    "own __hash__": _OwnHash,
    "nested": lambda fn: _Frozen(_OwnHash(fn)),
    "tuple in a dataclass": lambda fn: _Frozen((1, fn)),
}


def _held(holder: Any) -> Any:
    while not lift.is_lifted(holder):
        holder = holder[1] if isinstance(holder, tuple) else holder.fn
    return holder


@pytest.mark.parametrize("jit", ["jax.jit", "lift.jit"])
@pytest.mark.parametrize("holder", list(_HOLDERS))
def test_a_lifted_inside_a_static_argument_warns(jit: str, holder: str):
    # An object whose `__hash__` is Python code hashes the Lifted from there, not
    # from jax.jit's frame: each new one said all the same, at its compile.
    traces = _TRACES  # a global: lift.jit rebuilds what a function captures
    traces.clear()

    def counted(box: Any, g: Any) -> Any:
        _TRACES.append(None)
        return _held(box)(g)

    transform: Any = jax.jit if jit == "jax.jit" else lift.jit
    apply = transform(counted, static_argnums=0)
    for n, lr in enumerate((0.1, 0.2), start=1):
        with pytest.warns(
            UserWarning, match=r"python -m lift explain lifted-static-argument"
        ) as said:
            apply(_HOLDERS[holder](_make_update(lr)), jnp.ones(3))
        assert len(traces) == n
        assert [w.filename for w in said] == [__file__]


def test_a_holder_of_a_lifted_hashed_as_the_jitted_function_is_not_refused():
    # jax.jit hashes the function it jits in the same frame as static arguments:
    # a bound method of a holder, or a callable holder, is that function.
    update = _make_update(0.5)
    holder = _OwnHash(update)
    assert (jax.jit(holder.method)(jnp.ones(2)) == -0.5).all()

    @dataclasses.dataclass(frozen=True)
    class Callable_:
        fn: Any

        def __call__(self, g: Any) -> Any:
            return self.fn(g)

    assert (jax.jit(Callable_(update))(jnp.ones(2)) == -0.5).all()
    # Hashed elsewhere (a set, a dict key) such holders hash as they always did.
    assert len({_Frozen(update), _Frozen(update), _OwnHash(update)}) == 2


def test_hashing_a_lifted_elsewhere_is_by_identity():
    # JAX's own caches hash the functions it traces: scan, jit of a Lifted, of a
    # subclass's bound method; and so do sets, dicts and lru_cache.
    def make_step():
        return lift.lift(lambda c, x: (c + x, x))

    step = make_step()
    traces = 0

    @jax.jit
    def run(step):
        nonlocal traces
        traces += 1
        return jax.lax.scan(step, 0.0, jnp.arange(3.0))[0]

    assert run(step) == 3.0 and run(make_step()) == 3.0
    assert traces == 1
    assert jax.lax.scan(step, 0.0, jnp.arange(3.0))[0] == 3.0
    assert jax.jit(step)(1.0, 2.0)[0] == 3.0
    m = Model(scale_twice)
    assert jax.jit(m.simulate)(1.0) == 2.0

    class Owner:  # a Lifted as a method: `jax.jit` hashes the bound method
        step = lift.lift(lambda self, x: 2 * x)

    assert jax.jit(Owner().step)(1.0) == 2.0
    other = Model(scale_twice)
    assert len({m, other, m}) == 2 and {m: 1}[m] == 1 and m != other
    calls = functools.lru_cache(maxsize=None)(lambda f: f(1.0))
    assert calls(m) == calls(m) == 2.0 and calls.cache_info().hits == 1


class Holder(eqx.Module):
    update: Any


def test_equinox_filter_jit_compiles_once_for_a_lifted_field():
    @eqx.filter_jit
    def apply(h: Holder, g: jax.Array) -> jax.Array:
        return h.update(g)

    for lr in (0.1, 0.01):
        apply(Holder(_make_update(lr)), jnp.ones(3))
    assert apply._cached._cache_size() == 1  # pyright: ignore[reportAttributeAccessIssue]


# -- leak checking used the wrong way ---------------------------------------------


@pytest.mark.parametrize("jit", ["jax.jit", "lift.jit"])
def test_checked_given_a_compiled_function_says_to_give_the_transform(jit: str):
    transform = jax.jit if jit == "jax.jit" else lift.jit
    with pytest.raises(
        lift.LiftError,
        match=(
            rf"^lift\.checked\(\) got {re.escape(jit)}\(scale\) \(scale \({HERE}:\d+\)\), "
            r"a function already transformed: lift\.checked wraps the transform "
            r"itself, so that it checks each trace the transform runs\.\n"
            rf"Fix: `lift\.checked\({re.escape(jit)}\)\(scale\)`\.\n"
            r"Docs: python -m lift explain checked-got-a-function$"
        ),
    ):
        lift.checked(transform(scale))
    # The fix works.
    assert lift.checked(transform)(scale)(1.0) == 2.0


def test_checking_leaks_without_parentheses_says_to_add_them():
    with pytest.raises(
        lift.LiftError,
        match=(
            r"^@lift\.checking_leaks is used without parentheses, on "
            rf"test_checking_leaks_without_parentheses_says_to_add_them\.<locals>\."
            rf"step \({HERE}:\d+\)\.\n"
            r"Fix: `@lift\.checking_leaks\(\)`, or `with lift\.checking_leaks\(\):` "
            r"around a block\.\n"
            r"Docs: python -m lift explain checking-leaks-parentheses$"
        ),
    ):

        @lift.checking_leaks  # pyright: ignore[reportArgumentType]
        def step(x: float) -> float:
            return x

    @lift.checking_leaks()
    def fixed(x: float) -> float:
        return 2 * x

    assert fixed(1.0) == 2.0


# -- every message names its section of the Errors page ------------------------------

_RAISED = ("LiftError", "LeakError", "LiftAttributeError")

# Raise sites whose messages do not name their section yet, by file and function.
# No other may be added; remove an entry when its messages gain an anchor.
_UNANCHORED: dict[str, set[str]] = {}


def _page_anchors() -> set[str]:
    return set(re.findall(r"\{#([\w-]+)\}", ERRORS_PAGE.read_text()))


def _modules() -> list[tuple[str, ast.Module]]:
    return [
        (
            str(path.relative_to(ROOT / "lift")),
            ast.parse(path.read_text(), filename=str(path)),
        )
        for path in sorted((ROOT / "lift").rglob("*.py"))
    ]


def _calls(tree: ast.AST) -> list[tuple[ast.Call, str]]:
    """Each construction of one of lift's errors, with its enclosing function."""
    out: list[tuple[ast.Call, str]] = []
    stack: list[tuple[ast.AST, str]] = [(tree, "<module>")]
    while stack:
        node, owner = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            owner = node.name
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _RAISED
        ):
            out.append((node, owner))
        stack.extend((child, owner) for child in ast.iter_child_nodes(node))
    return out


def _anchored(call: ast.Call) -> bool:
    if any(k.arg == "anchor" for k in call.keywords):
        return True
    return any(  # the message itself ends with `docs_anchor(...)`
        isinstance(n, ast.Call) and getattr(n.func, "id", None) == "docs_anchor"
        for arg in call.args
        for n in ast.walk(arg)
    )


def test_every_raise_site_in_lift_names_a_docs_anchor():
    missing: dict[str, set[str]] = {}
    for name, tree in _modules():
        for call, owner in _calls(tree):
            if not _anchored(call):
                missing.setdefault(name, set()).add(owner)
    new = {
        name: owners - _UNANCHORED.get(name, set())
        for name, owners in missing.items()
        if owners - _UNANCHORED.get(name, set())
    }
    assert new == {}, (
        "every LiftError/LeakError needs `anchor=` (a heading id of docs/errors.md)"
    )


def test_every_docs_anchor_in_lift_is_on_the_errors_page():
    used: set[str] = set()
    for _, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.keyword) and node.arg == "anchor":
                value = node.value
            elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == (
                "docs_anchor"
            ):
                value = node.args[0]
            elif (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and getattr(node.targets[0], "id", None) == "anchor"
            ):
                value = node.value
            else:
                continue
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                used.add(value.value)
    assert len(used) > 25, "lift's messages name their docs anchors"
    assert sorted(used - _page_anchors()) == [], "anchors missing from docs/errors.md"


def test_the_anchor_is_the_last_line_and_an_attribute():
    err = lift.LiftError("what went wrong.\nFix: this.", anchor="options")
    assert (
        str(err) == "what went wrong.\nFix: this.\nDocs: python -m lift explain options"
    )
    assert err.anchor == "options"
    again = pickle.loads(pickle.dumps(err))
    assert str(again) == str(err) and again.anchor == "options"
    assert lift.LeakError("x").anchor is None


def _make(a):
    return lift.lift(lambda x: a * x)


def test_a_lifted_inside_a_hashable_dataclass_static_argument_warns():
    @dataclasses.dataclass(frozen=True)
    class Box:
        fn: object

    traces = []

    def body(box, x):
        traces.append(None)
        return box.fn(x)

    jitted = jax.jit(body, static_argnums=0)
    # Never a silent compile per call: each new one is said.
    for i in range(2):
        with pytest.warns(UserWarning, match="static argument"):
            jitted(Box(_make(jnp.float32(i))), 1.0)
    assert len(traces) == 2


def test_checked_given_a_checked_jitted_function_is_refused_with_the_fix():
    def f(x):
        return 2 * x

    jitted = lift.checked(jax.jit)(f)
    with pytest.raises(lift.LiftError, match="already"):
        lift.checked(jitted)


def _append_to(log):
    log.append(1)


def test_a_call_that_mutated_a_copy_names_the_variable():
    # The reading does not follow `_append_to`: the call shows the change.
    def make():
        state = {"log": [0.5]}
        calls = []  # no leaf: the user's own list

        def step(x):
            calls.append(x)
            if len(calls) == 1:
                _append_to(state["log"])
            return x * len(state["log"])

        return step, state

    step, state = make()
    lifted = lift.lift(step)
    with pytest.raises(
        lift.LiftError,
        match=(
            r"^test_a_call_that_mutated_a_copy_names_the_variable\.<locals>\.make"
            rf"\.<locals>\.step \({HERE}:\d+\) mutated the captured variable "
            r"'state' in place while it ran: a list that lift rebuilds around its "
            r"leaves \(it holds dynamic values, or functions capturing some\), so "
            r"the change "
            r"reached lift's copy and your list did not change\.\n"
            r"Fix: pass 'state' as an argument and return what the code adds to "
            r"it, or keep only static values in the list \(one without arrays "
            r"or floats, in it or its functions, is your own object inside the "
            r"lifted function\)\.\n"
            r"Docs: python -m lift explain mutates-a-rebuilt-container$"
        ),
    ):
        lifted(2.0)
    assert state == {"log": [0.5]}
    # The copy was dropped: the next call reads the captures afresh.
    assert lifted(2.0) == 2.0


class _UnprintableValue:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def test_a_value_whose_repr_fails_is_named_by_its_class():
    with pytest.raises(
        lift.LiftError,
        match=r"^lift\(\) got _UnprintableValue <_UnprintableValue object>, which "
        r"is neither a function nor a pytree holding functions\.",
    ):
        lift.lift(_UnprintableValue())


def test_lift_above_staticmethod_of_a_partial_shows_it_and_a_fix_named_f():
    # A partial has no `__name__`: the message shows it, the fix names `f`.
    with pytest.raises(
        lift.LiftError,
        match=r"^lift\(\) got a staticmethod \(<staticmethod\(functools\.partial"
        r"\(<function scale .*\): the decorators are in the wrong order\."
        r"(?s:.*)    def f\(x\): \.\.\.\n",
    ):
        lift.lift(staticmethod(functools.partial(scale)))


class _DictIsAList:
    """An object whose `__dict__` (a property) is no dict: nothing to list."""

    __dict__ = property(lambda self: [scale])  # pyright: ignore


class _FailsToFlatten:
    pass


jax.tree_util.register_pytree_node(
    _FailsToFlatten,
    lambda node: (_ for _ in ()).throw(ValueError("cannot flatten")),
    lambda aux, children: _FailsToFlatten(),
)


def test_an_object_holding_functions_skips_what_it_cannot_read():
    with pytest.raises(
        lift.LiftError,
        match=r"(?s)^lift\(\) got _DictIsAList .*explain lift-got-a-value$",
    ):
        lift.lift(_DictIsAList())
    # A node whose flatten fails is not looked into; the function beside it is
    # listed.
    with pytest.raises(
        lift.LiftError,
        match=r"^lift\(\) got SimpleNamespace .*holds functions in its attributes: "
        r"obj\.fn\. ",
    ):
        lift.lift(types.SimpleNamespace(node=_FailsToFlatten(), fn=scale))


def test_a_partial_of_a_builtin_needing_a_concrete_tracer_is_jaxs_error():
    # No code of the graph ran: lift has no capture to name, JAX's error stands.
    @jax.jit
    def run(x):
        return lift.lift(functools.partial(int, x))()

    with pytest.raises(jax.errors.ConcretizationTypeError, match="`int` function"):
        run(1.0)
