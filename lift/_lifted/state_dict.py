"""flax serialization of a `Lifted`: its leaves as a state dict, keyed by key path.

`flax.serialization` finds handlers by exact type. Every `Lifted` class gets
one once both it and `flax.serialization` exist, in either order. A
post-import hook (`wrapt`) does it: `import lift` never imports flax.

A state dict holds the leaves only. Each sits under the `keystr` of its key
path (`".captures['learning_rate']"`). The code comes from the program that
restores it, through the target `Lifted`.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import wrapt

from .._base.errors import LiftError, describe
from .._holders import trees as jtu
from .._skeleton.skeleton import LiftedParts


def register(cls: type[Any]) -> None:
    """Give `cls` flax state-dict handlers once `flax.serialization` is imported.

    That is now, if it already is. A handler the user registered first is
    kept."""

    def hook(serialization: ModuleType) -> None:
        if not serialization.is_serializable(cls):
            serialization.register_serialization_state(
                cls, to_state_dict, from_state_dict
            )

    wrapt.register_post_import_hook(hook, "flax.serialization")  # pyright: ignore[reportUnknownMemberType]


def _keyed(x: LiftedParts) -> dict[str, Any]:
    """Each leaf by its state-dict key: its key path as `keystr` prints it."""
    keyed: dict[str, Any] = {}
    for i, (path, leaf) in enumerate(jtu.tree_flatten_with_path(x)[0]):
        key = jtu.keystr(path)
        # An elided path of a closure nested thousands deep may repeat.
        keyed[f"{key} (leaf {i})" if key in keyed else key] = leaf
    return keyed


def to_state_dict(x: LiftedParts) -> dict[str, Any]:
    """The leaves of `x` by key path: what flax writes for it."""
    return {key: _storable(leaf) for key, leaf in _keyed(x).items()}


def _is_key(x: Any) -> bool:
    return isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jax.dtypes.prng_key)


def _storable(leaf: Any) -> Any:
    """A leaf as flax can write it: a typed PRNG key as its key data.

    NumPy cannot hold a key, so msgpack could not either."""
    return jax.random.key_data(leaf) if _is_key(leaf) else leaf


def from_state_dict(target: LiftedParts, state: dict[str, Any]) -> Any:
    """`target` with the leaves of `state`.

    Each is cast to its target leaf's dtype, shape and weak type. A restored
    optimizer compiles and computes as the one saved."""
    leaves = _keyed(target)
    missing = [k for k in leaves if k not in state]
    unexpected = [k for k in state if k not in leaves]
    if missing or unexpected:
        raise LiftError(
            "The state dict does not fit the lifted function "
            f"{describe(target.__wrapped__)}: missing {missing}, unexpected "
            f"{unexpected}.\nFix: restore into a target made by the same code with "
            "the same static captures (e.g. the same optimizer, any learning rate).",
            anchor="state-dict-mismatch",
        )
    restored = [_like(leaf, state[k], k) for k, leaf in leaves.items()]
    return jtu.unflatten(jtu.tree_structure(target), restored)


def _like(target: Any, value: Any, key: str) -> Any:
    """`value` as a leaf of the target's kind, dtype and shape."""
    if _is_key(target):
        # Stored as key data (`_storable`); wrapped again with the target's
        # implementation.
        if _is_key(value):
            value = jax.random.key_data(value)
        data = jax.random.key_data(target)
        if np.shape(value) != data.shape:
            raise LiftError(
                f"The state dict's {key} holds PRNG key data of shape "
                f"{np.shape(value)}, the target's key data {data.shape}.\nFix: "
                "restore into a target made with the same keys.",
                anchor="state-dict-mismatch",
            )
        raw: Any = jnp.asarray(value, dtype=data.dtype)  # pyright: ignore[reportUnknownMemberType]
        wrapped: Any = jax.random.wrap_key_data(raw, impl=jax.random.key_impl(target))  # pyright: ignore[reportUnknownVariableType, reportUnknownMemberType]
        return wrapped  # pyright: ignore[reportUnknownVariableType]
    shape: tuple[int, ...] = np.shape(value)
    want: tuple[int, ...] = np.shape(target)
    if shape != want:
        raise LiftError(
            f"The state dict's {key} has shape {shape}, the target's {want}.\n"
            "Fix: restore into a target made with the same shapes.",
            anchor="state-dict-mismatch",
        )
    dtype: Any = getattr(target, "dtype", None)
    if isinstance(target, jax.Array):
        # `full_like` keeps the target's dtype and weak type (a Python float
        # capture stays weakly typed, as `lift` made it).
        if not want:
            return jax.lax.full_like(target, np.asarray(value))
        return jnp.asarray(value, dtype=dtype)  # pyright: ignore[reportUnknownMemberType]
    if dtype is not None and isinstance(target, np.ndarray | np.generic):
        return np.asarray(value, dtype=dtype).reshape(want)
    return value
