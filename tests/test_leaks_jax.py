"""JAX's own leak-checker cases, through `find_leaks`, `checked` and
`checking_leaks`; and pins of what `lift/_compat.py` assumes for leak checking.

The cases follow the leak-checker tests of JAX's `tests/api_test.py` (a jit, a
pmap, a grad, a scan and a sublevel leak; the clean cases JAX must not report).
Each leak must be found by every entry point, named as the list element that
holds it and nothing else; each clean case must stay silent. The grad leak is
one JAX's own checker misses in eager mode; `checked` and `find_leaks` find it.
"""

from __future__ import annotations

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


def test_checking_leaks_finds_the_eager_grad_case_jax_misses() -> None:
    lst: list[Any] = []
    run = _grad_leak(lst)
    with jax.checking_leaks():
        run()  # JAX's own checker: silent
    lst.clear()
    with pytest.raises(lift.LeakError, match=r"lst\[0\]: float32\[\] from grad"):
        lift.checked(jax.grad)(lambda x: lst.append(x) or x)(3.0)


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
            found.append(any(t is c._trace for t in _compat._running_traces()))  # pyright: ignore[reportPrivateUsage]
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
    with (
        _compat.full_tracebacks(),
        jax.checking_leaks(),
        pytest.raises(IndexError, match="list index out of range") as info,
    ):
        jax.jit(something.set_x)(7)
    found = _compat.jax_leaked_tracers(info.value)
    assert found is not None and [t is something.x for t in found] == [True]


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
