"""The pytest plugin: check each test, with its fixtures, for leaked tracers.

Registered through the `pytest11` entry point and off unless asked for, with
`pytest --lift-leaks` or `lift_leaks = true` in the ini file. Each phase of a
test (fixture setup, the call, fixture teardown) is checked as part of that
test. Tracers that escaped before its setup began are never its fault. A
leak fails the phase with the `LeakError` text. `@pytest.mark.lift_allow_leaks`
exempts a test.

There are two modes (`--lift-leaks-mode`, `lift_leaks_mode`). `fast`, the
default, fails what JAX's checker would fail where it checks a trace: one
still alive with tracers. It then names the holder: the user's frames on the
stack, what the test and its fixtures name, every `Lifted` built. After the
phase it looks for tracers still alive of the traces that exited in it. JAX's
own checker is left as it is. `exhaustive` also runs each phase inside
`lift.checking_leaks()` (JAX's gc-based checker, its caches off). That finds
leaks held anywhere, at several times the cost.

A holder the scan cannot open (an attribute that raises) is named. It is
named in the leak report of a failing phase. For tests that pass, it is
named in a section of the run's summary. So are tracers that only JAX's (or
lift's) caches keep, which fail no test. An eager `grad` over a jitted
closure leaves such tracers.

This module imports neither JAX nor the rest of `lift` until it is switched
on. Installing the library costs nothing to test suites that do not use it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator
from typing import Any, Final, cast

import pytest

MARKER = "lift_allow_leaks"
MODES = ("fast", "exhaustive")
_ENABLED = pytest.StashKey[bool]()
_MODE = pytest.StashKey[str]()
BEFORE = pytest.StashKey[list[Any]]()  # tracers escaped before the test's setup
# Per test (node id), what the scans of its passing phases could not open.
UNOPENED = pytest.StashKey[dict[str, list[Any]]]()
# Per test, the tracers of its traces that only libraries' caches keep alive.
CACHED = pytest.StashKey[dict[str, str]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("lift", "leaked-tracer checks (lift)")
    group.addoption(
        "--lift-leaks",
        action="store_true",
        default=None,
        help="run each test inside lift.checking_leaks(): a leaked tracer fails it",
    )
    group.addoption(
        "--lift-leaks-mode",
        choices=MODES,
        default=None,
        help="fast (default): scan what each test and its fixtures name after "
        "each phase, JAX's caches kept; exhaustive: also run JAX's own checker "
        "(jax.checking_leaks(), caches off) for leaks held anywhere",
    )
    parser.addini(
        "lift_leaks",
        type="bool",
        default=False,
        help="run each test inside lift.checking_leaks() (as --lift-leaks)",
    )
    parser.addini(
        "lift_leaks_mode",
        default="fast",
        help="fast or exhaustive (as --lift-leaks-mode)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}: do not check this test for leaked tracers (lift --lift-leaks)",
    )
    option = config.getoption("lift_leaks")
    enabled = bool(config.getini("lift_leaks")) if option is None else bool(option)
    config.stash[_ENABLED] = enabled
    mode = config.getoption("lift_leaks_mode") or config.getini("lift_leaks_mode")
    if mode not in MODES:
        raise pytest.UsageError(f"lift_leaks_mode must be one of {MODES}: {mode!r}")
    config.stash[_MODE] = str(mode)
    config.stash[UNOPENED] = {}
    config.stash[CACHED] = {}
    config.pluginmanager.register(_Summary(), "lift-leaks-summary")


# The titles of the run summary's sections, each the name under which a
# test's report carries its line (`user_properties`: pytest-xdist sends them
# from its workers to the terminal's process).
_SECTIONS: Final = {
    "unopened": "lift --lift-leaks: holders not opened",
    "cached": "lift --lift-leaks: tracers kept by libraries' caches",
}


class _Summary:
    """The run summary's sections: per title, per test (node id), its line.
    Registered as a plugin of its own, so that its hooks see it."""

    def __init__(self) -> None:
        self.sections: dict[str, dict[str, str]] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Keep the summary lines a test's report carries (from this process
        or from a pytest-xdist worker)."""
        for name, value in report.user_properties:
            if name in _SECTIONS.values() and isinstance(value, str):
                self.sections.setdefault(name, {})[report.nodeid] = value

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """Name what the checks of passing tests could not open, and the
        tracers only libraries' caches keep.

        A tracer in what was not opened would not have been seen: make it
        readable, or exempt the test. Tracers only caches keep fail no test:
        they are not the test's escapes."""
        for title in _SECTIONS.values():
            if found := self.sections.get(title):
                terminalreporter.write_sep("=", title)
                for nodeid, text in list(found.items())[:20]:
                    terminalreporter.write_line(f"{nodeid}: {text}")
                if len(found) > 20:
                    terminalreporter.write_line(f"(and {len(found) - 20} more tests)")


def _carry_summary(item: pytest.Item, report: pytest.TestReport) -> None:
    """Give the test's last report its summary lines (`_SECTIONS`)."""
    from .report import unopened_text

    unopened = item.config.stash[UNOPENED].pop(item.nodeid, None)
    cached = item.config.stash[CACHED].pop(item.nodeid, None)
    if unopened:
        report.user_properties.append((_SECTIONS["unopened"], unopened_text(unopened)))
    if cached:
        report.user_properties.append((_SECTIONS["cached"], cached))


def _on(item: pytest.Item | pytest.Collector) -> bool:
    enabled = item.config.stash.get(_ENABLED, False)
    return enabled and not item.get_closest_marker(MARKER)


