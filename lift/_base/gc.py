"""Pausing Python's cyclic garbage collector around bulk allocation.

Walking a closure graph, scanning for leaks and converting scalars allocate
per item and free nothing. The collector would run every few hundred
allocations. Its older generations traverse the whole heap. With JAX loaded,
that is most of the time spent. A 10 000-level walk takes 35 µs a level with
it, 13 µs without. Converting 10 000 floats takes 25 µs each with it, 18 µs
without. None of these passes makes cycles, so the collector finds nothing.
"""

from __future__ import annotations

import gc


class _Paused:
    """Disable the collector for the block, restoring its previous state."""

    __slots__ = ("enabled",)

    def __enter__(self) -> None:
        self.enabled = gc.isenabled()
        if self.enabled:
            gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            gc.enable()


def paused() -> _Paused:
    """The collector disabled for a `with` block, then restored."""
    return _Paused()
