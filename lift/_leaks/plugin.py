"""The pytest plugin: check each test, with its fixtures, for leaked tracers.

Registered through the `pytest11` entry point and off unless asked for, with
`pytest --lift-leaks` or `lift_leaks = true` in the ini file. Each phase of a
test (fixture setup, the call, fixture teardown) is checked as part of that
test; tracers that escaped before its setup began are never its fault. A leak
fails the phase with the `LeakError` text; `@pytest.mark.lift_allow_leaks`
exempts a test. Two modes (`--lift-leaks-mode`, `lift_leaks_mode`): `fast`, the
default, notes the traces that exit in each phase and the locals of the
user's frames on the stack as each exits, and after the phase, for the
tracers of those traces still alive (if any), scans what the test and its
fixtures name (and every `Lifted` built), with JAX's own checker left as it
is; `exhaustive` also runs
each phase inside `lift.checking_leaks()` (JAX's gc-based checker), which finds
leaks held anywhere at several times the cost. A holder the scan cannot open
(an attribute that raises) is named: in the leak report of a failing phase,
and in a section of the run's summary for tests that pass; so are tracers that
only JAX's (or lift's) caches keep (after an eager `grad` over a jitted
closure), which fail no test. This module imports neither JAX nor the rest of
`lift` until it is switched on, so installing the library costs nothing to
test suites that do not use it.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable
from contextlib import ExitStack
from typing import Any, Final, cast

import pytest

__all__ = ["MARKER", "MODES"]

MARKER = "lift_allow_leaks"
MODES = ("fast", "exhaustive")
_ENABLED = pytest.StashKey[bool]()
_MODE = pytest.StashKey[str]()
_BEFORE = pytest.StashKey[list[Any]]()  # tracers escaped before the test's setup
# Per test (node id), what the scans of its passing phases could not open.
_UNOPENED = pytest.StashKey[dict[str, list[Any]]]()
# Per test, the tracers of its traces that only libraries' caches keep alive.
_CACHED = pytest.StashKey[dict[str, str]]()


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
    config.stash[_UNOPENED] = {}
    config.stash[_CACHED] = {}
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
        """Name what the checks of passing tests could not open (a tracer
        there would not have been seen: make it readable, or exempt the test),
        and the tracers only libraries' caches keep (not failed: not the
        test's escapes)."""
        for title in _SECTIONS.values():
            found = self.sections.get(title)
            if not found:
                continue
            terminalreporter.write_sep("=", title)
            for nodeid, text in list(found.items())[:20]:
                terminalreporter.write_line(f"{nodeid}: {text}")
            if len(found) > 20:
                terminalreporter.write_line(f"(and {len(found) - 20} more tests)")


def _carry_summary(item: pytest.Item, report: pytest.TestReport) -> None:
    """Give the test's last report its summary lines (`_SECTIONS`)."""
    from .report import unopened_text

    unopened = item.config.stash[_UNOPENED].pop(item.nodeid, None)
    cached = item.config.stash[_CACHED].pop(item.nodeid, None)
    if unopened:
        report.user_properties.append((_SECTIONS["unopened"], unopened_text(unopened)))
    if cached:
        report.user_properties.append((_SECTIONS["cached"], cached))


def _on(item: pytest.Item | pytest.Collector) -> bool:
    return item.config.stash.get(_ENABLED, False) and not item.get_closest_marker(
        MARKER
    )


def _fast(item: pytest.Item | pytest.Collector) -> bool:
    """Whether the fast mode watches `item`: chosen, and JAX's own checker
    not on anyway (when it is, each phase runs in `lift.checking_leaks()`, as
    in the exhaustive mode)."""
    import jax

    fast = item.config.stash.get(_MODE, "fast") == "fast"
    return fast and not bool(cast(Any, jax.config).jax_check_tracer_leaks)


