"""Helpers shared by the tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax


class TraceCounter:
    """Counts how often JAX traces a function: `counter.traces`."""

    def __init__(self) -> None:
        self.traces = 0

    def jit(self, fn: Callable[..., Any], **kwargs: Any) -> Callable[..., Any]:
        def counted(*args: Any, **kw: Any) -> Any:
            self.traces += 1
            return fn(*args, **kw)

        return jax.jit(counted, **kwargs)


def call_lifted(g: Any, *args: Any) -> Any:
    """`g(*args)`: the trampoline tests jit with a `Lifted` argument."""
    return g(*args)
