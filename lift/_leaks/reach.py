"""What the leak scan reaches: which types hold nothing (`ATOMIC`), and the
globals a function's code names. Whose code and classes are the user's (its
functions' globals are scanned, its classes opened) is `lift._base.owners`."""

from __future__ import annotations

import types
from typing import Any, Final

from .._base.atoms import UNOPENED

__all__ = [
    "ATOMIC",
    "code_names",
    "param_name",
]


# What the leak scan never opens (exact types: a subclass of `int` may hold
# attributes of its own).
ATOMIC: Final = UNOPENED


def code_names(
    code: types.CodeType, cache: dict[types.CodeType, tuple[str, ...]]
) -> tuple[str, ...]:
    """Global names a code object (and the code nested in it) refers to."""
    found = cache.get(code)
    if found is not None:
        return found
    names: dict[str, None] = {}
    stack = [code]
    while stack:
        c = stack.pop()
        names.update(dict.fromkeys(c.co_names))
        stack.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    found = tuple(names)
    cache[code] = found
    return found


def param_name(fn: Any, index: int) -> str:
    code = getattr(fn, "__code__", None)
    if isinstance(code, types.CodeType) and index < code.co_argcount:
        return code.co_varnames[index]
    return f"args[{index}]"
