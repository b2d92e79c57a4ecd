"""JAX's own leak-checker cases, through `find_leaks`, `checked` and
`checking_leaks`; and pins of what `lift/_compat/` assumes for leak checking.

The cases follow the leak-checker tests of JAX's `tests/api_test.py` (a jit, a
pmap, a grad, a scan and a sublevel leak; the clean cases JAX must not report).
Each leak must be found by every entry point, named as the list element that
holds it and nothing else; each clean case must stay silent. The grad leak is
one JAX's own checker misses in eager mode; `checked` and `find_leaks` find it.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import lift
from lift import _compat

pytestmark = pytest.mark.lift_allow_leaks


def _jit_leak(lst: list[Any]) -> Callable[[], Any]:
    @jax.jit
    def f(x: Any) -> Any:
        lst.append(x)
        return x

    return lambda: f(3)


def _pmap_leak(lst: list[Any]) -> Callable[[], Any]:
    @jax.pmap
    def f(x: Any) -> Any:
        lst.append(x)
        return x

    return lambda: f(np.ones(1))


def _grad_leak(lst: list[Any]) -> Callable[[], Any]:
    def f(x: Any) -> Any:
        lst.append(x)
        return x

    return lambda: jax.grad(f)(3.0)


def _scan_leak(lst: list[Any]) -> Callable[[], Any]:
    def body(c: Any, x: Any) -> Any:
        lst.append(c)
        return jnp.sin(c), None

    return lambda: lax.scan(body, 1.0, np.arange(3.0))


def _sublevel_leak(lst: list[Any]) -> Callable[[], Any]:
    @jax.jit
    def f(x: Any) -> Any:
        @jax.jit
        def g(x: Any) -> Any:
            lst.append(x)
            return x

        return g(x)

    return lambda: f(3)


LEAKS: dict[str, tuple[Callable[[list[Any]], Callable[[], Any]], str]] = {
    "jit": (_jit_leak, r"int32\[\] from jit\(f\)"),
    "pmap": (_pmap_leak, r"float32\[\] from pmap"),
    "grad": (_grad_leak, r"float32\[\] from grad"),
    "scan": (_scan_leak, r"float32\[\] from scan\(body\)"),
    "sublevel": (_sublevel_leak, r"int32\[\] from jit\(g\)"),
}


@pytest.mark.parametrize("case", list(LEAKS))
def test_find_leaks_finds_jax_case(case: str) -> None:
    make, tracer = LEAKS[case]
    lst: list[Any] = []
    with jax.check_tracer_leaks(False):
        make(lst)()
    leaks = lift.find_leaks(lst)
    assert [leak.path for leak in leaks] == ["roots[0][0]"]
    with pytest.raises(lift.LeakError, match=rf"roots\[0\]\[0\]: {tracer}"):
        lift.check_leaks(lst)


@pytest.mark.parametrize("case", [c for c in LEAKS if c != "grad"])
def test_checking_leaks_finds_jax_case(case: str) -> None:
    make, tracer = LEAKS[case]
    lst: list[Any] = []
    run = make(lst)
    with (
        pytest.raises(
            lift.LeakError,
            match=rf"^1 tracer escaped the transform that created it:\n"
            rf"  lst\[0\]: {tracer}",
        ),
        lift.checking_leaks(),
    ):
        run()


# -- The four eager-`grad` escapes of JAX 0.10.2's tests/api_test.py -------------
#
# `test_leak_checker_catches_a_grad_leak` and
# `test_escaped_tracers_tracer_from_higher_level` are skipped there (JAX's
# checker misses them); `test_escaped_tracers_cant_lift` and
# `test_escaped_tracers_not_among_input_tracers` see the escape only when the
# tracer is used later (`UnexpectedTracerError`) or through the `jit` tracer
# inside it. Each `run(grad)` leaks through the `grad` it is given.


class _Saver:
    """JAX's `helper_save_tracer`: keeps its argument on the object."""

    saved: Any = None

    def save(self, x: Any) -> Any:
        self.saved = x
        return x


def _eager_grad_leak(grad: Any, lst: list[Any], saver: _Saver) -> None:
    grad(lambda x: lst.append(x) or x)(3.0)


def _eager_grad_from_higher_level(grad: Any, lst: list[Any], saver: _Saver) -> None:
    grad(saver.save)(0.0)


