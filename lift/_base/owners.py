"""Whose code and classes are whose, by module name: the one list of the
libraries lift never looks into as the user's.

Decided by the module's name, never by where its file lies: the project under
test, and any library besides these, is the user's installed editable, as a
wheel, on `PYTHONPATH` or in a Bazel tree alike."""

from __future__ import annotations

import sys
import types
from typing import Final

__all__ = ["is_library_type", "is_user_function", "is_user_module"]

# JAX's, NumPy's, lift's, pytest's: their code is not the user's, and their
# classes hold no data of the user's.
_LIBRARIES: Final = frozenset(
    {"jax", "jaxlib", "numpy", "ml_dtypes", "lift", "_pytest", "pytest", "pluggy"}
)
_NOT_USERS: Final = _LIBRARIES | sys.stdlib_module_names


def is_user_module(name: object) -> bool:
    """Whether code of the module called `name` is the user's: not the
    libraries' above nor the standard library's; code without a module
    (`exec`'d, interactive) is the user's. The leak scan opens the globals of
    the user's functions and the user's classes' attributes, the frame look
    at a trace's exit the user's frames."""
    if type(name) is not str:
        return True
    return name.partition(".")[0] not in _NOT_USERS


def is_user_function(fn: types.FunctionType) -> bool:
    """Whether `fn` is the user's: by the module whose globals it runs in."""
    return is_user_module(fn.__globals__.get("__name__"))


def is_library_type(cls: type) -> bool:
    """Whether `cls` is the libraries' or a builtin (an exception, a C type):
    not opened by the leak scan. The standard library's other classes a user
    stores things in (`SimpleNamespace`, `argparse.Namespace`,
    `threading.local`) are opened like the user's own."""
    module = getattr(cls, "__module__", None)
    top = (module if type(module) is str else "builtins").partition(".")[0]
    return top == "builtins" or top in _LIBRARIES
