"""Breaks found by reviewing lift against its contract as an adversary.

Each test asserts what the contract promises and is marked
`xfail(strict=True)` with what is wrong today, so that it passes once fixed.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import heapq
import importlib.metadata
import inspect
import weakref
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from helpers import call_lifted

import lift

pytest_plugins = ("pytester",)


def _escaped() -> Any:
    """A tracer whose `jit` has exited."""
    box: list[Any] = []
    with jax.check_tracer_leaks(False):
        jax.jit(lambda x: box.append(x) or x)(1.0)
    return box[0]


# -- side effects on captured containers ---------------------------------------


def _augmented_item() -> tuple[Callable[[Any], Any], Any]:
    metrics = {"loss": 0.0}

    def step(x: Any) -> Any:
        metrics["loss"] += x
        return x

    return step, metrics


def _nested_append() -> tuple[Callable[[Any], Any], Any]:
    state: dict[str, Any] = {"lr": 0.5, "log": []}

    def step(x: Any) -> Any:
        state["log"].append(x)
        return x * state["lr"]

    return step, state


def _computed_index() -> tuple[Callable[[Any], Any], Any]:
    buf = [0.0, 0.0]

    def step(x: Any) -> Any:
        i = 0
        buf[i + 1] = x
        return x

    return step, buf


def _slice_store() -> tuple[Callable[[Any], Any], Any]:
    buf = [0.0, 0.0]

    def step(x: Any) -> Any:
        buf[:] = [x, x]
        return x

    return step, buf


def _heappush() -> tuple[Callable[[Any], Any], Any]:
    heap = [0.5]

    def step(x: Any) -> Any:
        heapq.heappush(heap, x)
        return x

    return step, heap


_MUTATION_REASON = (
    "the mutation analysis misses this pattern: the code mutates a silent copy "
    "of a captured container that holds a float, and lift does not refuse it"
)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(
            _augmented_item,
            id="metrics[k] += x",
            marks=pytest.mark.xfail(strict=True, reason=_MUTATION_REASON),
        ),
        pytest.param(_nested_append, id="state[k].append(x)"),
        pytest.param(
            _computed_index,
            id="buf[i + 1] = x",
            marks=pytest.mark.xfail(strict=True, reason=_MUTATION_REASON),
        ),
        pytest.param(
            _slice_store,
            id="buf[:] = ...",
            marks=pytest.mark.xfail(strict=True, reason=_MUTATION_REASON),
        ),
        pytest.param(
            _heappush,
            id="heapq.heappush(buf, x)",
            marks=pytest.mark.xfail(strict=True, reason=_MUTATION_REASON),
        ),
    ],
)
def test_a_mutated_container_holding_a_float_reaches_the_user_or_is_refused(
    make: Callable[[], tuple[Callable[[Any], Any], Any]],
) -> None:
    plain, expected = make()
    plain(2.0)
    step, container = make()
    refused = None
    try:
        lift.lift(step)(2.0)
    except lift.LiftError as err:
        refused = str(err)
    if refused is not None:
        assert "mutates" in refused
    else:
        assert container == expected


# -- lift.jit serves what Python computes now ----------------------------------


@pytest.mark.xfail(
    strict=True,
    reason="lift.jit watches a function's __kwdefaults__ but not a captured "
    "partial's keywords: changed in place, the old value is served",
)
def test_lift_jit_sees_a_captured_partials_keyword_changed_in_place() -> None:
    # As `f.__kwdefaults__['lr'] = 0.5` is seen, so should `p.keywords['lr']`:
    # Python reads both at each call.
    def scaled(w: Any, lr: float) -> Any:
        return w * lr

    def make(p: Callable[[Any], Any]) -> Callable[[Any], Any]:
        @lift.jit
        def step(w: Any) -> Any:
            return p(w)

        return step

    p = functools.partial(scaled, lr=0.1)
    step = make(p)
    step(1.0)
    step(1.0)
    p.keywords["lr"] = 0.5
    # lift.verifying() flags this call as a disagreement; without it, 0.1.
    assert float(step(1.0)) == pytest.approx(0.5)


@pytest.mark.xfail(
    strict=True,
    reason="lift.jit serves a captured dict's old float after config['lr'] "
    "changes in place, while lift.verifying() calls that same call a "
    "disagreement",
)
def test_lift_jit_sees_a_captured_dict_of_hyperparameters_changed_in_place() -> None:
    config = {"lr": 0.1}

    def make() -> Callable[[Any], Any]:
        @lift.jit
        def step(w: Any) -> Any:
            return w * config["lr"]

        return step

    step = make()
    step(1.0)
    step(1.0)
    config["lr"] = 0.5
    assert float(step(1.0)) == pytest.approx(0.5)


@pytest.mark.xfail(
    strict=True,
    reason="lift.jit keeps the leaves of a captured nnx model after an "
    "optimizer updates it in place, and serves the old parameters",
)
def test_lift_jit_over_an_nnx_model_sees_the_optimizers_update() -> None:
    import optax
    from flax import nnx

    model = nnx.Linear(2, 1, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)
    x = jnp.ones((1, 2))

    def make(model: Any) -> Callable[[Any], Any]:
        @lift.jit
        def loss(x: Any) -> Any:
            return jnp.sum(model(x) ** 2)

        return loss

    loss = make(model)
    loss(x)
    loss(x)
    grads = nnx.grad(lambda m: jnp.sum(m(x) ** 2))(model)
    optimizer.update(model, grads)
    assert float(loss(x)) == pytest.approx(float(jnp.sum(model(x) ** 2)))


def _tripled(x: Any) -> Any:
    return x * 3.0


@pytest.mark.xfail(
    strict=True,
    reason="lift.jit keys programs on code but serves the old program after "
    "the function's __code__ is replaced in place (as IPython's autoreload "
    "does); lift.verifying() calls it a disagreement",
)
def test_lift_jit_sees_its_functions_code_replaced_in_place() -> None:
    def step(x: Any) -> Any:
        return x * 2.0

    compiled = lift.jit(step)
    assert float(compiled(1.0)) == 2.0
    assert float(compiled(1.0)) == 2.0
    step.__code__ = _tripled.__code__
    assert float(compiled(1.0)) == step(1.0) == 3.0


# -- static keys -----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Head:
    width: int
    activation: Callable[[Any], Any] = dataclasses.field(
        default=jnp.tanh, compare=False
    )


@pytest.mark.xfail(
    strict=True,
    reason="a static compared by its class's own __eq__ (a frozen dataclass "
    "with a compare=False field) shares a program with one that computes "
    "otherwise: lift.jit serves tanh for relu",
)
def test_statics_equal_only_by_their_eq_never_share_a_program() -> None:
    def make(head: _Head) -> Callable[[Any], Any]:
        @lift.jit
        def apply(x: Any) -> Any:
            return head.activation(x) * head.width

        return apply

    assert float(make(_Head(2, jnp.tanh))(-1.0)) == pytest.approx(-1.5231884)
    assert float(make(_Head(2, jax.nn.relu))(-1.0)) == 0.0


@pytest.mark.xfail(
    strict=True,
    reason="a Lifted rebuilt from its leaves (tree_map, or any transform) and "
    "unlift report the annotations of another closure lifted earlier with the "
    "same code: inspect.signature shows int for a function annotated str",
)
def test_a_rebuilt_lifted_keeps_its_own_signature() -> None:
    def make(scale: float, kind: type) -> Callable[[Any], Any]:
        def f(x: Any) -> Any:
            return x * scale

        # As a module without `from __future__ import annotations` has them.
        f.__annotations__ = {"x": kind, "return": kind}
        return f

    lift.lift(make(1.0, int))
    g = make(2.0, str)
    lifted = lift.lift(g)
    rebuilt = jax.tree_util.tree_map(lambda v: v, lifted)
    assert inspect.signature(rebuilt) == inspect.signature(g)
    assert lift.unlift(lifted).__annotations__ == g.__annotations__


class _Rate(float, enum.Enum):
    SLOW = 0.01
    FAST = 0.1


@pytest.mark.xfail(
    strict=True,
    reason="a float-valued Enum member is made a dynamic leaf (it is a float "
    "by isinstance): under jit it becomes a tracer, its identity and .value "
    "are gone, and the call fails with a bare AttributeError",
)
def test_a_float_enum_member_keeps_its_identity_under_jit() -> None:
    def make(rate: _Rate) -> Callable[[Any], Any]:
        def f(x: Any) -> Any:
            if rate is _Rate.FAST:
                return x * 2
            return x * rate.value

        return f

    for rate in _Rate:
        f = make(rate)
        assert jax.jit(call_lifted)(lift.lift(f), 1.0) == pytest.approx(f(1.0))


# -- diagnosis -----------------------------------------------------------------


@functools.singledispatch
def _convert(x: Any) -> Any:
    return x * 2


@_convert.register
def _(x: int) -> Any:
    return x * 3


@pytest.mark.xfail(
    strict=True,
    reason="a closure over a functools.singledispatch function is refused, "
    "blaming functools' own 'registry' (dict keys JAX cannot sort) with a fix "
    "the user cannot apply",
)
def test_a_closure_over_a_singledispatch_function_lifts() -> None:
    def make(conv: Callable[[Any], Any]) -> Callable[[Any], Any]:
        return lambda x: conv(x) + 1.0

    f = make(_convert)
    assert float(lift.lift(f)(2.0)) == f(2.0) == 5.0


@pytest.mark.xfail(
    strict=True,
    reason="selecting with a comparison of a float capture ((a, b)[lr > 0.5]) "
    "fails eagerly with a bare TypeError that names neither the capture nor "
    "the fix",
)
def test_selecting_by_a_float_capture_works_or_names_the_capture() -> None:
    def make(lr: float) -> Callable[[Any], Any]:
        def f(x: Any) -> Any:
            return (x, 2 * x)[lr > 0.5]

        return f

    f = make(0.1)
    refused, out = None, None
    try:
        out = lift.lift(f)(1.0)
    except lift.LiftError as err:
        refused = str(err)
    if refused is not None:
        assert "'lr'" in refused and "static=('lr',)" in refused
    else:
        assert out == f(1.0)


@pytest.mark.xfail(
    strict=True,
    reason="lift.diff shows a captured list's contents as they are now on both "
    "sides (names = ['a', 'b'] vs ['a', 'b']), not as each Lifted was keyed",
)
def test_diff_shows_a_grown_list_as_each_lifted_was_keyed() -> None:
    def make() -> tuple[Callable[[Any], Any], list[str]]:
        names = ["a"]

        def f(x: Any) -> Any:
            return x * len(names)

        return f, names

    f, names = make()
    before = lift.lift(f)
    names.append("b")
    after = lift.lift(f)
    said = lift.diff(before, after)
    assert said is not None
    assert "names = ['a'] vs ['a', 'b']" in said


# -- the pytest plugin -----------------------------------------------------------


def _plugin_args() -> list[str]:
    installed = any(
        ep.value == "lift._plugin"
        for ep in importlib.metadata.entry_points(group="pytest11")
    )
    return [] if installed else ["-p", "lift._plugin"]


LOCAL_LOG = """
import jax

