"""Floats become arrays once: the Python scalars a `Lifted` captured, converted
to weakly typed arrays the first time it is flattened or called.

Python floats and complexes are converted by a cached `jax.jit` of the
identity: its C++ dispatch converts each scalar argument to its own buffer,
weakly typed at the default width, in about 4 µs where `jax.device_put` takes
about 20 (see the float conversion designs in `benchmarks/README.md`). Both
ways give the same leaves: type, dtype, weak type, sharding and commitment."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, cast

import jax

from .. import _compat
from .._base import gc as _gc
from .verify import STATE as _VERIFY, disagree, same_leaves

_SCALARS: Final = frozenset({float, complex, int, bool})


# Python floats and complexes are converted by a cached `jax.jit` of the identity:
# its C++ dispatch converts each scalar argument to its own buffer, weakly typed
# at the default width, in about 4 µs where `jax.device_put` takes about 20 (see
# the float conversion designs in `benchmarks/README.md`). Each argument count
# is a program compiled once (~30 ms), so `jax.device_put` converts until the
# process has converted `_COMPILE_AFTER` scalars and that count has come
# `_RECURRING` times (a sweep's shape); longer runs go in calls of `_BATCH`. Both
# ways give the same leaves: type, dtype, weak type, sharding and commitment
# (tested).
_BATCH: Final = 64
_COMPILE_AFTER = 1024  # read at each call: tests lower it
_RECURRING = 64
_calls: dict[tuple[type[Any], int], int] = {}
_total = 0


def _identity(*xs: Any) -> tuple[Any, ...]:
    return xs


# jax 0.12.1 deprecates the class's name for this predicate.
_single_device: Final[Callable[[Any], bool]] = getattr(
    jax.sharding, "is_single_device_sharding", None
) or (lambda s, cls=jax.sharding.SingleDeviceSharding: type(s) is cls)
_identity_jit: Final = cast(
    "Callable[..., tuple[jax.Array, ...]]",
    # The arguments are buffers it made itself from the scalars: donated, the
    # outputs are those buffers (no copy).
    jax.jit(_identity, donate_argnums=tuple(range(_BATCH))),  # pyright: ignore[reportUnknownMemberType]
)


_ALLOWED: Final = (None, "allow")


def _plain_config() -> bool:
    """Whether `jit` converts scalars as `jax.device_put` does: not when `jit` is
    disabled, when it checks outputs for NaN or infinity (a captured `nan` would
    raise), or under a transfer guard (it forbids or logs `jit`'s implicit
    transfers, not `device_put`'s explicit ones)."""
    c: Any = jax.config
    return (
        not (c.jax_disable_jit or c.jax_debug_nans or c.jax_debug_infs)
        and c.jax_transfer_guard_host_to_device in _ALLOWED
        and c.jax_transfer_guard in _ALLOWED
    )


def _to_arrays(values: list[Any]) -> list[jax.Array]:
    """`values` (Python scalars of one type) as weakly typed 0-d arrays, one
    buffer each."""
    global _total
    n = len(values)
    kind: type[Any] = type(values[0])  # pyright: ignore[reportUnknownVariableType]
    key = (kind, n)
    calls = _calls[key] = _calls.get(key, 0) + 1
    if _total < _COMPILE_AFTER or calls <= _RECURRING or not _plain_config():
        _total += n
        put = _put(values)
        if _VERIFY.on and _plain_config():  # the compiled way checked too
            _check_conversion(values, _compiled(values), put)
        return put
    compiled = _compiled(values)
    if compiled is None:
        return _put(values)
    if _VERIFY.on:
        _check_conversion(values, compiled, _put(values))
    return compiled


def _put(values: list[Any]) -> list[Any]:
    with _gc.paused():
        return jax.device_put(values)  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType, reportUnknownArgumentType]


def _compiled(values: list[Any]) -> list[Any] | None:
    """`values` converted by the compiled identity, or `None` where its outputs
    are not what `jax.device_put` gives."""
    arrays: tuple[Any, ...] = _identity_jit(*values)
    first = arrays[0]
    if first.committed or not _single_device(first.sharding):
        # A sharding context (`jax.set_mesh`) places `jit`'s outputs on its mesh,
        # where `jax.device_put` places the scalars as it always does.
        return None
    return list(arrays)


def _check_conversion(
    values: list[Any], compiled: list[Any] | None, put: list[Any]
) -> None:
    """With `lift.verifying()` on: the compiled conversion gives `device_put`'s."""
    if compiled is None:
        return
    differs = same_leaves(compiled, put)
    if differs is not None:
        raise disagree(
            "float conversion",
            f"{len(values)} captured {type(values[0]).__name__}s",
            f"the compiled identity and jax.device_put differ ({differs})",
        )


def as_arrays(leaves: tuple[Any, ...]) -> tuple[Any, ...]:
    """The leaves with Python scalars as weakly typed 0-d arrays, one buffer each.

    A `Lifted` converts its own scalars, once, the first time it is called or
    flattened, whichever comes first: so it computes the same before and after a
    flatten, its leaves are arrays for every `jit` (`eqx.filter_jit` included),
    the default float width follows `jax_enable_x64` at that moment, and no
    buffer is shared with another `Lifted` (donating one never deletes
    another's). Scalars of one type are converted together (`_to_arrays`).
    """
    groups: dict[type, list[int]] = {}
    for i, leaf in enumerate(leaves):
        t = type(leaf)  # pyright: ignore[reportUnknownVariableType]
        if t in _SCALARS:
            groups.setdefault(t, []).append(i)  # pyright: ignore[reportUnknownArgumentType]
    if not groups:
        return leaves
    out = list(leaves)
    if _compat.eager():
        _convert_by_type(out, groups)
    else:
        # Concrete even when a trace is active: these arrays outlive any trace.
        with jax.ensure_compile_time_eval():
            _convert_by_type(out, groups)
    return tuple(out)


def _convert_by_type(out: list[Any], groups: dict[type, list[int]]) -> None:
    """Replace `out`'s scalars, at the positions `groups` lists for each type,
    by arrays (floats and complexes in batches of `_BATCH`)."""
    for t, where in groups.items():
        if t is not float and t is not complex:
            chunks = [where]  # ints and bools (a `dynamic=` rule): rare
        else:
            chunks = [where[k : k + _BATCH] for k in range(0, len(where), _BATCH)]
        for chunk in chunks:
            arrays = _to_arrays([out[i] for i in chunk])
            for i, arr in zip(chunk, arrays, strict=True):
                out[i] = arr
