"""optax optimizers that are objects rather than pytrees: `optax.MultiSteps`.

`optax.MultiSteps(opt, k)` keeps the optimizer it wraps in its attributes.
Its `gradient_transformation()` is a pair of its bound methods. An object that
is not a pytree is a static capture, compared by identity. `lift` takes such
an object apart. It makes a pair of functions capturing the object's class
and attributes. They call the method on an instance rebuilt from them. The
captures are walked like any, so the inner hyperparameters are leaves.

The pair is a named tuple of the object's `GradientTransformation` type. It
has the rest of the object's API too (`has_updated`, `inner_opt`, ...). Those
read an instance rebuilt from the lifted `update`'s captures, so they see its
leaves. `gradient_transformation()` is the pair itself.
"""

from __future__ import annotations

import functools
import types
from typing import Any, cast

from .._rule.static import TAKES_APART
from .lifted import Lifted, rebuilt


def as_functions(obj: Any) -> Any | None:
    """`obj` as a `GradientTransformation` of functions, or `None`.

    `None` is for anything but an object with optax's
    `gradient_transformation()`, or that method's result."""
    owner = _owner(obj)
    if owner is None:
        return None
    transformation: Any = owner.gradient_transformation()
    if not all(_bound_to(transformation, m, owner) for m in ("init", "update")):
        return None
    cls = cast("type[Any]", type(owner))
    attrs: dict[str, Any] = dict(owner.__dict__)
    base = cast("type[Any]", type(transformation))
    return _transformation_type(base, cls)(
        functools.partial(_init, cls, attrs), functools.partial(_update, cls, attrs)
    )


TAKES_APART.append(as_functions)


@functools.cache
def _transformation_type(base: type[Any], cls: type[Any]) -> type[Any]:
    """`base`, a `GradientTransformation`, named after `cls`.

    It answers for `cls`'s other attributes, and flattens as a named tuple."""
    namespace: dict[str, Any] = {
        "__slots__": (),
        "__module__": __name__,
        "__qualname__": cls.__qualname__,
        "__doc__": f"`{cls.__qualname__}` as a `{base.__name__}` of functions, "
        "with its other attributes read from an instance rebuilt from `update`.",
        "__getattr__": _attribute,
        "__reduce__": _reduce,
        "_object_class": cls,
        "gradient_transformation": _itself,
    }
    return type(cls.__name__, (base,), namespace)


def _reduce(self: Any) -> tuple[Any, ...]:
    # The type is made here, not importable by name: pickle its recipe.
    kind = cast(Any, type(self))
    return _remade, (kind.__bases__[0], kind._object_class, tuple(self))


def _remade(base: type[Any], cls: type[Any], fields: tuple[Any, ...]) -> Any:
    return _transformation_type(base, cls)(*fields)


def _attribute(self: Any, name: str) -> Any:
    # Only for names the named tuple lacks; never dunders (`copy`, `pickle` and
    # JAX probe for those).
    if name.startswith("__"):
        raise AttributeError(name)
    return getattr(_rebuilt(self), name)


def _itself(self: Any) -> Any:
    """This `GradientTransformation`: the lifted form of the object's own."""
    return self


def _rebuilt(transformation: Any) -> Any:
    """An instance of the object's class with the attributes `update` holds now."""
    update: Any = transformation.update
    if isinstance(update, Lifted):
        update = rebuilt(cast("Lifted[..., Any]", update))
    func: Any = getattr(update, "func", None)
    if not (
        issubclass(type(update), functools.partial)
        and getattr(func, "__code__", None) is _update.__code__
    ):
        raise AttributeError(
            f"this {type(transformation).__name__}'s update is "
            f"{type(update).__name__}, not the one lift made: its object's "
            "attributes are not known"
        )
    cls, attrs = cast("tuple[type[Any], dict[str, Any]]", update.args)  # pyright: ignore[reportUnknownMemberType]
    return _instance(cls, attrs)


def _owner(value: Any) -> Any | None:
    """The object holding the optimizer's state.

    It is `obj` itself, or the `self` of a transformation's `init` and
    `update`."""
    obj: Any = value
    if issubclass(type(value), tuple):  # through the type: `value` may be hostile
        init: Any = getattr(value, "init", None)
        if not isinstance(init, types.MethodType):
            return None
        obj = init.__self__
    cls = cast("type[Any]", type(obj))
    if not callable(getattr(cls, "gradient_transformation", None)):
        return None
    if "__slots__" in cls.__dict__:  # its state is not (all) in its `__dict__`
        return None
    return obj if isinstance(getattr(obj, "__dict__", None), dict) else None


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