def _roots(item: pytest.Item, cached: bool = False) -> list[tuple[str, Any]]:
    """What a test names: its function, its fixtures' functions (and so the
    globals their code names) and the fixture values it received; with
    `cached`, also those an earlier test already set up (a higher scope's,
    cached on its definition)."""
    test = getattr(item, "obj", None)
    # A `unittest.TestCase` method, as the test wrote it (not the plugin's
    # wrapper around it, `_speaking_lift`).
    test = getattr(test, _UNWRAPPED, test)
    roots: list[tuple[str, Any]] = [(item.name, test)]
    info = getattr(item, "_fixtureinfo", None)
    for name, defs in getattr(info, "name2fixturedefs", {}).items():
        for fixturedef in defs:
            roots.append((f"fixture {name}", getattr(fixturedef, "func", None)))
            value = getattr(fixturedef, "cached_result", None) if cached else None
            if isinstance(value, tuple) and value:
                roots.append((f"fixture {name}", cast(Any, value)[0]))
    funcargs = getattr(item, "funcargs", None)
    if isinstance(funcargs, dict):
        roots.extend((f"fixture {k}", v) for k, v in funcargs.items())  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
    return roots


def _home(item: pytest.Item) -> str | None:
    """The name of the test's module."""
    module = getattr(getattr(item, "module", None), "__name__", None)
    return module if isinstance(module, str) else None


def _check(item: pytest.Item, watch: _Watch) -> None:
    """Fail the current phase for what escaped since the test's setup began:
    reachable from what the test names, or from a `Lifted` built in the phase,
    or (the fast mode's record of trace exits) a tracer of a trace that exited
    in the phase and is still alive, wherever it is kept.

    What only unreachable garbage holds did not escape (JAX's checker collects
    it first): a leak found is confirmed after a garbage collection, which only
    a suspected leak costs."""
    __tracebackhide__ = True
    if _check_once(item, watch, confirm=True):
        import gc

        gc.collect()  # after the first look's frame (and its roots) is gone
        _check_once(item, watch, confirm=False)


def _check_once(item: pytest.Item, watch: _Watch, confirm: bool) -> bool:
    """One look (see `_check`); with `confirm`, a leak found returns `True`
    (suspected: to be looked at again after a collection) before it is noted."""
    __tracebackhide__ = True
    from .._base.errors import LeakError
    from .._compat import escaped_tracers
    from .checking import jax_retained, lifted_roots, place_escaped, unseen_error
    from .report import Unopened, format_leaks
    from .scan import scan_tracers

    empty: list[Any] = []
    before = item.stash.get(_BEFORE, empty)
    escaped: list[Any] = []
    if watch.fast:
        # Only a trace that exited in this phase can have left a tracer of
        # this phase's: none exited (a test that traces nothing, or hits
        # JAX's caches), nothing to scan; else the tracers of those traces
        # still alive, and the scan of what the test names looks for them
        # alone (and stops once all are found).
        if watch.exits:
            known = {id(t) for t in before}
            escaped = [t for t in escaped_tracers(watch.exits) if id(t) not in known]
            cached, kept, escaped = jax_retained(escaped)
            if kept:
                # Retained by JAX's caches, not by the test: named, not failed.
                before.extend(kept)
                item.config.stash[_CACHED][item.nodeid] = (
                    f"{len(kept)} tracer(s) still alive, {cached}"
                )
        if not escaped and not watch.held:
            return False
    roots = _roots(item)
    roots.extend(lifted_roots(watch.lifted))
    home = _home(item)
    unopened: list[Unopened] = []
    if watch.fast and not escaped:
        leaks, tracers = [], []
    else:
        leaks, tracers = scan_tracers(
            roots,
            only=escaped if watch.fast else None,
            skip=before,
            home=home,
            unopened=unopened,
        )
    if watch.held:
        # Held by the user's frames when their trace exited (gone since).
        known = {id(t) for t in [*before, *tracers]}
        fresh = [(leak, t) for leak, t in watch.held if id(t) not in known]
        leaks.extend(leak for leak, _ in fresh)
        tracers.extend(t for _, t in fresh)
        if fresh:
            unopened.extend(watch.held_unopened)
    if leaks and confirm:
        return True
    if escaped:
        known = {id(t) for t in [*before, *tracers]}
        rest = [t for t in escaped if id(t) not in known]
        if rest:
            placed = place_escaped(rest, roots, home, unopened)
            if confirm and (placed.leaks or placed.unplaced):
                return True
            leaks.extend(placed.leaks)
            off = {id(t) for t in [*placed.unplaced, *placed.kept]}
            tracers.extend(t for t in rest if id(t) not in off)
            if placed.kept:
                # Kept by libraries' caches, not by the test: named, not failed.
                before.extend(placed.kept)
                item.config.stash[_CACHED][item.nodeid] = (
                    f"{len(placed.kept)} tracer(s) still alive, {placed.cached}"
                )
            if placed.unplaced and not leaks:
                before.extend(placed.unplaced)
                raise unseen_error(placed.unplaced, f"in {item.name}")
    if leaks:
        before.extend(tracers)  # each leak fails one phase only
        raise LeakError(format_leaks(leaks, unopened), anchor="leak-report")
    if unopened:
        noted = item.config.stash[_UNOPENED].setdefault(item.nodeid, [])
        noted.extend(u for u in unopened if u not in noted)
    return False


