"""A corpus of escaped tracers, each with its clean twin.

Every case builds the same program twice: once storing a tracer where it
outlives its transform (the escape), once storing a concrete value in the same
place (the twin). `find_leaks` must name the function, variable and line of
each escape, and stay quiet on every twin.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator
from typing import Any, cast

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lift

pytestmark = pytest.mark.lift_allow_leaks

CONCRETE = np.float32(0.0)
CONCRETE_INT = np.int32(0)
CONCRETE_KEY = jax.random.key(1)


@pytest.fixture(autouse=True)
def _jax_leak_checks_off() -> Iterator[None]:
    # The escapes are deliberate; JAX's own checker would raise at jit exit.
    with jax.check_tracer_leaks(False):
        yield


@dataclasses.dataclass
class Expect:
    roots: tuple[Any, ...]
    holder: Any  # the function the report must name
    variable: str
    transform: str
    path: str | None = None


def _keep(leak: bool, tracer: Any, concrete: Any = CONCRETE) -> Any:
    return tracer if leak else concrete


# -- where the tracer is stored ------------------------------------------------

GLOBAL_STASH: list[Any] = []
LAST: Any = None


def case_global_list(leak: bool) -> Expect:
    GLOBAL_STASH.clear()

    def step_global(x: Any) -> Any:
        GLOBAL_STASH.append(_keep(leak, x))
        return x

    jax.jit(step_global)(1.0)
    return Expect(
        (step_global,),
        step_global,
        "GLOBAL_STASH",
        "jit(step_global)",
        "GLOBAL_STASH[0]",
    )


def case_module_global(leak: bool) -> Expect:
    def step_last(x: Any) -> Any:
        global LAST
        LAST = _keep(leak, x)
        return x

    jax.jit(step_last)(1.0)
    return Expect((step_last,), step_last, "LAST", "jit(step_last)", "LAST")


class Holder:
    pass


def case_object_attribute(leak: bool) -> Expect:
    holder = Holder()

    def step_attr(x: Any) -> Any:
        holder.value = _keep(leak, x)  # type: ignore[attr-defined]
        return x

    jax.jit(step_attr)(1.0)
    return Expect(
        (step_attr,),
        step_attr,
        "holder",
        "jit(step_attr)",
        f"{step_attr.__qualname__}.captures['holder'].value",
    )


class Registry:
    items: list[Any] = []  # noqa: RUF012 (the class attribute is the point)


def case_class_attribute(leak: bool) -> Expect:
    Registry.items = []

    def step_cls(x: Any) -> Any:
        Registry.items.append(_keep(leak, x))
        return x

    jax.jit(step_cls)(1.0)
    return Expect(
        (step_cls,), step_cls, "Registry", "jit(step_cls)", "Registry.items[0]"
    )


class Slotted:
    __slots__ = ("value",)


def case_slots(leak: bool) -> Expect:
    box = Slotted()

    def step_slots(x: Any) -> Any:
        box.value = _keep(leak, x)
        return x

    jax.jit(step_slots)(1.0)
    return Expect((step_slots,), step_slots, "box", "jit(step_slots)")


def case_dict_in_closure(leak: bool) -> Expect:
    cache: dict[str, Any] = {}

    def step_dict(x: Any) -> Any:
        cache["last"] = _keep(leak, x)
        return x

    jax.jit(step_dict)(1.0)
    return Expect(
        (step_dict,),
        step_dict,
        "cache",
        "jit(step_dict)",
        f"{step_dict.__qualname__}.captures['cache']['last']",
    )


def case_captured_closure(leak: bool) -> Expect:
    stash: list[Any] = []

    def step(x: Any) -> Any:
        y = _keep(leak, x)

        def scaled(z: Any) -> Any:
            return y * z

        stash.append(scaled)
        return x

    jax.jit(step)(1.0)
    return Expect((stash,), stash[0], "y", "jit(step)", "roots[0][0].captures['y']")


def case_nested_closure(leak: bool) -> Expect:
    stash: list[Any] = []

    def step(x: Any) -> Any:
        y = _keep(leak, x)

        def make() -> Callable[[], Any]:
            def innermost() -> Any:
                return y

            return innermost

        stash.append(make())
        return x

    jax.jit(step)(1.0)
    return Expect((stash,), stash[0], "y", "jit(step)")


def case_default_argument(leak: bool) -> Expect:
    stash: list[Any] = []

    def step(x: Any) -> Any:
        y = _keep(leak, x)

        def apply(z: Any, scale: Any = y) -> Any:
            return z * scale

        stash.append(apply)
        return x

    jax.jit(step)(1.0)
    return Expect((stash,), stash[0], "scale", "jit(step)")


def case_keyword_default(leak: bool) -> Expect:
    stash: list[Any] = []

    def step(x: Any) -> Any:
        y = _keep(leak, x)

        def apply(z: Any, *, shift: Any = y) -> Any:
            return z + shift

        stash.append(apply)
        return x

    jax.jit(step)(1.0)
    return Expect((stash,), stash[0], "shift", "jit(step)")


def _scale(factor: Any, z: Any) -> Any:
    return factor * z


def case_partial(leak: bool) -> Expect:
    stash: list[Any] = []

    def step(x: Any) -> Any:
        stash.append(functools.partial(_scale, _keep(leak, x)))
        return x

    jax.jit(step)(1.0)
    return Expect((stash,), _scale, "factor", "jit(step)")


class Model:
    def __init__(self, w: Any) -> None:
        self.w = w

    def apply(self, z: Any) -> Any:
        return self.w * z


def case_bound_method(leak: bool) -> Expect:
    stash: list[Any] = []

    def step(x: Any) -> Any:
        stash.append(Model(_keep(leak, x)).apply)
        return x

    jax.jit(step)(1.0)
    return Expect((stash,), Model.apply, "self", "jit(step)")


class Affine(eqx.Module):
    w: Any


def case_pytree_in_closure(leak: bool) -> Expect:
    models: list[Any] = []

    def step(x: Any) -> Any:
        models.append(Affine(_keep(leak, x)))
        return x

    jax.jit(step)(1.0)
    return Expect(
        (step,),
        step,
        "models",
        "jit(step)",
        f"{step.__qualname__}.captures['models'][0].w",
    )


def case_wrapped(leak: bool) -> Expect:
    stash: list[Any] = []

    def step(x: Any) -> Any:
        y = _keep(leak, x)

        def inner(z: Any) -> Any:
            return y + z

        @functools.wraps(inner)
        def wrapper(z: Any) -> Any:
            return z

        stash.append(wrapper)
        return x

    jax.jit(step)(1.0)
    return Expect((stash,), stash[0].__wrapped__, "y", "jit(step)")


def case_lifted(leak: bool) -> Expect:
    stash: list[Any] = []

    def step(x: Any) -> Any:
        y = _keep(leak, x)

        def shifted(z: Any) -> Any:
            return z + y

        stash.append(lift.lift(shifted))
        return x

    jax.jit(step)(1.0)
    return Expect((stash,), stash[0].__wrapped__, "y", "jit(step)")


# -- which transform made the tracer --------------------------------------------


def _closure_stash(stash: list[Any], value: Any) -> None:
    def held() -> Any:
        return value

    stash.append(held)


def case_vmap(leak: bool) -> Expect:
    stash: list[Any] = []
    jax.vmap(lambda x: (_closure_stash(stash, _keep(leak, x)), x)[1])(jnp.ones(2))
    return Expect((stash,), stash[0], "value", "vmap")


def case_grad(leak: bool) -> Expect:
    stash: list[Any] = []
    jax.grad(lambda x: (_closure_stash(stash, _keep(leak, x)), x * 2)[1])(1.0)
    return Expect((stash,), stash[0], "value", "grad")


def case_jvp(leak: bool) -> Expect:
    stash: list[Any] = []
    f = lambda x: (_closure_stash(stash, _keep(leak, x)), x * 2)[1]
    jax.jvp(f, (1.0,), (1.0,))
    return Expect((stash,), stash[0], "value", "jvp")


def case_scan(leak: bool) -> Expect:
    stash: list[Any] = []

    def body(c: Any, y: Any) -> tuple[Any, Any]:
        _closure_stash(stash, _keep(leak, c))
        return c + y, y

    jax.lax.scan(body, 0.0, jnp.arange(3.0))
    return Expect((stash,), stash[0], "value", "scan(body)")


def case_cond(leak: bool) -> Expect:
    stash: list[Any] = []

    def branch(y: Any) -> Any:
        _closure_stash(stash, _keep(leak, y))
        return y

    jax.lax.cond(True, branch, branch, 1.0)
    return Expect((stash,), stash[0], "value", "cond(branch)")


def case_while_loop(leak: bool) -> Expect:
    stash: list[Any] = []

    def body(y: Any) -> Any:
        _closure_stash(stash, _keep(leak, y))
        return y + 1

    jax.lax.while_loop(lambda y: y < 3, body, 0.0)
    return Expect((stash,), stash[0], "value", "while_loop(body)")


def case_custom_vjp(leak: bool) -> Expect:
    stash: list[Any] = []

    @jax.custom_vjp
    def f(x: Any) -> Any:
        return x * 2

    def fwd(x: Any) -> tuple[Any, Any]:
        _closure_stash(stash, _keep(leak, x))
        return x * 2, None

    def bwd(res: Any, ct: Any) -> tuple[Any]:
        return (ct * 2,)

    f.defvjp(fwd, bwd)
    jax.jit(jax.grad(f))(1.0)
    return Expect((stash,), stash[0], "value", "jit(f)")


def case_nested_transforms(leak: bool) -> Expect:
    stash: list[Any] = []

    @jax.jit
    def outer(xs: Any) -> Any:
        return jax.vmap(lambda x: (_closure_stash(stash, _keep(leak, x)), x)[1])(xs)

    outer(jnp.ones(3))
    return Expect((stash,), stash[0], "value", "vmap")


def case_eval_shape(leak: bool) -> Expect:
    stash: list[Any] = []

    def shaped(x: Any) -> Any:
        _closure_stash(stash, _keep(leak, x))
        return x

    jax.eval_shape(shaped, jnp.ones(3))
    return Expect((stash,), stash[0], "value", "jit(shaped)")


def case_int_tracer(leak: bool) -> Expect:
    stash: list[Any] = []

    def count(n: Any) -> Any:
        _closure_stash(stash, _keep(leak, n, CONCRETE_INT))
        return n + 1

    jax.jit(count)(3)
    return Expect((stash,), stash[0], "value", "jit(count)")


def case_prng_key(leak: bool) -> Expect:
    stash: list[Any] = []

    def sample(key: Any) -> Any:
        _closure_stash(stash, _keep(leak, key, CONCRETE_KEY))
        return jax.random.normal(key)

    jax.jit(sample)(jax.random.key(0))
    return Expect((stash,), stash[0], "value", "jit(sample)")


def case_jax_closure_convert(leak: bool) -> Expect:
    # jax.closure_convert hoists float tracers only: an int32 one stays behind in
    # the converted function's closure.
    stash: list[Any] = []

    def step(x: Any, n: Any) -> Any:
        m = _keep(leak, n, CONCRETE_INT)

        def scale(y: Any) -> Any:
            return y * m

        converted, _ = jax.closure_convert(scale, x)
        stash.append(converted)
        return x

    jax.jit(step)(1.0, 2)
    return Expect((stash,), stash[0], "closure_consts", "jit(step)")


CASES: dict[str, Callable[[bool], Expect]] = {
    name.removeprefix("case_"): cast(Callable[[bool], Expect], fn)
    for name, fn in dict(globals()).items()
    if name.startswith("case_") and callable(fn)
}


def test_corpus_is_large() -> None:
    assert len(CASES) >= 20


@pytest.mark.parametrize("name", sorted(CASES))
def test_escape_is_reported(name: str) -> None:
    expect = CASES[name](True)
    leaks = lift.find_leaks(*expect.roots)
    assert len(leaks) == 1, leaks
    (leak,) = leaks
    code = expect.holder.__code__
    assert leak.function == expect.holder.__qualname__
    assert leak.variable == expect.variable
    assert leak.filename == code.co_filename
    assert leak.lineno == code.co_firstlineno
    assert leak.tracer.endswith(f" from {expect.transform}"), leak.tracer
    if expect.path is not None:
        assert leak.path == expect.path
    text = str(leak)
    assert f"{leak.function} ({code.co_filename}:{leak.lineno})" in text
    assert f"'{expect.variable}'" in text
    assert " — " in text
    with pytest.raises(lift.LeakError, match=f"'{expect.variable}'"):
        lift.check_leaks(*expect.roots)


def test_jax_closure_convert_leak_points_to_lift_closure_convert() -> None:
    (leak,) = lift.find_leaks(*case_jax_closure_convert(True).roots)
    assert leak.tracer == "int32[] from jit(step)"
    assert leak.hint.startswith("jax.closure_convert keeps integer, boolean")
    assert str(leak).endswith(
        "convert with lift.closure_convert(f, *example_args) instead"
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_clean_twin_is_quiet(name: str) -> None:
    expect = CASES[name](False)
    assert lift.find_leaks(*expect.roots) == []
    assert lift.check_leaks(*expect.roots) is None