def _eager_grad_cant_lift(grad: Any, lst: list[Any], saver: _Saver) -> None:
    def func1(x: Any) -> Any:
        grad(saver.save)(0.0)
        return x + saver.saved

    jax.grad(func1)(2.0)


def _eager_grad_under_jit(grad: Any, lst: list[Any], saver: _Saver) -> None:
    def func1(x: Any) -> Any:
        grad(saver.save)(x)
        return x + saver.saved

    jax.jit(func1)(2.0)


EAGER_GRAD: dict[str, tuple[Callable[..., None], str]] = {
    "grad leak": (_eager_grad_leak, r"lst\[0\]: float32\[\] from grad"),
    "tracer from higher level": (
        _eager_grad_from_higher_level,
        r"saver\.saved: float32\[\] from grad",
    ),
    "cant lift": (_eager_grad_cant_lift, r"saver\.saved: float32\[\] from grad"),
    "not among input tracers": (
        _eager_grad_under_jit,
        r"saver\.saved: float32\[\] from grad",
    ),
}


def _jax_report(run: Callable[..., None], *args: Any) -> str:
    """What JAX's own checker raises running `run(*args)`, or ""."""
    try:
        with jax.checking_leaks():
            run(*args)
    except Exception as e:
        return str(e)
    return ""


@pytest.mark.parametrize("case", list(EAGER_GRAD))
def test_eager_grad_escape_what_jax_reports(case: str) -> None:
    run, report = EAGER_GRAD[case]
    lst: list[Any] = []
    saver = _Saver()
    by_jax = _jax_report(run, jax.grad, lst, saver)
    from_grad = re.search(r"Leaked trace (JVP|Linearize)Trace", by_jax)
    if _compat.JAX_CHECKS_EAGER_GRAD:
        # jax >= 0.11 reports the escape from grad's own trace, its holders by
        # object id: what lift adds is where the tracer is kept, by name.
        assert from_grad
        assert not re.search(report, by_jax)
    else:
        # jax <= 0.10: silent, or seen late (a use of the tracer, the jit tracer
        # inside it), never as the escape from grad's own trace: lift finds it.
        assert not from_grad
        assert (lst or [saver.saved])[0] is not None


@pytest.mark.parametrize("case", list(EAGER_GRAD))
def test_eager_grad_escape_found_by_checked(case: str) -> None:
    run, report = EAGER_GRAD[case]
    lst: list[Any] = []
    saver = _Saver()
    with pytest.raises(lift.LeakError, match=report.replace("saver", r"(self|saver)")):
        run(lift.checked(jax.grad), lst, saver)


@pytest.mark.parametrize("case", list(EAGER_GRAD))
def test_eager_grad_escape_found_by_checking_leaks(case: str) -> None:
    run, report = EAGER_GRAD[case]
    lst: list[Any] = []
    saver = _Saver()
    with pytest.raises(lift.LeakError, match=report), lift.checking_leaks():
        run(jax.grad, lst, saver)


@pytest.mark.parametrize("case", list(EAGER_GRAD))
def test_eager_grad_escape_found_by_find_leaks(case: str) -> None:
    run, _ = EAGER_GRAD[case]
    lst: list[Any] = []
    saver = _Saver()
    with jax.check_tracer_leaks(False), contextlib.suppress(Exception):
        run(jax.grad, lst, saver)
    (leak,) = lift.find_leaks(lst, saver)
    assert leak.tracer == "float32[] from grad"


def test_eager_grad_clean_twin_is_silent() -> None:
    def f(x: Any) -> Any:
        return x * x, {"x": x}  # values leave as the auxiliary output

    with lift.checking_leaks():
        (g, aux), (h, _) = (
            jax.grad(f, has_aux=True)(3.0),
            jax.grad(jax.jit(f), has_aux=True)(2.0),
        )
        jax.jvp(lambda x: f(x)[0], (3.0,), (1.0,))
        jax.vjp(lambda x: f(x)[0], 3.0)[1](1.0)
    assert (float(g), float(aux["x"]), float(h)) == (6.0, 3.0, 4.0)
    assert float(lift.checked(jax.grad)(lambda x: x * x)(3.0)) == 6.0


