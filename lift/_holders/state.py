"""What a function holds besides its cells, recorded to compare by identity
later: `lift.jit`'s cached call is current while its functions hold the very
objects they held when it was made."""

from __future__ import annotations

import types
from typing import Any, NamedTuple


class FunctionState(NamedTuple):
    """What a function holds besides its cells, as objects to compare by
    identity later (`lift.jit` watches them): its code, defaults, keyword-only
    defaults and what that dict holds (Python reads it at each call), and its
    attributes."""

    code: types.CodeType
    defaults: tuple[Any, ...] | None
    kwdefaults: dict[str, Any] | None
    kwitems: tuple[tuple[str, Any], ...]
    attrs: tuple[tuple[str, Any], ...]


def function_state(fn: types.FunctionType) -> FunctionState:
    kwdefaults = fn.__kwdefaults__
    return FunctionState(
        fn.__code__,
        fn.__defaults__,
        kwdefaults,
        tuple(kwdefaults.items()) if kwdefaults else (),
        tuple(fn.__dict__.items()),
    )


def same_state(fn: types.FunctionType, state: FunctionState) -> bool:
    """Whether `fn` holds what `function_state` recorded: the same objects."""
    kwdefaults = fn.__kwdefaults__
    return (
        fn.__code__ is state.code
        and fn.__defaults__ is state.defaults
        and kwdefaults is state.kwdefaults
        and _same_items(kwdefaults or {}, state.kwitems)
        and _same_items(fn.__dict__, state.attrs)
    )


def _same_items(now: dict[str, Any], then: tuple[tuple[str, Any], ...]) -> bool:
    """The same keys, in order, holding the same objects."""
    return len(now) == len(then) and all(
        k == k0 and v is v0 for (k, v), (k0, v0) in zip(now.items(), then, strict=True)
    )
