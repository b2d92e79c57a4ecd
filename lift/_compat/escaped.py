"""Which traces noted exiting (`watching_trace_exits`) still have tracers
alive after the block: escaped ones."""

from __future__ import annotations

import gc
import sys
from typing import Any, Final

from .checker import drop_stale_snapshots
from .traces import SNAPSHOT_LOCALS, LiveTraces, Tracer, live_traces


def escaped_tracers(recorder: dict[int, Any]) -> list[Any]:
    """The tracers still alive of the traces `recorder` saw exit: escaped ones
    (after a garbage collection, so that only reachable tracers count).

    A trace may outlive its exit with no tracer of it alive. JAX keeps some
    itself, under every equinox, lineax and optimistix solve. A `custom_jvp`
    call staged into a jaxpr keeps a memoized thunk that closes over its trace,
    and the jaxpr is cached. Its referrers are looked at before any collection
    (garbage among them). The collection takes a few hundred milliseconds on a
    large heap; it runs only when they include a tracer."""
    traces = [t for ref in recorder.values() if (t := ref()) is not None]
    if not traces:
        return []
    live = live_traces()
    traces = [t for t in traces if not live.has(t)]
    if not traces or not _any_dead_tracer(traces, live):
        return []
    del traces
    # The young generations first: garbage a phase just made is there, and a
    # full collection on a large heap costs hundreds of milliseconds; the full
    # one only when a tracer is still referred to after it.
    for generation in (1, 2):
        gc.collect(generation)
        traces = [t for ref in recorder.values() if (t := ref()) is not None]
        traces = [t for t in traces if not live.has(t)]
        if not traces:
            return []
        if generation == 1 and not _any_dead_tracer(traces, live):
            return []
    return [
        x
        for x in gc.get_referrers(*traces)
        if isinstance(x, Tracer) and not live.is_live(x)
    ]


def _any_dead_tracer(traces: list[Any], live: LiveTraces) -> bool:
    """Whether anything, garbage included, refers to `traces` that is a tracer
    of none of the `live` traces (the referrers are not kept)."""
    return any(
        isinstance(x, Tracer) and not live.is_live(x) for x in gc.get_referrers(*traces)
    )


def leaked_at_check(ref: Any) -> list[Any]:
    """The tracers JAX's checker would report for the trace `ref` (a weak
    reference) at its check (`core.ensure_no_leaks`, jax 0.8.0 to 0.12).
    Those are, with the trace still alive after a garbage collection, the
    tracers among its referrers.

    JAX collects every generation whenever the trace is alive; this goes only
    as far as needed. A trace no one holds is freed at once (nothing to do).
    Garbage the trace just made is young, and collected first. A young trace's
    tracers are looked for among the young objects alone (`_any_tracer_of`),
    an old one's in the heap. The full collection runs only when a tracer
    still refers to it. The `f_locals`
    snapshots of the stack's frames (CPython 3.11, 3.12) hold nothing here,
    as under lift's run of JAX's checker."""
    if ref() is None:
        return []
    gc.collect(0)
    # No list of the tracers kept past here: it would keep them alive.
    if not _any_tracer_of(ref):
        return []
    if SNAPSHOT_LOCALS:
        # As lift runs JAX's checker: the `f_locals` snapshots of the frames
        # on the stack are no holders (`checker.snapshots_are_not_leaks`).
        drop_stale_snapshots()
    gc.collect()
    return _tracers_of(ref)


# Generations as CPython 3.11 to 3.13 keep them: an object leaves the young
# ones (0 and 1) only in a collection of generation 1 or 2.
_GENERATIONAL: Final = sys.version_info < (3, 14)


def _any_tracer_of(ref: Any) -> bool:
    """Whether a tracer refers to the trace `ref`, garbage included.

    A tracer of a trace is made after it. While the trace is young, no
    collection has moved anything made since into the old generation: its
    tracers are young too, and the few thousand young objects stand for the
    heap. An old trace's referrers are read in the heap."""
    trace = ref()
    if trace is None:
        return False
    if _GENERATIONAL:
        young = gc.get_objects(generation=0) + gc.get_objects(generation=1)
        if any(x is trace for x in young):
            return any(
                isinstance(x, Tracer) and any(r is trace for r in gc.get_referents(x))
                for x in young
            )
        del young
    del trace
    return bool(_tracers_of(ref))


def _tracers_of(ref: Any) -> list[Any]:
    """The tracers among the referrers of the trace `ref`, if still alive."""
    trace = ref()
    if trace is None:
        return []
    return [x for x in gc.get_referrers(trace) if isinstance(x, Tracer)]
