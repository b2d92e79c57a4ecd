"""flax's training containers with the optimizer as a pytree field.

`flax.training.train_state.TrainState` and `flax.nnx.Optimizer` keep their
optimizer (`tx`) out of the pytree's leaves. In `TrainState` it is a static
field, part of the treedef. So a lifted optimizer there still compiles once
per learning rate: two lifted optimizers are two different static values.
`nnx.Optimizer` refuses one outright. The classes here are the same
containers with `tx` a pytree field, lifted for you. Its hyperparameters are
leaves, and a sweep compiles once per structure.

`tx` is lifted wherever it is set: `TrainState.create`, the constructor,
`state.replace(tx=...)`, and `optimizer.tx = ...`. `Optimizer` holds the
optimizer's leaves as `Hyperparameter` Variables of its nnx state, which is
what nnx's `split`, `eval_shape` and `update` and orbax's restore see. A
checkpoint of flax's own `TrainState` (no `tx` in its state dict) restores into
`TrainState` here, which keeps the target's optimizer.

This module imports flax (`pip install "jax-lift[flax]"`); `import lift` does
not. Without flax, `import lift.flax` raises `ModuleNotFoundError` saying so.
Once flax is imported, flax's serialization handles a `Lifted` (its leaves,
by key path), whether or not this module is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

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

from ._compat import Tracer
from ._holders import trees as jtu
from ._holders.trees import is_function_like
from ._lifted.lift import is_lifted, lift
from ._lifted.multisteps import as_functions

__all__ = ["Hyperparameter", "Optimizer", "TrainState"]


class TrainState(train_state.TrainState):
    """`flax.training.train_state.TrainState` with `tx` lifted and a pytree field.

    A drop-in replacement: `TrainState.create(apply_fn=..., params=...,
    tx=optax.adam(lr))` lifts `tx`. The learning rate is a leaf of the state,
    and a jitted step compiles once for every rate. Subclass it as you would
    flax's (for `batch_stats`, say). It serializes with `flax.serialization`:
    the optimizer's leaves are saved under their key paths, and its code comes
    from the target you restore into. Restored, `step` and the optimizer's
    leaves are weakly typed where the target's are; flax alone gives NumPy
    arrays. So a resumed state reuses the compiled step. A checkpoint of
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
    def create(
        cls,
        *,
        apply_fn: Any,
        params: Any,
        tx: Any,
        dynamic: str | tuple[str, ...] | Callable[[Any], bool] | None = None,
        **kwargs: Any,
    ) -> Any:
        """flax's `TrainState.create`, with `tx` lifted first (a lifted one is
        kept as it is).

        `dynamic=` is `lift.lift`'s: `dynamic="step_size"` makes only optax's
        learning rate an input, every other float a constant as in plain optax.
        """
        tx = lift(tx, dynamic=dynamic)
        return super().create(apply_fn=apply_fn, params=params, tx=tx, **kwargs)  # pyright: ignore[reportUnknownMemberType]


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
        # flax's `TrainState` does not save its optimizer: the target's is kept.
        updates: dict[str, Any] = {} if "tx" in state else {"tx": x.tx}
        for name in (f for f in fields if f not in updates):
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
    held a weakly typed one. `step` is one: a Python `0` from `create`, then
    `step + 1` in `apply_gradients`. `jax.jit` keys on weak types, so a
    resumed state would compile its step a second time. Leaves of `tx` are
    restored by lift's own handler, which does this already. Other leaves are
    left as flax gives them.
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


class Hyperparameter(nnx.Variable[Any]):
    """A leaf of the optimizer a [`lift.flax.Optimizer`][lift.flax.Optimizer]
    holds: its learning rate, `b1`, ... as an `nnx.Variable` of its state.

    nnx sees only Variables (and arrays) as state. Held as Variables, the
    hyperparameters are in `nnx.split`, `nnx.state` and `nnx.eval_shape`'s
    abstract state. `nnx.update` updates them in place, and orbax restores
    them into that abstract state. Filters name them by this type:
    `nnx.state(optimizer, lift.flax.Hyperparameter)`, and `nnx.OptState`
    takes what it takes from `nnx.Optimizer` (not these).

    A value lift made weakly typed (a Python float) stays weakly typed when
    restored. orbax and flax's serialization give back strongly typed arrays.
    Those would compile the step again. Beside a bfloat16 model, they would
    promote its updates to float32.
    """

    # Where flax makes a Variable from a value (unflattening, copies,
    # `nnx.merge`, orbax's restore into an abstract state): `_new` from flax
    # 0.12.4 on, `from_metadata` before (its second parameter is named
    # `attributes` or `metadata`, passed by keyword or not).
    @classmethod
    def _new(cls, value: Any, metadata: dict[str, Any]) -> Any:
        return super()._new(_weakened(value, metadata), metadata)  # pyright: ignore[reportUnknownMemberType]

    @classmethod
    def from_metadata(cls, value: Any, *args: Any, **kwargs: Any) -> Any:
        metadata = args[0] if args else next(iter(kwargs.values()))
        return super().from_metadata(_weakened(value, metadata), *args, **kwargs)  # pyright: ignore[reportUnknownMemberType]

    # Where `nnx.update` sets a bare array: `set_raw_value` from flax 0.12.4 on,
    # the attribute `raw_value` before.
    def set_raw_value(self, value: Any, **kwargs: Any) -> None:
        super().set_raw_value(_weakened(value, self.get_metadata()), **kwargs)  # pyright: ignore[reportUnknownMemberType]

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "raw_value":
            value = _weakened(value, self.get_metadata())
        super().__setattr__(name, value)


