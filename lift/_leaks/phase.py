"""One phase of a test under the plugin's fast mode.

Here are what runs around it (`Watch`), what the test names (`named_by`),
and the check after it (`check`). Imported once the plugin is switched on."""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Iterable
from contextlib import ExitStack
from types import ModuleType
from typing import Any, cast

import pytest

from .._base.built import recording
from .._base.errors import LeakError
from .._compat import escaped_tracers, noting_promotions, watching_trace_exits
from .checking import checking_leaks, lifted_roots, place_escaped, unseen_error
from .frames import FrameLook
from .plugin import BEFORE, CACHED, UNOPENED, UNWRAPPED, fast_mode
from .report import Unopened, error_text, format_leaks, tracer_text
from .scan import scan_tracers
from .verdict import chain_leak, judge


def named_by(item: pytest.Item, cached: bool = False) -> list[tuple[str, Any]]:
    """What a test names: its function, its fixtures' functions and the
    fixture values it received; a doctest's names.

    The fixtures' functions bring the globals their code names. With
    `cached`, also the values an earlier test already set up: a higher
    scope's, cached on its definition."""
    test = getattr(item, "obj", None)
    # A `unittest.TestCase` method, as the test wrote it (not the plugin's
    # wrapper around it, `_speaking_lift`).
    test = getattr(test, UNWRAPPED, test)
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
    # A doctest's names: those its examples bound (`seen = []`), beside its
    # module's.
    globs = getattr(getattr(item, "dtest", None), "globs", None)
    if isinstance(globs, dict):
        roots.extend(
            (k, v)
            for k, v in cast("dict[str, Any]", globs).items()
            if not k.startswith("__") and not isinstance(v, ModuleType)
        )
    return roots


def module_of(item: pytest.Item) -> str | None:
    """The name of the test's module."""
    module = getattr(getattr(item, "module", None), "__name__", None)
    return module if isinstance(module, str) else None


def check(item: pytest.Item, watch: Watch) -> None:
    """Fail the current phase for what escaped since the test's setup began.

    A tracer escaped when it is reachable from what the test names, or from a
    `Lifted` built in the phase. The fast mode also records trace exits. A
    tracer of a trace that exited in the phase escaped if it is still alive,
    wherever it is kept.

    What only unreachable garbage holds did not escape; JAX's checker
    collects it first. So a leak found is confirmed after a garbage
    collection, which only a suspected leak costs."""
    __tracebackhide__ = True
    with watch.noting:  # what collections made old, noted until here
        if check_once(item, watch, confirm=True):
            gc.collect()  # after the first look's frame (and its roots) is gone
            check_once(item, watch, confirm=False)


def check_once(item: pytest.Item, watch: Watch, confirm: bool) -> bool:
    """One look (see `check`); with `confirm`, a leak found returns `True`
    (suspected: to be looked at again after a collection) before it is noted."""
    __tracebackhide__ = True
    empty: list[Any] = []
    before = item.stash.get(BEFORE, empty)
    escaped: list[Any] = []
    if watch.fast:
        # Only a trace that exited in this phase can have left a tracer of
        # this phase's: none exited (a test that traces nothing, or hits
        # JAX's caches), nothing to scan; else the tracers of those traces
        # still alive, and the scan of what the test names looks for them
        # alone (and stops once all are found).
        if watch.exits:
            # Those JAX's signal gave, still alive, are named again from what
            # the test names (a global then reads with its module's name).
            known = {id(t) for t in before}
            escaped = [t for t in escaped_tracers(watch.exits) if id(t) not in known]
        if not escaped and not watch.held:
            return False
    roots = [*named_by(item), *lifted_roots(watch.lifted)]
    home = module_of(item)
    unopened: list[Unopened] = []
    if watch.fast and not escaped:
        leaks, tracers = [], []
    else:
        leaks, tracers = scan_tracers(
            roots,
            only=escaped or None,
            skip=before,
            home=home,
            unopened=unopened,
            weak=not watch.fast,
        )
    known = {id(t) for t in [*before, *tracers]}
    # Alive at JAX's check of their trace (perhaps dropped since).
    fresh = [(leak, t) for leak, t in watch.held if id(t) not in known]
    if fresh:
        leaks.extend(leak for leak, _ in fresh)
        tracers.extend(t for _, t in fresh)
        known.update(id(t) for _, t in fresh)
        unopened.extend(watch.held_unopened)
    if leaks and confirm:
        return True
    if rest := [t for t in escaped if id(t) not in known]:
        placed = place_escaped(rest, roots, home, unopened)
        if confirm and (placed.leaks or placed.unplaced):
            return True
        leaks.extend(placed.leaks)
        tracers.extend(placed.named)
        if placed.kept:
            # Kept by libraries' caches, not by the test: named, not failed.
            before.extend(placed.kept)
            item.config.stash[CACHED][item.nodeid] = (
                f"{len(placed.kept)} tracer(s) still alive, {placed.cached}"
            )
        if placed.unplaced and not leaks:
            before.extend(placed.unplaced)
            raise unseen_error(placed.unplaced, f"in {item.name}")
    if leaks:
        before.extend(tracers)  # each leak fails one phase only
        raise LeakError(format_leaks(leaks, unopened), anchor="leak-report")
    if unopened:
        noted = item.config.stash[UNOPENED].setdefault(item.nodeid, [])
        noted.extend(u for u in unopened if u not in noted)
    return False


