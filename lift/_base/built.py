"""A weak, per-thread record of the `Lifted` objects built while someone listens.

`lift.checked` and `lift.checking_leaks` record around a call. They scan
what was lifted inside it. A trace runs in the thread of its call, so
recordings are per thread. A call never sees what another thread lifts. Each
new `Lifted` calls `record`: one attribute read when nobody listens.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Generator
from contextlib import contextmanager
from typing import Any


class _Listeners(threading.local):
    def __init__(self) -> None:
        self.buckets: list[weakref.WeakSet[Any]] = []


_local = _Listeners()


def record(obj: Any) -> None:
    """Note that `obj` was just built (no-op unless this thread is recording)."""
    for bucket in _local.buckets:
        bucket.add(obj)


@contextmanager
def recording() -> Generator[weakref.WeakSet[Any]]:
    """Collect, weakly, every object this thread passes to `record` in the block."""
    bucket: weakref.WeakSet[Any] = weakref.WeakSet()
    buckets = _local.buckets
    buckets.append(bucket)
    try:
        yield bucket
    finally:
        # By identity: two WeakSets with the same contents compare equal.
        del buckets[next(i for i, b in enumerate(buckets) if b is bucket)]
