"""Reading an object's attributes without running its code.

A walk of holders reads your objects this way. `__getattr__`, properties and
`__getattribute__` never run. So a scan never creates or attaches anything to
what it scans."""

from __future__ import annotations

import types
from typing import Any, Final, cast


class NotRun(Exception):
    """An attribute the scan does not read: reading it would run code.

    A property or `__getattr__` of the object's class may build and attach new
    objects (a config tree, a proxy), or fail."""


_ABSENT: Final = object()
# Descriptors of C types, read without running any Python code: an instance
# `__dict__` as Python makes it, a `__slots__` member, a C attribute.
_C_DESCRIPTORS: Final = frozenset(
    {types.GetSetDescriptorType, types.MemberDescriptorType}
)


def static_attribute(obj: Any, name: str, default: Any = None) -> Any:
    """`getattr(obj, name, default)` as Python resolves it, running no code of
    `obj`'s class.

    It reads a C descriptor (the instance `__dict__`, a slot), the instance's
    `__dict__`, or a class attribute that is no descriptor. It never calls
    `__getattr__` or `__getattribute__`: a name found nowhere is `default`.
    Raises `NotRun` where only running code would tell (a property)."""
    cls: type[Any] = type(obj)  # pyright: ignore[reportUnknownVariableType]
    found: Any = next((vars(k)[name] for k in cls.__mro__ if name in vars(k)), _ABSENT)
    if found is not _ABSENT and type(found) in _C_DESCRIPTORS:
        try:
            return found.__get__(obj, cls)
        except AttributeError:  # an unset slot
            return default
    if name != "__dict__":
        attrs = static_attribute(obj, "__dict__")
        if type(attrs) is dict and name in attrs:
            return cast(dict[str, Any], attrs)[name]
    if found is _ABSENT:
        # Nowhere in the type: a C type's own lookup may know it (a
        # `threading.local`'s per-thread `__dict__`), asked when no Python
        # code of the class would run for it.
        return getattr(obj, name, default) if _looks_up_in_c(cls) else default
    if hasattr(cast(type[Any], type(found)), "__get__"):
        kind = type(found).__qualname__  # pyright: ignore[reportUnknownMemberType]
        raise NotRun(
            f"{name} is a {kind} of {cls.__qualname__}, whose code a scan does not run"
        )
    return found


def own_attributes(obj: Any, slots: tuple[str, ...]) -> list[tuple[str, Any]]:
    """An object's own attributes: its `__dict__`'s entries and its set slots.

    `slots` are its class's (`lift._holders.closure.slots_of`). No code of its
    class runs: a `__dict__` only its code gives raises `NotRun`. The leak scan
    reads an object this way. So it reads a container subclass's attributes
    besides its items (`history.best = x`)."""
    attrs = static_attribute(obj, "__dict__")
    out = list(cast(dict[str, Any], attrs).items()) if type(attrs) is dict else []
    read = ((name, static_attribute(obj, name, _ABSENT)) for name in slots)
    return out + [(name, value) for name, value in read if value is not _ABSENT]


def _looks_up_in_c(cls: type) -> bool:
    """Whether reading an attribute of a `cls` instance runs no Python code.

    No `__getattr__`, and a `__getattribute__` of C along its MRO."""
    for klass in cls.__mro__:
        attrs = vars(klass)
        if "__getattr__" in attrs:
            return False
        method = attrs.get("__getattribute__")
        if method is not None:
            return type(method) is types.WrapperDescriptorType
    return True
