"""Cost of leak checking.

- `find_leaks` over a graph of 100 000 objects (closures, lists, dicts, objects,
  arrays; one escaped tracer at the far end).
- `checked(jax.jit)` against plain `jax.jit` on a cached call: the check must add
  nothing but a counter comparison, since a cached call runs no Python of the
  function and cannot leak.

Run `python benchmarks/bench_leaks.py`; `main()` returns the rows.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

import lift


class _Node:
    def __init__(self, value: Any, nxt: Any) -> None:
        self.value = value
        self.next = nxt


def build_graph(n: int) -> tuple[Any, int]:
    """A mixed graph of about `n` objects with one escaped tracer at its far end."""
    box: list[Any] = []
    with jax.check_tracer_leaks(False):
        jax.jit(lambda x: box.append(x) or x)(1.0)
    tail: Any = box[0]
    array = jnp.ones(3)
    count = 0
    while count < n:
        leaf = tail
        fn = (lambda v: lambda: v)(leaf)  # a function and its cell
        tail = [_Node({"f": fn, "a": array, "i": count}, leaf), (count, "s")]
        count += 6  # list, node, node dict, dict, function, tuple
    return tail, count


def _median_time(
    fn: Callable[[], Any],
    repeats: int,
    number: int,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    times: list[float] = []
    for _ in range(repeats):
        start = clock()
        for _ in range(number):
            fn()
        times.append((clock() - start) / number)
    return statistics.median(times)


def bench_find_leaks(n: int = 100_000, repeats: int = 5) -> dict[str, Any]:
    root, count = build_graph(n)
    leaks = lift.find_leaks(root)
    assert len(leaks) == 1, leaks
    seconds = _median_time(lambda: lift.find_leaks(root), repeats, 1)
    # CPU time of this process too: the scan is single-threaded Python, and on a
    # shared machine the wall clock also counts other people's work.
    cpu = _median_time(lambda: lift.find_leaks(root), repeats, 1, time.process_time)
    return {
        "benchmark": f"find_leaks, {count:,} objects",
        "median": f"{seconds * 1e3:.1f} ms",
        "note": f"{seconds / count * 1e9:.0f} ns per object; CPU {cpu * 1e3:.1f} ms",
    }


def bench_checked_jit(repeats: int = 7, number: int = 2_000) -> list[dict[str, Any]]:
    def step(x: Any, y: Any) -> Any:
        return x * y + 1.0

    plain = jax.jit(step)
    checked = lift.checked(jax.jit)(step)
    x, y = jnp.ones(8), jnp.float32(2.0)
    plain(x, y).block_until_ready()
    checked(x, y).block_until_ready()
    t_plain = _median_time(lambda: plain(x, y), repeats, number)
    t_checked = _median_time(lambda: checked(x, y), repeats, number)
    return [
        {
            "benchmark": "jax.jit, cached call",
            "median": f"{t_plain * 1e6:.2f} µs",
            "note": "",
        },
        {
            "benchmark": "lift.checked(jax.jit), cached call",
            "median": f"{t_checked * 1e6:.2f} µs",
            "note": f"{t_checked / t_plain:.2f} times jax.jit",
        },
    ]


def main(quick: bool = False) -> list[dict[str, Any]]:
    """Run the benchmarks; print and return their rows."""
    rows = [bench_find_leaks(10_000 if quick else 100_000, 2 if quick else 5)]
    rows += bench_checked_jit(3 if quick else 7, 200 if quick else 2_000)
    header = ["benchmark", "median", "note"]
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for row in rows:
        print("| " + " | ".join(str(row[k]) for k in header) + " |")
    return rows


if __name__ == "__main__":
    main()