@dataclasses.dataclass(slots=True, eq=False)
class Watch:
    """What runs around a phase, once entered.

    In the exhaustive mode it is `lift.checking_leaks()`. So it is when JAX's
    own checker is on anyway, its caches already off. In the fast mode JAX's
    caches stay on, and it records:

    - the `Lifted` built (`lifted`) and the traces that exit (`exits`);
    - the leaks of the traces JAX's checks find alive (`held`), each with its
      tracer;
    - what naming them could not open;
    - what collections make old, until `check` ends (`noting`)."""

    item: pytest.Item | pytest.Collector
    look: Any = None
    fast: bool = False
    lifted: Iterable[Any] = ()
    exits: dict[int, Any] = dataclasses.field(default_factory=lambda: {})
    held: list[tuple[Any, Any]] = dataclasses.field(default_factory=lambda: [])
    held_unopened: list[Any] = dataclasses.field(default_factory=lambda: [])
    stack: Any = None
    noting: ExitStack = dataclasses.field(default_factory=ExitStack)

    def __enter__(self) -> Watch:
        if not fast_mode(self.item):
            # Entered as it is, not through an `ExitStack`: its `LeakError`
            # then carries no context of the stack's own.
            self.stack = checking_leaks()
            self.stack.__enter__()
        else:
            self.fast = True
            stack = self.stack = ExitStack()
            self.lifted = stack.enter_context(recording())
            self.look = FrameLook()
            self.noting.enter_context(noting_promotions())
            self.exits = stack.enter_context(
                watching_trace_exits(every=True, threads=True, leaked=self.note_leak)
            )
        return self

    def note_leak(self, signal: Any) -> None:
        """Name the tracers of a trace JAX's checker would fail where it
        checks it, while their holders still hold them.

        Each is a leak, whatever holds it, except those only JAX's or lift's
        caches keep."""
        # A module being imported names nothing yet (its globals are scanned
        # as a user's module's): its attributes would import it again.
        test = self.item if isinstance(self.item, pytest.Item) else None
        roots = [*(named_by(test) if test else []), *lifted_roots(self.lifted)]
        try:
            leaks, unopened, cached = judge(
                signal, roots, module_of(test) if test else None, self.look
            )
        except Exception as exc:  # named, and each tracer reported as alive
            leaks = [(chain_leak(t, signal), t) for t in signal.tracers]
            holders = f"the holders of {tracer_text(signal.tracers[0])}"
            unopened, cached = [Unopened(holders, error_text(exc))], None
        self.held_unopened.extend(u for u in unopened if u not in self.held_unopened)
        if cached is not None and not leaks:
            self.item.config.stash[CACHED][self.item.nodeid] = (
                f"{len(signal.tracers)} tracer(s) still alive, {cached}"
            )
        known = {id(t) for _, t in self.held}
        for leak, tracer in leaks:
            if id(tracer) not in known:
                known.add(id(tracer))
                self.held.append((leak, tracer))

    def __exit__(self, *exc: Any) -> Any:
        __tracebackhide__ = True
        return self.stack.__exit__(*exc)
