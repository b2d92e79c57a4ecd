"""What the leak scan cannot open it names: each holder whose attribute,
`__dict__` or iteration raises is reported with its path and its error, as a
`RuntimeWarning` from `find_leaks` and `check_leaks` and after the leaks in a
`LeakError`. Each case has a clean twin that opens and warns of nothing."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

import jax
import pytest

import lift


@pytest.fixture(autouse=True)
def _jax_leak_checks_off() -> Iterator[None]:
    with jax.check_tracer_leaks(False):  # the tracers escape on purpose
        yield


def _escaped() -> Any:
    box: list[Any] = []
    jax.jit(lambda x: box.append(x) or x)(1.0)
    return box[0]


class DictRaises:
    def __init__(self, value: Any, fail: bool) -> None:
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "fail", fail)

    @property
    def __dict__(self) -> dict[str, Any]:  # type: ignore[override]
        if object.__getattribute__(self, "fail"):
            raise RuntimeError("no dict here")
        return {"value": object.__getattribute__(self, "value")}


class GetattrRaises:
    """A proxy: unknown attributes raise (a callable one is asked for
    `__wrapped__`)."""

    def __init__(self, value: Any, fail: bool) -> None:
        self.value = value
        self.fail = fail

    def __call__(self) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        if self.fail:
            raise RuntimeError(f"proxy has no {name}")
        raise AttributeError(name)


class IterRaises(list[Any]):
    def __init__(self, value: Any, fail: bool) -> None:
        super().__init__([value])
        self.fail = fail

    def __iter__(self) -> Any:
        if self.fail:
            raise RuntimeError("cannot iterate")
        return super().__iter__()


class ItemsRaises(dict[str, Any]):
    def __init__(self, value: Any, fail: bool) -> None:
        super().__init__(value=value)
        self.fail = fail

    def items(self) -> Any:
        if self.fail:
            raise RuntimeError("cannot list items")
        return super().items()


CASES: dict[str, tuple[Callable[[Any, bool], Any], str]] = {
    "__dict__ raises": (
        DictRaises,
        r"roots\[0\]\.__dict__: RuntimeError: no dict here",
    ),
    "__getattr__ raises": (
        GetattrRaises,
        r"roots\[0\]\.__wrapped__: RuntimeError: proxy has no __wrapped__",
    ),
    "iteration raises": (IterRaises, r"roots\[0\]: RuntimeError: cannot iterate"),
    "items raises": (ItemsRaises, r"roots\[0\]: RuntimeError: cannot list items"),
}


@pytest.mark.parametrize("case", CASES)
def test_find_leaks_names_what_it_cannot_open(case: str) -> None:
    make, where = CASES[case]
    with pytest.warns(RuntimeWarning, match=rf"could not open {where}"):
        lift.find_leaks(make(jax.numpy.ones(()), True))


@pytest.mark.lift_allow_leaks  # escapes on purpose (JAX's checker sees it)
@pytest.mark.parametrize("case", CASES)
def test_find_leaks_names_what_it_cannot_open_twin(case: str) -> None:
    make, _ = CASES[case]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert lift.find_leaks(make(jax.numpy.ones(()), False)) == []
        (leak,) = lift.find_leaks(make(_escaped(), False))  # opened: found
    assert leak.tracer == "float32[] from jit(<lambda>)"


@pytest.mark.lift_allow_leaks  # escapes on purpose (JAX's checker sees it)
def test_a_leak_report_lists_what_was_not_opened_after_the_leaks() -> None:
    roots = (DictRaises(_escaped(), True), [_escaped()])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # in the report, not a warning too
        with pytest.raises(lift.LeakError, match="could not be opened") as info:
            lift.check_leaks(*roots)
    lines = str(info.value).splitlines()
    assert lines[0] == "1 tracer escaped the transform that created it:"
    assert lines[1].startswith("  roots[1][0]: float32[] from jit(<lambda>)")
    assert lines[2].startswith("1 holder(s) could not be opened, so a tracer inside")
    assert lines[3] == "  could not open roots[0].__dict__: RuntimeError: no dict here"


@pytest.mark.lift_allow_leaks  # escapes on purpose (JAX's checker sees it)
def test_a_leak_report_lists_what_was_not_opened_twin() -> None:
    with pytest.raises(lift.LeakError, match="1 tracer escaped") as info:
        lift.check_leaks(DictRaises(1, False), [_escaped()])
    assert "could not" not in str(info.value)


def test_check_leaks_warns_of_what_it_cannot_open_when_nothing_leaked() -> None:
    with pytest.warns(RuntimeWarning, match=r"could not open roots\[0\]: Runtime"):
        assert lift.check_leaks(IterRaises(1, True)) is None


@pytest.mark.lift_allow_leaks  # escapes on purpose (JAX's checker sees it)
def test_a_proxy_that_raises_is_still_opened_where_it_can_be() -> None:
    # `__wrapped__` raised: its `__dict__` was still walked, and the tracer found.
    with pytest.warns(RuntimeWarning, match="proxy has no __wrapped__"):
        (leak,) = lift.find_leaks(GetattrRaises(_escaped(), True))
    assert leak.path == "roots[0].value"


@pytest.mark.lift_allow_leaks  # escapes on purpose (JAX's checker sees it)
def test_the_report_is_the_same_whatever_the_order_of_roots() -> None:
    bad, leaky = DictRaises(1, True), [_escaped()]
    with pytest.warns(RuntimeWarning, match="no dict here") as first:
        (a,) = lift.find_leaks(bad, leaky)
    with pytest.warns(RuntimeWarning, match="no dict here") as second:
        (b,) = lift.find_leaks(leaky, bad)
    assert a.path.replace("roots[1]", "roots[0]") == b.path
    assert str(first[0].message).replace("roots[0]", "roots[1]") == str(
        second[0].message
    )


@pytest.mark.lift_allow_leaks  # escapes on purpose (JAX's checker sees it)
def test_the_report_is_the_same_whatever_the_order_of_roots_twin() -> None:
    good, leaky = DictRaises(1, False), [_escaped()]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (a,) = lift.find_leaks(good, leaky)
        (b,) = lift.find_leaks(leaky, good)
    assert a.path.replace("roots[1]", "roots[0]") == b.path
