"""The pytest plugin: run each test inside `lift.checking_leaks()`.

Registered through the `pytest11` entry point and off unless asked for, with
`pytest --lift-leaks` or `lift_leaks = true` in the ini file. A leak fails the
test with the `LeakError` text; `@pytest.mark.lift_allow_leaks` exempts a test.
This module imports neither JAX nor the rest of `lift` until it is switched on,
so installing the library costs nothing to test suites that do not use it.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

__all__ = ["MARKER"]

MARKER = "lift_allow_leaks"
_ENABLED = pytest.StashKey[bool]()
_BEFORE = pytest.StashKey[list[Any]]()  # tracers escaped before the test's setup


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("lift", "leaked-tracer checks (lift)")
    group.addoption(
        "--lift-leaks",
        action="store_true",
        default=None,
        help="run each test inside lift.checking_leaks(): a leaked tracer fails it",
    )
    parser.addini(
        "lift_leaks",
        type="bool",
        default=False,
        help="run each test inside lift.checking_leaks() (as --lift-leaks)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}: do not check this test for leaked tracers (lift --lift-leaks)",
    )
    option = config.getoption("lift_leaks")
    enabled = bool(config.getini("lift_leaks")) if option is None else bool(option)
    config.stash[_ENABLED] = enabled


def _on(item: pytest.Item) -> bool:
    return item.config.stash.get(_ENABLED, False) and not item.get_closest_marker(
        MARKER
    )


def _roots(item: pytest.Item) -> list[tuple[str, Any]]:
    """What a test names: its function, its fixtures' functions (and so the
    globals their code names) and the fixture values it received."""
    roots: list[tuple[str, Any]] = [(item.name, getattr(item, "obj", None))]
    info = getattr(item, "_fixtureinfo", None)
    for name, defs in getattr(info, "name2fixturedefs", {}).items():
        for fixturedef in defs:
            roots.append((f"fixture {name}", getattr(fixturedef, "func", None)))
    funcargs = getattr(item, "funcargs", None)
    if isinstance(funcargs, dict):
        roots.extend((f"fixture {k}", v) for k, v in funcargs.items())  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
    return roots


def _check(item: pytest.Item) -> None:
    """Fail the current phase for what escaped since the test's setup began."""
    __tracebackhide__ = True
    from ._errors import LeakError
    from ._leaks import format_leaks, scan_tracers

    empty: list[Any] = []
    before = item.stash.get(_BEFORE, empty)
    leaks, tracers = scan_tracers(_roots(item), skip=before)
    if leaks:
        before.extend(tracers)  # each leak fails one phase only
        raise LeakError(format_leaks(leaks))


def _phase(item: pytest.Item) -> Generator[None, Any, Any]:
    """One phase of a test (setup, call, teardown) inside `checking_leaks()`."""
    __tracebackhide__ = True
    from ._checking import checking_leaks

    try:
        with checking_leaks():
            result = yield
    except BaseException:
        # This phase failed (JAX's checker reported a leak, or the test): what
        # escaped in it is this phase's, not a later phase's to report again.
        try:
            _check(item)
        except Exception:  # the phase's own error is the report
            pass
        raise
    _check(item)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, Any, Any]:
    __tracebackhide__ = True
    if not _on(item):
        return (yield)
    from ._leaks import scan_tracers

    # Tracers that escaped before this test ran are not its fault.
    item.stash[_BEFORE] = scan_tracers(_roots(item))[1]
    return (yield from _phase(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, Any]:
    # JAX's checker sees only traces exiting inside the test, and only when the
    # test leaves it on: the phase also scans what the test and its fixtures name.
    __tracebackhide__ = True
    if not _on(item):
        return (yield)
    return (yield from _phase(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, Any, Any]:
    __tracebackhide__ = True
    if not _on(item):
        return (yield)
    try:
        return (yield from _phase(item))
    finally:
        item.stash[_BEFORE] = []  # hold no tracer past the test
