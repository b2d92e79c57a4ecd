"""Python functions as JAX pytrees.

`lift` makes the code of a function static and what it captured dynamic, so that
closures go into and out of `jax.jit`, `vmap`, `grad`, `lax.scan` and friends
without recompiling for new hyperparameters and without leaking tracers.
"""

from ._diff import diff as diff
from ._errors import LeakError as LeakError, LiftError as LiftError
from ._lifted import (
    Lifted as Lifted,
    is_lifted as is_lifted,
    lift as lift,
    unlift as unlift,
)
from ._version import __version__ as __version__

__all__ = [
    "LeakError",
    "LiftError",
    "Lifted",
    "__version__",
    "diff",
    "is_lifted",
    "lift",
    "unlift",
]
