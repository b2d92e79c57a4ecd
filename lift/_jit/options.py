"""`lift.jit`'s options: `jax.jit`'s, checked and translated.

They are checked against the function's own signature. They are translated
for the trampoline, which takes the `Lifted` in front. Argument numbers shift
by one and names are resolved. Negative numbers stay, per call arity."""

from __future__ import annotations

import inspect
from typing import Any, Final

from .. import _compat
from .._base.errors import LiftError, describe

# `jax.jit` keywords that name positional parameters by number.
ARGNUMS: Final = ("static_argnums", "donate_argnums")


def positional(signature: inspect.Signature) -> list[str]:
    """The names of the positional parameters, in order."""
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in signature.parameters.values() if p.kind in kinds]


def _refused(fn: Any, text: str) -> LiftError:
    return LiftError(f"lift.jit({describe(fn)}) {text}", anchor="jit-options")


def as_tuple(value: Any, kind: type) -> tuple[Any, ...]:
    if value is None:
        return ()
    if isinstance(value, kind):
        return (value,)
    return tuple(value)


def translate(
    fn: Any, signature: inspect.Signature, options: dict[str, Any]
) -> dict[str, Any]:
    """`jax.jit` options for the trampoline, from options meant for `fn`.

    They are checked against `fn`'s own signature first. A mistake then names
    `fn`'s parameters, not the trampoline's.
    """
    params = list(signature.parameters.values())
    ordered = positional(signature)
    star_args = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params)
    star_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
    keywords = {
        p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }
    listed = ", ".join(ordered) or "none"
    kwargs = dict(options)
    for option in [o for o in ARGNUMS if o in options]:
        nums = as_tuple(options[option], int)
        for n in nums:
            if not isinstance(n, int):
                raise _refused(fn, f"got {option}={nums!r}: {n!r} is not an int.")
            if not star_args and not -len(ordered) <= n < len(ordered):
                raise _refused(
                    fn,
                    f"got {option}={nums!r}, but the function has {len(ordered)} "
                    f"positional parameters ({listed}), so {n} names none of them."
                    f"\nFix: number `{fn_name(fn)}`'s own parameters from 0, or use "
                    f"{option.replace('nums', 'names')}=...",
                )
        # The lifted function goes in front; negative numbers count from the end.
        kwargs[option] = tuple(n + 1 if n >= 0 else n for n in nums)
    for option in [o for o in ("static_argnames", "donate_argnames") if o in options]:
        names = as_tuple(options[option], str)
        for name in names:
            p = signature.parameters.get(name)
            if p is not None and p.kind is inspect.Parameter.POSITIONAL_ONLY:
                raise _refused(
                    fn,
                    f"got {option}={names!r}, but {name!r} is a positional-only "
                    "parameter, which has no name at the call site.\nFix: use "
                    f"{option.replace('names', 'nums')}=({params.index(p)},).",
                )
            if name not in keywords and not star_kwargs:
                raise _refused(
                    fn,
                    f"got {option}={names!r}, but `{fn_name(fn)}` has no parameter "
                    f"{name!r} (its parameters: "
                    f"{', '.join(signature.parameters) or 'none'}).\nFix: name one "
                    "of its parameters.",
                )
        kwargs[option] = names
    if "donate_argnums" in options and "donate_argnames" not in options:
        # What `jax.jit` infers from `fn`'s own signature (an argument donated by
        # number is donated when passed by keyword too), not from the trampoline's.
        kwargs["donate_argnames"] = _compat.inferred_argnames(
            signature, as_tuple(options["donate_argnums"], int)
        )
    static, donated = (resolved(signature, options, k) for k in ("static", "donate"))
    if both := sorted(static & donated):
        raise _refused(
            fn,
            f"marks the parameter {both[0]!r} both static and donated; a static "
            "argument is part of the program's key and has no buffer to donate."
            "\nFix: remove it from donate_argnums/donate_argnames.",
        )
    return kwargs


def resolved(
    signature: inspect.Signature, options: dict[str, Any], kind: str
) -> set[str]:
    """The parameter names that `{kind}_argnums` and `{kind}_argnames` designate."""
    ordered = positional(signature)
    nums = as_tuple(options.get(f"{kind}_argnums"), int)
    names: set[str] = {ordered[n] for n in nums if -len(ordered) <= n < len(ordered)}
    return names.union(as_tuple(options.get(f"{kind}_argnames"), str))


def shifted(options: dict[str, Any], k: int) -> dict[str, Any]:
    """Options for the function with its first `k` positional arguments bound.

    Numbers counted from the end name the same arguments."""
    options = dict(options)
    for option in [o for o in ARGNUMS if o in options]:
        nums = as_tuple(options[option], int)
        options[option] = tuple(n - k if n >= 0 else n for n in nums if n < 0 or n >= k)
    in_shardings = options.get("in_shardings")
    if isinstance(in_shardings, (tuple, list)):
        options["in_shardings"] = tuple(in_shardings[k:])  # pyright: ignore[reportUnknownArgumentType]
    return options


def static_positions(
    signature: inspect.Signature, kwargs: dict[str, Any]
) -> tuple[int, ...]:
    """The trampoline's static positions, as `jax.jit` resolves them.

    They are the shifted `static_argnums`, and the positional parameters that
    `static_argnames` names."""
    names = positional(signature)
    named = as_tuple(kwargs.get("static_argnames"), str)
    positions = {names.index(name) + 1 for name in named if name in names}
    return tuple(sorted(positions.union(as_tuple(kwargs.get("static_argnums"), int))))


def fn_name(fn: Any) -> str:
    name = getattr(fn, "__name__", None)
    return name if isinstance(name, str) else type(fn).__name__
