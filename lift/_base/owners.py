"""Whose code and classes are whose, by module name.

It holds the one list of libraries lift never treats as the user's. The
module's name decides, never where its file lies. The project under test is
the user's however it is installed."""

from __future__ import annotations

import sys
import types
from typing import Final

# JAX's, NumPy's, lift's, pytest's: their code is not the user's, and their
# classes hold no data of the user's.
_LIBRARIES: Final = frozenset(
    {"jax", "jaxlib", "numpy", "ml_dtypes", "lift", "_pytest", "pytest", "pluggy"}
)
_NOT_USERS: Final = _LIBRARIES | sys.stdlib_module_names


def is_user_module(name: object) -> bool:
    """Whether code of the module called `name` is the user's.

    The libraries above and the standard library are not. Code without a
    module (`exec`'d, interactive) is. The leak scan opens the user's globals
    and classes. The frame look opens the user's frames."""
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
