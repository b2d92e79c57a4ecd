"""What the leak scan cannot open it names: each holder whose attribute,
`__dict__` or iteration raises is reported with its path and its error, in
`find_leaks(...).unopened` and after the leaks in a `LeakError`, and fails
nothing by itself (no warning either: the suite turns warnings into errors,
as many do). Each case has a clean twin that opens and names nothing."""

from __future__ import annotations

import re
import types
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


class _DictProperty:
    """An object whose `__dict__` is a property: only running it would tell
    what it holds, and a scan runs no code of the object's class."""

    def __init__(self, value: Any) -> None:
        object.__setattr__(self, "value", value)

    @property
    def __dict__(self) -> dict[str, Any]:  # type: ignore[override]
        raise RuntimeError("no dict here")


def DictRaises(value: Any, fail: bool) -> Any:
    """`__dict__` a property (not opened), or its twin, a plain object."""
    return _DictProperty(value) if fail else types.SimpleNamespace(value=value)


class GetattrRaises:
    """A proxy: unknown attributes raise (a callable one would be asked for
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
    "__dict__ is a property": (
        DictRaises,
        r"roots\[0\]\.__dict__: NotRun: __dict__ is a property of _DictProperty, "
        r"whose code a scan does not run",
    ),
}

# Holders whose own code raises: a scan never runs it (`__getattr__`, a
# container subclass's `__iter__` or `items`), and opens them as Python
# stores them.
NEVER_RUN: dict[str, Callable[[Any, bool], Any]] = {
    "__getattr__ raises": GetattrRaises,
    "iteration raises": IterRaises,
    "items raises": ItemsRaises,
}


@pytest.mark.lift_allow_leaks  # escapes on purpose (JAX's checker sees it)
@pytest.mark.parametrize("case", NEVER_RUN)
def test_a_holders_own_code_is_never_run(case: str) -> None:
    found = lift.find_leaks(NEVER_RUN[case](_escaped(), True))
    assert [leak.tracer for leak in found] == ["float32[] from jit(<lambda>)"]
    assert found.unopened == ()


@pytest.mark.parametrize("case", NEVER_RUN)
def test_a_holders_own_code_is_never_run_twin(case: str) -> None:
    found = lift.find_leaks(NEVER_RUN[case](jax.numpy.ones(()), True))
    assert found == [] and found.unopened == ()


@pytest.mark.parametrize("case", CASES)
def test_find_leaks_names_what_it_cannot_open(case: str) -> None:
    make, where = CASES[case]
    found = lift.find_leaks(make(jax.numpy.ones(()), True))
    assert found == []
    (unopened,) = found.unopened
    assert re.fullmatch(f"could not open {where}", str(unopened))


@pytest.mark.lift_allow_leaks  # escapes on purpose (JAX's checker sees it)
@pytest.mark.parametrize("case", CASES)
def test_find_leaks_names_what_it_cannot_open_twin(case: str) -> None:
    make, _ = CASES[case]
    found = lift.find_leaks(make(jax.numpy.ones(()), False))
    assert found == [] and found.unopened == ()
    found = lift.find_leaks(make(_escaped(), False))  # opened: found
    assert [leak.tracer for leak in found] == ["float32[] from jit(<lambda>)"]
    assert found.unopened == ()


@pytest.mark.lift_allow_leaks  # escapes on purpose (JAX's checker sees it)
def test_a_leak_report_lists_what_was_not_opened_after_the_leaks() -> None:
    roots = (DictRaises(_escaped(), True), [_escaped()])
    with pytest.raises(lift.LeakError, match="could not be opened") as info:
        lift.check_leaks(*roots)
    lines = str(info.value).splitlines()
    assert lines[0] == "1 tracer escaped the transform that created it:"
    assert lines[1].startswith("  roots[1][0]: float32[] from jit(<lambda>)")
    assert lines[2].startswith("1 holder(s) could not be opened, so a tracer inside")
    assert lines[3] == (
        "  could not open roots[0].__dict__: NotRun: __dict__ is a property of "
        "_DictProperty, whose code a scan does not run"
    )


@pytest.mark.lift_allow_leaks  # escapes on purpose (JAX's checker sees it)
def test_a_leak_report_lists_what_was_not_opened_twin() -> None:
    with pytest.raises(lift.LeakError, match="1 tracer escaped") as info:
        lift.check_leaks(DictRaises(1, False), [_escaped()])
    assert "could not" not in str(info.value)


def test_what_cannot_be_opened_fails_no_clean_check() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert lift.check_leaks(DictRaises(1, True)) is None
    (unopened,) = lift.find_leaks(DictRaises(1, True)).unopened
    assert unopened.path == "roots[0].__dict__"
    assert unopened.error.startswith("NotRun: __dict__ is a property")


@pytest.mark.lift_allow_leaks  # escapes on purpose (JAX's checker sees it)
def test_the_report_is_the_same_whatever_the_order_of_roots() -> None:
    bad, leaky = DictRaises(1, True), [_escaped()]
    first, second = lift.find_leaks(bad, leaky), lift.find_leaks(leaky, bad)
    assert first[0].path.replace("roots[1]", "roots[0]") == second[0].path
    assert [u.path for u in first.unopened] == ["roots[0].__dict__"]
    assert [u.path for u in second.unopened] == ["roots[1].__dict__"]


@pytest.mark.lift_allow_leaks  # escapes on purpose (JAX's checker sees it)
def test_the_report_is_the_same_whatever_the_order_of_roots_twin() -> None:
    good, leaky = DictRaises(1, False), [_escaped()]
    first, second = lift.find_leaks(good, leaky), lift.find_leaks(leaky, good)
    assert first[0].path.replace("roots[1]", "roots[0]") == second[0].path
    assert first.unopened == second.unopened == ()
