"""Checking every fast path against the full walk: `lift.verifying()`, `LIFT_VERIFY=1`.

lift has one fast path: a `lift.jit` function's cached call. It stands for
lifting the function again. It must give exactly what lifting gives. With the
switch on, it also lifts. It raises `lift.LiftError` at the first difference.
That is a bug in lift; the message says which path differed.

`LIFT_VERIFY=1` sets the switch when `lift` is imported. `lift.verifying()`
sets it for a block. It applies to every thread.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Generator, Iterable
from typing import Any, Final

from .._base.errors import LiftError, describe, type_text
from .._copies.own import contents_key_of, own_changed, own_static
from .._holders.held import held
from .._holders.labels import variable_str
from .._holders.reach import items, reach
from .._lifted.lifted import Lifted
from .._skeleton.nodes import Static
from .._skeleton.skeleton import skeleton_of

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
    function again. It raises `lift.LiftError` if the two differ in anything.
    That is the treedef, the leaves' types and bits, or a refusal. Lifting a
    closure has no fast path: it always takes the full walk.
    `LIFT_VERIFY=1` in the environment turns the checks on for the process.
    Each cached call then costs a lift: for tests, not for production.

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

    - `enabled`: `False` turns the checks off in the block instead. A
      benchmark does so inside a suite run with `LIFT_VERIFY=1`.
    """
    with _lock:
        before, STATE.on = STATE.on, bool(enabled)
    try:
        yield
    finally:
        with _lock:
            STATE.on = before


def disagree(fn: Any, detail: str) -> LiftError:
    """The error a cached call of `fn` raises when it differs from lifting."""
    return LiftError(
        f"lift's lift.jit cached call disagrees with the full walk for "
        f"{describe(fn)}: {detail}.\nThis is a bug in lift: the full walk's answer is the one "
        "lift promises. Please report it with this message.",
        anchor="fast-path-disagrees",
    )


def logs_grew(statics: Iterable[Static]) -> bool:
    """Whether your own containers among `statics` changed, each as a log grows.

    A log is a list or dict that keeps its items and gains data: values
    holding no function (`held`). A trace or a callback fills it; the
    program does not read it. Any other change (an entry replaced, a function added) makes
    the compiled program stale: the check compares it."""
    changed = [s for s in statics if own_changed((s,))]
    return bool(changed) and all(map(_grew, changed))


def _grew(static: Static) -> bool:
    value: Any = static.value
    t: type[Any] = type(value)  # pyright: ignore[reportUnknownVariableType]
    if t is not list and t is not dict:
        return False
    # A key: the type, then one entry per item (a list) or per key (a dict).
    key = contents_key_of(static)
    if len(key) < 3 and t is dict:  # keyed as static data, not as yours
        return False
    n = len(key[1] if t is list else key[2])
    kept = value[:n] if t is list else dict(list(value.items())[:n])
    added = value[n:] if t is list else list(value.values())[n:]
    return contents_key_of(own_static(kept)) == key and all(
        held(x) is None or items(x) is not None
        for x in reach(added, held)  # pyright: ignore[reportUnknownArgumentType]
    )


def changed_at(kept: Any, fresh: Any) -> str:
    """` of variable 'config'`: the first capture whose key differs, or `""`."""
    if not (isinstance(kept, Lifted) and isinstance(fresh, Lifted)):
        return ""
    for a, b in zip(skeleton_of(kept).nodes, skeleton_of(fresh).nodes, strict=False):  # pyright: ignore[reportUnknownArgumentType]
        for (label, x), (_, y) in zip(a.parts(), b.parts(), strict=False):
            if not _same_key(x.key, y.key):
                return f" of {variable_str(label)}"
    return ""


def _same_key(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except TypeError:  # a treedef against `None` (one slot)
        return False


def _leaf(x: Any) -> tuple[Any, ...]:
    """What must agree between two leaves.

    That is type, shape, dtype, weak type, sharding, commitment and bits.
    `0.0` and `-0.0` differ; `nan` equals itself."""
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
    return (t, aval.shape, aval.dtype, aval.weak_type, x.sharding, x.committed, bits)


def same_leaves(a: Any, b: Any) -> str | None:
    """`None` when the leaf sequences `a` and `b` agree; else what differs."""
    # As many of each: the caller compared their treedefs first.
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        if x is not y and _leaf(x) != _leaf(y):
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
