"""What the leak scan reaches: whose code is the user's (its functions' globals
and frames are scanned; the standard library's, site-packages' and lift's are
not), which types are closed (JAX's, NumPy's, pytest's, lift's: not opened),
which hold nothing (`ATOMIC`), and the globals a function's code names."""

from __future__ import annotations

import functools
import os
import sysconfig
import types
from typing import Any, Final

from ._atoms import UNOPENED

__all__ = ["ATOMIC", "is_user_file"]


def _library_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    dirs = {
        paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths
    }
    dirs.add(os.path.dirname(os.path.abspath(__file__)))
    dirs.add(os.path.dirname(os.path.abspath(os.__file__)))
    return tuple(sorted(os.path.join(os.path.abspath(d), "") for d in dirs))


_LIBRARY_DIRS = _library_dirs()


@functools.lru_cache(maxsize=256)
def is_user_file(filename: str) -> bool:
    """Whether code from `filename` is the user's (not the stdlib, site-packages
    or lift): only the user's functions have their globals and frames scanned."""
    if filename.startswith("<"):
        return True  # exec'd or interactive code is the user's
    return not os.path.abspath(filename).startswith(_LIBRARY_DIRS)


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
