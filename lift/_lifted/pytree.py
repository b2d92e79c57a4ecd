# pyright: reportPrivateUsage=false
"""A `Lifted` as a pytree, and as the leak scan opens it.

Its leaves are its captures, Python scalars converted once. Its skeleton is
the treedef's static data. With `lift._lifted.lifted`, the only module reading
a `Lifted`'s slots."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Final

from .._base.errors import LiftError
from .._holders import trees as jtu
from .._holders.closure import register_function_of
from .._rule.floats import as_arrays
from .._skeleton.paths import leaf_paths
from .._skeleton.rebuild import build
from .._skeleton.skeleton import Skeleton

_FLOATS: Final = frozenset({float, complex})


def _live_static(x: Any, live: str) -> LiftError:
    return LiftError(
        f"{live}, from a transform still running. Called there, a "
        f"{type(x).__name__} keeps it as the function does; flattened (given to "
        "a transform, returned from one, tree_map), its static part would keep "
        "the tracer beyond that transform.\nFix: convert the function with "
        "`lift.closure_convert(f, *example_args)` (the tracer becomes a leaf), "
        "register the class as a pytree, or pass the value as an argument.",
        anchor="hidden-tracer",
    )


def register(cls: type[Any]) -> None:
    """Register `cls`, `Lifted` or a subclass, as a pytree.

    It is also the holder of its function for the leak scan."""

    def flatten(x: Any) -> tuple[tuple[Any, ...], Skeleton]:
        flat = x._flat
        if flat is None:
            live = x._skeleton.live
            if live is not None:
                raise _live_static(x, live)
            flat = x._flat = as_arrays(x._leaves)
        return flat, x._skeleton

    def flatten_with_keys(x: Any) -> tuple[tuple[tuple[Any, Any], ...], Skeleton]:
        flat, skeleton = flatten(x)
        return tuple(zip(leaf_paths(skeleton), flat, strict=True)), skeleton

    def unflatten(skeleton: Skeleton, children: Iterable[Any]) -> Any:
        self = object.__new__(cls)
        leaves = tuple(children)
        # A Python float or complex given in a leaf's place (`eqx.tree_at(where,
        # f, 0.2)`, a `tree_map` returning floats) is converted when next
        # flattened or called, as a captured one is: one leaf type whatever the
        # history. Trees without one keep their leaves as given: JAX's own trees
        # of this structure (`in_axes` ints, `None`, sentinels, `PartitionSpec`s,
        # equinox's boolean masks), and an int in a float's place, static to
        # `eqx.filter_jit` as a captured int is.
        self._setup(
            skeleton, leaves, leaves if _FLOATS.isdisjoint(map(type, leaves)) else None
        )
        return self

    jtu.register_pytree_with_keys(cls, flatten_with_keys, unflatten, flatten)
    register_function_of(cls, _as_held)


def _as_held(x: Any) -> Callable[..., Any]:
    """The function `x` stands for, as the leak scan opens it.

    It is rebuilt from the leaves as they are, Python floats unconverted.
    Converting them would fix their device and width at the scan. A scan
    changes nothing."""
    return build(x._skeleton, x._flat if x._flat is not None else x._leaves)
