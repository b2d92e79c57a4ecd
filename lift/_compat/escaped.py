"""Which traces noted exiting (`watching_trace_exits`) still have tracers
alive after the block: escaped ones. Which JAX's checker fails at its check.
Both read the young objects and the tracers noted going old
(`noting_promotions`), not the heap."""

from __future__ import annotations

import contextlib
import gc
import sys
import weakref
from collections.abc import Generator
from typing import Any, Final

from .._base.gc import young_objects
from .checker import drop_stale_snapshots
from .traces import SNAPSHOT_LOCALS, TRACE, Tracer, live_traces


def escaped_tracers(recorder: dict[int, Any]) -> list[Any]:
    """The tracers still alive of the traces `recorder` saw exit: escaped ones
    (after a garbage collection, so that only reachable tracers count).

    A trace may outlive its exit with no tracer of it alive. JAX keeps some
    itself, under every equinox, lineax and optimistix solve. A `custom_jvp`
    call staged into a jaxpr keeps a memoized thunk that closes over its trace,
    and the jaxpr is cached. Its referrers are looked at before any collection
    (garbage among them). The collection takes a few hundred milliseconds on a
    large heap; it runs only when they include a tracer."""
    if all(ref() is None for ref in recorder.values()):
        return []
    live = live_traces()
    # Looked at before any collection, after the young generations' (garbage
    # a phase just made is there), then after the full one, which costs
    # hundreds of milliseconds on a large heap: each only while a tracer is
    # still referred to.
    for next_generation in (1, 2, None):
        traces = [t for r in recorder.values() if (t := r()) is not None]
        traces = [t for t in traces if not live.has(t)]
        if not traces:
            return []
        found = [x for x in _tracers_referring(traces) if not live.is_live(x)]
        if not found or next_generation is None:
            return found
        del traces, found
        gc.collect(next_generation)
    return []


def leaked_at_check(ref: Any) -> list[Any]:
    """The tracers JAX's checker would report for the trace `ref` (a weak
    reference) at its check (`core.ensure_no_leaks`, jax 0.8.0 to 0.12).
    Those are, with the trace still alive after a garbage collection, the
    tracers among its referrers.

    JAX collects every generation whenever the trace is alive; this goes only
    as far as needed. A trace no one holds is freed at once (nothing to do).
    Garbage the trace just made is young, and collected first. Its tracers
    are read as `_tracers_referring` says. The full collection runs only
    when a tracer still refers to it. The `f_locals` snapshots of the stack's
    frames (CPython 3.11, 3.12) hold nothing here, as under lift's run of
    JAX's checker."""
    trace = ref()
    if trace is None:
        return []
    del trace
    gc.collect(0)
    # No list of the tracers kept past here: it would keep them alive.
    if not _tracers_of(ref):
        return []
    if SNAPSHOT_LOCALS:
        # As lift runs JAX's checker: the `f_locals` snapshots of the frames
        # on the stack are no holders (`checker.snapshots_are_not_leaks`).
        # Often they alone hold the tracers: then no collection is needed (a
        # collection only frees, so none would refer after it either).
        drop_stale_snapshots()
        if not _tracers_of(ref):
            return []
    gc.collect()
    return _tracers_of(ref)


def _tracers_of(ref: Any) -> list[Any]:
    """The tracers that refer to the trace `ref`, garbage included."""
    trace = ref()
    if trace is None:
        return []
    return _tracers_referring([trace])


# Generations as CPython 3.11 to 3.13 keep them: an object leaves the young
# ones (0 and 1) only in a collection of generation 1 or 2.
_GENERATIONAL: Final = sys.version_info < (3, 14)

# The kinds of types: neither, a tracer, a trace, or one whose instances
# may say they are tracers (a proxy's `__class__`).
_OTHER, _TRACER, _TRACE, _MAYBE = 0, 1, 2, 3