def fast_mode(item: pytest.Item | pytest.Collector) -> bool:
    """Whether the fast mode watches `item`: chosen, and JAX's own checker
    not on anyway.

    When JAX's checker is on, each phase runs in `lift.checking_leaks()`, as
    in the exhaustive mode."""
    import jax

    fast = item.config.stash.get(_MODE, "fast") == "fast"
    return fast and not bool(cast(Any, jax.config).jax_check_tracer_leaks)


def _phase(item: pytest.Item) -> Generator[None, Any, Any]:
    """One phase of a test (setup, call, teardown), watched for leaks."""
    __tracebackhide__ = True
    from .phase import Watch, check

    watch = Watch(item)
    try:
        with watch:
            result = yield
    except BaseException:
        # This phase failed (JAX's checker reported a leak, or the test): what
        # escaped in it is this phase's, not a later phase's to report again.
        with contextlib.suppress(Exception):  # the phase's own error is the report
            check(item, watch)
        raise
    check(item, watch)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, Any]:
    """A leak that fails a phase of an item that is not a Python function (a
    doctest) is reported as its `LeakError` alone.

    Such items would show the traceback of pytest's own calls around it."""
    report = yield
    if report.when == "teardown" and _on(item):
        _carry_summary(item, report)
    excinfo = call.excinfo
    if report.failed and not isinstance(item, pytest.Function) and _on(item):
        from .._base.errors import LeakError

        if excinfo is not None and isinstance(excinfo.value, LeakError):
            report.longrepr = f"lift.LeakError: {excinfo.value}"
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, Any, Any]:
    """A test module's import, watched as a phase is: a leak there fails its
    collection (as JAX's checker errors it), with lift's report."""
    if (
        not isinstance(collector, pytest.Module)
        or not _on(collector)
        or not fast_mode(collector)
    ):
        return (yield)
    from .._base.errors import LeakError
    from .phase import Watch
    from .report import format_leaks

    with Watch(collector) as watch:
        report = yield
    if watch.held and report.passed:
        text = format_leaks([leak for leak, _ in watch.held], watch.held_unopened)
        report.outcome = "failed"
        report.longrepr = f"lift.LeakError: {LeakError(text, anchor='leak-report')}"
        report.result = []
    watch.held.clear()
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, Any, Any]:
    __tracebackhide__ = True
    if not _on(item):
        return (yield)
    from .phase import named_by
    from .scan import scan_tracers

    # Tracers that escaped before this test ran are not its fault: held by
    # what it names, or by a fixture value already cached from an earlier test
    # (a session or module fixture, not yet in `item.funcargs`). The fast mode
    # looks only for tracers of the traces that exit in each phase: none of
    # those escaped before.
    before = [] if fast_mode(item) else scan_tracers(named_by(item, cached=True))[1]
    item.stash[BEFORE] = before
    return (yield from _phase(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, Any]:
    # JAX's checker sees only traces exiting inside the test, and only when the
    # test leaves it on: the phase also scans what the test and its fixtures name.
    __tracebackhide__ = True
    if not _on(item):
        return (yield)
    test = getattr(item, "obj", None)
    if _is_unittest(item) and callable(test):
        item.obj = _speaking_lift(test)  # pyright: ignore[reportAttributeAccessIssue]
        try:
            return (yield from _phase(item))
        finally:
            item.obj = test  # pyright: ignore[reportAttributeAccessIssue]
    import doctest

    runner = getattr(item, "runner", None)
    if isinstance(runner, doctest.DocTestRunner):  # a doctest's
        runner.report_unexpected_exception = _speaking_doctest(runner)
        try:
            return (yield from _phase(item))
        finally:
            del runner.report_unexpected_exception  # the class's again
    return (yield from _phase(item))


def _is_unittest(item: pytest.Item) -> bool:
    """Whether `item` is a `unittest.TestCase` method (its class runs it and
    keeps its error: the error never reaches the phase around it)."""
    import unittest

    cls = getattr(getattr(item, "parent", None), "obj", None)
    return isinstance(cls, type) and issubclass(cls, unittest.TestCase)


def _speaking_lift(test: Any) -> Any:
    """`test`, raising `LeakError` with lift's report where JAX's checker
    raises its own inside it.

    A `unittest.TestCase` records the error its method raises before the
    phase could translate it."""
    import functools

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        try:
            return test(*args, **kwargs)
        except Exception as exc:
            _speak(exc)
            raise

    setattr(run, UNWRAPPED, test)
    return run


def _speaking_doctest(runner: Any) -> Any:
    """`runner`'s report of an example's error, raising `LeakError` with
    lift's report where JAX's checker raised its own.

    The doctest's runner catches the error, and clears the doctest's
    globals before the phase could translate it."""
    report = runner.report_unexpected_exception

    def run(out: Any, test: Any, example: Any, exc_info: Any) -> Any:
        __tracebackhide__ = True
        if isinstance(exc_info[1], Exception):
            _speak(exc_info[1])
        return report(out, test, example, exc_info)

    return run


def _speak(exc: Exception) -> None:
    """Raise lift's `LeakError` for JAX's leaked-tracer error `exc`."""
    __tracebackhide__ = True
    from .._compat import filtering_mode, jax_leaked_tracers
    from .checking import leak_error

    if jax_leaked_tracers(exc) is not None:
        leak_error(exc, [], [], filtering_mode())


# The attribute of `_speaking_lift`'s wrapper that holds the test it wraps.
UNWRAPPED = "_lift_unwrapped"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, Any, Any]:
    __tracebackhide__ = True
    if not _on(item):
        return (yield)
    try:
        return (yield from _phase(item))
    finally:
        item.stash[BEFORE] = []  # hold no tracer past the test
