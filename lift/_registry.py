"""A weak, thread-safe record of the `Lifted` objects built while someone listens.

`lift.checked` and `lift.checking_leaks` open a recording around a call and scan
what was lifted inside it. Construction of a `Lifted` calls `record`, which costs
one attribute read when nobody listens.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Generator
from contextlib import contextmanager
from typing import Any

__all__ = ["record", "recording"]

_lock = threading.Lock()
_listeners: list[weakref.WeakSet[Any]] = []


def record(obj: Any) -> None:
    """Note that `obj` was just built (no-op unless a recording is open)."""
    if _listeners:
        with _lock:
            for bucket in _listeners:
                bucket.add(obj)


@contextmanager
def recording() -> Generator[weakref.WeakSet[Any]]:
    """Collect, weakly, every object passed to `record` while the block runs."""
    bucket: weakref.WeakSet[Any] = weakref.WeakSet()
    with _lock:
        _listeners.append(bucket)
    try:
        yield bucket
    finally:
        with _lock:
            _listeners.remove(bucket)
