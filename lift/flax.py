"""flax's training containers with the optimizer as a pytree field.

`flax.training.train_state.TrainState` and `flax.nnx.Optimizer` keep their
optimizer (`tx`) out of the pytree's leaves: in `TrainState` it is a static field,
part of the treedef, so a lifted optimizer there still compiles once per learning
rate (two lifted optimizers are two different static values); `nnx.Optimizer`
refuses one outright. The classes here are the same containers with `tx` a
pytree field, lifted for you: its hyperparameters are leaves, and a sweep
compiles once per structure.

This module imports flax; `import lift` does not. flax's serialization handles a
`Lifted` (its leaves, by key path) once flax is imported, whether or not this
module is.
"""

from __future__ import annotations

from typing import Any

from flax import nnx, struct
from flax.training import train_state

from ._lift import lift

__all__ = ["Optimizer", "TrainState"]


class TrainState(train_state.TrainState):
    """`flax.training.train_state.TrainState` with `tx` lifted and a pytree field.

    A drop-in replacement: `TrainState.create(apply_fn=..., params=...,
    tx=optax.adam(lr))` lifts `tx`, so the learning rate is a leaf of the state
    and a jitted step compiles once for every rate. Subclass it as you would
    flax's (for `batch_stats`, say). It serializes with `flax.serialization`:
    the optimizer's leaves are saved under their key paths, and its code comes
    from the target you restore into.
    """

    # flax's own is `struct.field(pytree_node=False)`: static, part of the treedef.
    tx: Any = struct.field(pytree_node=True)  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]

    @classmethod
    def create(cls, *, apply_fn: Any, params: Any, tx: Any, **kwargs: Any) -> Any:
        """flax's `TrainState.create`, with `tx` lifted first (a lifted one is
        kept as it is)."""
        return super().create(apply_fn=apply_fn, params=params, tx=lift(tx), **kwargs)  # pyright: ignore[reportUnknownMemberType]


class Optimizer(nnx.Optimizer[Any]):
    """`flax.nnx.Optimizer` with `tx` lifted and held as pytree data.

    Takes what `nnx.Optimizer` takes: `Optimizer(model, optax.adam(lr),
    wrt=nnx.Param)`. The optimizer's hyperparameters are part of the
    optimizer's state, so `nnx.jit` compiles a step once for every learning
    rate.
    """

    def __init__(self, model: Any, tx: Any, **kwargs: Any) -> None:
        tx = lift(tx)
        # Declared data before `nnx.Optimizer` assigns it, which it otherwise
        # refuses: a static attribute may not hold arrays (flax 0.12).
        self.tx = nnx.data(tx)
        super().__init__(model, tx, **kwargs)