def _weakened(value: Any, metadata: Any) -> Any:
    """`value` weakly typed when `metadata` says it was, committed to its
    device if it was.

    This applies to a concrete 0-d array that is not weakly typed (a restored
    one). Anything else is returned as it is."""
    if (
        not metadata.get("weak_type")
        or not _is_concrete_array(value)
        or getattr(value, "weak_type", False)
        or np.ndim(value) != 0
    ):
        return value
    template = _weak_template(np.dtype(value.dtype))
    if template is None:
        return value  # not a width lift makes weak leaves of
    # `full_like` keeps its template's dtype and weak type.
    weak: jax.Array = jax.lax.full_like(template, np.asarray(value))  # pyright: ignore[reportUnknownMemberType]
    if getattr(value, "committed", False):
        # Where orbax put it, as it puts the rest: `jax.jit` keys on placement,
        # and a step would compile once for these uncommitted, then again for
        # the committed values it returns.
        weak = jax.device_put(weak, value.sharding)  # pyright: ignore[reportUnknownMemberType]
    return weak


def _is_concrete_array(x: Any) -> bool:
    return isinstance(x, jax.Array | np.ndarray | np.generic) and not isinstance(
        x, Tracer
    )


def _weak_template(dtype: np.dtype[Any]) -> jax.Array | None:
    """A weakly typed 0-d array of `dtype`: the default widths of Python's
    scalars (what lift converts them to), else `None`."""
    scalars = (0.0, 0j, 0)
    return next((t for s in scalars if (t := jnp.asarray(s)).dtype == dtype), None)  # pyright: ignore[reportUnknownMemberType]


def _is_variable(x: Any) -> bool:
    return isinstance(x, nnx.Variable)


def _held(tx: Any) -> Any:
    """Lifted `tx` with each leaf a `Hyperparameter` (a Variable already is
    kept: a state being merged or updated)."""

    def hold(leaf: Any) -> Any:
        if _is_variable(leaf):
            return leaf
        if getattr(leaf, "weak_type", False):
            return Hyperparameter(leaf, weak_type=True)
        return Hyperparameter(leaf)

    return jax.tree.map(hold, tx, is_leaf=_is_variable)


def _pure(tx: Any) -> Any:
    """`tx` with each Variable replaced by its value: the lifted optimizer as
    optax's functions take it."""

    def value(x: Any) -> Any:
        if not _is_variable(x):
            return x
        # flax 0.12.0 has no `get_value`: its Variables hold `raw_value`.
        get: Any = getattr(x, "get_value", None)
        return get() if get is not None else x.raw_value

    return jax.tree.map(value, tx, is_leaf=_is_variable)


class Optimizer(nnx.Optimizer[Any]):
    """`flax.nnx.Optimizer` with `tx` lifted and its leaves in the state.

    Takes what `nnx.Optimizer` takes: `Optimizer(model, optax.adam(lr),
    wrt=nnx.Param)`. Also takes `lift.lift`'s `dynamic=`. With
    `dynamic="step_size"`, only optax's learning rate is a hyperparameter of
    the state; every other float is a constant, as in plain optax.

    The optimizer's hyperparameters are part of the optimizer's state, as
    [`Hyperparameter`][lift.flax.Hyperparameter] Variables. So `nnx.jit`
    compiles a step once for every learning rate. flax's checkpoint recipes
    (`nnx.eval_shape`, `nnx.split`, orbax, `nnx.merge`, `nnx.update`) save and
    restore them with the rest. `tx` is lifted wherever it is set:
    `optimizer.tx = optax.adam(lr)` too.

    Read, `optimizer.tx` is the lifted optimizer with arrays for leaves, to
    call as optax's (`optimizer.tx.update(...)`); `nnx.state(optimizer)["tx"]`
    holds the same leaves as Variables.
    """

    def __init__(
        self,
        model: Any,
        tx: Any,
        *,
        dynamic: str | tuple[str, ...] | Callable[[Any], bool] | None = None,
        **kwargs: Any,
    ) -> None:
        tx = lift(tx, dynamic=dynamic)
        # Declared data before `nnx.Optimizer` assigns it, which it otherwise
        # refuses: a static attribute may not hold arrays (flax 0.12).
        self.tx = nnx.data(_held(tx))
        super().__init__(model, tx, **kwargs)

    if not TYPE_CHECKING:

        def __getattribute__(self, name: str) -> Any:
            value = super().__getattribute__(name)
            return _pure(value) if name == "tx" else value

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "tx":
            value = _lifted(value)
            # (`nnx.data(...)` is flax's marker, which holds no lifted function:
            # kept as it is)
            if any(map(is_lifted, jax.tree_util.tree_leaves(value, is_leaf=is_lifted))):
                value = _held(value)
        super().__setattr__(name, value)
