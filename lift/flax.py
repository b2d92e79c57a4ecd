"""flax's training containers with the optimizer as a pytree field.

`flax.training.train_state.TrainState` and `flax.nnx.Optimizer` keep their
optimizer (`tx`) out of the pytree's leaves: in `TrainState` it is a static field,
part of the treedef, so a lifted optimizer there still compiles once per learning
rate (two lifted optimizers are two different static values); `nnx.Optimizer`
refuses one outright. The classes here are the same containers with `tx` a
pytree field, lifted for you: its hyperparameters are leaves, and a sweep
compiles once per structure.

`tx` is lifted wherever it is set: `TrainState.create`, the constructor,
`state.replace(tx=...)`, and `optimizer.tx = ...`. A checkpoint of flax's own
`TrainState` (no `tx` in its state dict) restores into `TrainState` here, which
keeps the target's optimizer.

This module imports flax (`pip install "jax-lift[flax]"`); `import lift` does
not. Without flax, `import lift.flax` raises `ModuleNotFoundError` saying so. flax's serialization handles a
`Lifted` (its leaves, by key path) once flax is imported, whether or not this
module is.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

try:
    from flax import nnx, serialization, struct
    from flax.training import train_state
except ModuleNotFoundError as err:
    if err.name is None or err.name.partition(".")[0] != "flax":
        raise
    raise ModuleNotFoundError(
        "lift.flax needs flax, which is not installed.\n"
        'Fix: pip install "jax-lift[flax]"  (or: pip install flax)',
        name="flax",
    ) from err

from ._capture.lift import is_lifted, lift
from ._capture.objects import as_functions
from ._holders import trees as jtu
from ._holders.trees import is_function_like

__all__ = ["Optimizer", "TrainState"]


class TrainState(train_state.TrainState):
    """`flax.training.train_state.TrainState` with `tx` lifted and a pytree field.

    A drop-in replacement: `TrainState.create(apply_fn=..., params=...,
    tx=optax.adam(lr))` lifts `tx`, so the learning rate is a leaf of the state
    and a jitted step compiles once for every rate. Subclass it as you would
    flax's (for `batch_stats`, say). It serializes with `flax.serialization`:
    the optimizer's leaves are saved under their key paths, and its code comes
    from the target you restore into. Restored, `step` and the optimizer's
    leaves are weakly typed where the target's are (flax alone gives NumPy
    arrays), so a resumed state reuses the compiled step. A checkpoint of
    flax's own `TrainState`, which has no `tx`, restores too: the target's
    optimizer is kept.

    `tx` is lifted wherever it is set: by `create`, the constructor and
    `state.replace(tx=optax.adam(lr))` alike (a subclass defining
    `__post_init__` calls `super().__post_init__()`).
    """

    # flax's own is `struct.field(pytree_node=False)`: static, part of the treedef.
    tx: Any = struct.field(pytree_node=True)  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]

    def __post_init__(self) -> None:
        # Run by `__init__`, so by `replace` and by every unflattening too (where
        # `tx` is already lifted, or holds whatever leaves JAX put there).
        tx = _lifted(self.tx)
        if tx is not self.tx:
            object.__setattr__(self, "tx", tx)  # a frozen dataclass

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # flax makes `cls` a dataclass and registers its own handlers: replaced.
        super().__init_subclass__(**kwargs)  # pyright: ignore[reportUnknownMemberType]
        _register(cls)

    @classmethod
    def create(cls, *, apply_fn: Any, params: Any, tx: Any, **kwargs: Any) -> Any:
        """flax's `TrainState.create`, with `tx` lifted first (a lifted one is
        kept as it is)."""
        return super().create(apply_fn=apply_fn, params=params, tx=lift(tx), **kwargs)  # pyright: ignore[reportUnknownMemberType]


def _lifted(tx: Any) -> Any:
    """`tx` lifted if it holds a function not lifted yet (or is an optimizer
    object, `optax.MultiSteps`), else `tx` itself: cheap for a lifted one."""
    if issubclass(type(tx), tuple) and all(map(is_lifted, tx)):
        return tx  # a lifted `GradientTransformation`, as every unflattening has
    if as_functions(tx) is not None or any(
        not is_lifted(leaf)
        for leaf in jax.tree_util.tree_leaves(tx, is_leaf=_stops)
        if _stops(leaf)
    ):
        return lift(tx)
    return tx


def _stops(x: Any) -> bool:
    return is_function_like(x) or is_lifted(x)


def _register(cls: type[TrainState]) -> None:
    """flax's state-dict handlers for `cls`, restoring a state dict without `tx`
    (a checkpoint of flax's own `TrainState`) with the target's optimizer."""
    fields = [
        f.name
        for f in dataclasses.fields(cls)
        if f.metadata.get("pytree_node", True)  # flax's data fields
    ]

    def to_state_dict(x: Any) -> dict[str, Any]:
        return {
            name: serialization.to_state_dict(getattr(x, name))  # pyright: ignore[reportUnknownMemberType]
            for name in fields
        }

    def from_state_dict(x: Any, state: dict[str, Any]) -> Any:
        state = dict(state)
        updates: dict[str, Any] = {}
        if "tx" not in state:
            updates["tx"] = x.tx  # flax's `TrainState` does not save its optimizer
        for name in fields:
            if name in updates:
                continue
            if name not in state:
                raise ValueError(
                    f"Missing field {name} in state dict while restoring an "
                    f"instance of {cls.__name__}, at path "
                    f"{serialization.current_path()}"
                )
            target = getattr(x, name)
            value = serialization.from_state_dict(  # pyright: ignore[reportUnknownMemberType]
                target, state.pop(name), name=name
            )
            updates[name] = _weak_like(target, value)
        if state:
            raise ValueError(
                f'Unknown field(s) "{",".join(state)}" in state dict while '
                f"restoring an instance of {cls.__name__} at path "
                f"{serialization.current_path()}"
            )
        return x.replace(**updates)

    serialization.register_serialization_state(  # pyright: ignore[reportUnknownMemberType]
        cls, to_state_dict, from_state_dict, override=True
    )


def _weak_like(target: Any, restored: Any) -> Any:
    """`restored` with each leaf weakly typed where the target's is.

    flax restores every leaf as a NumPy array, strongly typed, where the state
    held a weakly typed one: `step` (a Python `0` from `create`, then `step + 1`
    in `apply_gradients`). `jax.jit` keys on weak types, so a resumed state would
    compile its step a second time. Leaves of `tx` are restored by lift's own
    handler, which does this already; other leaves are left as flax gives them.
    """
    if jtu.tree_structure(target) != jtu.tree_structure(restored):
        return restored  # a custom restore: not ours to second-guess

    def leaf(t: Any, r: Any) -> Any:
        weak = (
            getattr(t, "weak_type", False)
            if isinstance(t, jax.Array)
            else type(t) in (int, float, complex)  # weak when traced
        )
        if weak and not getattr(r, "weak_type", False) and np.ndim(r) == 0:
            # `full_like` on a weakly typed scalar keeps its dtype and weak type.
            return jax.lax.full_like(jnp.asarray(t), np.asarray(r))  # pyright: ignore[reportUnknownMemberType]
        return r

    return jtu.tree_map(leaf, target, restored)


_register(TrainState)


class Optimizer(nnx.Optimizer[Any]):
    """`flax.nnx.Optimizer` with `tx` lifted and held as pytree data.

    Takes what `nnx.Optimizer` takes: `Optimizer(model, optax.adam(lr),
    wrt=nnx.Param)`. The optimizer's hyperparameters are part of the
    optimizer's state, so `nnx.jit` compiles a step once for every learning
    rate. `tx` is lifted wherever it is set: `optimizer.tx = optax.adam(lr)`
    too.
    """

    def __init__(self, model: Any, tx: Any, **kwargs: Any) -> None:
        tx = lift(tx)
        # Declared data before `nnx.Optimizer` assigns it, which it otherwise
        # refuses: a static attribute may not hold arrays (flax 0.12).
        self.tx = nnx.data(tx)
        super().__init__(model, tx, **kwargs)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "tx":
            value = _lifted(value)  # (`nnx.data(tx)` is a marker: kept as it is)
        super().__setattr__(name, value)