class _Watch:
    """What runs around a phase: in the exhaustive mode (or when JAX's own
    checker is on anyway, its caches already off) `lift.checking_leaks()`; in
    the fast mode a record of the `Lifted` built and of the traces that exit
    (`lifted`, `exits`), JAX's caches kept on, and the leaks found in the
    user's frames as traces exited (`held`: each with its tracer, and what
    naming them could not open)."""

    __slots__ = (
        "exits",
        "fast",
        "held",
        "held_unopened",
        "item",
        "lifted",
        "look",
        "stack",
    )

    def __init__(self, item: pytest.Item | pytest.Collector) -> None:
        self.item = item
        self.look: Any = None
        self.fast = False
        self.lifted: Iterable[Any] = ()
        self.exits: dict[int, Any] = {}
        self.held: list[tuple[Any, Any]] = []
        self.held_unopened: list[Any] = []
        self.stack: Any = None

    def start(self) -> _Watch:
        from .._base.registry import recording
        from .._compat import watching_trace_exits
        from .checking import checking_leaks
        from .frames import FrameLook

        item = self.item
        if not _fast(item):
            # Entered as it is, not through an `ExitStack`: its `LeakError`
            # then carries no context of the stack's own.
            self.stack = checking_leaks()
        else:
            self.fast = True
            stack = self.stack = ExitStack()
            self.lifted = stack.enter_context(recording())
            self.look = FrameLook()
            self.exits = stack.enter_context(
                watching_trace_exits(
                    every=True,
                    frames=(self.note_frames, self.look),
                    threads=True,
                    leaked=self.note_leak,
                )
            )
        return self

    def note_leak(self, signal: Any) -> None:
        """Name the tracers of a trace JAX's checker would fail where it
        checks it, while their holders still hold them: each is a leak,
        whatever holds it, but those only JAX's or lift's caches keep."""
        from .checking import lifted_roots
        from .report import Unopened, error_text, tracer_text
        from .verdict import chain_leak, judge

        # A module being imported names nothing yet (its globals are scanned
        # as a user's module's): its attributes would import it again.
        test = isinstance(self.item, pytest.Item)
        roots = [*(_roots(self.item) if test else []), *lifted_roots(self.lifted)]
        try:
            verdict = judge(signal, roots, _home(self.item) if test else None, self.look)
        except Exception as exc:  # named, and each tracer reported as alive
            leaks = [(chain_leak(t, signal), t) for t in signal.tracers]
            failed = Unopened(f"the holders of {tracer_text(signal.tracers[0])}", error_text(exc))
            self.held_unopened.append(failed)
        else:
            leaks = verdict.leaks
            self.held_unopened.extend(
                u for u in verdict.unopened if u not in self.held_unopened
            )
            if verdict.cached is not None and not leaks:
                self.item.config.stash[_CACHED][self.item.nodeid] = (
                    f"{len(signal.tracers)} tracer(s) still alive, {verdict.cached}"
                )
        known = {id(t) for _, t in self.held}
        for leak, tracer in leaks:
            if id(tracer) not in known:
                known.add(id(tracer))
                self.held.append((leak, tracer))

    def note_frames(self, holdings: list[Any]) -> None:
        """Name the tracers the user's frames hold as their trace exits (the
        frames may drop them before the phase ends)."""
        from .find import frame_leaks

        leaks, tracers, unopened = frame_leaks(holdings)
        known = {id(t) for _, t in self.held}
        for leak, tracer in zip(leaks, tracers, strict=True):
            if id(tracer) not in known:
                known.add(id(tracer))
                self.held.append((leak, tracer))
        self.held_unopened.extend(u for u in unopened if u not in self.held_unopened)

    def __enter__(self) -> _Watch:
        if not isinstance(self.stack, ExitStack):
            self.stack.__enter__()
        return self

    def __exit__(self, *exc: Any) -> Any:
        __tracebackhide__ = True
        return self.stack.__exit__(*exc)


