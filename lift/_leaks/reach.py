"""What the leak scan reaches: which types are closed (JAX's, NumPy's, pytest's,
lift's: not opened), which hold nothing (`ATOMIC`), and the globals a
function's code names. Whose code is the user's (its functions' globals and
frames are scanned) is `lift._compat.is_user_module`, by module name, the
frame look's rule too."""

from __future__ import annotations

import types
from typing import Any, Final

from .._base.atoms import UNOPENED

__all__ = [
    "ATOMIC",
    "code_names",
    "is_closed_type",
    "param_name",
]


# Standard-library objects a user stores things in (`SimpleNamespace`,
# `argparse.Namespace`, `threading.local`, ...) are opened like the user's own;
# JAX's, NumPy's, pytest's, lift's and the builtins' (exceptions and their
# tracebacks) are not.
_CLOSED_MODULES = frozenset(
    {"jax", "jaxlib", "numpy", "builtins", "ml_dtypes", "lift", "_pytest", "pytest"}
)


def is_closed_type(cls: type) -> bool:
    module = getattr(cls, "__module__", None) or "builtins"
    return module.partition(".")[0] in _CLOSED_MODULES


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
