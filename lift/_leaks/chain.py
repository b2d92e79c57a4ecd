"""The referrer chain of an object, from it up to a module, a running frame
or a class.

JAX's own leak report gives the same chain (`core._why_alive`). A report
gives it for a tracer that no walk of lift's names."""

from __future__ import annotations

import contextlib
import gc
import itertools
import sys
import traceback
import types
from typing import Any, Final

from .. import _compat
from .._base import gc as _gc
from .._holders.attributes import own_attributes
from .._holders.closure import slots_of

#: The most links of a referrer chain.
_CHAIN: Final = 12


def referrer_chain(obj: Any, ignore: list[Any] = []) -> list[str]:  # noqa: B006
    """How `obj` is held, from it up to a module, a frame or a class (or
    `_CHAIN` links).

    Each link gives a referrer's kind, and the key, index or attribute that
    holds the one below. The referrers of frames now running and
    `ignore`'s objects are passed over (the callers' own)."""
    skip = {id(x) for x in ignore}
    stack = traceback.walk_stack(sys._getframe())  # pyright: ignore[reportPrivateUsage]
    running = {id(frame) for frame, _ in stack}
    links = [type(obj).__name__]
    child = obj
    with _gc.paused():
        for _ in range(_CHAIN):
            parents = gc.get_referrers(child)
            skip.add(id(parents))
            # A frame first: it names a variable, and ends the chain. Else the
            # first referrer not the caller's (a heap-wide pass a candidate
            # container: the first few only).
            frames = [p for p in parents if type(p) is types.FrameType]
            others = (
                p
                for p in parents
                if type(p) is not types.FrameType and not _ours(p, skip, 0)
            )
            candidates = itertools.chain(frames, itertools.islice(others, 4))
            parent = next((p for p in candidates if not _ours(p, skip)), None)
            del parents, frames, others, candidates
            if parent is None:
                break
            skip.add(id(child))
            link, parent, stop = _link(parent, child, skip, running)
            links.append(link)
            if stop:
                break
            child = parent
    return links


def _ours(obj: Any, skip: set[int], depth: int = 1) -> bool:
    """Whether `obj` is the caller's or lift's own: skipped, a frame of lift's
    code, or a container that only such objects hold."""
    if id(obj) in skip:
        return True
    if type(obj) is types.FrameType:
        name = obj.f_globals.get("__name__")  # lift's frames hold what they name
        return type(name) is str and name.partition(".")[0] == "lift"
    if type(obj).__module__.partition(".")[0] == "lift":
        return True
    if depth and type(obj) in (list, tuple, dict):
        holders = gc.get_referrers(obj)
        skip.add(id(holders))
        return bool(holders) and all(_ours(h, skip, depth - 1) for h in holders)
    return False


def _link(
    parent: Any, child: Any, skip: set[int], running: set[int]
) -> tuple[str, Any, bool]:
    """How `parent` holds `child` (its text), and the object to go on from.

    For a namespace's `__dict__` that object is the namespace's owner. Also
    whether to stop there: at a module, or a frame still running."""
    kind: type[Any] = type(parent)  # pyright: ignore[reportUnknownVariableType]
    if kind is types.ModuleType:
        return f"module {parent.__name__}", parent, True
    if kind is types.FrameType:
        code = parent.f_code
        held = child.cell_contents if type(child) is types.CellType else child
        names = (f"local {k} of " for k, v in _compat.frame_locals(parent) if v is held)
        where = f"{code.co_qualname} ({code.co_filename}:{parent.f_lineno})"
        done = "" if id(parent) in running else "a finished frame of "
        return f"{next(names, '')}{done}{where}", parent, id(parent) in running
    if kind is dict:
        key = next((k for k, v in parent.items() if v is child), None)
        owner = _namespace_owner(parent, skip)
        if owner is not None:
            if type(owner) is types.ModuleType:
                return f"global {key!s} of module {owner.__name__}", owner, True
            if isinstance(owner, type):
                return f"class attribute {owner.__qualname__}.{key!s}", owner, True
            return f"{type(owner).__qualname__}.{key!s}", owner, False
        return f"dict[{key!r:.40}]", parent, False
    if kind in (list, tuple):
        index = next((i for i, v in enumerate(parent) if v is child), None)
        return f"{kind.__name__}[{index}]", parent, False
    if kind is types.CellType:
        for frame in gc.get_referrers(parent):
            if type(frame) is types.FrameType and not _ours(frame, skip):
                return _link(frame, parent, skip, running)
        found = cell_holder(parent)
        if found is None:
            return "cell", parent, False
        fn, var = found
        return f"variable {var} of {fn.__qualname__}", fn, False
    if kind is types.FunctionType:
        return f"function {parent.__qualname__}", parent, False
    name = f"{kind.__module__}.{kind.__qualname__}".removeprefix("builtins.")
    return name + _attribute(parent, child), parent, False


def cell_holder(cell: types.CellType) -> tuple[types.FunctionType, str] | None:
    """The function whose closure holds `cell`, with its variable, if any."""
    for closure in gc.get_referrers(cell):
        if type(closure) is tuple:
            for fn in gc.get_referrers(closure):
                if type(fn) is types.FunctionType and fn.__closure__ is closure:
                    return fn, fn.__code__.co_freevars[closure.index(cell)]
    return None


def _attribute(obj: Any, child: Any) -> str:
    """`.name` of the attribute (in `__dict__` or a slot) of `obj` that
    holds `child`, where there is one (read without running `obj`'s code)."""
    cls: type[Any] = type(obj)  # pyright: ignore[reportUnknownVariableType]
    try:
        attributes = own_attributes(obj, slots_of(cls))
    except Exception:  # a `__dict__` only its code gives
        return ""
    return next((f".{key}" for key, value in attributes if value is child), "")


def _namespace_owner(namespace: dict[Any, Any], skip: set[int]) -> Any:
    """The module, class or object whose `__dict__` is `namespace`, if any."""
    for owner in gc.get_referrers(namespace):
        if id(owner) in skip:
            continue
        if isinstance(owner, type):
            # A class's namespace is reached as a read-only view of it.
            if owner.__dict__.keys() == namespace.keys():
                return owner
            continue
        with contextlib.suppress(Exception):  # a `__dict__` that raises: not it
            if getattr(owner, "__dict__", None) is namespace:  # a module's, ...
                return owner
    return None