def test_local_log():
    seen = []

    def f(x):
        seen.append(x)
        return x * 2

    assert float(jax.jit(f)(1.0)) == 2.0
    assert len(seen) == 1
"""


@pytest.mark.xfail(
    strict=True,
    reason="the fast mode passes a test whose local list kept a jit tracer "
    "for the rest of the test: JAX's checker fails it at the trace exit, the "
    "fast mode looks only after the test's frame has dropped it",
)
def test_fast_mode_fails_a_test_jax_fails_for_a_tracer_kept_in_a_local(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_local=LOCAL_LOG)
    monkeypatch.setenv("JAX_CHECK_TRACER_LEAKS", "1")
    jax_run = pytester.runpytest_subprocess()
    jax_run.assert_outcomes(failed=1)  # JAX's checker: a leak
    monkeypatch.setenv("JAX_CHECK_TRACER_LEAKS", "0")
    result = pytester.runpytest_subprocess(*_plugin_args(), "--lift-leaks")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*LeakError*seen*"])


ODEINT = """
import jax
import jax.numpy as jnp
from jax.experimental.ode import odeint

def test_odeint_in_jit():
    def solve(y0, k):
        return odeint(lambda y, t: -k * y, y0, jnp.linspace(0.0, 1.0, 3))

    out = jax.jit(solve)(1.0, 2.0)
    assert abs(float(out[-1]) - float(jnp.exp(-2.0))) < 1e-3
