"""Python functions as JAX pytrees.

`lift` makes the code of a function static and what it captured dynamic, so that
closures go into and out of `jax.jit`, `vmap`, `grad`, `lax.scan` and friends
without recompiling for new hyperparameters and without leaking tracers.
"""

from ._checking import checked as checked, checking_leaks as checking_leaks
from ._diff import diff as diff
from ._errors import LeakError as LeakError, LiftError as LiftError
from ._jit import jit as jit
from ._leaks import Leak as Leak, check_leaks as check_leaks, find_leaks as find_leaks
from ._lift import is_lifted as is_lifted, lift as lift, unlift as unlift
from ._lifted import Lifted as Lifted
from ._version import __version__ as __version__

closure_convert = Lifted.closure_convert

__all__ = [
    "Leak",
    "LeakError",
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
    "unlift",
]
