"""The code a message gives as its fix, where it depends on what was refused:
the object a rate goes into, the factory whose product to lift."""

from __future__ import annotations

import functools
import inspect
import sys
import types
from typing import Any


def rate_route(obj: Any, held: list[tuple[str, Any]]) -> str:
    """Where a rate goes when `obj` is built: into the optimizer it holds,
    `SVI(..., optim=Adam(lr), ...)`; else `Obj(..., lr, ...)`."""
    t: type[Any] = type(obj)  # pyright: ignore[reportUnknownVariableType]
    cls = t.__name__ if t.__name__.isidentifier() else "Obj"
    # The attribute holding an object or pytree of functions: an optimizer first.
    inner = sorted(
        {p.split(".")[1] for p, v in held if p.count(".") > 1 or not callable(v)},
        key=lambda a: "opt" not in a.lower(),
    )
    value = object.__getattribute__(obj, "__dict__")[inner[0]] if inner else None
    if value is None:
        return f"{cls}(..., lr, ...)"
    kind: type[Any] = type(value)  # pyright: ignore[reportUnknownVariableType]
    if kind.__module__.partition(".")[0] == "optax":
        made = "optax.adam(lr)"  # a built optax optimizer: its factory is unknown
    else:
        name = kind.__name__ if kind.__name__.isidentifier() else "Inner"
        made = f"{name}(lr)"
    try:
        keyword = inner[0] in inspect.signature(t).parameters
    except (TypeError, ValueError):
        keyword = False
    return (
        f"{cls}(..., {inner[0]}={made}, ...)" if keyword else f"{cls}(..., {made}, ...)"
    )


def factory_route(x: Any, code: types.CodeType, name: str) -> str | None:
    """`optax.contrib.reduce_on_plateau(..., factor=...)` when `x` lifts a
    partial of a factory given `name`, whose own code (`code`) needed its value
    while it built (a check of its argument)."""
    try:
        fn = x.__wrapped__
    except Exception:  # a function that cannot be rebuilt: no route to give
        return None
    if not isinstance(fn, functools.partial) or name not in fn.keywords:
        return None
    factory: Any = fn.func
    if getattr(factory, "__code__", None) is not code:
        return None
    module = str(getattr(factory, "__module__", "") or "")
    public = ".".join(p for p in module.split(".") if not p.startswith("_"))
    found = sys.modules.get(public)
    title = getattr(factory, "__name__", "factory")
    # By code: the partial's function may be lift's rebuilt copy.
    if public and getattr(getattr(found, title, None), "__code__", None) is code:
        title = f"{public}.{title}"
    return f"{title}(..., {name}=...)"
