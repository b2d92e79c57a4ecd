"""Calling a lifted function through `jax.jit`, the function an argument.

The `jitted` modes of optax_plugin and blackjax_plugin replace a lifted
optimizer's `init`/`update` (a kernel's `init`/`step`) by `jitted(fn)`: one
`jax.jit` of a function that takes the lifted function as an ordinary pytree
argument, so its code is static and its captured arrays are traced.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any


# One program per lifted function's treedef and argument structure: the lifted
# function is an argument like the arrays it is called with. Other arguments
# stay as the test gave them: Python scalars (`update(..., loss=1)` where the
# update asserts `loss == 1`), functions (a `value_fn`), strings are static, by
# identity when they are not hashable.
class _Static:
    def __init__(self, value: Any) -> None:
        self.value = value

    def __hash__(self) -> int:
        try:
            return hash((type(self.value), self.value))
        except TypeError:
            return id(self.value)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Static):
            return NotImplemented
        if type(self.value) is not type(other.value):
            return False
        try:
            return bool(self.value == other.value)
        except Exception:
            return self.value is other.value


def _is_array(leaf: Any) -> bool:
    import jax
    import numpy as np

    return isinstance(leaf, jax.Array | np.ndarray | np.generic)


@functools.cache
def _apply_jit() -> Callable[..., Any]:
    import jax

    def apply(fn: Any, dynamic: list[Any], static: tuple[Any, ...]) -> Any:
        treedef, statics = static
        it = iter(dynamic)
        leaves = [next(it) if s is None else s.value for s in statics]
        args, kwargs = jax.tree.unflatten(treedef, leaves)
        return fn(*args, **kwargs)

    return jax.jit(apply, static_argnums=2)


def jitted(fn: Any) -> Any:
    """`fn` called through one `jax.jit`, as a `Lifted` (so a lifted object
    that holds it stays lifted)."""
    import jax

    import lift

    def call(*args: Any, **kwargs: Any) -> Any:
        leaves, treedef = jax.tree.flatten((args, kwargs))
        dynamic = [leaf for leaf in leaves if _is_array(leaf)]
        statics = tuple(None if _is_array(leaf) else _Static(leaf) for leaf in leaves)
        return _apply_jit()(fn, dynamic, (treedef, statics))

    # Called as `fn` is: code that reads its parameters (blackjax's protocol
    # tests) sees `fn`'s.
    call.__signature__ = inspect.signature(fn)  # type: ignore[attr-defined]
    return lift.lift(call)
