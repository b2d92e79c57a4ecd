"""`lift.checked(transform)` and `lift.checking_leaks()`."""

from __future__ import annotations

import dataclasses
import fractions
import functools
import gc
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lift
from lift import _compat
from lift._leaks import checking as _checking

pytestmark = pytest.mark.lift_allow_leaks

STASH: list[Any] = []


@pytest.fixture(autouse=True)
def _clear() -> Iterator[None]:
    yield
    STASH.clear()


@pytest.fixture
def scans(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the scans `checked` runs (through `scan_confirmed`)."""
    count = [0]
    real = _checking.scan_tracers

    def counting(*args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(_checking, "scan_tracers", counting)
    return count


def _stash(x: Any) -> Any:
    STASH.append(x)
    return x * 2


@pytest.mark.parametrize("jax_checks", [False, True])
def test_checked_jit_reports_a_global(jax_checks: bool) -> None:
    with jax.check_tracer_leaks(jax_checks):
        f = lift.checked(jax.jit)(_stash)
        with pytest.raises(
            lift.LeakError,
            match=r"STASH\[0\]: float32\[\] from jit\(_stash\), in global 'STASH' "
            r"used by _stash \(.*test_checking.py:\d+\) — return the value",
        ):
            f(1.0)


def test_cached_calls_cost_no_scan(scans: list[int]) -> None:
    traces = 0

    def clean(x: Any) -> Any:
        nonlocal traces
        traces += 1
        return x * 2

    f = lift.checked(jax.jit)(clean)
    np.testing.assert_allclose(f(1.0), 2.0)
    assert (traces, scans[0]) == (1, 1)
    for _ in range(5):
        f(2.0)
    assert (traces, scans[0]) == (1, 1)
    f(jnp.ones(3))  # a new shape traces, and is scanned
    assert (traces, scans[0]) == (2, 2)


def test_checked_keeps_transform_arguments_and_methods() -> None:
    def add(x: Any, n: int) -> Any:
        return x + n

    f: Any = lift.checked(jax.jit)(add, static_argnums=1)
    np.testing.assert_allclose(f(1.0, 2), 3.0)
    assert f.__name__ == "add"
    assert "add" in f.lower(1.0, 2).as_text()


def test_checked_eager_grad_names_the_holder() -> None:
    box: list[Any] = []

    def loss(x: Any) -> Any:
        box.append(lambda: x)
        return x * 2

    if _compat.JAX_CHECKS_EAGER_GRAD:
        # jax >= 0.11 sees it too, and names the holders by object id only.
        with (
            pytest.raises(Exception, match="Leaked trace LinearizeTrace"),
            jax.checking_leaks(),
        ):
            jax.grad(loss)(1.0)
    else:
        with jax.checking_leaks():
            jax.grad(loss)(1.0)  # jax <= 0.10 does not see eager grad escapes
    box.clear()
    with pytest.raises(
        lift.LeakError,
        match=r"loss.captures\['box'\]\[0\] -> .*captured variable 'x'.*from grad",
    ):
        lift.checked(jax.grad)(loss)(1.0)


def test_checked_vmap_and_clean_results() -> None:
    def double(x: Any) -> Any:
        return x * 2

    out = lift.checked(jax.vmap)(double)(jnp.arange(3.0))
    np.testing.assert_allclose(out, [0.0, 2.0, 4.0])
    with pytest.raises(lift.LeakError, match=r"from vmap"):
        lift.checked(jax.vmap)(_stash)(jnp.arange(3.0))


def test_checked_scans_outputs() -> None:
    escaped: list[Any] = []
    with jax.check_tracer_leaks(False):
        jax.jit(lambda x: escaped.append(x) or x)(1.0)

    def leaky() -> Any:
        return {"kept": escaped[0]}

    with pytest.raises(lift.LeakError, match=r"output\['kept'\]: float32\[\]"):
        lift.checked(lambda f: f)(leaky)()


class Sink:
    """Hashable, so it can be a static argument; collects what it is given."""

    def __init__(self) -> None:
        self.items: list[Any] = []

    def __hash__(self) -> int:
        return 0


def test_checked_scans_lifted_built_during_the_call() -> None:
    def build(x: Any, sink: Sink) -> Any:
        def shifted(y: Any) -> Any:
            return y + x

        sink.items.append(lift.lift(shifted))
        return x

    with (
        jax.check_tracer_leaks(False),
        pytest.raises(lift.LeakError, match=r"shifted \(.*\), captured variable 'x'"),
    ):
        lift.checked(jax.jit)(build, static_argnums=1)(1.0, Sink())


def test_checked_inside_a_transform_sees_outer_tracers_as_live() -> None:
    @jax.jit
    def outer(x: Any) -> Any:
        inner = lift.checked(jax.vmap)(lambda y: y * x)
        return inner(jnp.arange(3.0))

    np.testing.assert_allclose(outer(2.0), [0.0, 2.0, 4.0])


def test_checking_leaks_translates_jax_report() -> None:
    with (
        pytest.raises(lift.LeakError, match=r"STASH\[0\]") as info,
        lift.checking_leaks(),
    ):
        jax.jit(_stash)(1.0)
    assert info.value.__cause__ is None
    assert info.value.__suppress_context__


class Something:
    def set_x(self, x: Any) -> None:
        self.x = x


def test_checking_leaks_never_surfaces_jax_issue_26560() -> None:
    something = Something()
    # A discarded closure makes `something` a cell variable of this frame: the
    # cell, held only by the frame, sends JAX's `_why_alive` out of range.
    lambda: something  # noqa: B018

    # What JAX does on its own: jax <= 0.10 loses the report in an IndexError;
    # jax >= 0.11 reports the chain of objects by id.
    with (
        jax.checking_leaks(),
        pytest.raises(IndexError if _compat.JAX_ISSUE_26560 else Exception),
    ):
        jax.jit(something.set_x)(7)
    del something.x
    with (
        pytest.raises(
            lift.LeakError, match=r"something\.x: int32\[\] from jit\(set_x\)"
        ),
        lift.checking_leaks(),
    ):
        jax.jit(something.set_x)(7)


def test_checking_leaks_as_decorator() -> None:
    @lift.checking_leaks()
    def run() -> Any:
        return jax.jit(_stash)(1.0)

    with pytest.raises(lift.LeakError, match=r"in global 'STASH'"):
        run()


def test_checking_leaks_lets_other_errors_through() -> None:
    with pytest.raises(IndexError, match="mine"), lift.checking_leaks():
        raise IndexError("mine")
    with pytest.raises(ValueError, match="mine"), lift.checking_leaks():
        raise ValueError("mine")


@pytest.mark.parametrize("form", ["block", "decorator"])
def test_checking_leaks_names_the_blocks_variable_holding_an_eager_tracer(
    form: str,
) -> None:
    # An eager `grad`'s tracer kept in a list of the block's: JAX's checker
    # (from jax 0.12) reports it as the trace exits, inside the transform;
    # lift then (before 0.12) as the block ends. The frames JAX's error
    # unwound are below the block's, whose variables name the holder; as a
    # decorator, the block is the caller's.
    kept: list[Any] = []
    grad = jax.grad(lambda x: kept.append(x) or x)

    def run() -> None:
        if form == "decorator":
            lift.checking_leaks()(grad)(jnp.float32(1))
        else:
            with lift.checking_leaks():
                grad(jnp.float32(1))

    with pytest.raises(
        lift.LeakError, match=r"kept\[0\]: float32\[\] from grad"
    ) as err:
        run()
    kept.clear()
    assert "fn." not in str(err.value)  # no variable of lift's own wrapper


class _Fitted:
    def __init__(self) -> None:
        self.stash: list[Any] = []

    @lift.checking_leaks()
    def fit(self, x: Any) -> Any:
        return jax.grad(lambda y: self.stash.append(y) or y)(x)


@lift.checking_leaks()
def _fit(buffer: list[Any], x: Any) -> Any:
    return jax.grad(lambda y: buffer.append(y) or y)(x)


@pytest.mark.parametrize("form", ["method", "argument"])
def test_checking_leaks_as_a_decorator_names_the_functions_arguments(
    form: str,
) -> None:
    # The tracer is kept by the decorated function's argument, which no
    # variable of the caller holds (a temporary object): it is named by its
    # parameter, not reported as held by nothing lift can see.
    if form == "method":
        with pytest.raises(lift.LeakError, match=r"self\.stash\[0\]: float32\[\]"):
            _Fitted().fit(jnp.float32(1))
    else:
        with pytest.raises(lift.LeakError, match=r"buffer\[0\]: float32\[\]"):
            _fit([], jnp.float32(1))


@pytest.mark.parametrize("holder", ["box", "STASH"])
@pytest.mark.parametrize("transform", [jax.grad, jax.jit])
def test_checking_leaks_names_the_variable_holding_a_lifted_built_inside(
    transform: Any, holder: str
) -> None:
    # The `Lifted` holds the tracer; the report names where it is stored (a
    # local of the block, a global), under an eager `grad` (found in the
    # `Lifted`s the block built: JAX's checker misses it before 0.12) as
    # under `jit` (JAX's checker).
    box: list[Any] = []
    name = "grad" if transform is jax.grad else "jit(loss)"

    def loss(x: Any) -> Any:
        (box if holder == "box" else STASH).append(lift.lift(lambda: x))
        return x * 2

    with (
        pytest.raises(
            lift.LeakError,
            match=rf"{holder}\[0\] -> .*captured variable 'x'.*from {re.escape(name)}",
        ),
        lift.checking_leaks(),
    ):
        transform(loss)(1.0)


class _Opaque:
    """Not a pytree: only `lift.closure_convert` reaches the tracer it holds."""

    def __init__(self, v: Any) -> None:
        self.v = v


@pytest.mark.parametrize("kept", [False, True])
@pytest.mark.parametrize("how", ["checking_leaks", "checked"])
def test_a_lifted_that_only_garbage_holds_escaped_nothing(how: str, kept: bool) -> None:
    # A `Lifted` built in the call, holding a tracer, that only an uncollected
    # cycle holds when the call ends escaped nothing: JAX's checker, which
    # collects first, agrees. The collector is off, as between two of its
    # runs. The same cycle kept in a global is a leak.
    def loss(x: Any) -> Any:
        box = _Opaque(x * 2)
        g = lift.closure_convert(lambda y: y * box.v, jnp.float32(1))
        cycle: list[Any] = [g]
        cycle.append(cycle)
        if kept:
            STASH.append(cycle)
        return g(x)

    def run() -> Any:
        if how == "checked":
            return lift.checked(jax.grad)(loss)(jnp.float32(1))
        with lift.checking_leaks():
            return jax.grad(loss)(jnp.float32(1))

    gc.disable()
    try:
        if kept:
            with pytest.raises(lift.LeakError, match=r"'consts' at consts\[0\]"):
                run()
        else:
            assert run() == 4.0
    finally:
        gc.enable()


def test_checking_leaks_quiet_on_clean_code() -> None:
    with lift.checking_leaks():
        out = jax.jit(lambda x: x * 2)(1.0)
        f = lift.lift(lambda y: y * out)
    np.testing.assert_allclose(f(2.0), 4.0)


class Counter:
    """Not a pytree: `lift` keeps it as it is, so counts reach the test."""

    def __init__(self) -> None:
        self.n = 0


def test_checked_lift_jit_shares_one_program_across_closures(scans: list[int]) -> None:
    traces = Counter()

    def make(lr: float) -> Any:
        def step(x: Any) -> Any:
            traces.n += 1
            return x * lr

        return step

    f: Any = lift.checked(lift.jit)(make(0.1))
    g: Any = lift.checked(lift.jit)(make(0.2))
    np.testing.assert_allclose(f(1.0), 0.1)
    np.testing.assert_allclose(g(1.0), 0.2)
    assert (traces.n, scans[0]) == (1, 1)


def test_checking_leaks_finds_globals_of_modules_off_the_stack(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "leaky_helpers.py").write_text(
        "CACHE = []\n\ndef step(x):\n    CACHE.append(x)\n    return x\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import leaky_helpers  # pyright: ignore[reportMissingImports]

    with (
        pytest.raises(lift.LeakError, match=r"leaky_helpers\.CACHE\[0\]: float32\[\]"),
        lift.checking_leaks(),
    ):
        jax.jit(leaky_helpers.step)(1.0)
    monkeypatch.delitem(sys.modules, "leaky_helpers")


def test_checked_function_is_a_transparent_proxy() -> None:
    def double(x):
        """Double it."""
        return 2 * x

    f: Any = lift.checked(jax.jit)(double)  # the proxy's attributes are dynamic
    assert f(1.0) == 2.0
    assert f(2.0) == 4.0
    assert f._cache_size() == 1  # the jitted function's own attributes reach through
    assert f.__name__ == "double" and f.__doc__ == "Double it."
    assert "double" in f.lower(1.0).as_text()


def test_checked_jit_as_a_method() -> None:
    @functools.partial(
        jax.tree_util.register_dataclass, data_fields=["k"], meta_fields=[]
    )
    @dataclasses.dataclass
    class Scaler:
        k: jax.Array

        @lift.checked(jax.jit)
        def apply(self, x):
            return self.k * x

    assert (
        Scaler(jnp.asarray(3.0)).apply(2.0) == 6.0
    )  # bound: `self` is the first argument


# -- False alarms: what is not a leak is never reported -------------------------


def _index_error(x: Any) -> Any:
    y = x * 2
    return [x, y][3]  # a genuine bug of the user's, raised while tracing


@pytest.mark.parametrize("jax_checks", [False, True])
def test_user_index_error_under_checking_leaks_passes_through(jax_checks: bool) -> None:
    with (
        jax.check_tracer_leaks(jax_checks),
        pytest.raises(IndexError, match="list index out of range") as info,
        lift.checking_leaks(),
    ):
        jax.jit(_index_error)(1.0)
    # The traceback is the one JAX would have shown: the user's frames.
    frames = [tb.tb_frame.f_code.co_name for tb in _walk(info.value.__traceback__)]
    assert "_index_error" in frames
    assert "trace_to_jaxpr" not in frames


@pytest.mark.parametrize("jax_checks", [False, True])
def test_user_index_error_under_checked_jit_passes_through(jax_checks: bool) -> None:
    with (
        jax.check_tracer_leaks(jax_checks),
        pytest.raises(IndexError, match="list index out of range"),
    ):
        lift.checked(jax.jit)(_index_error)(1.0)


@pytest.fixture(params=["off", "tracebackhide"])
def traceback_filtering(request: pytest.FixtureRequest) -> Iterator[str]:
    """JAX's `jax_traceback_filtering` set to each mode lift's default leaves."""
    was = jax.config.jax_traceback_filtering  # pyright: ignore[reportAttributeAccessIssue]
    jax.config.update("jax_traceback_filtering", request.param)
    try:
        yield request.param
    finally:
        jax.config.update("jax_traceback_filtering", was)


def test_user_error_under_checked_jit_is_filtered_as_jax_filters_it(
    traceback_filtering: str,
) -> None:
    # JAX's checker on: the call runs with whole tracebacks (to tell its report
    # from the user's error), and the user's error leaves as JAX's own filtering
    # mode would have left it.
    with (
        jax.check_tracer_leaks(True),
        pytest.raises(IndexError, match="list index out of range") as info,
    ):
        lift.checked(jax.jit)(_index_error)(1.0)
    frames = [tb.tb_frame for tb in _walk(info.value.__traceback__)]
    assert "_index_error" in [f.f_code.co_name for f in frames]
    jaxs = [f for f in frames if f.f_globals.get("__name__", "").startswith("jax.")]
    assert jaxs  # not removed, in either mode
    hidden = ["__tracebackhide__" in f.f_locals for f in jaxs]
    assert all(hidden) if traceback_filtering == "tracebackhide" else not all(hidden)


def _scale(n: Any, x: Any) -> Any:
    return x * n


def test_checked_jit_refusing_its_arguments_before_tracing_passes_the_error_through() -> (
    None
):
    # `jax.jit` refuses the static argument before `_scale` runs: nothing was
    # traced, nothing to check, JAX's error as it is.
    with (
        jax.check_tracer_leaks(True),
        pytest.raises(ValueError, match="Non-hashable static arguments"),
    ):
        lift.checked(jax.jit)(_scale, static_argnums=0)([2], 1.0)
    assert float(lift.checked(jax.jit)(_scale, static_argnums=0)(2, 1.0)) == 2.0


class _UnreadableLower:
    """A transform whose `lower` cannot be read: not a compiled function."""

    @property
    def lower(self) -> Any:
        raise RuntimeError("not compiled")

    def __call__(self, fn: Any) -> Any:
        return jax.jit(fn)


class _Jitted:
    """What a transform returns: `jax.jit`'s function, with an attribute that
    cannot be read."""

    def __init__(self, fn: Any) -> None:
        self.fn = jax.jit(fn)

    def __call__(self, *args: Any) -> Any:
        return self.fn(*args)

    def lower(self, *args: Any) -> Any:
        return self.fn.lower(*args)

    @property
    def broken(self) -> Any:
        raise RuntimeError("unreadable")


def _jit_with_a_broken_attribute(fn: Any) -> Any:
    return _Jitted(fn)


def test_checked_takes_a_transform_whose_attributes_fail() -> None:
    assert float(lift.checked(_UnreadableLower())(_double)(1.0)) == 2.0
    # What the transformed function's attributes it can read are reached
    # through; one that fails to read is left out.
    f: Any = lift.checked(_jit_with_a_broken_attribute)(_double)
    assert float(f(2.0)) == 4.0
    assert "mul" in f.lower(1.0).as_text()
    assert not hasattr(f, "broken")


def test_index_error_twin_a_leak_is_still_a_leak() -> None:
    with (
        pytest.raises(lift.LeakError, match=r"STASH\[0\]: float32\[\] from jit"),
        lift.checking_leaks(),
    ):
        jax.jit(_stash)(1.0)


def _walk(tb: Any) -> Iterator[Any]:
    while tb is not None:
        yield tb
        tb = tb.tb_next


def _sublevel(x: Any) -> Any:
    lst: list[Any] = []

    @jax.jit
    def g(x: Any) -> Any:
        lst.append(x)
        return x

    return g(x)


def test_sublevel_leak_names_only_the_leaked_tracer() -> None:
    # JAX's test_leak_checker_catches_a_sublevel_leak: the outer function's own
    # argument `x` dies with the traceback and is no leak.
    with (
        pytest.raises(
            lift.LeakError,
            match=r"^1 tracer escaped the transform that created it:\n"
            r"  lst\[0\]: int32\[\] from jit\(g\)",
        ) as info,
        lift.checking_leaks(),
    ):
        jax.jit(_sublevel)(3)
    assert "from jit(_sublevel)" not in str(info.value)


def test_sublevel_clean_twin() -> None:
    def clean(x: Any) -> Any:
        return jax.jit(lambda y: y + 1)(x)

    with lift.checking_leaks():
        assert jax.jit(clean)(3) == 4


def test_checking_leaks_ignores_leaks_from_before_it() -> None:
    with jax.check_tracer_leaks(False):
        jax.jit(_stash)(1.0)  # STASH[0] escaped before the block
    with (
        pytest.raises(lift.LeakError, match=r"^1 tracer escaped.*\n  STASH\[1\]"),
        lift.checking_leaks(),
    ):
        # Another shape: traced anew whatever the JAX version's cache keys on.
        jax.jit(_stash)(jnp.ones(2))
    with lift.checking_leaks():  # twin: an old leak alone reports nothing
        jax.jit(lambda x: x * len(STASH))(1.0)


def test_unplaced_jax_report_is_kept_chained() -> None:
    hidden: dict[str, Any] = {}

    class Sealed:
        """Opaque to lift: only running its code would show its attributes
        (a scan runs none)."""

        @property
        def __dict__(self) -> dict[str, Any]:  # type: ignore[override]
            raise AttributeError("__dict__")

    sealed = Sealed()

    def hide(x: Any) -> Any:
        object.__setattr__(sealed, "x", x)
        return x

    del hidden
    with (
        pytest.raises(
            lift.LeakError, match=r"held by no variable lift can see"
        ) as info,
        lift.checking_leaks(),
    ):
        jax.jit(hide)(1.0)
    cause = info.value.__cause__
    assert cause is not None and str(cause).startswith("Leaked trace")


_REGISTRY: list[Any] = []


def test_report_names_the_path_to_a_stored_lifted() -> None:
    def make(x: Any) -> Any:
        _REGISTRY.append(lift.lift(lambda y: y * x))
        return x

    try:
        with (
            pytest.raises(
                lift.LeakError,
                match=r"  _REGISTRY\[0\] -> .*make\.<locals>\.<lambda> \(.*:\d+\), "
                r"captured variable 'x': float32\[\] from jit\(make\) — .* is "
                r"already lifted",
            ),
            lift.checking_leaks(),
        ):
            jax.jit(make)(1.0)
    finally:
        _REGISTRY.clear()


def test_report_names_the_attribute_holding_a_lifted() -> None:
    @dataclasses.dataclass
    class State:
        tx: Any = None

    state = State()

    def make(x: Any) -> Any:
        state.tx = lift.lift(lambda y: y * x)
        return x

    with (
        pytest.raises(lift.LeakError, match=r"  state\.tx -> .*captured variable 'x'"),
        lift.checking_leaks(),
    ):
        jax.jit(make)(1.0)
    state.tx = None
    with lift.checking_leaks():  # twin: the Lifted returned, not stored
        state.tx = jax.jit(lambda x: lift.lift(lambda y: y * x))(1.0)
    assert float(state.tx(2.0)) == 2.0


@pytest.mark.parametrize("transform", [jax.grad, jax.vmap], ids=["grad", "vmap"])
def test_checked_given_a_transformed_function_says_to_pass_the_transform(
    transform: Any,
) -> None:
    def square(x: Any) -> Any:
        return x * x

    with pytest.raises(
        lift.LiftError,
        match=r"^lift\.checked\(\.\.\.\) was given a function already transformed "
        r"\(.*square \(.*test_checking\.py:\d+\)\) and then called with float 3\.0: "
        r"(?s:.*)\nFix: `lift\.checked\(jax\.grad\)\(square\)`\.\n"
        r"Docs: python -m lift explain checked-got-a-function$",
    ):
        lift.checked(transform(square))(3.0)
    # Its twin, the transform then the function, checks and computes.
    assert float(lift.checked(jax.grad)(square)(3.0)) == 6.0


def _double(x: Any) -> Any:
    return 2 * x


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (lambda: lift.checked(jax.jit)(_double), r"a function lift\.checked already"),
        (lambda: lift.checked(jax.grad)(_double), r"a function lift\.checked already"),
        (lambda: jax.jit(lift.checked(jax.jit)(_double)), r"got jax\.jit\(_double\)"),
        (lambda: functools.partial(jax.jit(_double)), r"got jax\.jit\(_double\)"),
        (lambda: lift.checked(jax.jit), r"got lift\.checked\(jit\), a transform"),
        (lambda: lift.checked(_double), r"got lift\.checked\(_double\), a transform"),
    ],
    ids=["checked-jit", "checked-grad", "jit-of-checked", "partial-of-jit", "jit", "f"],
)
def test_checked_given_what_it_made_or_a_compiled_function_is_refused(
    given: Callable[[], Any], said: str
) -> None:
    with pytest.raises(lift.LiftError, match=said) as caught:
        lift.checked(given())
    assert str(caught.value).endswith(
        "Docs: python -m lift explain checked-got-a-function"
    )
    if "function" in said or "jax" in said:
        assert "_double (" in str(caught.value)  # the user's function, named


def test_checked_takes_a_partial_of_a_transform() -> None:
    jitted = lift.checked(functools.partial(jax.jit, static_argnums=1))(
        lambda x, n: x * n
    )
    assert float(jitted(2.0, 3)) == 6.0
    assert jitted._cache_size() == 1  # pyright: ignore[reportFunctionMemberAccess]


class _Fn(eqx.Module):
    """GenJAX's `Fn`: a function kept in a static field."""

    source: Any = eqx.field(static=True)


def _returns_static_closure(x: Any) -> Any:
    return _Fn(lambda: x)


def test_checking_leaks_names_a_closure_in_a_returned_static_field() -> None:
    # JAX's checker fails inside jit, before the output exists: the closure is
    # found from the tracer itself, as `checked(jax.jit)` finds it in the output.
    line = _returns_static_closure.__code__.co_firstlineno + 1
    with (
        pytest.raises(
            lift.LeakError,
            match=re.escape(
                f"_returns_static_closure.<locals>.<lambda> ({__file__}:{line}), "
                "captured variable 'x': float32[] from jit(_returns_static_closure)"
            ),
        ) as info,
        lift.checking_leaks(),
    ):
        jax.jit(_returns_static_closure)(1.0)
    assert "make it a pytree node" in str(info.value)
    with (
        jax.check_tracer_leaks(False),
        pytest.raises(lift.LeakError, match=r"output\.<static>\[\d\] -> "),
    ):
        lift.checked(jax.jit)(_returns_static_closure)(1.0)


def test_checking_leaks_static_field_twin() -> None:
    def returns_static_constant(x: Any) -> Any:
        c = np.float32(2.0)
        return _Fn(lambda: c), x * 2

    with lift.checking_leaks():
        _, out = jax.jit(returns_static_constant)(1.0)
    assert float(out) == 2.0


# A setter into a module that is not the user's (the standard library's): the
# scan does not open a module met inside a partial, only one a root names.
_KEEP_IN_A_LIBRARY = functools.partial(setattr, fractions, "_lift_kept")


def _checking_jvp_keeping(kept: Callable[[Any], Any]) -> None:
    def f(x: Any) -> Any:
        _KEEP_IN_A_LIBRARY(kept(x))
        return x * x

    with lift.checking_leaks():
        jax.jvp(f, (3.0,), (1.0,))


def test_checking_leaks_names_an_eager_tracer_a_library_module_keeps() -> None:
    # Eager jvp, which JAX's checker never looks at: its tracer is named from
    # every module, as the plugin names it, not reported as held by no variable.
    try:
        with pytest.raises(
            lift.LeakError, match=r"fractions\._lift_kept: float32\[\] from jvp"
        ):
            _checking_jvp_keeping(lambda x: x)
        _checking_jvp_keeping(lambda x: x.shape)  # twin: what is kept is concrete
    finally:
        vars(fractions).pop("_lift_kept", None)


_BY_KEY: dict[Any, Any] = {}


@pytest.mark.parametrize(
    ("key", "shown"), [(("w", 1), "('w', 1)"), ((2,), "(2,)")], ids=["pair", "single"]
)
def test_a_report_names_a_dict_entry_under_a_tuple_key(key: Any, shown: str) -> None:
    def keep(x: Any) -> Any:
        _BY_KEY[key] = x
        return x * 2

    try:
        with (
            pytest.raises(
                lift.LeakError,
                match=rf"^1 tracer escaped .*:\n  _BY_KEY\[{re.escape(shown)}\]: "
                r"float32\[\] from jit\(",
            ),
            lift.checking_leaks(),
        ):
            jax.jit(keep)(1.0)
    finally:
        _BY_KEY.clear()
    with lift.checking_leaks():  # twin: what it keeps is concrete
        jax.jit(lambda x: keep(x.shape) and x)(1.0)
    _BY_KEY.clear()


def test_checking_leaks_names_the_kind_of_object_holding_an_unplaced_tracer() -> None:
    # Eager jvp, which JAX's checker never looks at: the tracer sits in an
    # object lift does not open (its docstring), reached from the block's own
    # list; the report names that object's kind, and no list of lift's own.
    kept: list[Any] = []

    def keep(x: Any) -> Any:
        kept.append(np.vectorize(len, doc=x))
        return x * 2

    with (
        pytest.raises(
            lift.LeakError,
            match=r"^1 tracer\(s\) of transforms that exited inside "
            r"lift\.checking_leaks\(\) are still alive, held by no variable lift "
            r"can see: float32\[\] from jvp \(held by numpy\.vectorize: objects "
            r"lift does not open\)\. Return the value from the transformed "
            r"function instead of storing it\.\n",
        ),
        lift.checking_leaks(),
    ):
        jax.jvp(keep, (1.0,), (1.0,))
    kept.clear()
    with lift.checking_leaks():  # twin: what the object keeps is concrete
        jax.jvp(lambda x: keep(x.shape) and x, (1.0,), (1.0,))


def test_checking_leaks_names_the_closure_over_an_unplaced_tracer() -> None:
    kept: list[Any] = []

    def keep(x: Any) -> Any:
        kept.append(np.vectorize(lambda: x))
        return x * 2

    line = keep.__code__.co_firstlineno + 1
    with (
        pytest.raises(
            lift.LeakError,
            match=r"^1 tracer escaped the transform that created it:\n  <held by "
            r"no variable lift can see: .*> -> .*keep\.<locals>\.<lambda> "
            rf"\(.*test_checking\.py:{line}\), captured variable 'x': "
            r"float32\[\] from jvp — return the value",
        ),
        lift.checking_leaks(),
    ):
        jax.jvp(keep, (1.0,), (1.0,))


def _cube_root(a: Any) -> Any:
    optx = pytest.importorskip("optimistix")

    def fn(y: Any, args: Any) -> Any:
        return y**3 - a

    solver = optx.Newton(rtol=1e-6, atol=1e-6)
    return optx.root_find(fn, solver, jnp.array(1.0), throw=False).value


def test_tracers_kept_by_another_librarys_cache_are_reported_where_jax_sees_them() -> (
    None
):
    # Eager grad over a function that jits a closure over grad's tracer:
    # equinox's `filter_eval_shape` cache (a library's, not JAX's) keeps it.
    # Before jax 0.11 JAX's checker never looks at eager grad, and neither
    # block reports it; from 0.11 JAX's checker fails it, and lift reports it
    # too, naming that cache (only JAX's and lift's own caches are excused).
    with jax.check_tracer_leaks(False):  # compiled once, outside the check
        jax.grad(_cube_root)(2.0)
    if _compat.JAX_VERSION < (0, 11):
        with lift.checking_leaks(), jax.check_tracer_leaks(False):  # lift's record
            jax.grad(_cube_root)(2.0)
        with lift.checking_leaks():
            jax.grad(_cube_root)(2.0)
        return
    with (
        pytest.raises(lift.LeakError, match=r"_cached_filter_eval_shape"),
        lift.checking_leaks(),
        jax.check_tracer_leaks(False),
    ):
        jax.grad(_cube_root)(2.0)


def test_tracers_kept_by_jax_caches_twin_a_stored_one_is_reported() -> None:
    def stored(a: Any) -> Any:
        STASH.append(a)
        return _cube_root(a)

    with jax.check_tracer_leaks(False):
        jax.grad(_cube_root)(2.0)
    with (
        pytest.raises(lift.LeakError, match=r"STASH\[0\]: float32\[\] from grad"),
        lift.checking_leaks(),
        jax.check_tracer_leaks(False),  # lift's record alone, as above
    ):
        jax.grad(stored)(2.0)


class _Model:
    """A stateful object whose jitted method takes it as a static argument."""

    def __init__(self) -> None:
        self.last: Any = None

    def step(self, x: Any) -> Any:
        self.last = x
        return x * 2


def test_checked_jit_finds_a_tracer_stored_on_a_static_argument() -> None:
    model = _Model()
    step = lift.checked(jax.jit)(_Model.step, static_argnums=0)
    with (
        jax.check_tracer_leaks(False),
        pytest.raises(
            lift.LeakError, match=r"self\.last: float32\[\] from jit\(step\)"
        ),
    ):
        step(model, 1.0)


def test_checked_jit_with_a_static_argument_that_keeps_nothing() -> None:
    class Scale:
        def __init__(self) -> None:
            self.calls = 0

        def step(self, x: Any) -> Any:
            self.calls += 1
            return x * 2

    model = Scale()
    step = lift.checked(jax.jit)(Scale.step, static_argnums=0)
    assert float(step(model, 1.0)) == 2.0
    assert float(step(model, 2.0)) == 4.0
    assert model.calls == 1  # traced once: the second call hit the cache