def test_eager_grad_escape_before_the_block_is_not_its_fault() -> None:
    lst: list[Any] = []
    with jax.check_tracer_leaks(False):
        jax.grad(lambda x: lst.append(x) or x)(3.0)
    with lift.checking_leaks():
        jax.grad(lambda x: x * x)(3.0)
    assert len(lift.find_leaks(lst)) == 1


def _clean_jit() -> None:
    @jax.jit
    def f(x: Any) -> Any:
        return x

    f(3)
    jax.vmap(f)(np.arange(3))
    jax.grad(f)(3.0)


def _clean_pmap() -> None:
    @jax.pmap
    def f(x: Any) -> Any:
        return x

    f(np.ones(1))
    jax.vmap(f)(np.ones((1, 1)))


def _clean_scan() -> None:
    lax.scan(lambda c, x: (jnp.sin(c), None), jnp.asarray(1.0), np.arange(3.0))


def _clean_scan_jvp() -> None:
    def f(x: Any) -> None:
        lax.scan(lambda c, x: (c, None), x, None, length=1)

    jax.jvp(f, (3.0,), (1.0,))


def _clean_scan_vmap() -> None:
    @jax.vmap
    def f(x: Any) -> None:
        lax.scan(lambda c, _: (1.0, None), x, None, length=1)

    f(np.arange(5.0))


def _clean_scan_vmap_2() -> None:
    @jax.vmap
    def f(x: Any) -> None:
        lax.scan(lambda c, _: (c, None), x, None, length=1)

    f(np.arange(5.0))


CLEAN: dict[str, Callable[[], None]] = {
    "jit, vmap, grad": _clean_jit,
    "pmap": _clean_pmap,
    "scan": _clean_scan,
    "scan under jvp": _clean_scan_jvp,
    "scan under vmap": _clean_scan_vmap,
    "scan under vmap, carry": _clean_scan_vmap_2,
}


@pytest.mark.parametrize("case", list(CLEAN))
def test_jax_clean_case_is_silent(case: str) -> None:
    with lift.checking_leaks():
        CLEAN[case]()
    out = lift.checked(jax.jit)(lambda: CLEAN[case]() or 0)()
    assert int(out) == 0
    lift.check_leaks(CLEAN[case])


# -- Pins of what `_compat` assumes (jax 0.10.2) --------------------------------


def test_pin_traces_running_under_shard_map_are_found_on_the_stack() -> None:
    from jax.sharding import PartitionSpec as P

    found: list[bool] = []

    def outer(x: Any) -> Any:
        c = x.sum()

        def body(y: Any) -> Any:
            # The enclosing jit's trace is not among the current trace's parents,
            # only on the stack.
            parents: list[Any] = []
            trace = jax._src.core.trace_ctx.trace  # pyright: ignore
            while trace is not None:
                parents.append(trace)
                trace = getattr(trace, "parent_trace", None)
            found.append(c._trace not in parents)
            found.append(any(t is c._trace for t in _compat.running_traces()))  # pyright: ignore[reportPrivateUsage]
            return y + c

        mesh = jax.make_mesh((len(jax.devices()),), ("i",))
        return jax.shard_map(body, mesh=mesh, in_specs=P(), out_specs=P())(x)

    jax.jit(outer)(jnp.ones(2))
    assert found == [True, True]


def test_pin_jax_issue_26560_index_error_is_raised_in_why_alive() -> None:
    class Something:
        def set_x(self, x: Any) -> None:
            self.x = x

    something = Something()
    lambda: something  # noqa: B018 — makes `something` a cell of this frame
    with _compat.full_tracebacks(), jax.checking_leaks():
        if _compat.JAX_ISSUE_26560:  # jax <= 0.10: the report is lost
            with pytest.raises(IndexError, match="list index out of range") as info:
                jax.jit(something.set_x)(7)
        else:  # jax >= 0.11: reported, the cell in the chain
            with pytest.raises(Exception, match=r"(?s)Leaked trace.*<cell") as info:
                jax.jit(something.set_x)(7)
    found = _compat.jax_leaked_tracers(info.value)
    assert found is not None and [t is something.x for t in found] == [True]


def test_pin_jax_version_facts() -> None:
    assert tuple(map(int, jax.__version__.split(".")[:3])) == _compat.JAX_VERSION
    assert _compat.JAX_CHECKS_EAGER_GRAD is (_compat.JAX_VERSION >= (0, 11))
    assert _compat.JAX_ISSUE_26560 is not _compat.JAX_CHECKS_EAGER_GRAD