def _phase(item: pytest.Item) -> Generator[None, Any, Any]:
    """One phase of a test (setup, call, teardown), watched for leaks."""
    __tracebackhide__ = True
    watch = _Watch(item)
    try:
        with watch.start():
            result = yield
    except BaseException:
        # This phase failed (JAX's checker reported a leak, or the test): what
        # escaped in it is this phase's, not a later phase's to report again.
        try:
            _check(item, watch)
        except Exception:  # the phase's own error is the report
            pass
        raise
    _check(item, watch)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, Any]:
    """A leak that fails a phase of an item that is not a Python function (a
    doctest) is reported as its `LeakError` alone: such items show the
    traceback of pytest's own calls around it."""
    report = yield
    if report.when == "teardown" and _on(item):
        _carry_summary(item, report)
    excinfo = call.excinfo
    if (
        excinfo is not None
        and report.failed
        and not isinstance(item, pytest.Function)
        and _on(item)
    ):
        from .._base.errors import LeakError

        if isinstance(excinfo.value, LeakError):
            report.longrepr = f"lift.LeakError: {excinfo.value}"
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, Any]:
    """A test module's import, watched as a phase is: a leak there fails its
    collection (as JAX's checker errors it), with lift's report."""
    if not isinstance(collector, pytest.Module) or not _on(collector) or not _fast(
        collector
    ):
        return (yield)
    from .._base.errors import LeakError
    from .report import format_leaks

    watch = _Watch(collector)
    with watch.start():
        report = yield
    if watch.held and report.passed:
        leaks = [leak for leak, _ in watch.held]
        text = format_leaks(leaks, watch.held_unopened)
        report.outcome = "failed"
        error = LeakError(text, anchor="leak-report")
        report.longrepr = f"lift.LeakError: {error}"
        report.result = []
    watch.held.clear()
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, Any, Any]:
    __tracebackhide__ = True
    if not _on(item):
        return (yield)
    from .scan import scan_tracers

    # Tracers that escaped before this test ran are not its fault: held by
    # what it names, or by a fixture value already cached from an earlier test
    # (a session or module fixture, not yet in `item.funcargs`). The fast mode
    # looks only for tracers of the traces that exit in each phase: none of
    # those escaped before.
    before = [] if _fast(item) else scan_tracers(_roots(item, cached=True))[1]
    item.stash[_BEFORE] = before
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
    return (yield from _phase(item))


def _is_unittest(item: pytest.Item) -> bool:
    """Whether `item` is a `unittest.TestCase` method (its class runs it and
    keeps its error: the error never reaches the phase around it)."""
    import unittest

    cls = getattr(getattr(item, "parent", None), "obj", None)
    return isinstance(cls, type) and issubclass(cls, unittest.TestCase)


def _speaking_lift(test: Any) -> Any:
    """`test`, raising `LeakError` with lift's report where JAX's checker
    raises its own inside it: a `unittest.TestCase` records the error its
    method raises before the phase could translate it."""
    import functools

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        try:
            return test(*args, **kwargs)
        except Exception as exc:
            from .._compat import filtering_mode, jax_leaked_tracers
            from .checking import leak_error

            if jax_leaked_tracers(exc) is not None:
                leak_error(exc, [], [], filtering_mode())
            raise

    setattr(run, _UNWRAPPED, test)
    return run


# The attribute of `_speaking_lift`'s wrapper that holds the test it wraps.
_UNWRAPPED = "_lift_unwrapped"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, Any, Any]:
    __tracebackhide__ = True
    if not _on(item):
        return (yield)
    try:
        return (yield from _phase(item))
    finally:
        item.stash[_BEFORE] = []  # hold no tracer past the test
