"""Python functions as JAX pytrees.

`lift` makes the code of a function static and what it captured dynamic, so that
closures go into and out of `jax.jit`, `vmap`, `grad`, `lax.scan` and friends
without recompiling for new hyperparameters and without leaking tracers.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any, NoReturn

from ._base.errors import (
    LeakError as LeakError,
    LiftError as LiftError,
    describe as _describe,
)
from ._version import __version__ as __version__

if TYPE_CHECKING:
    from ._diagnose.diff import diff as diff, stack as stack
    from ._jit.function import jit as jit
    from ._jit.verify import verifying as verifying
    from ._leaks.checked import checked as checked
    from ._leaks.checking import checking_leaks as checking_leaks
    from ._leaks.find import check_leaks as check_leaks, find_leaks as find_leaks
    from ._leaks.report import Leak as Leak, Leaks as Leaks
    from ._lifted.lift import is_lifted as is_lifted, lift as lift, unlift as unlift
    from ._lifted.lifted import Lifted as Lifted
    from ._lifted.replace import replace as replace
    from ._skeleton.paths import CapturePath as CapturePath

    closure_convert = Lifted.closure_convert

__all__ = [
    "CapturePath",
    "Leak",
    "LeakError",
    "Leaks",
    "LiftError",
    "Lifted",
    "__version__",
    "check_leaks",
    "checked",
    "checking_leaks",
    "closure_convert",
    "diff",
    "find_leaks",
    "is_lifted",
    "jit",
    "lift",
    "replace",
    "stack",
    "unlift",
    "verifying",
]

# Public names imported on first use, so that importing `lift` (as pytest does
# for the `lift._leaks.plugin` entry point) does not import JAX until a name is used.
_LAZY = {
    "CapturePath": "_skeleton.paths",
    "Leak": "_leaks.report",
    "Leaks": "_leaks.report",
    "Lifted": "_lifted.lifted",
    "check_leaks": "_leaks.find",
    "checked": "_leaks.checked",
    "checking_leaks": "_leaks.checking",
    "diff": "_diagnose.diff",
    "find_leaks": "_leaks.find",
    "is_lifted": "_lifted.lift",
    "jit": "_jit.function",
    "lift": "_lifted.lift",
    "replace": "_lifted.replace",
    "stack": "_diagnose.diff",
    "unlift": "_lifted.lift",
    "verifying": "_jit.verify",
}


def __getattr__(name: str) -> Any:
    if name == "closure_convert":
        value = __getattr__("Lifted").closure_convert
    elif name in _LAZY:
        value = getattr(importlib.import_module(f"lift.{_LAZY[name]}"), name)
    else:
        raise AttributeError(f"module 'lift' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


class _Module(types.ModuleType):
    """The module `lift`, which says what to write when called as a decorator.

    `import lift` then `@lift` calls the module. It stays a module (no type
    checker has callable modules): the call raises a `LiftError` naming the two
    forms that work, where Python's own says "'module' object is not callable".
    """

    def __call__(self, *args: object, **kwargs: object) -> NoReturn:
        given = f" on {_describe(args[0])}" if args else ""
        raise LiftError(
            f"the module lift was called{given}: `import lift` gives the module, "
            "and the decorator is its function `lift.lift`.\nFix: write "
            "`@lift.lift`, or import the function, `from lift import lift`, "
            "and write `@lift`.",
            anchor="lift-module-called",
        )


sys.modules[__name__].__class__ = _Module
