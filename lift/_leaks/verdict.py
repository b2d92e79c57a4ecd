"""The fast mode's verdict: JAX's own signal, named by lift's walks.

At each check of JAX's checker, a trace still alive with tracers among its
referrers is a leak (`_compat.LeakSignal`), whatever holds it. The walks then
name the holder: the user's frames, what the test names, the user's modules,
any module. A tracer that only JAX's or lift's caches keep is no leak (JAX's
checker turns those caches off). Where no walk names a holder, the report
gives the referrer chain, from the tracer up, as JAX's own report does.
"""

from __future__ import annotations

from typing import Any

from .. import _compat
from .caches import CacheHolders, closure_holding
from .chain import referrer_chain
from .checking import place_escaped
from .frames import FrameLook, frame_leaks
from .report import Leak, Unopened, tracer_text


def judge(
    signal: _compat.LeakSignal,
    roots: list[tuple[str, Any]],
    home: str | None,
    look: FrameLook,
) -> tuple[list[tuple[Leak, Any]], list[Unopened], CacheHolders | None]:
    """What a `LeakSignal` comes to: the leaks of its tracers, each with its
    tracer; what naming them could not open; the caches that alone keep the
    others.

    Each leak is named by the first walk that reaches it, or by its
    referrer chain."""
    holdings = look.at_exit(_compat.ExitedTrace(signal.trace), signal.frame)
    found, unopened = frame_leaks(holdings)
    named = {id(t) for _, t in found}
    rest = [t for t in signal.tracers if id(t) not in named]
    if not rest:
        return found, unopened, None
    placed = place_escaped(rest, roots, home, unopened)
    found.extend(zip(placed.leaks, placed.named, strict=True))
    for tracer in placed.unplaced:
        leak = closure_holding(tracer) or chain_leak(
            tracer, signal, [placed, placed.unplaced, rest]
        )
        found.append((leak, tracer))
    return found, unopened, placed.cached if placed.kept else None


def chain_leak(
    tracer: Any,
    signal: _compat.LeakSignal,
    mine: list[Any] = [],  # noqa: B006 (never mutated)
) -> Leak:
    """The report of a tracer no walk names: its referrer chain (`mine`: the
    caller's own containers)."""
    chain = referrer_chain(tracer, ignore=[signal, signal.tracers, *mine])
    path = (
        f"alive after JAX's check of its trace, no variable lift opens "
        f"holding it; referrers, from the tracer up: {' <- '.join(chain)}"
    )
    return Leak(path, None, None, None, None, tracer_text(tracer))
