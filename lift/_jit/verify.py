"""Checking every fast path against the full walk: `lift.verifying()`, `LIFT_VERIFY=1`.

lift answers one request by a fast path that stands for a slower, simpler
rule: a `lift.jit` function's cached call, for lifting its function again.
(Lifting a closure always takes the full walk; captured floats are always
converted by `jax.device_put`.) The cached call must give exactly what lifting
gives. With the switch on, it also lifts and raises `lift.LiftError` at the
first difference (a bug in lift: the message says which path, for which
function, and what differed).

The switch is read when `lift` is imported (`LIFT_VERIFY=1` in the
environment) and set for a block by `lift.verifying()`; it applies to every
thread.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Generator
from typing import Any, Final

from .._base.errors import LiftError, describe, type_text

__all__ = ["ENV", "STATE", "disagree", "same_leaves", "verifying"]

ENV: Final = "LIFT_VERIFY"


class _State:
    """Whether fast paths check themselves (`on`), read on every fast call."""

    __slots__ = ("on",)

    def __init__(self) -> None:
        self.on = os.environ.get(ENV, "").strip().lower() not in ("", "0", "false")


STATE: Final = _State()
_lock = threading.Lock()


@contextlib.contextmanager
def verifying(enabled: bool = True) -> Generator[None]:
    """Make every fast path of lift check itself against the full walk, in a block.

    Inside the block, a `lift.jit` function's cached call also lifts the
    function again, the rule it stands for, and raises `lift.LiftError` if
    the two differ in anything: treedef, leaves (type,
    dtype, weak type, sharding, bits), or whether the value is accepted.
    Lifting a closure has no fast path to check: it always takes the full
    walk. Setting the environment variable `LIFT_VERIFY=1` turns the same
    checks on for the whole process (the test suite's CI runs so). The checks
    cost a lift per cached call: for tests, not for production.

    ```python
    import jax.numpy as jnp
    import lift

    def make(lr):
        return lambda g: -lr * g

    with lift.verifying():
        for lr in (0.1, 0.2, 0.3):
            assert lift.lift(make(lr))(jnp.ones(2))[0] == -lr
    ```

    **Arguments:**

    - `enabled`: `False` turns the checks off in the block instead (for a
      benchmark inside a suite run with `LIFT_VERIFY=1`).
    """
    with _lock:
        before, STATE.on = STATE.on, bool(enabled)
    try:
        yield
    finally:
        with _lock:
            STATE.on = before


def disagree(fn: Any, detail: str) -> LiftError:
    """The error the fast path (a `lift.jit` function's cached call of `fn`)
    raises when it differs from the full rule."""
    return LiftError(
        f"lift's lift.jit cached call disagrees with the full walk for "
        f"{describe(fn)}: {detail}.\nThis is a bug in lift: the full walk's answer is the one "
        "lift promises. Please report it with this message.",
        anchor="fast-path-disagrees",
    )


def _leaf(x: Any) -> tuple[Any, ...]:
    """What must agree between two leaves: type, shape, dtype, weak type,
    sharding, commitment and bits (`0.0` and `-0.0` differ, `nan` equals itself)."""
    import numpy as np  # not when `lift` is imported

    t: type[Any] = type(x)  # pyright: ignore[reportUnknownVariableType]
    aval = getattr(x, "aval", None)
    # Asked of the class: a deleted (donated) array's `addressable_shards` raises.
    if aval is None or not hasattr(t, "addressable_shards"):
        # A tracer (identity decides) or a NumPy value or a Python scalar.
        if issubclass(t, (np.ndarray, np.generic)):
            return (t, x.dtype, x.shape, x.tobytes())  # pyright: ignore[reportUnknownVariableType]
        return (t, id(x)) if aval is not None else (t, repr(x))
    try:
        bits = np.asarray(x).tobytes()
    except Exception:  # a deleted (donated) buffer: its identity decides
        return (t, id(x))
    return (
        t,
        aval.shape,
        aval.dtype,
        getattr(aval, "weak_type", False),
        x.sharding,
        getattr(x, "committed", None),
        bits,
    )


def same_leaves(a: Any, b: Any) -> str | None:
    """`None` when the leaf sequences `a` and `b` agree; else what differs."""
    # As many of each: the caller compared their treedefs first.
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        if x is y:
            continue
        kx, ky = _leaf(x), _leaf(y)
        if kx != ky:
            return f"leaf {i}: {_shown(x)} against {_shown(y)}"
    return None


def _shown(x: Any) -> str:
    import numpy as np

    aval = getattr(x, "aval", None)
    try:
        value = repr(x) if aval is None else f"{type_text(x)} {np.asarray(x)!r}"
    except Exception:  # a deleted (donated) array
        value = f"{aval}"
    return f"{type(x).__name__} {value:.80}"
