"""optax optimizers that are objects rather than pytrees: `optax.MultiSteps`.

`optax.MultiSteps(opt, k)` keeps the optimizer it wraps in its attributes, and
its `gradient_transformation()` is a pair of bound methods of it. An object that
is not a pytree is a static capture, compared by identity, so lifting those
methods left the inner optimizer's learning rate out of reach: one program per
object. `lift` takes such an object apart instead: the same optimizer as a pair
of functions that capture the object's class and attributes (walked like any
capture, so the inner optimizer's hyperparameters are leaves) and call the
method on an instance rebuilt from them.
"""

from __future__ import annotations

import functools
import types
from typing import Any, cast

__all__ = ["as_functions"]


def as_functions(obj: Any) -> Any | None:
    """`obj` as a `GradientTransformation` of functions, or `None` when it is not an
    object with optax's `gradient_transformation()` (or that method's result)."""
    owner = _owner(obj)
    if owner is None:
        return None
    transformation: Any = owner.gradient_transformation()
    if not (
        _bound_to(transformation, "init", owner)
        and _bound_to(transformation, "update", owner)
    ):
        return None
    cls = cast("type[Any]", type(owner))
    attrs: dict[str, Any] = dict(owner.__dict__)
    return type(transformation)(
        functools.partial(_init, cls, attrs), functools.partial(_update, cls, attrs)
    )


def _owner(value: Any) -> Any | None:
    """The object holding the optimizer's state: `obj` itself, or the `self` of
    the `init` and `update` of a `GradientTransformation` made by it."""
    obj: Any = value
    if issubclass(type(value), tuple):  # through the type: `value` may be hostile
        init: Any = getattr(value, "init", None)
        if not isinstance(init, types.MethodType):
            return None
        obj = init.__self__
    cls = cast("type[Any]", type(obj))
    if not callable(getattr(cls, "gradient_transformation", None)):
        return None
    if "__slots__" in cls.__dict__ or not isinstance(
        getattr(obj, "__dict__", None), dict
    ):
        return None  # its state is not (all) in its `__dict__`
    return obj


def _bound_to(transformation: Any, name: str, owner: Any) -> bool:
    method: Any = getattr(transformation, name, None)
    return isinstance(method, types.MethodType) and method.__self__ is owner


def _instance(cls: type[Any], attrs: dict[str, Any]) -> Any:
    obj = object.__new__(cls)
    obj.__dict__.update(attrs)
    return obj


def _init(cls: type[Any], attrs: dict[str, Any], params: Any) -> Any:
    return _instance(cls, attrs).init(params)


def _update(
    cls: type[Any],
    attrs: dict[str, Any],
    updates: Any,
    state: Any,
    params: Any = None,
    **extra_args: Any,
) -> Any:
    return _instance(cls, attrs).update(updates, state, params, **extra_args)