"""


@pytest.mark.xfail(
    strict=True,
    reason="the fast mode fails a clean test of jax.experimental.ode.odeint "
    "under jit (a tracer kept by JAX's own closure_convert cache, which JAX's "
    "checker passes) and tells the user to stop storing "
    "_closure_convert_for_avals",
)
def test_fast_mode_passes_odeint_under_jit_as_jax_checker_does(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_odeint=ODEINT)
    monkeypatch.setenv("JAX_CHECK_TRACER_LEAKS", "1")
    pytester.runpytest_subprocess().assert_outcomes(passed=1)
    monkeypatch.setenv("JAX_CHECK_TRACER_LEAKS", "0")
    result = pytester.runpytest_subprocess(*_plugin_args(), "--lift-leaks")
    result.assert_outcomes(passed=1)


class _Model:
    """A stateful object whose jitted method takes it as a static argument."""

    def __init__(self) -> None:
        self.last: Any = None

    def step(self, x: Any) -> Any:
        self.last = x
        return x * 2


@pytest.mark.lift_allow_leaks
@pytest.mark.xfail(
    strict=True,
    reason="lift.checked(jax.jit) does not scan the static arguments of the "
    "call that traced: a method that stores a tracer on self (static_argnums=0) "
    "passes, where JAX's checker fails it",
)
def test_checked_jit_finds_a_tracer_stored_on_a_static_argument() -> None:
    model = _Model()
    step = lift.checked(jax.jit)(_Model.step, static_argnums=0)
    with jax.check_tracer_leaks(False), pytest.raises(lift.LeakError, match="last"):
        step(model, 1.0)


# -- find_leaks --------------------------------------------------------------------


class _Holder:
    def __init__(self, value: Any) -> None:
        self.value = value


@pytest.mark.lift_allow_leaks
@pytest.mark.xfail(
    strict=True,
    reason="a tracer reached from two roots is reported under whichever root "
    "comes first: the report (holder, function, variable) depends on the "
    "order of the roots",
)
def test_a_report_does_not_depend_on_the_order_of_roots() -> None:
    tracer = _escaped()
    model = _Holder(tracer)
    cache = {"last": tracer}

    def uses_model() -> Any:
        return model

    def uses_cache() -> Any:
        return cache

    def report(*roots: Any) -> list[tuple[str, Any, Any]]:
        leaks = lift.find_leaks(*roots)
        return sorted((leak.path, leak.function, leak.variable) for leak in leaks)

    assert report(uses_model, uses_cache) == report(uses_cache, uses_model)


@pytest.mark.lift_allow_leaks
@pytest.mark.xfail(
    strict=True,
    reason="find_leaks skips a weakref.ref silently: the tracer its referent "
    "holds is neither reported nor the holder named",
)
def test_find_leaks_opens_or_names_a_weak_reference() -> None:
    holder = _Holder(_escaped())
    ref = weakref.ref(holder)

    def reads() -> Any:
        return ref().value  # pyright: ignore[reportOptionalMemberAccess]

    assert lift.find_leaks(reads) != []


@pytest.mark.lift_allow_leaks
@pytest.mark.xfail(
    strict=True,
    reason="find_leaks skips an exception's args silently: a caught error "
    "kept with a tracer in it is neither reported nor named",
)
def test_find_leaks_opens_or_names_a_kept_exception() -> None:
    errors = [ValueError("not finite", _escaped())]

    def reads() -> Any:
        return errors

    assert lift.find_leaks(reads) != []
