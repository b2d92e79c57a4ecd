"""JAX's configuration, read fast: leak checking, x64 and the default device."""

from __future__ import annotations

from typing import Any, Final, cast

from jax._src import config as _config

_CHECK_TRACER_LEAKS: Final[Any] = _config.check_tracer_leaks  # pyright: ignore[reportUnknownMemberType]


def jax_checks_leaks() -> bool:
    """Whether JAX's own leak checker is on (`jax_check_tracer_leaks`).

    jax 0.10.2: `config.check_tracer_leaks.value` reads the thread's state in
    C++ (~0.15 µs; `jax.config.jax_check_tracer_leaks` costs ~0.6 µs, too much
    on every call of a `lift.checked` function).
    """
    return _CHECK_TRACER_LEAKS.value is True


def jax_leak_checks_declined() -> bool:
    """Whether the running code turned JAX's checker off for itself: a leak
    there is meant.

    The code does so with `with jax.check_tracer_leaks(False):`, a
    thread-local setting. jax 0.8.0 to 0.12 give a sentinel object when none
    is set."""
    return _CHECK_TRACER_LEAKS.get_local() is False


# What decides how a captured Python scalar becomes an array: the default float
# width and the default device. Written against jax 0.10.2 (and 0.8.0, 0.12.0):
# `config.enable_x64` and `config.default_device` are `State`s whose `.value`
# reads this thread's setting (context managers included) in about 20 ns, where
# `jax.config.jax_enable_x64` takes 80 (read on every `lift.jit` cached call).
X64: Final[Any] = cast(Any, _config.enable_x64)  # pyright: ignore[reportUnknownMemberType]
DEFAULT_DEVICE: Final[Any] = cast(Any, _config.default_device)  # pyright: ignore[reportUnknownMemberType]