class _Promotions:
    """The traces and tracers that collections made old while
    `noting_promotions` runs.

    Only a collection of generation 1 or 2 makes an object old. At its
    start, the young objects are what it makes old (or frees). A weak
    reference to each trace and tracer among them is kept. A trace's tracers
    are made after it. So when a noted collection made the trace old, a
    noted one made each of its old tracers old too. Its tracers are then the
    young ones and the noted ones alive: no heap walk.

    Another thread running Python code may make tracers while the young
    objects are read, and must not have them read (`young_objects`). With
    one, a collection notes nothing and forgets the traces noted so far."""

    __slots__ = ("depth", "kinds", "tracers", "traces")

    def __init__(self) -> None:
        self.depth = 0
        self.kinds: dict[type, int] = {}
        self.traces: dict[int, Any] = {}  # by id: each trace's weak reference
        self.tracers: list[Any] = []  # weak references

    def note(self, phase: str, info: dict[str, Any]) -> None:
        """Note the traces and tracers a collection is about to make old
        (a `gc.callbacks` entry)."""
        if not info["generation"]:
            return
        if phase == "stop":  # what it freed is gone
            self.tracers = [r for r in self.tracers if r() is not None]
            self.traces = {k: r for k, r in self.traces.items() if r() is not None}
            return
        young = young_objects()
        if young is None:  # other threads: what goes old is not noted
            self.traces.clear()
            return
        kinds = _kinds_of(young)
        unnoted = False
        for x in young:
            kind = kinds[type(x)]
            try:
                if _is_tracer(x, kind):
                    self.tracers.append(weakref.ref(x))
                elif kind == _TRACE:
                    self.traces[id(x)] = weakref.ref(x)
            except TypeError:  # no weak reference to it: not noted
                unnoted = unnoted or kind != _TRACE
        if unnoted:
            # A tracer goes old unnoted. Its trace, made before it, is one of
            # those noted so far, or not noted: each is read in the heap now.
            self.traces.clear()

    def old_tracers_of(self, trace: Any) -> list[Any] | None:
        """The old tracers that refer to `trace`, garbage included. `None`
        when the noted ones may miss some."""
        noted = self.traces.get(id(trace))
        if noted is None or noted() is not trace or self.note not in gc.callbacks:
            return None  # not noted, or not every collection since
        return [
            x
            for r in self.tracers
            if (x := r()) is not None and any(y is trace for y in gc.get_referents(x))
        ]


def _is_tracer(x: Any, kind: int) -> bool:
    """Whether `x`, of the `kind` its type has (`_kinds_of`), is a tracer."""
    return kind == _TRACER or (kind == _MAYBE and isinstance(x, Tracer))


def _kinds_of(objects: list[Any]) -> dict[type, int]:
    """The kind of each of `objects`' types, read once per type.

    `isinstance` through `Tracer`'s metaclass is slow."""
    kinds = _PROMOTIONS.kinds
    types: set[type] = {type(x) for x in objects}
    for tp in types.difference(kinds):
        if issubclass(tp, Tracer):
            kinds[tp] = _TRACER
        elif issubclass(tp, TRACE):
            kinds[tp] = _TRACE
        else:
            fakes = any("__class__" in vars(k) for k in tp.__mro__[:-1])
            kinds[tp] = _MAYBE if fakes else _OTHER
    return kinds


_PROMOTIONS: Final = _Promotions()


@contextlib.contextmanager
def noting_promotions() -> Generator[None]:
    """While the block runs, the young traces and tracers each collection
    makes old are noted (weakly). Then the checks read an old trace's
    tracers without a heap walk."""
    if not _GENERATIONAL:
        yield
        return
    if _PROMOTIONS.depth == 0:
        gc.callbacks.append(_PROMOTIONS.note)
    _PROMOTIONS.depth += 1
    try:
        yield
    finally:
        _PROMOTIONS.depth -= 1
        if _PROMOTIONS.depth == 0:
            with contextlib.suppress(ValueError):  # removed by the block's code
                gc.callbacks.remove(_PROMOTIONS.note)
            _PROMOTIONS.traces.clear()
            _PROMOTIONS.tracers.clear()


def _tracers_referring(traces: list[Any]) -> list[Any]:
    """The tracers that refer to one of `traces`, garbage included: JAX's
    referrers that are tracers.

    A trace's tracers are made after it. While it is young, nothing made
    since is old: its tracers are young too. So the few thousand young
    objects stand for the heap. An old trace's tracers are the young ones and
    those noted old (`_Promotions`), when each collection since it went old
    was noted. With another thread running Python code, or else, the heap is
    read (`young_objects` says why)."""
    young = young_objects() if _GENERATIONAL else None
    if young is not None:
        young_ids = {id(x) for x in young}
        old: dict[int, Any] = {}
        for trace in traces:
            if id(trace) in young_ids:
                continue
            noted = _PROMOTIONS.old_tracers_of(trace)
            if noted is None:
                break
            old.update((id(x), x) for x in noted)
        else:
            ids = {id(t) for t in traces}
            kinds = _kinds_of(young)
            found = [
                x
                for x in young
                if _is_tracer(x, kinds[type(x)])
                and any(id(y) in ids for y in gc.get_referents(x))
            ]
            return [*found, *old.values()]
        del young, old
    return [x for x in gc.get_referrers(*traces) if isinstance(x, Tracer)]
