"""The library's exceptions, and the one way messages name a function."""

from __future__ import annotations

from typing import Any

__all__ = ["LeakError", "LiftError", "describe", "docs_anchor"]


class LiftError(TypeError):
    """Raised when `lift` cannot turn what it was given into a pytree.

    The message names the function (qualified name and `file:line`), the
    variable concerned, and what to do instead.
    """


class LeakError(RuntimeError):
    """Raised when a tracer has escaped the transform that created it.

    The message lists every leak found, each with the function holding it,
    `file:line`, the captured variable, and a hint of the fix.
    """


LiftError.__module__ = "lift"
LeakError.__module__ = "lift"


def describe(fn: Any) -> str:
    """`qualname (file:line)` for a function, method or partial; a repr otherwise."""
    from ._closure import code_of  # imports JAX: not when `lift` is imported

    code = code_of(fn)
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    if code is None:
        return name if isinstance(name, str) else repr(fn)
    if not isinstance(name, str):
        name = code.co_qualname
    return f"{name} ({code.co_filename}:{code.co_firstlineno})"


def docs_anchor(anchor: str) -> str:
    """The last line of a message: where the Errors page of the docs explains it.

    `anchor` is a heading id of `docs/errors.md` (the page `errors/` of the built
    site); the docs' tests check that every anchor used in `lift/` exists there.
    """
    return f"\nDocs: errors.md#{anchor}"