def test_pin_user_index_error_is_not_jax_issue_26560() -> None:
    def f(x: Any) -> Any:
        return [x][3]

    with (
        _compat.full_tracebacks(),
        jax.checking_leaks(),
        pytest.raises(IndexError, match="list index out of range") as info,
    ):
        jax.jit(f)(1.0)
    assert _compat.jax_leaked_tracers(info.value) is None


def test_pin_filter_traceback_matches_jax() -> None:
    def f(x: Any) -> Any:
        raise ValueError("mine")

    def names(exc: BaseException) -> list[str]:
        out: list[str] = []
        tb = exc.__traceback__
        while tb is not None:
            out.append(tb.tb_frame.f_code.co_name)
            tb = tb.tb_next
        return out

    before = jax.config.jax_traceback_filtering  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType, reportUnknownVariableType]
    jax.config.update("jax_traceback_filtering", "quiet_remove_frames")
    try:
        with pytest.raises(ValueError, match="mine") as by_jax:
            jax.jit(f)(1.0)
    finally:
        jax.config.update("jax_traceback_filtering", before)
    with (
        _compat.full_tracebacks(),
        pytest.raises(ValueError, match="mine") as whole,
    ):
        jax.jit(f)(1.0)
    # JAX's own frames are there (`trace_to_jaxpr`, `trace_to_jaxpr_dynamic` in
    # jax 0.8.0).
    assert any(n.startswith("trace_to_jaxpr") for n in names(whole.value))
    _compat.filter_traceback(whole.value, "quiet_remove_frames")
    assert names(whole.value) == names(by_jax.value)
    assert whole.value.__notes__ == by_jax.value.__notes__


def test_pin_pmap_runs_as_shard_map_of_pmap_fun() -> None:
    box: list[Any] = []
    with jax.check_tracer_leaks(False):
        jax.pmap(lambda x: box.append(x) or x)(jnp.ones(1))
    debug = box[0]._trace.frame.debug_info
    assert debug.traced_for == "shard_map"
    # jax 0.10.2: `_fun` in jax/_src/pmap.py; jax 0.8.0: `call_wrapped` in
    # jax/_src/linear_util.py.
    assert "jax/_src/pmap.py" in debug.func_src_info or (
        debug.func_name == "call_wrapped" and "linear_util.py" in debug.func_src_info
    )
    assert _compat.transform_name(box[0]) == "pmap"


def test_pin_jax_checks_leaks_follows_the_config() -> None:
    with jax.check_tracer_leaks(False):
        assert not _compat.jax_checks_leaks()
        with jax.checking_leaks():
            assert _compat.jax_checks_leaks()


def test_an_error_inside_eager_grad_passes_through_checking_leaks() -> None:
    # The traceback's frames hold grad's tracer `x`: no leak, the error is the
    # report.
    def f(x: Any) -> Any:
        y = x * 2
        raise ValueError(f"mine: {y.shape}")

    with pytest.raises(ValueError, match=r"^mine: \(\)"), lift.checking_leaks():
        jax.grad(f)(3.0)


@pytest.mark.parametrize("transform", ["grad", "vjp", "linearize", "jvp"])
def test_eager_ad_escapes_jax_reports_by_version_and_lift_always(
    transform: str,
) -> None:
    lst: list[Any] = []

    def f(x: Any) -> Any:
        lst.append(x)
        return x * 2.0

    runs: dict[str, Callable[[], Any]] = {
        "grad": lambda: jax.grad(f)(1.0),
        "vjp": lambda: jax.vjp(f, 1.0),
        "linearize": lambda: jax.linearize(f, 1.0),
        "jvp": lambda: jax.jvp(f, (1.0,), (1.0,)),
    }
    by_jax = _jax_report(lambda: runs[transform]())
    checked_by_jax = _compat.JAX_CHECKS_EAGER_GRAD and transform != "jvp"
    assert by_jax.startswith("Leaked trace") is checked_by_jax
    lst.clear()
    with (
        pytest.raises(lift.LeakError, match=r"lst\[0\]: float32\[\] from "),
        lift.checking_leaks(),
    ):
        runs[transform]()
